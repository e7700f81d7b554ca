"""Deployment figures: start-up, steady state, pipeline vs its limit, int8 vs fp32, memory, processes.

    python -m benchmarks.bench_deploy [--only startup pipeline localizer localizer_ckpt int8 memory processes]
                                      [--repeats 3] [--localizer mvss] [--output FILE.json]

- startup: `python infer.py` on one PNG, a new process each time, with the `.onnx` and the `.ckpt`
  of `npr` (wall time, best of `--repeats`); steady state = images/s of a long run with the one-image
  run's time taken off, so start-up and throughput are reported separately.
- pipeline: `npr` at 224 px, batch 32, 256 PNGs: `infer.py`'s scoring loop with the `.onnx` (model
  loaded: decoding threads, batches, forward, rows streamed to CSV) against (a) the raw onnxruntime
  forward on pre-decoded tensors and (b) the limit that decoding plus the raw forward set on the same
  cores: N / (time to decode and preprocess the N files with one thread + time of the raw forward).
- localizer: `--localizer` (default `mvss`) on 8 PNGs of 512 x 512, batch 8: the `.onnx` scoring
  loop with maps not saved and saved (`save_masks=true`) against the raw onnxruntime forward (all
  outputs fetched) and against decoding plus it.
- localizer_ckpt: the same localizer's `.ckpt` scoring loop against the eager PyTorch forward, and
  the raw onnxruntime forward against the eager one.
- int8: raw onnxruntime forward images/s of the fp32 and the int8 (static QDQ) exports of `npr`,
  `dct` and `seg_tiny` (a localizer, 256 px).
- memory: peak resident memory of `infer.py` (.onnx, `dct_tiny`) scoring 10,000 vs 1,000 images.
- processes: `infer.py devices=2 device=cpu` vs one process, images/s end to end and in steady state
  (start-up taken off by scoring `count` and 4 x `count` images).

Pipeline and localizer figures: every timing once as warm-up (the localizers on one image), then
`--repeats` rounds of all of them in turn; each ratio is the median over the rounds of the ratio
within a round, so the pipeline and its reference are measured under the same load. The raw forward
is timed with a default onnxruntime session and with the scoring runtime's own session (its threads
sleep instead of spinning when idle); the faster of the two in each round is the reference.
Untrained weights (speed does not depend on them); CPU only; one run gives all ratios.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from benchmarks.deploy.int8 import int8_speed
from benchmarks.deploy.processes import memory, processes, startup
from benchmarks.deploy.scoring_loop import localizer, localizer_ckpt, pipeline

SECTIONS = ("startup", "pipeline", "localizer", "localizer_ckpt", "int8", "memory", "processes")


def run_section(name: str, work: Path, repeats: int, localizer_name: str) -> dict:
    """One section's figures, measured in the empty folder `work`."""
    if name == "memory":
        return memory(work)
    if name in ("localizer", "localizer_ckpt"):
        return {"localizer": localizer, "localizer_ckpt": localizer_ckpt}[name](work, repeats, localizer_name)
    return {"startup": startup, "pipeline": pipeline, "int8": int8_speed, "processes": processes}[name](work, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--localizer", default="mvss", help="the localizer of the `localizer` figures")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for name in args.only:
            work = Path(folder) / name
            work.mkdir()
            start = time.perf_counter()
            results[name] = run_section(name, work, args.repeats, args.localizer)
            print(json.dumps({name: results[name], "seconds": round(time.perf_counter() - start, 1)}), flush=True)
    if args.output:
        args.output.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
