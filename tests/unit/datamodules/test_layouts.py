"""Every published layout read from a small tree in tmp_path, plus detection and its errors."""

import json
import logging
import os
import re
import shutil
from pathlib import Path

import pytest

from datamodules.layouts import (
    detect_layout,
    fraudbench_metadata,
    read_casia_list,
    read_fraudbench,
    read_genimage,
    read_imdl,
    read_imdl_json,
    read_layout,
    read_themis,
    records_from_input,
)
from datamodules.records import LayoutError, assign_splits


def _touch(root: Path, *names: str) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\x89PNG\r\n")  # readers only list files; content is not decoded here


def test_genimage(tmp_path):
    _touch(
        tmp_path,
        "sdv4/imagenet_ai_0419_sdv4/train/ai/a.png",
        "sdv4/imagenet_ai_0419_sdv4/train/nature/b.JPEG",
        "midjourney/val/ai/c.png",
        "midjourney/val/nature/d.png",
        "midjourney/val/nature/notes.txt",
    )
    records = read_genimage(tmp_path)
    by_name = {Path(r.path).name: r for r in records}
    assert set(by_name) == {"a.png", "b.JPEG", "c.png", "d.png"}
    assert (by_name["a.png"].label, by_name["a.png"].group, by_name["a.png"].split) == (1, "sdv4", "train")
    assert (by_name["d.png"].label, by_name["d.png"].group, by_name["d.png"].split) == (0, "midjourney", "val")
    assert detect_layout(tmp_path) == "genimage"


def _fraudbench_tree(root: Path) -> None:
    _touch(
        root,
        "Electronics/Positive/Review_001/Image_001_01.jpg",
        "Electronics/Negative/Review_002/Image_002_01.jpg",
        "Electronics/Negative/Review_002/Image_002_02.jpg",
        "Electronics/DeepFake/gpt-image-1/Review_001/Image_001_01.jpg",
        "Electronics/DeepFake/flux-kontext/Review_001/Image_001_01.jpg",
        "Hotels/Negative/Review_010/Image_010_01.jpg",
        "Hotels/DeepFake/gpt-image-1/Review_011/Image_011_01.jpg",
        "Hotels/Positive/Review_011/Image_011_01.jpg",
    )
    (root / "Electronics/Negative/Review_002/MetaReview_002.json").write_text(
        json.dumps({"review_id": "002", "text": "arrived cracked", "category": "Consumer Electronics"})
    )
    (root / "Electronics/DeepFake/Metadata").mkdir(parents=True)
    (root / "Electronics/DeepFake/Metadata/Edit_001.json").write_text(
        json.dumps({"damage_type": "crack", "target": "screen", "review": "screen came cracked"})
    )


def test_fraudbench(tmp_path):
    _fraudbench_tree(tmp_path)
    records = read_fraudbench(tmp_path)
    assert not any("/Positive/" in r.path for r in records)  # sources only, excluded from evaluation
    negatives = [r for r in records if r.label == 0]
    fakes = [r for r in records if r.label == 1]
    assert len(negatives) == 3 and len(fakes) == 3
    assert {r.group for r in fakes} == {"gpt-image-1", "flux-kontext"}
    assert {r.review for r in negatives if r.category == "Electronics"} == {"Electronics/Negative/Review_002"}
    fake = next(r for r in fakes if r.group == "flux-kontext")
    assert fake.source.endswith("Electronics/Positive/Review_001/Image_001_01.jpg")
    assert fake.category == "Electronics"
    with_positive = read_fraudbench(tmp_path, include_positive=True)
    assert sum(r.group == "positive" for r in with_positive) == 2
    meta = fraudbench_metadata(tmp_path)
    assert meta["Electronics/DeepFake/Review_001"]["damage_type"] == "crack"
    assert meta["Electronics/Negative/Review_002"]["text"] == "arrived cracked"
    assert detect_layout(tmp_path) == "fraudbench"


def test_fraudbench_names_each_category_by_its_folder_for_genuine_images_and_fakes_alike(tmp_path):
    """A MetaReview's display name ("Consumer Electronics") would put a category's genuine images and
    its fakes in two categories, and the macro averages over categories would mix them up."""
    _fraudbench_tree(tmp_path)
    assert {(r.category, r.label) for r in read_fraudbench(tmp_path)} == {
        ("Electronics", 0),
        ("Electronics", 1),
        ("Hotels", 0),
        ("Hotels", 1),
    }


