"""Layouts -> records: manifests, labelled folder trees, and leakage-free splits."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from datamodules.layouts import records_from_input
from datamodules.records import LayoutError, Record, assign_splits, read_manifest, scan_folder, write_manifest


def touch_image(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8)).save(path)
    return path


def test_csv_manifest_resolves_relative_paths_and_reads_every_column(tmp_path):
    (tmp_path / "m.csv").write_text(
        "path,label,mask,group,category,source,split,review\n"
        "a.png,1,a_mask.png,sdxl,shoes,src1,train,r1\n"
        "/abs/b.png,0,,,,,,\n"
    )
    first, second = read_manifest(tmp_path / "m.csv")
    assert first == Record(
        str(tmp_path / "a.png"), 1, str(tmp_path / "a_mask.png"), "sdxl", "shoes", "src1", "train", "r1"
    )
    assert second == Record("/abs/b.png", 0)


def test_jsonl_manifest_is_read_like_csv(tmp_path):
    (tmp_path / "m.jsonl").write_text(
        "\n".join(json.dumps(r) for r in [{"path": "x.png", "label": 0}, {"path": "y.png", "label": 1}])
    )
    assert [r.label for r in read_manifest(tmp_path / "m.jsonl")] == [0, 1]


@pytest.mark.parametrize(
    "content,message",
    [
        ("file,label\na.png,1\n", "m.csv has no `path` column"),
        ("path,label\na.png,0\nb.png,1\nc.png,2\n", r"m.csv:4: label must be 0"),
        ("path,label\na.png,0\nb.png,fake\n", r"m.csv:3: label must be 0 .* got 'fake'"),
        ("path,split\na.png,train\nb.png,holdout\n", r"m.csv:3: split must be one of"),
        ("path,label\na.png,0\n,1\n", r"m.csv:3: empty path"),
        # a misspelled column would leave every row without it (all unlabelled: calibrated as genuine)
        ("path,lable\na.png,1\n", r"m.csv: column 'lable' is not one of .*; did you mean 'label'\?"),
        ("path,Label\na.png,1\n", r"did you mean 'label'\?"),
        # fractions, negatives and infinities are no label to round or truncate
        ("path,label\na.png,0.7\n", r"m.csv:2: label must be 0 .* got '0.7'"),
        ("path,label\na.png,-0.5\n", r"m.csv:2: label must be 0 .* got '-0.5'"),
        ("path,label\na.png,inf\n", r"m.csv:2: label must be 0 .* got 'inf'"),
        # infer.py's rows: `label` is the decision there, and reading it as the truth is circular
        ("path,score,label,status,error,true_label\na.png,0.9,1,ok,,0\n", r"m.csv is a results file"),
        ("path,label\na.png,0\na.png,1\nb.png,1\n", r"m.csv: 1 image\(s\) listed as both genuine and fake"),
        # the last of two `label` columns was taken silently; a row's extra field was dropped silently
        ("path,label,label\na.png,0,1\n", r"m.csv: column 'label' appears twice in the header"),
        ("path,label\na.png,0\nb,c.png,1\n", r"m.csv:3: more fields than the header has columns"),
        # a per-category threshold would take one of them, and the other category lose the image
        (
            "path,label,category\na.png,0,Photo\na.png,0,photo\nb.png,0,\nb.png,0,gel\n",
            r"m.csv: 1 image\(s\) listed in two categories or more, e.g. .*a.png \('Photo', 'photo'\)",
        ),
    ],
)
def test_bad_manifests_say_what_is_wrong_and_where(tmp_path, content, message):
    """The message names the file and the line of the bad row (the header is line 1)."""
    (tmp_path / "m.csv").write_text(content)
    with pytest.raises(LayoutError, match=message):
        read_manifest(tmp_path / "m.csv")


def test_columns_of_a_users_own_are_ignored_and_one_close_to_a_present_column_is_not_a_typo(tmp_path):
    (tmp_path / "m.csv").write_text("path,label,labels,score,photographer\na.png,1,x,0.3,me\n")
    assert [r.label for r in read_manifest(tmp_path / "m.csv")] == [1]


def test_write_then_read_manifest_round_trips(tmp_path):
    records = [Record(str(tmp_path / "img" / "a.png"), 1, group="g", source="s")]
    write_manifest(records, tmp_path / "manifest.csv")
    assert "img/a.png" in (tmp_path / "manifest.csv").read_text()
    assert read_manifest(tmp_path / "manifest.csv") == records


def test_scan_folder_finds_label_folders_at_any_depth(tmp_path):
    touch_image(tmp_path / "progan" / "cat" / "0_real" / "a.png")
    touch_image(tmp_path / "progan" / "cat" / "1_fake" / "b.png")
    touch_image(tmp_path / "test" / "sd" / "fake" / "c.jpg")
    touch_image(tmp_path / "test" / "sd" / "real" / "d.webp")
    (tmp_path / "progan" / "cat" / "0_real" / "notes.txt").write_text("ignored")
    records = {r.path.rsplit("/", 1)[-1]: r for r in scan_folder(tmp_path)}
    assert set(records) == {"a.png", "b.png", "c.jpg", "d.webp"}
    assert (records["a.png"].label, records["b.png"].label) == (0, 1)
    assert records["a.png"].group == "progan/cat" and records["a.png"].split is None
    assert records["c.jpg"].group == "sd" and records["c.jpg"].split == "test"


def test_scan_folder_without_label_folders_says_what_it_expected(tmp_path):
    touch_image(tmp_path / "images" / "a.png")
    with pytest.raises(LayoutError, match="0_real"):
        scan_folder(tmp_path)


def test_records_from_input_accepts_file_folder_and_manifest(tmp_path):
    image = touch_image(tmp_path / "deep" / "er" / "a.png")
    assert [r.path for r in records_from_input(image)] == [str(image)]
    assert [r.path for r in records_from_input(tmp_path)] == [str(image)]
    (tmp_path / "m.csv").write_text("path\ndeep/er/a.png\n")
    assert [r.path for r in records_from_input(tmp_path / "m.csv")] == [str(image)]
    with pytest.raises(LayoutError, match="does not exist"):
        records_from_input(tmp_path / "nothing")


def test_the_default_split_is_80_10_10_by_source_through_the_manifest_config(tmp_path):
    """`data=manifest` as configured: rows without a split are split 80/10/10, by source."""
    from hydra.utils import instantiate

    from tests.helpers import compose_config

    rows = "".join(f"img{s}_{k}.png,{k % 2},src{s}\n" for s in range(200) for k in range(2))
    (tmp_path / "m.csv").write_text("path,label,source\n" + rows)
    cfg = compose_config("train", ["data=manifest", f"data.manifest={tmp_path / 'm.csv'}"])
    datamodule = instantiate(cfg.data, _convert_="all")
    datamodule.setup("fit")
    sources = {name: {r.source for r in split} for name, split in datamodule.splits.items()}
    assert {name: len(found) for name, found in sources.items()} == {"train": 160, "val": 20, "test": 20}
    assert not (
        sources["train"] & sources["val"] or sources["train"] & sources["test"] or sources["val"] & sources["test"]
    )


def test_splits_keep_every_image_of_a_source_together_and_are_deterministic():
    records = [Record(f"{s}_{k}.png", label=k % 2, source=f"src{s}") for s in range(50) for k in range(3)]
    records.append(Record("pinned.png", label=0, split="test"))
    first = assign_splits(records, (0.6, 0.2, 0.2), seed=3)
    assert first == assign_splits(records, (0.6, 0.2, 0.2), seed=3)
    by_source: dict[str, set] = {}
    for record in first[:-1]:
        by_source.setdefault(record.source, set()).add(record.split)
    assert all(len(splits) == 1 for splits in by_source.values())
    counts = {name: sum(r.split == name for r in first[:-1]) // 3 for name in ("train", "val", "test")}
    assert counts == {"train": 30, "val": 10, "test": 10}
    assert first[-1].split == "test"
    assert assign_splits(records, (0.6, 0.2, 0.2), seed=4) != first


def test_fakes_whose_source_is_their_originals_path_stay_in_its_split(tmp_path):
    """The original (no source of its own) was keyed by its resolved path, its fakes by the path as
    written: 8 of 24 pairs straddled the splits."""
    rows = [f"originals/a{i}.png,0,,\nfakes/f{i}.png,1,originals/a{i}.png,\n" for i in range(24)]
    (tmp_path / "m.csv").write_text("path,label,source,split\n" + "".join(rows))
    records = assign_splits(read_manifest(tmp_path / "m.csv"), seed=0)
    split_of = {r.path: r.split for r in records}
    assert all(
        split_of[str(tmp_path / f"fakes/f{i}.png")] == split_of[str(tmp_path / f"originals/a{i}.png")]
        for i in range(24)
    )
    assert len(set(split_of.values())) == 3
    assert {r.source for r in records if r.label == 1} == {str(tmp_path / f"originals/a{i}.png") for i in range(24)}
    (tmp_path / "named.csv").write_text("path,label,source\nx.png,1,scene7\n")  # a source that names no row
    assert read_manifest(tmp_path / "named.csv")[0].source == "scene7"


def test_a_jsonl_line_that_is_no_object_is_refused_with_its_line(tmp_path):
    (tmp_path / "m.jsonl").write_text('{"path": "a.png", "label": 1.0}\n["b.png", 0]\n')
    with pytest.raises(LayoutError, match=r"m.jsonl:2: each line must be a JSON object"):
        read_manifest(tmp_path / "m.jsonl")
    (tmp_path / "m.jsonl").write_text('{"path": "a.png", "label": 1.0}\n{"path": "b.png", "label": 3}\n')
    with pytest.raises(LayoutError, match=r"m.jsonl:2: label must be 0"):
        read_manifest(tmp_path / "m.jsonl")


def test_an_image_listed_twice_with_one_label_is_said(tmp_path, caplog):
    (tmp_path / "m.csv").write_text("path,label\na.png,1\na.png,1.0\n")
    assert [r.label for r in read_manifest(tmp_path / "m.csv")] == [1, 1]
    assert "lists 1 image(s) more than once" in caplog.text


def test_files_of_a_folder_that_are_not_read_as_images_are_counted(tmp_path, caplog):
    Image.new("RGB", (8, 8)).save(tmp_path / "photo.png")
    (tmp_path / "notes.txt").write_text("not an image")
    (tmp_path / "gone.png").symlink_to(tmp_path / "missing.png")
    with caplog.at_level("INFO", logger="datamodules.records"):
        records = records_from_input(tmp_path)
    assert [r.path for r in records] == [str(tmp_path / "photo.png")]
    assert "2 file(s) not read as images (.png, .txt)" in caplog.text


def test_rows_without_a_label_beside_labelled_ones_are_counted_once_as_left_out(tmp_path, caplog):
    (tmp_path / "m.csv").write_text("path,label\na.png,1\nb.png,\nc.png,0\nd.png,\n")
    with caplog.at_level("WARNING", logger="datamodules.records"):
        assert [r.label for r in read_manifest(tmp_path / "m.csv")] == [1, None, 0, None]
    said = [m for m in caplog.messages if "no label" in m]
    assert said == [
        f"manifest {tmp_path / 'm.csv'}: 2 of 4 row(s) have no label, so they are left out of metrics "
        "and calibration (neither genuine nor fake)"
    ]


def test_a_manifest_that_labels_nothing_is_read_without_a_word_on_labels(tmp_path, caplog):
    (tmp_path / "m.csv").write_text("path,label\na.png,\nb.png,\n")
    with caplog.at_level("WARNING", logger="datamodules.records"):
        assert [r.label for r in read_manifest(tmp_path / "m.csv")] == [None, None]
    assert not [m for m in caplog.messages if "no label" in m]
