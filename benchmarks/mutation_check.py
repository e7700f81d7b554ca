"""Mutation check: which lines of the scoring, export and weight-loading code no test pins.

    python benchmarks/mutation_check.py [--module evaluation/pixel.py ...] [--timeout 300]
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
import ast
import copy
import gc
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PINNED = "tests/unit/pinned"
# module -> the fast tests that cover it; the first file (the pinned specification) runs alone
# first, the others only for the mutants it does not kill
COVERAGE = {
    "evaluation/pixel.py": [f"{PINNED}/test_pinned_pixel_threshold.py",
                            "tests/unit/evaluation/test_eval_pixel.py"],
    "inference/masks.py": [f"{PINNED}/test_pinned_map_size.py"],
    "inference/tiling.py": [f"{PINNED}/test_pinned_tiles.py",
                            "tests/unit/detectors/test_tiled_localizer.py"],
    "inference/parts.py": [f"{PINNED}/test_pinned_merge_order.py",
                           "tests/unit/inference/test_infer_parts.py"],
    # the one-convolution graphs of the pinned files, not tests/unit/exporting/test_onnx_variants.py
    # (it exports a trained model: about 100 s a run, against 20 s)
    "exporting/variants.py": [f"{PINNED}/test_pinned_variant_refusal.py",
                              f"{PINNED}/test_pinned_variant_paths.py"],
    "detectors/trufor_weights.py": [
        f"{PINNED}/test_pinned_trufor_published_roles.py",
        *[f"tests/unit/detectors/test_trufor.py::test_{name}" for name in (
            "published_names_and_shapes_round_trip_through_the_mapping",
            "published_checkpoint_loads_and_reproduces_the_model",
            "published_checkpoint_with_unknown_keys_is_refused",
            "missing_published_file_says_so",
            "a_convolutional_stem_cannot_take_published_weights")]],
    "tools/themis_blocks.py": [f"{PINNED}/test_pinned_themis_grid.py",
                                   "tests/unit/tools/test_themis_blocks.py"],
    "tools/fraudbench_table.py": [f"{PINNED}/test_pinned_fraudbench_calibration.py",
                                      "tests/unit/tools/test_fraudbench_table.py"],
}
ACCEPTED = ROOT / "benchmarks" / "mutation_accepted.txt"
# third-party libraries imported once, before the forks
PRELOAD = ("numpy", "scipy.ndimage", "cv2", "PIL.Image", "torch", "torchvision", "timm",
           "lightning", "sklearn.metrics", "onnx", "onnxruntime", "onnxruntime.quantization",
           "yaml", "hydra", "pandas", "albumentations", "skimage", "segmentation_models_pytorch",
           "open_clip", "pytest")

COMPARE_SWAPS = {ast.Gt: (ast.GtE, ast.LtE), ast.GtE: (ast.Gt, ast.Lt), ast.Lt: (ast.LtE, ast.GtE),
                 ast.LtE: (ast.Lt, ast.Gt), ast.Eq: (ast.NotEq,), ast.NotEq: (ast.Eq,),
                 ast.Is: (ast.IsNot,), ast.IsNot: (ast.Is,), ast.In: (ast.NotIn,),
                 ast.NotIn: (ast.In,)}
BINOP_SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add}
NAME_SWAPS = {"max": "min", "min": "max", "amax": "amin", "amin": "amax", "maximum": "minimum",
              "minimum": "maximum", "argmax": "argmin", "argmin": "argmax", "nanmax": "nanmin",
              "nanmin": "nanmax"}
INDEX_SWAPS = {0: 1, 1: 0, -1: 0}
QUIET_CALLS = {"debug", "info", "warning", "error", "exception", "print", "warn", "warn_undefined"}


@dataclass
class Mutant:
    module: str
    index: int  # position of the node in ast.walk order
    option: int  # which replacement of that node
    line: int
    before: str
    after: str
    scope: str = "<module>"  # the enclosing function (or class)
    status: str = "pending"  # killed | survived | timeout | accepted
    seconds: float = 0.0

    @property
    def key(self) -> str:
        """Stable across edits elsewhere in the file: module, function and statement (no line)."""
        return f"{self.module}: {self.scope}: {self.before}  ->  {self.after}"


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _silent(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Inside an error message, a log call, an f-string, an annotation or the type tuple of an
    `isinstance`."""
    while node in parents:
        parent = parents[node]
        if isinstance(parent, (ast.Raise, ast.JoinedStr, ast.ExceptHandler)):
            return True
        if isinstance(parent, ast.Call):
            func = parent.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in QUIET_CALLS or (name == "isinstance" and node is not parent.args[0]):
                return True
        if isinstance(parent, (ast.arg, ast.FunctionDef, ast.AnnAssign)) and node in (
            getattr(parent, "annotation", None),
            getattr(parent, "returns", None),
        ):
            return True
        node = parent
    return False