def test_fraudbench_keeps_one_sources_fakes_and_one_reviews_images_together_without_the_positive_folder(tmp_path):
    _fraudbench_tree(tmp_path)
    shutil.rmtree(tmp_path / "Electronics/Positive")
    records = read_fraudbench(tmp_path)
    fakes = [r for r in records if r.category == "Electronics" and r.label == 1]
    assert len(fakes) == 2 and len({r.source for r in fakes}) == 1 and fakes[0].source  # both generators' fakes
    review = [r for r in records if r.review == "Electronics/Negative/Review_002"]
    assert len(review) == 2 and len({r.source for r in review}) == 1 and review[0].source  # one source, named
    split = assign_splits(records, (0.5, 0.25, 0.25), seed=0)
    assert len({r.split for r in split if r.source == fakes[0].source}) == 1


def test_fraudbench_reads_a_category_of_one_class_and_says_so(tmp_path, caplog):
    _fraudbench_tree(tmp_path)
    _touch(tmp_path, "Beauty/DeepFake/gpt-image-1/Review_020/Image_020_01.jpg")
    with caplog.at_level(logging.WARNING):
        records = read_fraudbench(tmp_path)
    assert sum(r.category == "Beauty" for r in records) == 1
    assert "one class only" in caplog.text and "Beauty" in caplog.text


def test_one_fraudbench_category_folder_is_read_as_that_category_without_its_sources(tmp_path):
    _fraudbench_tree(tmp_path)
    records = records_from_input(tmp_path / "Electronics")
    assert len(records) == 4 and {r.category for r in records} == {"Electronics"}
    assert not any("/Positive/" in r.path for r in records)


def test_a_fraudbench_metareview_that_is_not_a_json_object_is_refused_naming_it(tmp_path):
    _fraudbench_tree(tmp_path)
    (tmp_path / "Electronics/Negative/Review_002/MetaReview_002.json").write_text('[{"category": "x"}]')
    with pytest.raises(LayoutError, match="MetaReview_002.json: expected a JSON object"):
        fraudbench_metadata(tmp_path)


def test_imdl_folders_pair_masks_by_name(tmp_path):
    _touch(tmp_path, "Tp/Tp_D_001.jpg", "Tp/Tp_S_002.tif", "Gt/Tp_D_001_gt.png", "Gt/Tp_S_002.png", "Au/Au_003.jpg")
    records = read_imdl(tmp_path)
    masks = {Path(r.path).name: (r.label, r.mask and Path(r.mask).name) for r in records}
    assert masks == {
        "Tp_D_001.jpg": (1, "Tp_D_001_gt.png"),
        "Tp_S_002.tif": (1, "Tp_S_002.png"),
        "Au_003.jpg": (0, None),
    }
    assert detect_layout(tmp_path) == "imdl"


def test_an_imdl_image_without_a_mask_is_listed_without_one_and_said(tmp_path, caplog):
    """Localization's data.missing_masks decides (drop, full or error); the reader refused the tree."""
    _touch(tmp_path, "Tp/Tp_D_001.jpg", "Gt/Tp_D_001_gt.png", "Tp/Tp_D_999.jpg")
    records = {Path(r.path).name: r.mask and Path(r.mask).name for r in read_imdl(tmp_path)}
    assert records == {"Tp_D_001.jpg": "Tp_D_001_gt.png", "Tp_D_999.jpg": None}
    assert "1 tampered images in Tp/ have no mask in Gt/" in caplog.text and "Tp_D_999.jpg" in caplog.text


def test_images_of_one_name_in_two_sub_folders_get_their_own_masks(tmp_path):
    """Both took the mask of the last sub-folder read (IMDL), and THEMIS lost half its originals."""
    _touch(tmp_path / "imdl", "Tp/A/0.png", "Tp/B/0.png", "Gt/A/0_gt.png", "Gt/B/0_gt.png", "Tp/C/1.png", "Gt/1.png")
    pairs = {r.path: r.mask for r in read_imdl(tmp_path / "imdl")}
    tp, gt = tmp_path / "imdl" / "Tp", tmp_path / "imdl" / "Gt"
    assert pairs == {str(tp / "A/0.png"): str(gt / "A/0_gt.png"), str(tp / "B/0.png"): str(gt / "B/0_gt.png"),
                     str(tp / "C/1.png"): str(gt / "1.png")}  # fmt: skip
    _touch(tmp_path / "themis", *(f"{role}/{s}/p.png" for role in ("original", "forged", "mask") for s in "AB"))
    records = read_themis(tmp_path / "themis")
    assert sum(r.label == 0 for r in records) == 2
    for forged in (r for r in records if r.label == 1):
        folder = forged.path.split("/")[-2]
        assert forged.mask.endswith(f"mask/{folder}/p.png") and forged.source.endswith(f"original/{folder}/p.png")


