"""Dataset planning pieces: region records of known masks, leak-free splits, spec checks, contact sheet."""

from __future__ import annotations

import numpy as np
import pytest

from datamodules.io import read_image, split_keys, split_keys_by_group, write_image
from synthesis.contact_sheet import contact_sheet
from synthesis.dataset import KINDS, OPERATIONS, DatasetSpec, _panel_tasks
from synthesis.operations import regions_from_mask
from synthesis.photos import photo_table


def test_regions_of_a_known_mask_are_ordered_by_area_with_exact_boxes():
    mask = np.zeros((50, 80), bool)
    mask[5:15, 10:20] = True  # 100 px
    mask[30:45, 40:70] = True  # 450 px
    regions = regions_from_mask(mask)
    assert [r["bbox"] for r in regions] == [[40, 30, 70, 45], [10, 5, 20, 15]]
    assert regions[0]["primary"] and not regions[1]["primary"]
    assert regions[0]["area_fraction"] == pytest.approx(450 / 4000)
    assert all(not r["machine_derived"] and len(r["polygon"]) >= 4 for r in regions)
    assert regions_from_mask(np.zeros((4, 4), bool)) == []


def test_splits_are_drawn_per_source_and_a_few_photos_still_fill_every_split():
    assert set(split_keys(["a", "b", "c"], (0.7, 0.15, 0.15), 0).values()) == {"train", "val", "test"}
    many = split_keys([f"s{i}" for i in range(100)], (0.8, 0.1, 0.1), 1)
    assert sorted(list(many.values()).count(s) for s in ("train", "val", "test")) == [10, 10, 80]
    assert many == split_keys([f"s{i}" for i in reversed(range(100))], (0.8, 0.1, 0.1), 1)


def test_each_kind_of_genuine_image_has_its_own_sources_in_train_val_and_test(tmp_path):
    # 22 photos, then 8 sources of each kind: split over all 46 at once, a kind can land in test only
    table = [{"photo": f"p{i}.png", "key": f"p{i}", "source": f"p{i}", "category": "photo"} for i in range(22)]
    table += [{"photo": "pp.png", "key": f"pp{i}", "source": f"p{i}", "category": "phone_photo"} for i in range(4)]
    for kind in ("blot", "chart", "histology"):
        table += [{"photo": "k.png", "key": f"{kind}{i}", "source": f"{kind}{i}", "category": kind} for i in range(8)]
    for seed in range(5):
        tasks = _panel_tasks(tmp_path, DatasetSpec(seed=seed, genuine_kinds={"blot": 8}), table)
        split_of = {t["photo"]["key"]: t["split"] for t in tasks}
        for kind in ("photo", "blot", "chart", "histology"):
            keys = [p["key"] for p in table if p["category"] == kind]
            assert sorted(split_of[k] for k in keys).count("train") == round(0.7 * len(keys))
            assert {split_of[k] for k in keys} == {"train", "val", "test"}
        assert all(split_of[f"pp{i}"] == split_of[f"p{i}"] for i in range(4))  # a phone photo follows its photo
    groups = {f"a{i}": "a" for i in range(10)} | {"b0": "b"}
    alone = split_keys(list(groups)[:10], (0.8, 0.1, 0.1), 0)
    assert split_keys_by_group(groups, (0.8, 0.1, 0.1), 0) == {**alone, "b0": "train"}
    assert DatasetSpec(genuine_kinds={"blot": 8}).fingerprint()["split_by"] == "category"
    assert "split_by" not in DatasetSpec().fingerprint()  # datasets of photos alone keep their splits


def test_a_category_can_have_its_own_crop_count_and_the_first_crops_do_not_move(tmp_path):
    from synthesis.items import run_task

    image = np.random.default_rng(0).integers(0, 255, (200, 240, 3), dtype=np.uint8)
    write_image(tmp_path / "p.png", image)
    table = [
        {"photo": str(tmp_path / "p.png"), "key": "p", "source": "p", "category": "photo"},
        {"photo": str(tmp_path / "p.png"), "key": "blot0", "source": "blot0", "category": "blot"},
    ]

    def panels(spec: DatasetSpec, output) -> dict[str, list[str]]:
        rows = [r for task in _panel_tasks(output, spec, table) for r in run_task(task)["rows"]]
        return {key: sorted(r["path"] for r in rows if r["source"] == key) for key in ("p", "blot0")}

    spec = DatasetSpec(crops_per_photo=2, crops_by_category={"photo": 5}, crop_size=64, genuine_kinds={"blot": 1})
    made = panels(spec, tmp_path / "a")
    assert len(made["p"]) == 1 + 5 and len(made["blot0"]) == 1 + 2  # the whole panel and its crops
    fewer = panels(DatasetSpec(crops_per_photo=2, crop_size=64, genuine_kinds={"blot": 1}), tmp_path / "b")
    for path in fewer["p"]:  # the photo's first two crops are the same pixels with either count
        assert np.array_equal(read_image(tmp_path / "a" / path), read_image(tmp_path / "b" / path))
    assert "crops_by_category" not in DatasetSpec().fingerprint()  # datasets made before it keep their stamp
    assert spec.fingerprint()["crops_by_category"] == {"photo": 5}
    with pytest.raises(ValueError, match="0 or more"):
        DatasetSpec(crops_by_category={"photo": -1})