def _options(node: ast.AST) -> list:
    """The replacements of one node (empty when it is not mutated)."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        return list(COMPARE_SWAPS.get(type(node.ops[0]), ()))
    if isinstance(node, ast.BinOp) and type(node.op) in BINOP_SWAPS:
        return [BINOP_SWAPS[type(node.op)]]
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and not isinstance(node.operand, ast.Constant)
    ):
        return ["drop minus"]
    if isinstance(node, ast.Name) and node.id in NAME_SWAPS and isinstance(node.ctx, ast.Load):
        return [NAME_SWAPS[node.id]]
    if isinstance(node, ast.Attribute) and node.attr in NAME_SWAPS:
        return [NAME_SWAPS[node.attr]]
    if isinstance(node, ast.Subscript) and isinstance(node.slice, (ast.Constant, ast.UnaryOp)):
        value = ast.literal_eval(node.slice) if _is_int_literal(node.slice) else None
        return [INDEX_SWAPS[value]] if value in INDEX_SWAPS else []
    if (
        isinstance(node, ast.Tuple)
        and len(node.elts) == 2
        and not all(isinstance(e, ast.Constant) for e in node.elts)
    ):
        return ["swap"] if ast.unparse(node.elts[0]) != ast.unparse(node.elts[1]) else []
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "sorted":
        return ["drop key"] if any(k.arg == "key" for k in node.keywords) else []
    return []


def _is_int_literal(node: ast.AST) -> bool:
    try:
        return isinstance(ast.literal_eval(node), int)
    except ValueError:
        return False


def _apply(node: ast.AST, choice) -> ast.AST:
    """Mutate `node` in place (or return its replacement)."""
    if isinstance(node, ast.Compare):
        node.ops = [choice()]
    elif isinstance(node, ast.BinOp):
        node.op = choice()
    elif isinstance(node, ast.UnaryOp):
        return node.operand
    elif isinstance(node, ast.Name):
        node.id = choice
    elif isinstance(node, ast.Attribute):
        node.attr = choice
    elif isinstance(node, ast.Subscript):
        node.slice = ast.Constant(choice)
    elif isinstance(node, ast.Tuple):
        node.elts = node.elts[::-1]
    elif isinstance(node, ast.Call):
        node.keywords = [k for k in node.keywords if k.arg != "key"]
    return node


def _describe(statement: ast.AST, node: ast.AST, choice) -> tuple[str, str]:
    """(statement before, statement after), one line each, for the report."""
    before = ast.unparse(statement).split("\n")[0]
    mutated = copy.deepcopy(statement)
    target = next(
        n for n in ast.walk(mutated) if _same_place(n, node) and ast.dump(n) == ast.dump(node)
    )
    replacement = _apply(target, choice)
    if replacement is not target:
        _replace(mutated, target, replacement)
    return before, ast.unparse(mutated).split("\n")[0]


def _same_place(a: ast.AST, b: ast.AST) -> bool:
    return (getattr(a, "lineno", None), getattr(a, "col_offset", None)) == (
        getattr(b, "lineno", None),
        getattr(b, "col_offset", None),
    )


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
            elif isinstance(value, list) and any(v is old for v in value):
                setattr(parent, field, [new if v is old else v for v in value])


def _scope(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str:
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return node.name
    return "<module>"


def mutants_of(module: str) -> list[Mutant]:
    source = (ROOT / module).read_text(encoding="utf-8")
    tree = ast.parse(source)
    parents = _parents(tree)
    found = []
    for index, node in enumerate(ast.walk(tree)):
        options = _options(node)
        if not options or _silent(node, parents):
            continue
        statement = node
        while not isinstance(statement, ast.stmt) and statement in parents:
            statement = parents[statement]
        if isinstance(statement, (ast.FunctionDef, ast.ClassDef)):
            statement = node
        scope = _scope(node, parents)
        for option, choice in enumerate(options):
            before, after = _describe(statement, node, choice)
            found.append(Mutant(module, index, option, node.lineno, before.strip(), after.strip(),
                                scope))
    return found


def mutated_source(mutant: Mutant) -> str:
    tree = ast.parse((ROOT / mutant.module).read_text(encoding="utf-8"))
    node = list(ast.walk(tree))[mutant.index]
    replacement = _apply(node, _options(node)[mutant.option])
    if replacement is not node:
        _replace(tree, node, replacement)
    return ast.unparse(ast.fix_missing_locations(tree))


def copy_repository(target: Path) -> None:
    """Tracked and untracked-but-not-ignored files, as `git` lists them."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for name in listed:
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def run_tests(copy_root: Path, tests: list[str], timeout: float) -> tuple[str, float]:
    """Run `tests` in a forked child inside the copy; 'passed', 'failed' or 'timeout'."""
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: imports the (mutated) project code fresh, from the copy
        try:
            os.chdir(copy_root)
            os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = (
                "1"  # third-party plugins: seconds per run
            )
            sys.path.insert(0, str(copy_root))
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            import pytest

            code = pytest.main([*tests, "-x", "-q", "-p", "no:cacheprovider", "-W", "ignore"])
        except BaseException:  # noqa: BLE001 - any crash of the child is a failed run
            code = 3
        os._exit(int(code))
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            return ("passed" if code == 0 else "failed"), time.monotonic() - start
        if time.monotonic() - start > timeout:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return "timeout", time.monotonic() - start
        time.sleep(0.05)


