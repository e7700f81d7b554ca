"""What `infer.py` writes on the bundled photographs is pinned: rows, metrics, reports, maps.

`tests/data/infer_pinned.json` holds what the scoring pipeline wrote for two deterministically
initialized tiny models (an NPR classifier and a seg localizer, seeded, no training) on the
bundled photographs shrunk to <= 96 px, with copy-move fakes and their masks, and one unreadable
file: the result rows, `<output>.metrics.json` (with robustness curves), the review verdicts, the
report's text, the list of files written, and a digest of every saved map. A change to the scoring
code that alters any score, label, metric, file name or map fails here; a deliberate change
regenerates the file with `PYTHONPATH=. python tests/integration/test_infer_pinned.py` and says why
in its commit.
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

EXPECTED = Path(__file__).resolve().parents[1] / "data" / "infer_pinned.json"
CLASSIFIER_RUN = ["robustness=true", "robustness_perturbations=[jpeg,rescale]", "group_by=category"]
LOCALIZER_RUN = ["robustness=true", "robustness_perturbations=[jpeg]", "overlays=true"]
LONG_SIDE = 96


def make_photo_set(folder: Path) -> Path:
    """Each bundled photo (shrunk, RGB) as a genuine image and as a copy-move fake with its mask."""
    from datamodules.io import read_image, write_image
    from synthesis.embedded import bundled_photo_paths

    (folder / "masks").mkdir(parents=True)
    rows = ["path,label,mask,category"]
    for photo in bundled_photo_paths():
        image = read_image(photo)
        scale = LONG_SIDE / max(image.shape[:2])
        size = (round(image.shape[1] * scale), round(image.shape[0] * scale))
        image = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
        height, width = image.shape[:2]
        side_h, side_w = height // 4, width // 4
        fake, mask = image.copy(), np.zeros((height, width), np.uint8)
        fake[-side_h:, -side_w:] = image[:side_h, :side_w]  # top-left corner pasted bottom-right
        mask[-side_h:, -side_w:] = 255
        write_image(folder / f"{photo.stem}.png", image)
        write_image(folder / f"{photo.stem}_moved.png", fake)
        write_image(folder / "masks" / f"{photo.stem}_moved.png", mask)
        rows += [
            f"{photo.stem}.png,0,,{photo.stem}",
            f"{photo.stem}_moved.png,1,masks/{photo.stem}_moved.png,{photo.stem}",
        ]
    (folder / "broken.png").write_bytes(b"not an image")
    rows.append("broken.png,0,,broken")
    (folder / "manifest.csv").write_text("\n".join(rows) + "\n")
    return folder / "manifest.csv"


def write_models(folder: Path) -> dict[str, Path]:
    """The tiny NPR (seed 0) and the tiny seg localizer (seed 0), untrained, as train.py saves them."""
    from tests.helpers import write_tiny_model
    from tests.localization_helpers import save_untrained_checkpoint

    classifier = write_tiny_model(folder / "npr", onnx=False, seed=0)["ckpt"]
    save_untrained_checkpoint(folder / "seg_tiny.ckpt", seed=0)
    return {"classifier": classifier, "localizer": folder / "seg_tiny.ckpt"}


def run(model: Path, manifest: Path, output: Path, extra: list[str]) -> None:
    from infer import infer
    from tests.helpers import compose_config

    infer(
        compose_config(
            "infer",
            [
                f"model={model}",
                f"input={manifest}",
                f"output={output}",
                "num_workers=0",
                "progress=false",
                "batch_size=4",
                *extra,
            ],
        )
    )


def relative(text: str, roots: list[Path]) -> str:
    for root in roots:
        text = text.replace(str(root), f"<{root.name}>")
    return text


def outcome(folder: Path, roots: list[Path]) -> dict[str, Any]:
    """Everything a run wrote under `folder`: text files parsed (paths made relative), maps digested."""
    found: dict[str, Any] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        name = path.relative_to(folder).as_posix()
        if path.name.endswith(".run.json"):  # names the model file by its absolute path and hash
            found[name] = "file"
        elif path.suffix == ".csv":
            with path.open(newline="", encoding="utf-8") as handle:
                found[name] = [{k: relative(v, roots) for k, v in row.items()} for row in csv.DictReader(handle)]
            for row in found[name]:  # the image file's size and modification time: recorded, not pinned
                if row.get("file_signature"):
                    row["file_signature"] = "<recorded>"
        elif path.suffix == ".json":
            found[name] = json.loads(relative(path.read_text(encoding="utf-8"), roots))
        elif path.suffix == ".md":
            found[name] = relative(path.read_text(encoding="utf-8"), roots)
        elif path.suffix == ".png" and "_masks" in name:
            pixels = cv2.imread(str(path), cv2.IMREAD_UNCHANGED).astype(np.int64)
            found[name] = {
                "shape": list(pixels.shape),
                "sum": int(pixels.sum()),
                "positive": int((pixels >= 128).sum()),
            }
        else:
            found[name] = "file"  # figures and overlays: that they are written, under this name
    return found


def pinned_outcome(tmp_path: Path) -> dict[str, Any]:
    data, models = tmp_path / "photos", write_models(tmp_path / "models")
    manifest = make_photo_set(data)
    results = {}
    for name, extra in (("classifier", CLASSIFIER_RUN), ("localizer", LOCALIZER_RUN)):
        out = tmp_path / name
        run(models[name], manifest, out / "scores.csv", extra)
        results[name] = outcome(out, [data, out])
    return results


NUMBER = re.compile(r"-?\d+\.\d+(?:e-?\d+)?")


def float_tolerance(where: str) -> float:
    """1e-6, as another CPU may round the last bits; 1e-4 for pixel metrics, which count the pixels
    of a map on each side of a threshold: those last bits move a few of some 10^5 pixels across it
    (1.6e-5 relative seen between two machines)."""
    return 1e-4 if "pixel_" in where.rsplit("/", 1)[-1] else 1e-6


def assert_same(actual: Any, expected: Any, where: str = "") -> None:
    """Equal, with float values equal to `float_tolerance` and numbers written in text to 1e-6."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and set(actual) == set(expected), f"{where}: keys differ"
        for key in expected:
            assert_same(actual[key], expected[key], f"{where}/{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{where}: lengths differ"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{where}[{i}]")
    elif where.endswith("/codec"):  # names the installed OpenCV and libjpeg versions
        assert isinstance(actual, str) and actual.startswith("OpenCV"), f"{where}: {actual!r}"
    elif isinstance(expected, float):
        tolerance = float_tolerance(where)
        assert isinstance(actual, (int, float)) and math.isclose(actual, expected, rel_tol=tolerance, abs_tol=1e-6), (
            f"{where}: {actual} != {expected}"
        )
    elif isinstance(expected, str) and NUMBER.search(expected):
        assert NUMBER.sub("#", actual) == NUMBER.sub("#", expected), f"{where}: text differs"
        for a, e in zip(NUMBER.findall(actual), NUMBER.findall(expected)):
            assert math.isclose(float(a), float(e), rel_tol=1e-6, abs_tol=1e-6), f"{where}: {a} != {e}"
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def assert_same_maps(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    """Map digests: same shape, pixel sums within half a grey level per pixel on one pixel in a thousand."""
    for name, digest in expected.items():
        if isinstance(digest, dict) and "sum" in digest and "shape" in digest:
            got = actual[name]
            assert got["shape"] == digest["shape"], name
            pixels = int(np.prod(digest["shape"]))
            assert abs(got["sum"] - digest["sum"]) <= max(1, pixels // 1000), name
            assert abs(got["positive"] - digest["positive"]) <= max(1, pixels // 1000), name
            actual[name] = expected[name] = "map"


@pytest.mark.slow
@pytest.mark.ci  # what users see, pinned: CI runs it
def test_infer_writes_the_pinned_rows_metrics_reports_and_maps(tmp_path):
    expected = json.loads(EXPECTED.read_text(encoding="utf-8"))
    actual = pinned_outcome(tmp_path)
    for name in ("classifier", "localizer"):
        assert sorted(actual[name]) == sorted(expected[name]), f"{name}: other files written"
        assert_same_maps(actual[name], expected[name])
        assert_same(actual[name], expected[name], name)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        EXPECTED.write_text(json.dumps(pinned_outcome(Path(folder)), indent=1, sort_keys=True) + "\n")
    print(f"wrote {EXPECTED}")