def test_a_mask_two_images_would_share_by_name_is_refused(tmp_path):
    _touch(tmp_path, "Tp/A/0.png", "Tp/B/0.png", "Gt/0_gt.png")
    with pytest.raises(LayoutError, match="both pair with the mask .*0_gt.png by name"):
        read_imdl(tmp_path)


@pytest.mark.parametrize(
    ("entry", "fault"),
    [
        (["c.png", None], 'the mask must be a path or "Negative", got null'),
        (["d.png", ""], 'the mask must be a path or "Negative", got ""'),
        ([None, "gt/e.png"], "the image must be a path, got null"),
    ],
)
def test_an_imdl_json_entry_without_a_mask_or_image_is_refused_by_file_and_index(tmp_path, entry, fault):
    (tmp_path / "list.json").write_text(json.dumps([["a.png", "Negative"], entry]))
    with pytest.raises(LayoutError, match=re.escape(f"{tmp_path / 'list.json'}: entry 1 ") + ".*" + re.escape(fault)):
        read_imdl_json(tmp_path / "list.json")


def test_imdl_json_and_casia_lists(tmp_path):
    (tmp_path / "list.json").write_text(json.dumps([["img/a.jpg", "gt/a.png"], ["img/b.jpg", "Negative"]]))
    records = read_imdl_json(tmp_path / "list.json")
    assert [(r.label, r.mask) for r in records] == [(1, str(tmp_path / "gt/a.png")), (0, None)]
    assert records[0].path == str(tmp_path / "img/a.jpg")
    assert detect_layout(tmp_path / "list.json") == "imdl_json"
    (tmp_path / "bad.json").write_text(json.dumps({"images": []}))
    with pytest.raises(LayoutError, match="expected a JSON list.*found a dict"):
        read_imdl_json(tmp_path / "bad.json")

    (tmp_path / "casia.txt").write_text("tp/x.jpg gt/x.png 1\n\nau/y.jpg None 0\n")
    records = read_casia_list(tmp_path / "casia.txt")
    assert [(Path(r.path).name, r.mask and Path(r.mask).name, r.label) for r in records] == [
        ("x.jpg", "x.png", 1),
        ("y.jpg", None, 0),
    ]
    assert read_layout(tmp_path / "casia.txt") == records
    (tmp_path / "broken.txt").write_text("tp/x.jpg 1\n")
    with pytest.raises(LayoutError, match=r"broken.txt:1: expected `image mask label`.*found 'tp/x.jpg 1'"):
        read_casia_list(tmp_path / "broken.txt")


def test_themis_triplets(tmp_path):
    _touch(tmp_path, "original/p1.png", "original/p2.png", "forged/p1.png", "mask/p1.png")
    records = read_themis(tmp_path)
    forged = [r for r in records if r.label == 1]
    assert len(forged) == 1 and forged[0].mask.endswith("mask/p1.png")
    assert forged[0].source.endswith("original/p1.png")
    assert sum(r.label == 0 for r in records) == 2
    assert detect_layout(tmp_path) == "themis"


def test_themis_forgeries_name_their_fraud_type_and_keep_the_split_of_their_original(tmp_path):
    """Several forgeries of one original (`p1_cm0`, `p1_cm1`) share its source, so no split holds
    the original on one side and a forgery of it on the other; the sub-folder is the fraud type."""
    originals = [f"original/copy_move/p{i}.png" for i in range(12)] + ["original/ai_generated/tre/p1.png"]
    forged = [f"forged/copy_move/p{i}_cm{k}.png" for i in range(12) for k in range(2)] + [
        "forged/ai_generated/tre/p1.png"
    ]
    _touch(tmp_path, *originals, *forged, *(f.replace("forged/", "mask/") for f in forged))
    records = assign_splits(read_themis(tmp_path), (0.5, 0.25, 0.25), seed=0)
    split_of = {r.path: r.split for r in records if r.label == 0}
    for record in (r for r in records if r.label == 1):
        original = re.sub(r"_cm\d", "", record.path.replace("forged/", "original/"))
        assert record.source == original and record.split == split_of[original]
        assert record.group == ("copy_move" if "_cm" in record.path else "ai_generated/tre")
    assert len(set(split_of.values())) == 3


