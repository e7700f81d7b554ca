"""report=html end to end: a training run's test report is a page a reviewer can open."""
from __future__ import annotations

import re

from train import train


def test_a_test_run_with_report_html_writes_a_page_of_every_test_image(train_config, tmp_path):
    cfg = train_config("+trainer.limit_train_batches=2", "report=html")
    metrics = train(cfg)
    page = tmp_path / "run" / "report.html"
    text = page.read_text(encoding="utf-8")
    n_test = metrics["n_pos"] + metrics["n_neg"]
    shown = len(re.findall(r'<tr data-decision="', text)) + sum(
        len(re.findall(r'<tr data-decision="', p.read_text())) for p in (tmp_path / "run" / "report_files" / "pages").glob("*.html"))
    assert shown == n_test
    assert "flags for a person to check" in text and "Against the known truth" in text
    assert re.search(r"[0-9a-f]{64}", text)  # the checkpoint's SHA-256
    assert len(list((tmp_path / "run" / "report_files" / "thumbs").glob("*.jpg"))) == n_test
