"""Write the README's detector table from `configs/detector/*.yaml`, so the table cannot go stale.

    python -m tools.readme_table            # rewrite the table between the markers of README.md
    python -m tools.readme_table --check    # exit 1 when README.md's table differs from the configs

One row per detector family: every config whose name does not end in `_tiny`, with its `_tiny`
variant (the CPU size) beside it. A config that sets `net.image_score` (how a map becomes an image
score) is a localizer; the others classify whole images. The text is the config's `summary`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
MARKERS = ("<!-- detector-table:start -->", "<!-- detector-table:end -->")
TINY_SUFFIX = "_tiny"


def read_configs(config_dir: Path) -> dict[str, Any]:
    """Config stem -> plain dict; yaml only (nothing is built, no network library imported)."""
    paths = sorted(config_dir.glob("*.yaml"))
    if not paths:
        raise FileNotFoundError(f"no detector configs in {config_dir}")
    return {path.stem: OmegaConf.to_container(OmegaConf.load(path)) for path in paths}


def describe_input(net: dict[str, Any], task: str = "classifier") -> str:
    """What the network is fed; a localizer is calibrated, tested and scored on each image whole, after
    training on crops."""
    preprocess = net.get("preprocess") or {}
    size, mode = preprocess.get("size"), preprocess.get("mode", "none")
    if task == "localizer":
        return f"each image whole (training: {size} px, {mode})" if size else "each image whole"
    return f"{size} px, {mode}" if size else f"any size ({mode})"


def task_of(net: dict[str, Any]) -> str:
    """What the network answers: a pair detector (two panels), a localizer (a map) or a classifier.
    Read from its class where the config names one; a config without `_target_` is a localizer
    when it says how a map becomes an image score (`image_score`)."""
    if "_target_" in net:
        from detectors.build import resolve_detector_class

        cls = resolve_detector_class(net["_target_"])
        return (
            "pair detector"
            if getattr(cls, "is_pair_detector", False)
            else ("localizer" if cls.is_localizer else "classifier")
        )
    return "localizer" if "image_score" in net else "classifier"


def detector_rows(config_dir: Path = ROOT / "configs" / "detector") -> list[list[str]]:
    configs = read_configs(config_dir)
    rows = []
    for name, config in configs.items():
        if name.endswith(TINY_SUFFIX) and name[: -len(TINY_SUFFIX)] in configs:
            continue
        summary = config.get("summary")
        if not summary:
            raise ValueError(f"{config_dir / name}.yaml has no `summary:` line for the README")
        net = config.get("net") or {}
        task = task_of(net)
        tiny = f"`{name}{TINY_SUFFIX}`" if f"{name}{TINY_SUFFIX}" in configs else "itself"
        rows.append([f"`{name}`", task, " ".join(str(summary).split()), describe_input(net, task), tiny])
    return sorted(rows, key=lambda row: (row[1], row[0].strip("`")))  # classifiers, localizers, then pair detectors


def render_table(config_dir: Path = ROOT / "configs" / "detector") -> str:
    header = ["`detector=`", "task", "what", "input", "CPU variant"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in detector_rows(config_dir)]
    return "\n".join(lines)


def replace_between_markers(text: str, table: str, source: str = "README.md") -> str:
    start, end = MARKERS
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(f"{source} must hold `{start}` once, followed by `{end}` once")
    head, rest = text.split(start)
    _, tail = rest.split(end)
    return f"{head}{start}\n{table}\n{end}{tail}"


def table_in(text: str) -> str:
    start, end = MARKERS
    return text.split(start, 1)[1].split(end, 1)[0].strip("\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    parser.add_argument("--configs", type=Path, default=ROOT / "configs" / "detector")
    parser.add_argument("--check", action="store_true", help="report a stale table, change nothing")
    args = parser.parse_args(argv)
    text = args.readme.read_text(encoding="utf-8")
    updated = replace_between_markers(text, render_table(args.configs), str(args.readme))
    if args.check:
        if updated != text:
            print(f"{args.readme}: the detector table is stale; run python -m tools.readme_table", file=sys.stderr)
            return 1
        return 0
    if updated != text:
        args.readme.write_text(updated, encoding="utf-8")
        print(f"{args.readme}: detector table rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
