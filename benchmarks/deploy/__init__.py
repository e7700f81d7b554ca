"""The sections of `python -m benchmarks.bench_deploy`: the models and images they run on (`fixtures`),
interleaved timing (`timing`), the scoring loop against its references (`scoring_loop`), fresh
`infer.py` processes (`processes`) and int8 against fp32 (`int8`)."""
