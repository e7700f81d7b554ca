"""Leave-one-family-out splits: the held-out family and its test photos are never seen in training."""

from __future__ import annotations

import pytest

from benchmarks.leave_one_family_out import main
from datamodules.records import Record, read_manifest
from datamodules.splits import DEFAULT_FAMILIES, SplitError, all_families_split, family_of, family_split

GROUPS = (
    "ae_transposed",
    "ae_pixel_shuffle",
    "ae_transposed_region",
    "latent_ae",
    "ddpm_pixel_sdedit_0.3",
    "ddpm_pixel_sdedit_0.6",
    "ddpm_latent_sdedit_0.3",
    "ddpm_pixel_inpaint",
)


def manifest() -> list[Record]:
    """30 photos, each with genuine panels and fakes of every group (as a generated set has)."""
    records = []
    for s in range(30):
        for p in range(3):
            records.append(Record(f"real/photo{s}_{p}.png", 0, group="genuine", source=f"photo{s}"))
            for g in GROUPS:
                records.append(Record(f"fake/{g}/photo{s}_{p}.png", 1, group=g, source=f"photo{s}"))
    return records


def test_families_group_the_generated_groups_and_leave_region_edits_out_by_default():
    assert family_of("ae_pixel_shuffle", DEFAULT_FAMILIES) == "autoencoder"
    assert family_of("ddpm_pixel_sdedit_0.6", DEFAULT_FAMILIES) == "ddpm_pixel"
    assert family_of("ae_transposed_region", DEFAULT_FAMILIES) is None
    assert family_of("ddpm_pixel_inpaint", DEFAULT_FAMILIES) is None


@pytest.mark.parametrize("held_out", sorted(DEFAULT_FAMILIES))
def test_no_source_photo_is_shared_between_train_and_test(held_out):
    out, summary = family_split(manifest(), DEFAULT_FAMILIES, held_out, seed=3)
    sources = {split: {r.source for r in out if r.split == split} for split in ("train", "val", "test")}
    assert sources["test"] and not (sources["test"] & (sources["train"] | sources["val"]))
    assert not sources["train"] & sources["val"]
    assert {r.group for r in out if r.split == "test" and r.label == 1} == {held_out}
    seen = {r.group for r in out if r.split in ("train", "val") and r.label == 1}
    assert held_out not in seen and seen == set(DEFAULT_FAMILIES) - {held_out}
    # genuine test photos are photos no training image was made from
    assert {r.source for r in out if r.split == "test" and r.label == 0} <= sources["test"]
    assert all(c["genuine"] and c["fake"] for c in summary["counts"].values())


def test_all_families_split_keeps_photos_whole_and_names_families():
    out = all_families_split(manifest(), DEFAULT_FAMILIES, seed=0)
    split_of = {}
    for r in out:
        assert split_of.setdefault(r.source, r.split) == r.split
    assert {r.group for r in out if r.label == 1} == set(DEFAULT_FAMILIES)
    assert {r.split for r in out} == {"train", "val", "test"}


def test_fakes_with_no_group_belong_to_no_family_and_are_left_out(tmp_path):
    records = manifest() + [Record(f"fake/other/photo{s}.png", 1, group=None, source=f"photo{s}") for s in range(5)]
    out, summary = family_split(records, DEFAULT_FAMILIES, "latent_ae", seed=3)
    assert not any(r.path.startswith("fake/other/") for r in out)
    assert summary["dropped"]["(none)"] == 5
    everything = {"latent_ae": ["latent_ae"], "all": ["*"]}  # a pattern matching the empty name takes them in
    out, _ = family_split(records, everything, "latent_ae", seed=3)
    assert {r.group for r in out if r.path.startswith("fake/other/")} == {"all"}
    path = tmp_path / "manifest.csv"
    path.write_text("path,label,group,source\nreal/a.png,0,genuine,a\nfake/a.png,1,,a\n")
    assert main(["--manifest", str(path), "--split-only", "--output-dir", str(tmp_path / "o")]) == 2


def test_unknown_or_empty_families_are_refused(tmp_path, capsys):
    with pytest.raises(SplitError, match="unknown family"):
        family_split(manifest(), DEFAULT_FAMILIES, "gan", seed=0)
    with pytest.raises(SplitError, match="matches no group"):
        family_split(manifest(), {**DEFAULT_FAMILIES, "gan": ["stylegan_*"]}, "gan", seed=0)


def test_split_only_writes_one_manifest_per_held_out_family(tmp_path):
    from datamodules.records import write_manifest

    write_manifest(manifest(), tmp_path / "manifest.csv")
    code = main(
        [
            "--manifest",
            str(tmp_path / "manifest.csv"),
            "--output-dir",
            str(tmp_path / "out"),
            "--split-only",
            "--families",
            "ae=ae_transposed,ae_pixel_shuffle",
            "ddpm=ddpm_*_sdedit_*",
            "latent=latent_ae",
        ]
    )
    assert code == 0
    for family in ("ae", "ddpm", "latent"):
        records = read_manifest(tmp_path / "out" / f"holdout_{family}" / "manifest.csv")
        assert {r.group for r in records if r.split == "test" and r.label == 1} == {family}
    assert (tmp_path / "out" / "all_families" / "manifest.csv").is_file()


def test_an_unknown_holdout_is_refused_and_families_not_run_are_not_called_failed(tmp_path, capsys):
    from benchmarks.leave_one_family_out import table
    from datamodules.records import write_manifest

    write_manifest(manifest(), tmp_path / "manifest.csv")
    arguments = ["--manifest", str(tmp_path / "manifest.csv"), "--output-dir", str(tmp_path / "out")]
    assert main([*arguments, "--holdout", "nosuch", "--fused", ""]) == 2
    assert "--holdout nosuch: not a family" in capsys.readouterr().err
    cells = table({"npr (the other families)": {"ae": None}}, ["ae", "ddpm"]).splitlines()[-1]
    assert cells == "| npr (the other families) | failed | not run |"


@pytest.mark.parametrize("bad", ["detector", "output"])
def test_an_unknown_detector_or_an_output_under_a_file_is_refused_before_any_split_or_training(tmp_path, capsys, bad):
    from datamodules.records import write_manifest

    write_manifest(manifest(), tmp_path / "manifest.csv")
    (tmp_path / "afile").write_text("mine")
    output = tmp_path / ("afile/out" if bad == "output" else "out")
    detectors = ["npr", "nosuch"] if bad == "detector" else ["npr"]
    arguments = ["--manifest", str(tmp_path / "manifest.csv"), "--output-dir", str(output), "--fused", ""]
    with pytest.raises(SystemExit) as refused:
        main([*arguments, "--detectors", *detectors])
    assert refused.value.code == 2
    assert ("unknown detector nosuch" if bad == "detector" else "afile is a file") in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fraction", [-0.1, 0.0, 1.0])
def test_a_validation_fraction_outside_0_and_1_is_refused(fraction):
    """-0.1 sliced from the end of the training sources: 20 trained on, 309 validated."""
    with pytest.raises(SplitError, match="validation fraction must lie between 0 and 1"):
        family_split(manifest(), DEFAULT_FAMILIES, next(iter(DEFAULT_FAMILIES)), val_fraction=fraction)
