"""FraudBench's calibrated threshold is set on genuine images only: a labelled calibration input
contributes its label-0 images and none of its fakes; an unlabelled folder counts whole."""

from __future__ import annotations

import csv
import json

import numpy as np

from tests.helpers import write_images, write_tiny_model
from tools.fraudbench_table import genuine_records, main


def labelled_manifest(folder, genuine: int, fake: int):
    """A manifest of `genuine` label-0 and `fake` label-1 images of odd, non-square sizes,
    interleaved."""
    labels = [0] * genuine + [1] * fake
    order = np.random.default_rng(3).permutation(len(labels))
    labels = [labels[i] for i in order]
    paths = write_images(folder, [(31 + i, 45 - i) for i in range(len(labels))])
    lines = ["path,label,group"] + [
        f"{p.name},{label},{'genA' if label else 'real'}" for p, label in zip(paths, labels)
    ]
    (folder / "manifest.csv").write_text("\n".join(lines) + "\n")
    return folder / "manifest.csv", {str(p) for p, label in zip(paths, labels) if label == 0}


def test_a_labelled_calibration_input_gives_its_genuine_images_only(tmp_path):
    manifest, genuine = labelled_manifest(tmp_path / "calibration", genuine=4, fake=5)
    records = genuine_records(str(manifest))
    assert {r.path for r in records} == genuine and all(r.label == 0 for r in records)


def test_a_real_fake_tree_gives_its_real_folder_only(tmp_path):
    real = write_images(tmp_path / "tree" / "0_real", [(33, 21), (20, 35)])
    write_images(tmp_path / "tree" / "1_fake", [(25, 27), (19, 41), (40, 22)], seed=1)
    assert sorted(r.path for r in genuine_records(str(tmp_path / "tree"))) == sorted(map(str, real))


def test_an_unlabelled_folder_counts_every_image(tmp_path):
    paths = write_images(tmp_path / "photos", [(33, 21), (20, 35), (17, 29)])
    assert sorted(r.path for r in genuine_records(str(tmp_path / "photos"))) == sorted(map(str, paths))


def test_the_table_calibrates_on_the_genuine_images_of_a_labelled_input(tmp_path):
    model = write_tiny_model(tmp_path / "model", onnx=False)["ckpt"]
    data, _ = labelled_manifest(tmp_path / "data", genuine=3, fake=3)
    calibration, genuine = labelled_manifest(tmp_path / "calibration", genuine=6, fake=5)
    output = tmp_path / "table.md"
    table = main(
        [
            "--data",
            str(data),
            "--model",
            f"npr={model}",
            "--genuine",
            str(calibration),
            "--target-fpr",
            "0.2",
            "--output",
            str(output),
            "--workers",
            "0",
            "--device",
            "cpu",
        ]
    )
    fixed, calibrated = table["rows"]
    assert fixed["threshold_kind"] == "fixed" and fixed["threshold"] == 0.5
    assert calibrated["threshold_kind"] == "calibrated" and calibrated["n_calibration_genuine"] == 6
    with (tmp_path / "table_scores" / "npr_genuine.csv").open() as handle:
        scores = {row["path"]: float(row["score"]) for row in csv.DictReader(handle)}
    assert set(scores) == genuine  # no fake image was scored for calibration
    assert np.mean(np.asarray(list(scores.values())) >= calibrated["threshold"]) <= 0.2
    assert json.loads(output.with_suffix(".json").read_text())["rows"][1]["n_calibration_genuine"] == 6


def test_images_without_a_score_are_counted_in_a_warning_and_only_then(tmp_path, caplog):
    data, _ = labelled_manifest(tmp_path / "data", genuine=3, fake=3)
    paths = sorted(str(p) for p in (tmp_path / "data").glob("*.png"))
    for name, scored in (("all", paths), ("some", paths[1:])):
        scores = tmp_path / f"{name}.csv"
        scores.write_text("path,score,label,status,error\n" + "".join(f"{p},0.7,1,ok,\n" for p in scored))
        caplog.clear()
        with caplog.at_level("WARNING", logger="tools.fraudbench_table"):
            main(["--data", str(data), "--scores", f"det={scores}", "--output", str(tmp_path / f"{name}.md")])
        if name == "all":
            assert "have no score" not in caplog.text
        else:
            assert "det: 1 of 6 images have no score" in caplog.text