def _write(path: Path, text: str) -> None:
    """Write a module with a modification time of its own, so its cached bytecode (keyed by
    time and size) is never taken for that of another version; the rest keeps its cache."""
    global _VERSION
    _VERSION += 1
    path.write_text(text, encoding="utf-8")
    os.utime(path, (1_000_000_000 + _VERSION, 1_000_000_000 + _VERSION))


_VERSION = 0


def accepted_keys() -> dict[str, str]:
    """`benchmarks/mutation_accepted.txt`: `<mutant key>  # reason` per line."""
    if not ACCEPTED.is_file():
        return {}
    lines = [
        line
        for line in ACCEPTED.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
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
                raise SystemExit(
                    f"no tests are listed for {module}; add it to COVERAGE in {__file__}"
                )
            baseline, seconds = run_tests(copy_root, tests, timeout)
            if baseline != "passed":
                raise SystemExit(
                    f"the tests of {module} do not pass on the unmutated code ({baseline})"
                )
            log(f"{module}: tests pass unmutated in {seconds:.1f} s")
            original = (copy_root / module).read_text(encoding="utf-8")
            try:
                for mutant in mutants_of(module):
                    _write(copy_root / module, mutated_source(mutant))
                    outcome, mutant.seconds = run_tests(copy_root, tests[:1], timeout)
                    if (
                        outcome == "passed" and len(tests) > 1
                    ):  # the rest only for what the first misses
                        outcome, seconds = run_tests(copy_root, tests[1:], timeout)
                        mutant.seconds += seconds
                    mutant.status = {"failed": "killed", "passed": "survived"}.get(outcome, outcome)
                    if mutant.status == "survived" and mutant.key in accepted:
                        mutant.status = "accepted"
                    log(f"  {mutant.status:8s} {module}:{mutant.line}  "
                        f"{mutant.before}  ->  {mutant.after}")
                    results.append(mutant)
            finally:
                _write(copy_root / module, original)
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
