"""infer.py with a localizer: maps at the original size, inside masks_dir whatever the input path,
a `mask` column, overlays, and pixel metrics with a contact sheet when the input has true masks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from inference.writer import read_results
from tests.integration.test_infer import run_infer
from tests.localization_helpers import save_untrained_checkpoint

SIZES = {"wide.png": (45, 70), "square.png": (64, 64), "tall.png": (90, 37)}


@pytest.fixture(scope="module")
def localizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("localizer")
    module = save_untrained_checkpoint(folder / "seg_tiny.ckpt")
    return folder / "seg_tiny.ckpt", module


@pytest.fixture
def manifest(tmp_path) -> Path:
    """Images reached through `..` and absolute paths, true masks for the fakes, one broken file."""
    rng = np.random.default_rng(0)
    data, elsewhere = tmp_path / "data", tmp_path / "elsewhere"
    (data / "masks").mkdir(parents=True)
    elsewhere.mkdir()
    rows = ["path,label,mask"]
    for i, (name, (h, w)) in enumerate(SIZES.items()):
        folder = elsewhere if i == 0 else data
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(folder / name)
        mask = np.zeros((h, w), np.uint8)
        mask[h // 4 : h // 2, w // 4 : w // 2] = 255
        Image.fromarray(mask).save(data / "masks" / name)
        path = f"../elsewhere/{name}" if i == 0 else str((data / name).resolve()) if i == 1 else name
        label = 0 if name == "tall.png" else 1
        rows.append(f"{path},{label},{'masks/' + name if label else ''}")
    (data / "broken.png").write_bytes(b"no image")
    rows.append("broken.png,1,masks/wide.png")
    (data / "manifest.csv").write_text("\n".join(rows) + "\n")
    return data / "manifest.csv"


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def test_maps_are_written_at_the_original_size_inside_masks_dir_only(localizer, manifest, tmp_path):
    checkpoint, module = localizer
    before = files_under(tmp_path)
    masks_dir = tmp_path / "out" / "maps"
    result = run_infer(
        checkpoint,
        manifest,
        tmp_path / "out" / "scores.csv",
        "save_masks=true",
        f"masks_dir={masks_dir}",
        "overlays=true",
    )
    assert result["counts"] == {"ok": 3, "error": 1, "skipped": 0}
    new = files_under(tmp_path) - before
    outside = [
        p
        for p in new
        if masks_dir not in p.parents
        and p.parent != tmp_path / "out"
        and (tmp_path / "out" / "scores_report") not in p.parents
    ]
    assert not outside, f"files written outside masks_dir: {outside}"
    rows = {Path(r["path"]).name: r for r in read_results(tmp_path / "out" / "scores.csv")}
    assert rows["broken.png"]["status"] == "error" and not rows["broken.png"].get("mask")
    for name, (h, w) in SIZES.items():
        saved = Path(rows[name]["mask"])
        assert masks_dir in saved.parents
        pixels = np.asarray(Image.open(saved))
        assert pixels.shape == (h, w) and pixels.dtype == np.uint8
        image = torch.from_numpy(np.array(Image.open(Path(rows[name]["path"])))).permute(2, 0, 1)[None] / 255
        with torch.no_grad():
            expected = torch.sigmoid(module.net(image.float())["mask_logit"])[0, 0].numpy() * 255
        assert np.abs(pixels.astype(np.float32) - expected).max() <= 0.5 + 1e-3  # the whole image, not a crop
        overlay = masks_dir / "overlays" / saved.name.replace(".png", ".jpg")
        assert np.asarray(Image.open(overlay)).shape == (h, w, 3)


def test_true_masks_give_pixel_metrics_and_a_contact_sheet(localizer, manifest, tmp_path):
    checkpoint, _ = localizer
    output = tmp_path / "scores.csv"
    result = run_infer(checkpoint, manifest, output)  # true masks: maps are saved without asking
    metrics = json.loads(output.with_suffix(".metrics.json").read_text())
    assert metrics["n_masks"] == 2 and 0.0 <= metrics["pixel_f1"] <= 1.0
    assert 0.0 <= metrics["pixel_fpr_genuine"] <= 1.0 and "per manipulated image" in metrics["pixel_protocol"]
    assert result["metrics"]["pixel_iou"] == metrics["pixel_iou"]
    report = tmp_path / "scores_report"
    assert (report / "contact_sheet.png").is_file()
    assert "pixel_f1" in (report / "report.md").read_text()
    assert all(r.get("mask") for r in read_results(output) if r["status"] == "ok")


@pytest.mark.slow
@pytest.mark.ci  # in CI's slow phase: keeps the default run under 5 minutes
def test_resume_keeps_finished_maps_and_scores_the_rest(localizer, manifest, tmp_path):
    checkpoint, _ = localizer
    output = tmp_path / "scores.csv"
    first = run_infer(checkpoint, manifest, output, "save_masks=true")
    lines = output.read_text().splitlines()
    output.write_text("\n".join(lines[:2]) + "\n")  # only the first scored row survived
    second = run_infer(checkpoint, manifest, output, "save_masks=true", "resume=true")
    assert second["counts"]["skipped"] == 1 and second["counts"]["ok"] + second["counts"]["error"] == 3
    assert second["metrics"]["pixel_f1"] == pytest.approx(first["metrics"]["pixel_f1"])


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_resume_that_saves_maps_the_first_run_did_not_is_refused_before_any_image_is_scored(
    localizer, tmp_path, suffix
):
    from inference.run_report import InferenceFailed

    checkpoint, _ = localizer
    Image.fromarray(np.full((40, 50, 3), 90, np.uint8)).save(tmp_path / "x.png")
    output = tmp_path / "out" / f"scores{suffix}"
    run_infer(checkpoint, tmp_path / "x.png", output)  # no true mask: no map saved
    written = output.read_bytes()
    with pytest.raises(InferenceFailed, match="resume with the options it was started with"):
        run_infer(checkpoint, tmp_path / "x.png", output, "resume=true", "save_masks=true")
    assert output.read_bytes() == written and not (tmp_path / "out" / "scores_masks").exists()


def test_tiled_maps_cover_the_original_size(localizer, manifest, tmp_path, caplog):
    checkpoint, _ = localizer
    output = tmp_path / "tiled.csv"
    with caplog.at_level("WARNING"):
        run_infer(checkpoint, manifest, output, "tiles=true", "tile_size=32", "save_masks=true")
    rows = {Path(r["path"]).name: r for r in read_results(output) if r["status"] == "ok"}
    for name, (h, w) in SIZES.items():
        assert np.asarray(Image.open(rows[name]["mask"])).shape == (h, w)
    assert "threshold was calibrated on scores made without tiles" in caplog.text  # its FPR does not carry over


def test_an_input_added_before_a_resume_does_not_overwrite_an_earlier_rows_map(localizer, tmp_path):
    """The new input takes the first position, which an earlier row's map is named after."""
    checkpoint, _ = localizer
    rng = np.random.default_rng(3)
    (tmp_path / "in" / "b").mkdir(parents=True)
    Image.fromarray(rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)).save(tmp_path / "in" / "b" / "x.png")
    output = tmp_path / "scores.csv"
    run_infer(checkpoint, tmp_path / "in", output, "save_masks=true")
    (tmp_path / "in" / "a").mkdir()
    Image.fromarray(rng.integers(0, 256, (30, 20, 3), dtype=np.uint8)).save(tmp_path / "in" / "a" / "x.png")
    run_infer(checkpoint, tmp_path / "in", output, "save_masks=true", "resume=true")
    rows = {Path(r["path"]).parent.name: r for r in read_results(output)}
    assert rows["a"]["mask"] != rows["b"]["mask"]
    for folder, row in rows.items():  # each row's map is its own image's (sizes differ)
        assert Image.open(row["mask"]).size == Image.open(tmp_path / "in" / folder / "x.png").size


