"""Saved localization maps keep the input image's geometry: height stays height and width stays
width for non-square, odd-sized images, whatever size the model saw; 0.5 stays on the positive side
of the 8-bit encoding."""

from __future__ import annotations

import numpy as np
import pytest

from datamodules.io import read_image, write_image
from datamodules.records import Record
from inference.masks import MapWriter, PixelReduction, heat_overlay, save_mask, save_overlay, to_uint8_map


def read_map(path: str) -> np.ndarray:
    """A saved 8-bit map as probabilities."""
    return read_image(path)[..., 0].astype(np.float32) / 255


def half_map(shape: tuple[int, int], axis: int) -> np.ndarray:
    """A probability map that is 1 on the first half along `axis` (rows 0, columns 1), else 0."""
    prob = np.zeros(shape, np.float32)
    if axis == 0:
        prob[: shape[0] // 2] = 1.0
    else:
        prob[:, : shape[1] // 2] = 1.0
    return prob


@pytest.mark.parametrize("network, image", [((8, 12), (37, 53)), ((12, 8), (53, 37)), ((16, 16), (23, 61))])
@pytest.mark.parametrize("axis", [0, 1])
def test_a_map_is_resized_to_the_image_height_and_width(network, image, axis):
    out = to_uint8_map(half_map(network, axis), image)
    assert out.shape == image and out.dtype == np.uint8
    expected = half_map(image, axis) * 255
    interior = np.abs(np.arange(image[axis]) - image[axis] / 2) > image[axis] / 8  # away from the edge ramp
    index = (interior, slice(None)) if axis == 0 else (slice(None), interior)
    np.testing.assert_array_equal(out[index], expected[index])


def test_saved_maps_read_back_at_the_original_size(tmp_path):
    path = save_mask(tmp_path, 3, "../odd name.jpg", half_map((9, 14), 1), (41, 67))
    assert path.parent == tmp_path
    back = read_map(str(path))
    assert back.shape == (41, 67)
    assert back[:, :30].min() == 1.0 and back[:, 38:].max() == 0.0


def test_an_overlay_is_drawn_over_a_non_square_picture_in_place(tmp_path):
    picture = np.zeros((3, 21, 34), np.float32)  # as the network saw it: 3 x H x W in [0, 1]
    save_overlay(tmp_path, 0, "a.png", picture, half_map((7, 10), 0))
    [written] = list(tmp_path.glob("*.jpg"))
    overlay = read_image(written)
    assert overlay.shape == (21, 34, 3)
    assert overlay[:7, :, 0].mean() > 100 and overlay[14:, :, 0].mean() < 20  # red on the top half only


def test_probability_one_half_stays_positive_through_the_8_bit_map(tmp_path):
    prob = np.array([[0.5, np.nextafter(np.float32(0.498), np.float32(0)), 1.0, 0.0]], np.float32)
    pixels = to_uint8_map(prob, prob.shape)
    assert pixels.tolist() == [[128, 127, 255, 0]]
    back = read_map(str(save_mask(tmp_path, 0, "x.png", prob, prob.shape)))
    assert (back >= 0.5).tolist() == [[True, False, True, False]]


def test_overlay_blends_red_in_proportion_to_the_probability():
    image = np.full((3, 5, 3), 100, np.uint8)
    prob = np.array([[0.0] * 5, [1.0] * 5, [0.5] * 5], np.float32)
    out = heat_overlay(image, prob, strength=0.6)
    assert out[0].tolist() == [[100, 100, 100]] * 5
    assert out[1].tolist() == [[193, 40, 40]] * 5  # 0.4 x 100 + 0.6 x (255, 0, 0)
    assert out[2, 0, 1] == 70 and out[2, 0, 0] in (146, 147)


def test_map_writer_hands_over_each_queued_write_once(tmp_path):
    writer = MapWriter()
    paths = [writer.mask(tmp_path, i, f"img{i}.png", np.full((3, 4), 0.5, np.float32), (7, 9)) for i in range(3)]
    queued = writer.take()
    assert len(queued) == 3 and writer.take() == []
    for future in queued:
        future.result()
    writer.close()
    assert all(read_map(str(p)).shape == (7, 9) for p in paths)


HEIGHT, WIDTH, CASES = 21, 34, 4
COLUMNS = [10, 10, 9, 8, 7, 6, 5, 4, 3, 2]


def write(path, array) -> str:
    write_image(path, array)
    return str(path)


def report_inputs(tmp_path):
    """Ten manipulated images (mask: the left 10 columns; map k flags the first COLUMNS[k], so
    m0 and m1 tie at F1 1 and F1 falls with k), listed last to first; a genuine one whose map flags
    3 rows; and rows that say nothing about pixels: a failed image, a path of no record, a fake
    without mask, no label."""
    truth = np.zeros((HEIGHT, WIDTH), np.uint8)
    truth[:, :10] = 255
    records, rows = [], []
    for k in range(10):
        image = write(tmp_path / f"m{k}.png", np.full((HEIGHT, WIDTH, 3), 9 * k, np.uint8))
        mask = write(tmp_path / f"m{k}_mask.png", truth)
        flagged = np.zeros((HEIGHT, WIDTH), np.uint8)
        flagged[:, : COLUMNS[k]] = 255
        records.append(Record(image, label=1, mask=mask))
        rows.insert(0, {"path": image, "status": "ok", "mask": write(tmp_path / f"m{k}_map.png", flagged)})
    genuine_map = np.zeros((HEIGHT, WIDTH), np.uint8)
    genuine_map[:3] = 255
    image = write(tmp_path / "g.png", np.zeros((HEIGHT, WIDTH, 3), np.uint8))
    records.append(Record(image, label=0, mask=write(tmp_path / "g_mask.png", truth)))
    rows.append({"path": image, "status": "ok", "mask": write(tmp_path / "g_map.png", genuine_map)})
    everything = write(tmp_path / "all_map.png", np.full((HEIGHT, WIDTH), 255, np.uint8))
    for name, label, status in (("failed", 1, "error"), ("nomask", 1, "ok"), ("unlabelled", None, "ok")):
        path = write(tmp_path / f"{name}.png", np.zeros((HEIGHT, WIDTH, 3), np.uint8))
        records.append(Record(path, label=label, mask=None))
        rows.append({"path": path, "status": status, "mask": everything})
    rows.append({"path": str(tmp_path / "stranger.png"), "status": "ok", "mask": everything})
    return records, rows, truth > 0


def pixel_report(records, rows, cases):
    """What a run reduces from its saved maps: each ok row of an input record, in input order."""
    reduction = PixelReduction(records, cases=cases)
    position = {record.path: index for index, record in enumerate(records)}
    for row in rows:
        if row["status"] == "ok" and row["path"] in position:
            reduction.add_saved(position[row["path"]], row["mask"])
    metrics = reduction.metrics()
    sheet = reduction.contact_sheet() if metrics else []
    return None if not sheet else (metrics, sheet)


def test_pixel_report_scores_manipulated_and_genuine_maps_and_picks_worst_and_best(tmp_path):
    records, rows, truth = report_inputs(tmp_path)
    metrics, sheet = pixel_report(records, rows, cases=CASES)
    f1 = [2 * c / (c + 10) for c in COLUMNS]
    assert metrics["n_masks"] == 10 and metrics["pixel_f1"] == pytest.approx(np.mean(f1))
    assert metrics["pixel_fpr_genuine"] == pytest.approx(3 / HEIGHT)
    titles = [title for *_, title in sheet]
    # the 4 worst and the 4 best by F1, ties by path
    assert titles == [f"m{k}.png  pixel F1 {f1[k]:.2f}" for k in (9, 8, 7, 6, 3, 2, 0, 1)]
    for image, mask, prob, _ in sheet:
        assert image.shape == (HEIGHT, WIDTH, 3) and prob.shape == (HEIGHT, WIDTH)
        np.testing.assert_array_equal(mask, truth)


def test_pixel_report_shows_every_case_when_there_are_few(tmp_path):
    records, rows, _ = report_inputs(tmp_path)
    _, sheet = pixel_report(records, rows[: 2 * CASES], cases=CASES)
    assert [title.split()[0] for *_, title in sheet] == [f"m{k}.png" for k in range(9, 1, -1)]
    assert pixel_report(records, rows[10:], cases=CASES) is None  # no manipulated image with a map


def test_a_long_run_keeps_few_maps_in_memory_and_still_shows_the_worst_and_best(tmp_path):
    """However many maps stream through, at most four times `cases` are held, and the contact
    sheet still shows the worst and the best of the whole run."""
    records, rows, _ = report_inputs(tmp_path)
    reduction = PixelReduction(records, cases=1)
    position = {record.path: index for index, record in enumerate(records)}
    for row in rows[:10]:  # m9 ... m0: F1 rising (m1 and m0 tie at 1, then ordered by path)
        reduction.add_saved(position[row["path"]], row["mask"])
        assert len(reduction.scored) <= 4
    assert [title.split()[0] for *_, title in reduction.contact_sheet()] == ["m9.png", "m1.png"]


def test_a_manipulated_image_with_an_empty_or_misfit_mask_says_nothing_about_pixels(tmp_path, caplog):
    """An empty mask counted its image as genuine in pixel_fpr_genuine; a mask of another size was
    stretched onto the map (training sets both aside)."""
    records, rows, _ = report_inputs(tmp_path)
    for name, mask in (("empty", np.zeros((HEIGHT, WIDTH), np.uint8)), ("small", np.full((5, 7), 255, np.uint8))):
        image = write(tmp_path / f"{name}.png", np.zeros((HEIGHT, WIDTH, 3), np.uint8))
        records.append(Record(image, label=1, mask=write(tmp_path / f"{name}_mask.png", mask)))
        rows.append({"path": image, "status": "ok", "mask": str(tmp_path / "all_map.png")})
    metrics, _ = pixel_report(records, rows, cases=CASES)
    assert metrics["n_masks"] == 10 and metrics["pixel_fpr_genuine"] == pytest.approx(3 / HEIGHT)
    said = f"pixel metrics skip {tmp_path / 'small.png'}: its mask is 7 x 5, the image {WIDTH} x {HEIGHT}"
    assert said in caplog.text
