"""Splits that hold generators out of training: cross-generator (train on some generator groups,
test on others) and leave-one-family-out (each generator family held out in turn).

Test images never share a source (the authentic photo a fake was made from) with training or
validation images, so neither the held-out generators nor any test photo is seen in training.
`benchmarks/cross_generator.py` and `benchmarks/leave_one_family_out.py` train on them.
"""

from __future__ import annotations

import fnmatch
import random
from collections import defaultdict
from dataclasses import asdict

from datamodules.records import Record

# the families `python generate.py preset=cpu_diverse` makes
DEFAULT_FAMILIES = {
    "autoencoder": ["ae_transposed", "ae_nearest_conv", "ae_bilinear_conv", "ae_pixel_shuffle"],
    "latent_ae": ["latent_ae"],
    "ddpm_pixel": ["ddpm_pixel_sdedit_*"],
    "ddpm_latent": ["ddpm_latent_sdedit_*"],
}  # region edits (ae_*_region, ddpm_*_inpaint) are a localization task; add them with --families


class SplitError(ValueError):
    """The manifest cannot give the cross-generator split asked for."""


def match_groups(patterns: list[str], available: set[str], option: str) -> set[str]:
    chosen: set[str] = set()
    for pattern in patterns:
        hits = set(fnmatch.filter(sorted(available), pattern))
        if not hits:
            raise SplitError(
                f"{option} {pattern!r} matches no generator group of the manifest; "
                f"groups there: {', '.join(sorted(available)) or 'none'}"
            )
        chosen |= hits
    return chosen


def cross_generator_split(
    records: list[Record], train_groups: list[str], test_groups: list[str], val_fraction: float = 0.15, seed: int = 0
) -> tuple[list[Record], dict]:
    """Records with `split` set for a cross-generator run, and a summary of what went where.

    Kept in one piece: sides, orphan genuines and the validation carve share one random stream, and the
    published figures depend on its order.
    """
    if not 0 < val_fraction < 1:  # a negative one sliced from the end: nearly every source went to val
        raise SplitError(f"the validation fraction must lie between 0 and 1, got {val_fraction}")
    fakes = [r for r in records if r.label == 1]
    genuine = [r for r in records if r.label == 0]
    available = {r.group or "(none)" for r in fakes}
    seen = match_groups(train_groups, available, "--train-groups")
    held_out = match_groups(test_groups, available, "--test-groups")
    seen -= held_out  # a pattern such as 'rerender_*' trains on every group that is not held out
    if not seen:
        raise SplitError("every group matched by --train-groups is held out by --test-groups")

    key = lambda r: r.source or r.path  # noqa: E731  (an image without a source is its own source)
    sides_of: dict[str, set[str]] = defaultdict(set)
    for r in fakes:
        group = r.group or "(none)"
        if group in seen or group in held_out:
            sides_of[key(r)].add("train" if group in seen else "test")
    rng = random.Random(seed)
    side: dict[str, str] = {}
    for source in sorted(sides_of):  # a source with fakes on both sides goes to one of them
        options = sorted(sides_of[source])
        side[source] = options[0] if len(options) == 1 else rng.choice(options)
    orphans = sorted({key(r) for r in genuine} - set(side))
    if orphans:  # genuine images with no selected fake: shared out in proportion to the sides
        train_share = sum(s == "train" for s in side.values()) / max(1, len(side))
        rng.shuffle(orphans)
        cut = round(train_share * len(orphans))
        side.update({s: "train" for s in orphans[:cut]})
        side.update({s: "test" for s in orphans[cut:]})

    train_sources = sorted(s for s, v in side.items() if v == "train")
    rng.shuffle(train_sources)
    val_sources = set(train_sources[: round(val_fraction * len(train_sources))])

    out, dropped = [], defaultdict(int)
    for r in records:
        source = key(r)
        group = r.group or "(none)"
        where = side.get(source)
        if r.label == 1 and not ((where == "train" and group in seen) or (where == "test" and group in held_out)):
            dropped[group] += 1
            continue
        if where is None or r.label is None:  # unlabelled rows cannot be trained or scored
            dropped[group] += 1
            continue
        split = "test" if where == "test" else "val" if source in val_sources else "train"
        out.append(Record(**{**asdict(r), "split": split}))

    summary = {
        "train_groups": sorted(seen),
        "test_groups": sorted(held_out),
        "dropped": dict(dropped),
        "counts": {
            split: {
                "genuine": sum(r.split == split and r.label == 0 for r in out),
                "fake": sum(r.split == split and r.label == 1 for r in out),
            }
            for split in ("train", "val", "test")
        },
    }
    for split, count in summary["counts"].items():
        if not count["genuine"] or not count["fake"]:
            raise SplitError(
                f"the {split} split would hold {count['genuine']} genuine and {count['fake']} "
                "fake images; it needs both (more data, or another --val-fraction)"
            )
    by_split: dict[str, set[str]] = defaultdict(set)
    for r in out:
        by_split[r.split].add(key(r))
    assert not (
        by_split["train"] & by_split["val"]
        or by_split["train"] & by_split["test"]
        or by_split["val"] & by_split["test"]
    ), "a source in two splits"
    return out, summary