def test_a_page_draws_each_mask_at_its_categorys_threshold(localizer, tmp_path):
    """One image under two categories with thresholds of their own: each row's mask, and the share
    of pixels above, is drawn at the threshold that decided it (the page's share cell says it)."""
    import re

    checkpoint, _ = localizer
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    strict = float(np.nextafter(1.0, 2.0))  # above every score, as a calibration with genuine scores of 1.0 sets it
    saved["category_thresholds"] = {"lenient": 0.0, "strict": strict}  # every pixel above / none above
    torch.save(saved, tmp_path / "by_category.ckpt")
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)).save(tmp_path / "a.png")
    Image.fromarray(rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)).save(tmp_path / "b.png")
    (tmp_path / "manifest.csv").write_text("path,category\na.png,lenient\nb.png,strict\n")
    output = tmp_path / "out" / "scores.csv"
    run_infer(tmp_path / "by_category.ckpt", tmp_path / "manifest.csv", output, "save_masks=true", "report=html")
    page = output.with_name("scores_report.html").read_text(encoding="utf-8")
    shares = dict(re.findall(r'<td class="name">[^<]*/([ab])\.png</td>.*?<td class="share">([^<]*)</td>', page, re.S))
    assert shares == {"a": "100.0 %", "b": "0.0 %"}