def test_photo_keys_are_unique_and_a_stereo_pair_is_one_source(tmp_path):
    paths = [
        tmp_path / "shoes" / "a.png",
        tmp_path / "bags" / "a.png",
        tmp_path / "x_left.png",
        tmp_path / "x_right.png",
    ]
    table = photo_table(paths, tmp_path)
    assert len({t["key"] for t in table}) == 4
    assert {t["source"] for t in table} == {"bags__a", "shoes__a", "x"}
    assert {t["category"] for t in table} == {"bags", "shoes", None}


def test_spec_checks_names_and_kinds_select_operations():
    with pytest.raises(ValueError, match="kind must be one of"):
        DatasetSpec(kind="everything")
    with pytest.raises(ValueError, match="unknown operations"):
        DatasetSpec(ops={"splice": 1.0})
    assert set(DatasetSpec(kind="aigi").active) == {
        "rerender",
        "region_edit",
        "latent_rerender",
        "diffusion_sdedit",
        "diffusion_inpaint",
    }
    assert "rerender" not in DatasetSpec(kind="forgery").active
    assert set(DatasetSpec(kind="all", ops={op: 1.0 for op in OPERATIONS}).active) == set(KINDS["all"])
    assert DatasetSpec(seed=1).fingerprint() != DatasetSpec(seed=2).fingerprint()


def test_contact_sheet_shows_one_row_per_operation(tmp_path):
    rng = np.random.default_rng(0)
    source = rng.integers(0, 255, (40, 60, 3), dtype=np.uint8)
    write_image(tmp_path / "real/p.png", source)
    rows = []
    for op in ("splicing", "copy_move"):
        fake, mask = source.copy(), np.zeros((40, 60), np.uint8)
        mask[5:20, 5:25] = 255
        fake[mask > 0] = 0
        write_image(tmp_path / f"fake/{op}/p.png", fake)
        write_image(tmp_path / f"masks/{op}/p.png", mask)
        (tmp_path / f"masks/{op}/p.json").write_text('{"source_panel": "real/p.png"}')
        rows += [{"path": f"fake/{op}/p.png", "mask": f"masks/{op}/p.png", "label": 1, "group": op}] * 2
    sheet = read_image(contact_sheet(tmp_path, rows, tile=64))
    assert sheet.shape == (22 + 2 * (22 + 64), 4 * 64, 3)
    assert contact_sheet(tmp_path, rows[:0]) is None


def test_precomputed_similarity_equals_the_splicing_score():
    from skimage import data

    from synthesis.planning import feature_similarity, similarity_features
    from synthesis.splicing import pair_similarity

    images = [data.astronaut(), data.coffee(), data.chelsea()[:200, :300].copy()]
    for a in images:
        for b in images:
            expected = pair_similarity(a, b)
            assert feature_similarity(similarity_features(a), similarity_features(b)) == pytest.approx(
                expected, abs=1e-9
            )


def test_forgery_options_mark_the_fingerprint_and_reach_the_generator(tmp_path):
    import json

    import cv2

    from synthesis.operations import run_operation
    from synthesis.planning import plan_items

    seed_recipe = DatasetSpec().fingerprint()
    assert "forgery_options" not in seed_recipe  # datasets made before the option keep their stamp
    assert DatasetSpec(forgery_options={"copy_move": {}, "splicing": {}}).fingerprint() == seed_recipe
    assert DatasetSpec(forgery_options={"copy_move": {"scale": (1.0, 1.0)}}).fingerprint() == seed_recipe
    assert DatasetSpec(forgery_options={"splicing": {"donor_chains": ["jpeg75"]}}).fingerprint() != seed_recipe
    with pytest.raises(ValueError, match="unknown"):
        DatasetSpec(forgery_options={"copy_move": {"angle": [0, 30]}})
    with pytest.raises(ValueError, match="no options for 'damage'"):
        DatasetSpec(forgery_options={"damage": {"strength": 1}})

    image = np.full((120, 160, 3), 40, np.uint8)
    cv2.circle(image, (50, 60), 25, (220, 200, 180), -1)
    write_image(tmp_path / "real/p.png", image)
    panel = {"path": "real/p.png", "height": 120, "width": 160, "split": "train", "source": "p", "category": None}
    spec = DatasetSpec(
        kind="forgery",
        ops={"copy_move": 1.0},
        forgery_options={"copy_move": {"rotation": [20, 20], "interpolation": "bicubic"}},
    )
    (item,) = plan_items(spec, tmp_path, [panel], generators={})
    row = run_operation(item["op"], item["name"], tmp_path, item["panels"], np.random.default_rng(0), item["options"])[
        "rows"
    ][0]
    meta = json.loads((tmp_path / row["mask"]).with_suffix(".json").read_text())["meta"]
    assert meta["rotation"] == 20.0 and meta["interpolation"] == "bicubic"


def test_receipts_drawn_without_some_fonts_are_told_apart_in_the_fingerprint(monkeypatch, tmp_path):
    import synthesis.genuine_kinds as kinds

    spec = DatasetSpec(genuine_kinds={"document": 4})
    full = spec.fingerprint()
    assert "missing_fonts" not in full or full["missing_fonts"] == kinds.missing_document_fonts()
    present = [path for path in kinds.document_fonts() if path.is_file()]
    monkeypatch.setattr(kinds, "document_fonts", lambda: [*present, tmp_path / "NoSuchFont.ttf"])
    assert spec.fingerprint()["missing_fonts"] == ["NoSuchFont.ttf"]
    assert "missing_fonts" not in DatasetSpec(genuine_kinds={"blot": 4}).fingerprint()  # no text drawn
