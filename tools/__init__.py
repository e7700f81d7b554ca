"""Command-line tools beside the five entry points, each run as `python -m tools.<name>` with
argparse options (`--help` lists them):

- `released`: a self-contained `.ckpt` from a detector config and its authors' released weights;
- `check_mapping`: a released-weight mapping checked against a dump of the authors' own model;
- `fraudbench_table`: FraudBench's detector table from one command;
- `themis_blocks`: localizer maps scored as THEMIS scores MLLMs, as numbered blocks.
"""