def parse_families(specs: list[str] | None) -> dict[str, list[str]]:
    if not specs:
        return dict(DEFAULT_FAMILIES)
    families = {}
    for spec in specs:
        name, _, patterns = spec.partition("=")
        if not name or not patterns:
            raise SplitError(f"--families takes NAME=PATTERN[,PATTERN...], got {spec!r}")
        families[name] = patterns.split(",")
    return families


def family_of(group: str | None, families: dict[str, list[str]]) -> str | None:
    for name, patterns in families.items():
        if any(fnmatch.fnmatchcase(group or "", p) for p in patterns):
            return name
    return None


def family_split(
    records: list[Record], families: dict[str, list[str]], held_out: str, val_fraction: float = 0.15, seed: int = 0
) -> tuple[list[Record], dict]:
    """The cross-generator split holding out `held_out`, with groups renamed to families.

    Fakes with no group belong to no family (unless a pattern matches the empty name, as ``*``
    does): like region edits they are left out, counted under "(none)" in the summary's dropped."""
    if held_out not in families:
        raise SplitError(f"unknown family {held_out!r}; families: {', '.join(families)}")
    groups = {r.group or "" for r in records if r.label == 1}
    if not any(family_of(g, families) == held_out for g in groups):
        raise SplitError(f"family {held_out!r} ({', '.join(families[held_out])}) matches no group of the manifest")
    named = lambda g: g or "(none)"  # noqa: E731  (cross_generator_split's name for fakes with no group)
    train = [named(g) for g in sorted(groups) if family_of(g, families) not in (None, held_out)]
    test = [named(g) for g in sorted(groups) if family_of(g, families) == held_out]
    split, summary = cross_generator_split(records, train, test, val_fraction, seed)
    return [_as_family(r, families) for r in split], summary


def all_families_split(
    records: list[Record], families: dict[str, list[str]], fractions=(0.6, 0.15, 0.25), seed: int = 0
) -> list[Record]:
    """Every family in training: photos (sources) shuffled and cut by `fractions`."""
    kept = [r for r in records if r.label == 0 or family_of(r.group, families) is not None]
    sources = sorted({r.source or r.path for r in kept})
    random.Random(seed).shuffle(sources)
    cut1, cut2 = round(fractions[0] * len(sources)), round((fractions[0] + fractions[1]) * len(sources))
    where = {s: "train" if i < cut1 else "val" if i < cut2 else "test" for i, s in enumerate(sources)}
    return [_as_family(Record(**{**asdict(r), "split": where[r.source or r.path]}), families) for r in kept]


def _as_family(record: Record, families: dict[str, list[str]]) -> Record:
    if record.label != 1:
        return record
    return Record(**{**asdict(record), "group": family_of(record.group, families)})