def test_themis_forgeries_in_sub_folders_find_a_flat_original_by_name_exactly_or_by_prefix(tmp_path):
    _touch(
        tmp_path,
        "original/p1.png",
        "original/p2.png",
        "original/a/p3.png",
        "original/b/p3.png",  # two originals of one name: neither is taken by name alone
        "forged/splicing/p1.png",
        "forged/copy_move/p1_cm0.png",
        "forged/copy_move/p2-x_cm1.png",
        "forged/copy_move/p3_cm0.png",
        "mask/splicing/p1.png",
    )
    sources = {Path(r.path).relative_to(tmp_path).as_posix(): r.source for r in read_themis(tmp_path) if r.label}
    assert sources["forged/splicing/p1.png"] == str(tmp_path / "original/p1.png")
    assert sources["forged/copy_move/p1_cm0.png"] == str(tmp_path / "original/p1.png")
    assert sources["forged/copy_move/p2-x_cm1.png"] == str(tmp_path / "original/p2.png")
    assert sources["forged/copy_move/p3_cm0.png"] is None


def test_a_themis_forgery_extends_an_originals_name_only_with_a_numbered_tag(tmp_path, caplog):
    names = ("p1_cm0", "p1-2", "p1.v3", "p1-final", "p1_edited.x")  # the last two merely start like p1
    _touch(tmp_path, "original/p1.png", *(f"{role}/{n}.png" for role in ("forged", "mask") for n in names))
    with caplog.at_level(logging.WARNING):
        sources = {Path(r.path).stem: r.source for r in read_themis(tmp_path) if r.label}
    paired = str(tmp_path / "original/p1.png")
    assert sources == {"p1_cm0": paired, "p1-2": paired, "p1.v3": paired, "p1-final": None, "p1_edited.x": None}
    assert "2 forged images have no original" in caplog.text and "p1-final.png" in caplog.text


def test_themis_says_what_it_cannot_pair_and_what_it_does_not_read(tmp_path, caplog):
    _touch(tmp_path, "authentic/p1.png", "forged/p1.png", "forged/q7.png", "mask/p1.png", "mask/q7.png")
    with caplog.at_level(logging.WARNING):
        records = read_themis(tmp_path)
    assert len(records) == 2 and "no original/ folder" in caplog.text and "not read: authentic/" in caplog.text
    (tmp_path / "authentic").rename(tmp_path / "original")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        read_themis(tmp_path)
    assert "1 forged images have no original" in caplog.text and "q7.png" in caplog.text


def test_a_themis_tree_per_fraud_type_is_read_whole_with_the_type_leading_each_group(tmp_path, caplog):
    _touch(
        tmp_path, *(f"{t}/{role}/p.png" for t in ("splicing", "copy_move") for role in ("original", "forged", "mask"))
    )
    _touch(tmp_path, "notes/readme.png")
    assert detect_layout(tmp_path) == "themis"
    with caplog.at_level(logging.WARNING):
        records = read_layout(tmp_path)
    assert sorted((r.label, r.group) for r in records) == [(0, None), (0, None), (1, "copy_move"), (1, "splicing")]
    assert all(r.source.endswith(f"{r.group}/original/p.png") for r in records if r.label == 1)
    assert "not read: notes/" in caplog.text


def test_detection_of_folder_and_manifest(tmp_path):
    _touch(tmp_path / "cnnspot", "progan/car/0_real/a.png", "progan/car/1_fake/b.png")
    assert detect_layout(tmp_path / "cnnspot") == "folder"
    records = read_layout(tmp_path / "cnnspot")
    assert {(r.label, r.group) for r in records} == {(0, "progan/car"), (1, "progan/car")}
    (tmp_path / "m").mkdir()
    (tmp_path / "m/manifest.csv").write_text("path,label\na.png,0\nb.png,1\n")
    assert detect_layout(tmp_path / "m") == "manifest"
    assert [r.label for r in read_layout(tmp_path / "m")] == [0, 1]


