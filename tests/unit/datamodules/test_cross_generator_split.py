"""The cross-generator split (`datamodules.splits`): unseen generators and unseen sources in test,
never shared."""

from __future__ import annotations

import pytest

from datamodules.records import Record
from datamodules.splits import SplitError, cross_generator_split

GENERATORS = ("g_nearest", "g_bilinear", "g_bicubic", "g_lanczos")


def manifest() -> list[Record]:
    records = []
    for s in range(40):
        records.append(Record(f"real_{s}.png", 0, source=f"src{s}"))
        for g in (GENERATORS[s % 4], GENERATORS[(s + 1) % 4]):  # two generators per source
            records.append(Record(f"{g}_{s}.png", 1, group=g, source=f"src{s}"))
    return records


def test_test_split_holds_only_held_out_generators_and_no_source_is_shared():
    out, summary = cross_generator_split(manifest(), ["g_nearest", "g_bilinear"], ["g_bicubic", "g_lanczos"], seed=1)
    sources = {split: {r.source for r in out if r.split == split} for split in ("train", "val", "test")}
    assert not (
        sources["train"] & sources["test"] or sources["val"] & sources["test"] or sources["train"] & sources["val"]
    )
    test_groups = {r.group for r in out if r.split == "test" and r.label == 1}
    train_groups = {r.group for r in out if r.split in ("train", "val") and r.label == 1}
    assert test_groups == {"g_bicubic", "g_lanczos"} and train_groups == {"g_nearest", "g_bilinear"}
    assert all(count["genuine"] and count["fake"] for count in summary["counts"].values())
    assert out == cross_generator_split(manifest(), ["g_nearest", "g_bilinear"], ["g_bicubic", "g_lanczos"], seed=1)[0]


def test_patterns_and_clear_errors():
    out, summary = cross_generator_split(manifest(), ["g_*"], ["g_lanczos"])
    assert summary["test_groups"] == ["g_lanczos"] and "g_lanczos" not in summary["train_groups"]
    with pytest.raises(SplitError, match="matches no generator group"):
        cross_generator_split(manifest(), ["sdxl"], ["g_lanczos"])
    with pytest.raises(SplitError, match="held out"):
        cross_generator_split(manifest(), ["g_lanczos"], ["g_lanczos"])
