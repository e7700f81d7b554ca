"""Mutation check: which lines of the scoring, export and weight-loading code no test pins.

    python -m benchmarks.mutation_check [--module evaluation/pixel.py ...] [--timeout 300]
        [--output mutation.json] [--list]

Each mutant changes one thing in one module: a comparison made strict or loose (`>` <-> `>=`) or
negated, `==` <-> `!=`, `is` <-> `is not`, `in` <-> `not in`, `+` <-> `-`, a unary minus dropped,
max <-> min (built-in, numpy, methods), an index 0 <-> 1 or -1 -> 0, the two items of a pair
swapped, a sort key dropped. It is applied to a copy of the repository (the working tree is never
touched) and the tests that cover the module run against it, stopping at the first failure. A
mutant that no test fails *survived*: a test is missing, or the change does not alter behaviour
(an equivalent mutant). Survivors that were judged harmless are listed, with the reason, in
`benchmarks/mutation_accepted.txt`; the command exits 1 when any other mutant survives.

Third-party libraries are imported once and every mutant runs in a forked process, so a mutant
costs the run time of its tests, not the imports. Error messages, log calls and type annotations
are not mutated (their text is not behaviour).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import tempfile
from dataclasses import asdict
from pathlib import Path

from benchmarks.mutation.mutants import Mutant, mutants_of, mutated_source
from benchmarks.mutation.runner import copy_repository, run_tests, write_module

ROOT = Path(__file__).resolve().parents[1]
PINNED = "tests/unit/pinned"
# module -> the fast tests that cover it; the first file (the pinned specification) runs alone
# first, the others only for the mutants it does not kill
COVERAGE = {
    "evaluation/pixel.py": [f"{PINNED}/test_pinned_pixel_threshold.py", "tests/unit/evaluation/test_eval_pixel.py"],
    "inference/masks.py": [f"{PINNED}/test_pinned_map_size.py"],
    "inference/tiling.py": [f"{PINNED}/test_pinned_tiles.py", "tests/unit/detectors/test_tiled_localizer.py"],
    "inference/parts.py": [f"{PINNED}/test_pinned_merge_order.py", "tests/unit/inference/test_infer_parts.py"],
    # the one-convolution graphs of the pinned files, not tests/unit/exporting/test_onnx_variants.py
    # (it exports a trained model: about 100 s a run, against 20 s)
    "exporting/variants.py": [f"{PINNED}/test_pinned_variant_refusal.py", f"{PINNED}/test_pinned_variant_paths.py"],
    "detectors/trufor_weights.py": [
        f"{PINNED}/test_pinned_trufor_published_roles.py",
        *[
            f"tests/unit/detectors/test_trufor.py::test_{name}"
            for name in (
                "published_names_and_shapes_round_trip_through_the_mapping",
                "published_checkpoint_loads_and_reproduces_the_model",
                "published_checkpoint_with_unknown_keys_is_refused",
                "missing_published_file_says_so",
                "a_convolutional_stem_cannot_take_published_weights",
            )
        ],
    ],
    "tools/themis_blocks.py": [f"{PINNED}/test_pinned_themis_grid.py", "tests/unit/tools/test_themis_blocks.py"],
    "tools/fraudbench_table.py": [
        f"{PINNED}/test_pinned_fraudbench_calibration.py",
        "tests/unit/tools/test_fraudbench_table.py",
    ],
}
ACCEPTED = ROOT / "benchmarks" / "mutation_accepted.txt"
# third-party libraries imported once, before the forks
PRELOAD = (
    "numpy",
    "scipy.ndimage",
    "cv2",
    "PIL.Image",
    "torch",
    "torchvision",
    "timm",
    "lightning",
    "sklearn.metrics",
    "onnx",
    "onnxruntime",
    "onnxruntime.quantization",
    "yaml",
    "hydra",
    "pandas",
    "albumentations",
    "skimage",
    "segmentation_models_pytorch",
    "open_clip",
    "pytest",
)


def accepted_keys() -> dict[str, str]:
    """`benchmarks/mutation_accepted.txt`: `<mutant key>  # reason` per line."""
    if not ACCEPTED.is_file():
        return {}
    lines = [
        line for line in ACCEPTED.read_text(encoding="utf-8").splitlines() if line.strip() and not line.startswith("#")
    ]
    return {line.split("  # ")[0].strip(): line.split("  # ", 1)[-1].strip() for line in lines}


def check(modules: list[str], timeout: float, log=print) -> list[Mutant]:
    """Every mutant of `modules`, run against its tests; returns them with their status."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    gc.freeze()  # the preloaded heap is left out of the children's garbage collections
    results = []
    with tempfile.TemporaryDirectory(prefix="mutation_") as folder:
        copy_root = Path(folder)
        copy_repository(copy_root)
        accepted = accepted_keys()
        for module in modules:
            tests = COVERAGE.get(module)
            if not tests:
                raise SystemExit(f"no tests are listed for {module}; add it to COVERAGE in {__file__}")
            baseline, seconds = run_tests(copy_root, tests, timeout)
            if baseline != "passed":
                raise SystemExit(f"the tests of {module} do not pass on the unmutated code ({baseline})")
            log(f"{module}: tests pass unmutated in {seconds:.1f} s")
            original = (copy_root / module).read_text(encoding="utf-8")
            try:
                for mutant in mutants_of(module):
                    write_module(copy_root / module, mutated_source(mutant))
                    outcome, mutant.seconds = run_tests(copy_root, tests[:1], timeout)
                    if outcome == "passed" and len(tests) > 1:  # the rest only for what the first misses
                        outcome, seconds = run_tests(copy_root, tests[1:], timeout)
                        mutant.seconds += seconds
                    mutant.status = {"failed": "killed", "passed": "survived"}.get(outcome, outcome)
                    if mutant.status == "survived" and mutant.key in accepted:
                        mutant.status = "accepted"
                    log(f"  {mutant.status:8s} {module}:{mutant.line}  {mutant.before}  ->  {mutant.after}")
                    results.append(mutant)
            finally:
                write_module(copy_root / module, original)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--module", action="append", help="module to mutate (default: all)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per test run")
    parser.add_argument("--output", type=Path, help="write every mutant and its status as JSON")
    parser.add_argument("--list", action="store_true", help="list the mutants, run no test")
    args = parser.parse_args(argv)
    modules = args.module or list(COVERAGE)
    if args.list:
        for module in modules:
            for mutant in mutants_of(module):
                print(f"{module}:{mutant.line}  {mutant.before}  ->  {mutant.after}")
        return 0
    results = check(modules, args.timeout)
    survivors = [m for m in results if m.status == "survived"]
    statuses = ("killed", "timeout", "accepted", "survived")
    counts = {status: sum(m.status == status for m in results) for status in statuses}
    print(f"\n{len(results)} mutants: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    for mutant in survivors:
        print(f"SURVIVED {mutant.module}:{mutant.line}  {mutant.before}  ->  {mutant.after}")
    if args.output:
        args.output.write_text(json.dumps([{**asdict(m), "key": m.key} for m in results], indent=1))
    return 1 if survivors else 0


if __name__ == "__main__":
    raise SystemExit(main())