def test_a_folder_given_as_the_manifest_layout_is_read_through_its_manifest(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m/manifest.csv").write_text("path,label\na.png,0\nb.png,1\n")
    assert [r.label for r in read_layout(tmp_path / "m", "manifest")] == [0, 1]
    assert [r.label for r in records_from_input(tmp_path / "m", layout="manifest")] == [0, 1]
    (tmp_path / "j").mkdir()
    (tmp_path / "j/manifest.jsonl").write_text('{"path": "a.png", "label": 1}\n')
    assert [r.label for r in read_layout(tmp_path / "j", "manifest")] == [1]
    with pytest.raises(LayoutError, match="layout=manifest needs a manifest.csv or manifest.jsonl in this folder"):
        read_layout(tmp_path, "manifest")


def test_errors_say_what_was_expected_and_found(tmp_path):
    _touch(tmp_path / "plain", "holiday/beach.jpg", "notes/readme.md")
    with pytest.raises(LayoutError) as error:
        detect_layout(tmp_path / "plain")
    message = str(error.value)
    assert "Tp/ and Gt/" in message and "{ai,nature}" in message and "holiday/" in message
    _touch(tmp_path / "both", "Tp/a.jpg", "Gt/a.png", "x/0_real/b.png")
    with pytest.raises(LayoutError, match="ambiguous layout, matches imdl, folder"):
        detect_layout(tmp_path / "both")
    assert len(read_layout(tmp_path / "both", layout="imdl")) == 1
    with pytest.raises(LayoutError, match="expected GenImage"):
        read_genimage(tmp_path / "plain")
    with pytest.raises(LayoutError, match="expected FraudBench"):
        read_fraudbench(tmp_path / "plain")
    with pytest.raises(LayoutError, match="unknown layout 'coco'"):
        read_layout(tmp_path / "plain", layout="coco")
    with pytest.raises(LayoutError, match="does not exist"):
        detect_layout(tmp_path / "missing")


def test_infer_input_reads_every_layout_training_reads_and_scores_no_fraudbench_source(tmp_path):
    """`infer.py input=` detects layouts as `train.py data=layout` does: labels, groups, categories
    and masks come along, and FraudBench's Positive images (the sources of the fakes) are not scored."""

    _fraudbench_tree(tmp_path / "fb")
    scored = records_from_input(tmp_path / "fb")
    assert scored == read_fraudbench(tmp_path / "fb")
    assert not any("/Positive/" in r.path for r in scored) and {r.label for r in scored} == {0, 1}
    assert {r.category for r in scored} == {"Electronics", "Hotels"}
    _touch(tmp_path / "gi", "sd/val/ai/a.png", "sd/val/nature/b.png")
    assert records_from_input(tmp_path / "gi") == read_genimage(tmp_path / "gi")
    _touch(tmp_path / "imdl", "Tp/x.png", "Gt/x.png", "Au/y.png")
    imdl = records_from_input(tmp_path / "imdl")
    assert imdl == read_imdl(tmp_path / "imdl") and any(r.mask for r in imdl)
    _touch(tmp_path / "plain", "holiday/a.png", "b.jpg")  # no layout: unlabelled images, recursively
    assert [(Path(r.path).name, r.label) for r in records_from_input(tmp_path / "plain")] == [
        ("b.jpg", None),
        ("a.png", None),
    ]
    assert records_from_input(tmp_path / "plain" / "b.jpg")[0].path == str(tmp_path / "plain" / "b.jpg")
    assert records_from_input(tmp_path / "fb", layout="fraudbench") == scored
    with pytest.raises(LayoutError, match="does not exist"):
        records_from_input(tmp_path / "missing")


def test_images_beside_a_real_fake_tree_are_said_to_be_left_out_and_layout_images_reads_them_all(tmp_path, caplog):
    """An archive whose one paper has a `real` folder is read as a labelled tree: the other papers'
    images are not read, and that is said; `layout=images` reads every image, unlabelled."""
    import logging

    import numpy as np

    from datamodules.io import write_image

    for name in ("paperA/source.png", "paperB/real/panel.png", "paperC/fig/other.png"):
        write_image(tmp_path / name, np.zeros((8, 8, 3), np.uint8))
    with caplog.at_level(logging.WARNING):
        labelled = records_from_input(tmp_path)
    assert [Path(r.path).name for r in labelled] == ["panel.png"]
    assert "2 image(s) outside its label folders are left out (layout=images" in caplog.text
    every = records_from_input(tmp_path, "images")
    assert sorted(Path(r.path).name for r in every) == ["other.png", "panel.png", "source.png"]
    assert {r.label for r in every} == {None}


@pytest.mark.parametrize("layout", ["auto", "images", "folder", "genimage"])
def test_a_linked_folder_is_read_as_the_folders_beside_it_and_a_link_back_up_the_tree_ends(tmp_path, layout):
    """An archive assembled from links: every layout that walks a tree reads the linked folder under
    the link's own path, and a link to a folder above it is read once, not forever."""

    stored, archive = tmp_path / "stored", tmp_path / "archive"
    inner = {"auto": "plain", "images": "plain", "folder": "real", "genimage": "sdv4/train/nature"}[layout]
    _touch(stored, f"{inner}/linked.png")
    _touch(archive, f"{inner}/own.png")
    (archive / "more").symlink_to(stored, target_is_directory=True)
    (archive / "more" / inner / "loop").symlink_to(archive, target_is_directory=True)
    records = records_from_input(archive, layout)
    assert sorted(os.path.relpath(r.path, archive) for r in records) == sorted(
        [f"{inner}/own.png", f"more/{inner}/linked.png"]
    )
