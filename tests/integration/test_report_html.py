"""report=html end to end: a training run's test report is a page a reviewer can open."""

from __future__ import annotations

import hashlib
import logging
import re

import numpy as np

from train import train


def test_a_test_run_with_report_html_writes_a_page_of_every_test_image(train_config, tmp_path):
    cfg = train_config("+trainer.limit_train_batches=2", "report=html")
    metrics = train(cfg)
    page = tmp_path / "run" / "report.html"
    text = page.read_text(encoding="utf-8")
    n_test = metrics["n_pos"] + metrics["n_neg"]
    shown = len(re.findall(r'<tr data-decision="', text)) + sum(
        len(re.findall(r'<tr data-decision="', p.read_text()))
        for p in (tmp_path / "run" / "report_files" / "pages").glob("*.html")
    )
    assert shown == n_test
    assert "flags for a person to check" in text and "Against the known truth" in text
    assert re.search(r"[0-9a-f]{64}", text)  # the checkpoint's SHA-256
    # a small test split: one file, its thumbnails embedded (a larger one links them in report_files/)
    assert not (tmp_path / "run" / "report_files").exists()
    assert (
        len(re.findall(r'<img loading="lazy" class="thumb" alt="thumbnail" src="data:image/jpeg;base64,', text))
        == n_test
    )


def test_infer_with_report_html_writes_the_page_beside_the_rows_and_names_the_model(tmp_path, caplog):
    from datamodules.io import write_image
    from infer import infer
    from tests.helpers import compose_config, write_tiny_model

    model = write_tiny_model(tmp_path / "model", onnx=False)["ckpt"]
    folder = tmp_path / "uploads"
    rng = np.random.default_rng(0)
    for name in ("a.png", "<img src=x onerror=alert(1)>.png", "c.png"):
        write_image(folder / name, rng.integers(0, 256, (40, 56, 3), dtype=np.uint8))
    (folder / "broken.png").write_bytes(b"no image")
    output = tmp_path / "out" / "scores.csv"
    infer(
        compose_config(
            "infer",
            [f"model={model}", f"input={folder}", f"output={output}", "report=html", "num_workers=0", "progress=false"],
        )
    )
    page = output.with_name("scores_report.html").read_text(encoding="utf-8")
    assert hashlib.sha256(model.read_bytes()).hexdigest() in page
    assert "&lt;img src=x onerror=alert(1)&gt;.png" in page and "<img src=x" not in page
    assert len(re.findall(r'<tr data-decision="', page)) == 4 and 'data-decision="error"' in page

    # scored again without report=html: the page left beside the new rows is said to be the earlier run's
    with caplog.at_level(logging.WARNING, logger="infer"):
        infer(
            compose_config(
                "infer", [f"model={model}", f"input={folder}", f"output={output}", "num_workers=0", "progress=false"]
            )
        )
    assert "scores_report.html is the page of an earlier run, not of these scores" in caplog.text
