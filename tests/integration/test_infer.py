"""infer.py on real-world folders: bad files become error rows, runs resume, exit codes mean something."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from datamodules.records import read_manifest
from evaluation import image_metrics
from evaluation.report import to_jsonable
from infer import InferenceFailed, infer
from inference.runtime import load_runtime
from inference.writer import read_results
from tests.helpers import ROOT, compose_config, prepare_train_config, small_train_overrides
from train import train


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, small_dataset) -> Path:
    run = tmp_path_factory.mktemp("infer_run")
    train(
        prepare_train_config(
            [*small_train_overrides(small_dataset), "+trainer.limit_train_batches=2", "test=false"], run
        )
    )
    return run / "checkpoints" / "last.ckpt"


@pytest.fixture
def mixed_folder(tmp_path) -> Path:
    """Good images of several sizes and formats, next to files no decoder can read."""
    folder = tmp_path / "uploads"
    rng = np.random.default_rng(0)
    for i, (size, suffix) in enumerate(
        [((40, 50), ".png"), ((64, 64), ".jpg"), ((100, 31), ".webp"), ((80, 90), ".png")]
    ):
        (folder / "sub" / str(i)).mkdir(parents=True)
        Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(folder / "sub" / str(i) / f"img{suffix}")
    (folder / "broken.png").write_bytes(b"these bytes are no image")
    good = folder / "sub" / "0" / "img.png"
    (folder / "truncated.png").write_bytes(good.read_bytes()[:60])
    (folder / "notes.txt").write_text("not an image, not listed")
    return folder


def run_infer(model: Path, input: Path, output: Path, *extra: str) -> dict:
    return infer(
        compose_config(
            "infer",
            [
                f"model={model}",
                f"input={input}",
                f"output={output}",
                "num_workers=0",
                "progress=false",
                "batch_size=2",
                *extra,
            ],
        )
    )


def test_unreadable_files_become_error_rows_and_never_stop_the_run(checkpoint, mixed_folder, tmp_path):
    result = run_infer(checkpoint, mixed_folder, tmp_path / "scores.csv", "num_workers=2")
    rows = {
        Path(r["path"]).name if "sub" not in r["path"] else r["path"]: r for r in read_results(tmp_path / "scores.csv")
    }
    assert result["counts"] == {"ok": 4, "error": 2, "skipped": 0}
    assert rows["broken.png"]["status"] == "error" and "recognised" in rows["broken.png"]["error"]
    assert rows["truncated.png"]["status"] == "error" and "truncated" in rows["truncated.png"]["error"]
    assert rows["truncated.png"]["score"] is None
    ok = [r for r in rows.values() if r["status"] == "ok"]
    assert len(ok) == 4 and all(0.0 <= r["score"] <= 1.0 and r["label"] in (0, 1) for r in ok)
    assert result["metrics"] is None and not (tmp_path / "scores.metrics.json").exists()


def test_a_resume_with_another_threshold_is_refused_before_any_row_changes(checkpoint, mixed_folder, tmp_path):
    from inference.run_report import InferenceFailed

    output = tmp_path / "scores.csv"
    run_infer(checkpoint, mixed_folder, output, "threshold=0.5")
    written = output.read_bytes()
    with pytest.raises(InferenceFailed, match="threshold 0.5\\): adding rows with another model, threshold"):
        run_infer(checkpoint, mixed_folder, output, "resume=true", "threshold=0.25")
    assert output.read_bytes() == written
    run_infer(checkpoint, mixed_folder, output, "resume=true", "threshold=0.5")  # the same threshold resumes
    run_infer(checkpoint, mixed_folder, output, "threshold=0.25")  # a new run (no resume) starts over


def test_shards_merges_and_resumes_never_mix_rows_scored_otherwise(checkpoint, mixed_folder, tmp_path):
    from inference.run_report import InferenceFailed

    output = tmp_path / "scores.csv"
    run_infer(checkpoint, mixed_folder, output, "threshold=0.5")  # an earlier whole run
    with pytest.raises(InferenceFailed, match="threshold 0.5.*mix two runs"):
        run_infer(checkpoint, mixed_folder, output, "shard=0/2")  # the model's own threshold
    run_infer(checkpoint, mixed_folder, output, "shard=0/2", "threshold=0.5")
    with pytest.raises(InferenceFailed, match="scoring .*mix two runs"):
        run_infer(checkpoint, mixed_folder, output, "shard=1/2", "threshold=0.5", "tiles=true")
    run_infer(checkpoint, mixed_folder, output, "shard=1/2", "threshold=0.5")
    with pytest.raises(InferenceFailed, match="mix two runs"):
        run_infer(checkpoint, mixed_folder, output, "merge=true", "threshold=0.25")
    run_infer(checkpoint, mixed_folder, output, "merge=true", "threshold=0.5")
    # parts of an unfinished run and no output yet (a killed devices=N run): a resume is compared too
    again = tmp_path / "again.csv"
    run_infer(checkpoint, mixed_folder, again, "shard=0/2")
    assert not again.exists()
    with pytest.raises(InferenceFailed, match="mix two runs"):
        run_infer(checkpoint, mixed_folder, again, "resume=true", "threshold=0.25")


@pytest.mark.parametrize("switch", ["tiles=no", "save_masks=no", "overlays=0"])
def test_a_switch_given_another_word_than_true_or_false_is_refused(checkpoint, mixed_folder, tmp_path, switch):
    """`tiles=no` is a non-empty string: it switched tiles on, and save_masks=no wrote maps."""
    from inference.run_report import InferenceFailed

    with pytest.raises(InferenceFailed, match=f"{switch.split('=')[0]} must be true or false"):
        run_infer(checkpoint, mixed_folder, tmp_path / "scores.csv", switch)
    assert not (tmp_path / "scores.csv").exists()


def test_a_mistyped_group_by_is_refused_before_scoring_and_an_image_listed_twice_is_one_row(
    checkpoint, mixed_folder, tmp_path
):
    from inference.run_report import InferenceFailed

    images = sorted(str(p) for p in mixed_folder.rglob("img.*"))
    manifest = tmp_path / "claims.csv"
    listed = [*images, images[0]]  # the first photo sent twice
    manifest.write_text("path,label,review\n" + "".join(f"{p},{i % 2},r{i // 2}\n" for i, p in enumerate(listed)))
    with pytest.raises(InferenceFailed, match="group_by='revieww': the manifest has no such column"):
        run_infer(checkpoint, manifest, tmp_path / "typo.csv", "group_by=revieww")
    assert not (tmp_path / "typo.csv").exists()  # refused before a row was scored
    rows = read_results(run_infer(checkpoint, manifest, tmp_path / "scores.csv") and tmp_path / "scores.csv")
    assert sorted(r["path"] for r in rows) == images  # one row each, as a several-process run writes


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_resume_scores_only_what_is_missing_even_after_a_torn_write(checkpoint, mixed_folder, tmp_path, suffix):
    output = tmp_path / f"scores{suffix}"
    run_infer(checkpoint, mixed_folder, output)
    complete = read_results(output)
    lines = output.read_text().splitlines(keepends=True)
    header = 1 if suffix == ".csv" else 0
    output.write_text("".join(lines[: header + 2]) + lines[header + 2][:15])  # interrupted mid-line
    result = run_infer(checkpoint, mixed_folder, output, "resume=true")
    kept = [r for r in complete[:2] if r["status"] == "ok"]  # an error row is not finished: tried again
    assert result["counts"]["skipped"] == len(kept) and sum(result["counts"].values()) == len(complete)
    resumed = read_results(output)
    assert sorted(r["path"] for r in resumed) == sorted(r["path"] for r in complete)
    by_path = {r["path"]: r for r in complete}
    for row in resumed:  # every row whole again: same status and score as in the uninterrupted run
        before = by_path[row["path"]]
        assert row["status"] == before["status"]
        # scored in another batch: torch's kernels may round the last bit otherwise
        assert row["score"] == (None if before["score"] is None else pytest.approx(before["score"], abs=1e-6))


def test_threshold_override_changes_labels_not_scores(checkpoint, small_dataset, tmp_path):
    folder = tmp_path / "images"  # a dozen of the dataset's images: labels and scores, no report
    folder.mkdir()
    for kind in ("fake", "real"):
        for image in sorted((small_dataset.parent / kind).glob("*.png"))[:6]:
            shutil.copy(image, folder / f"{kind}_{image.name}")
    run_infer(checkpoint, folder, tmp_path / "default.csv")
    default = {r["path"]: r for r in read_results(tmp_path / "default.csv")}
    scores = sorted(r["score"] for r in default.values())
    threshold = (scores[len(scores) // 3] + scores[len(scores) // 3 + 1]) / 2  # between two scores
    run_infer(checkpoint, folder, tmp_path / "override.csv", f"threshold={threshold}")
    override = read_results(tmp_path / "override.csv")
    assert {r["path"] for r in override} == set(default)
    for row in override:
        assert row["score"] == default[row["path"]]["score"]
        assert row["label"] == int(row["score"] >= threshold)
    assert 0 < sum(r["label"] for r in override) < len(override)


def test_decompression_bombs_become_error_rows(checkpoint, tmp_path):
    """A file declaring more pixels than the limit is refused before it is decoded, and the run goes on."""
    folder = tmp_path / "uploads"
    folder.mkdir()
    Image.new("1", (12_000, 11_000)).save(folder / "bomb.png")  # 132 M pixels in a small file
    Image.fromarray(np.zeros((40, 40, 3), np.uint8)).save(folder / "fine.png")
    result = run_infer(checkpoint, folder, tmp_path / "scores.csv")
    rows = {Path(r["path"]).name: r for r in read_results(tmp_path / "scores.csv")}
    assert result["counts"] == {"ok": 1, "error": 1, "skipped": 0}
    assert rows["bomb.png"]["status"] == "error" and "decompression-bomb" in rows["bomb.png"]["error"]
    assert rows["fine.png"]["status"] == "ok"


def test_nothing_scorable_or_unusable_model_is_a_clear_failure(checkpoint, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "a.jpg").write_bytes(b"nope")
    with pytest.raises(InferenceFailed, match="nothing could be scored"):
        run_infer(checkpoint, bad, tmp_path / "out.csv")
    with pytest.raises(InferenceFailed, match="does not exist"):
        run_infer(tmp_path / "missing.ckpt", bad, tmp_path / "out.csv")
    with pytest.raises(InferenceFailed, match=r"\.ckpt .* or \.onnx"):
        run_infer(tmp_path / "model.bin", bad, tmp_path / "out.csv")


@pytest.mark.slow  # two infer.py processes (~15 s); test_expected_failures covers every exit status
def test_command_line_exit_status(checkpoint, mixed_folder, tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(ROOT / "infer.py"), *args, "num_workers=0", "progress=false"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=300,
        )

    ok = run(f"model={checkpoint}", f"input={mixed_folder}", "output=out.csv")
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "out.csv").read_text().count("\n") == 7  # header + 6 rows
    failed = run(f"model={tmp_path / 'nope.ckpt'}", f"input={mixed_folder}", "output=out2.csv")
    assert failed.returncode == 2 and "does not exist" in failed.stdout + failed.stderr
    assert "Traceback" not in failed.stdout + failed.stderr


@pytest.mark.slow
@pytest.mark.ci  # in CI's slow phase: keeps the default run under 5 minutes
def test_labelled_input_gets_a_report_and_robustness_curves(checkpoint, small_dataset, tmp_path):
    result = run_infer(checkpoint, small_dataset, tmp_path / "scores.csv", "robustness=true", "robustness_max_images=4")
    report = tmp_path / "scores_report"
    for name in ("report.md", "metrics.json", "roc.png", "score_histogram.png", "robustness.png"):
        assert (report / name).is_file(), name
    metrics = result["metrics"]
    assert to_jsonable(metrics) == json.loads((tmp_path / "scores.metrics.json").read_text())
    assert set(metrics["robustness"]["curves"]) == {"jpeg", "blur", "rescale"}
    assert "by_group" in metrics and "genuine" not in metrics["by_group"]
    # the values are those of the scores written, against the manifest's labels, at the model's threshold
    truth = {r.path: r for r in read_manifest(small_dataset)}
    rows = [r for r in read_results(tmp_path / "scores.csv") if r["status"] == "ok"]
    labels = np.array([truth[r["path"]].label for r in rows])
    assert [r["true_label"] for r in rows] == list(labels)  # beside the decision, for reading them together
    scores = np.array([r["score"] for r in rows])
    threshold = load_runtime(checkpoint, "cpu").threshold
    expected = image_metrics(labels, scores, threshold=threshold)
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value, abs=1e-12, nan_ok=True), key
    for group, values in metrics["by_group"].items():
        chosen = np.array([truth[r["path"]].group == group or truth[r["path"]].label == 0 for r in rows])
        assert values["auroc"] == pytest.approx(image_metrics(labels[chosen], scores[chosen])["auroc"], nan_ok=True)
    assert "## Robustness" in (report / "report.md").read_text()


def test_robustness_sweep_scores_through_the_scoring_runs_dataset_and_transform(checkpoint, small_dataset, tmp_path):
    """Unperturbed, the sweep's scoring path gives the scores of the scoring run itself, and a
    perturbation reaches the decoded pixels (so the curves measure the model, not a second pipeline)."""
    from datamodules.records import Record
    from imageops import gaussian_blur
    from inference.runtime import load_runtime
    from inference.scoring import score_perturbed_fn

    run_infer(checkpoint, small_dataset, tmp_path / "scores.csv")
    rows = [r for r in read_results(tmp_path / "scores.csv") if r["status"] == "ok"][:10]
    score = score_perturbed_fn(load_runtime(checkpoint, "cpu"), [Record(path=r["path"]) for r in rows], batch_size=4)
    np.testing.assert_allclose(score(None), [r["score"] for r in rows], rtol=0, atol=1e-6)
    blurred = score(lambda image: gaussian_blur(image, 3.0))
    assert blurred.shape == (10,) and np.abs(blurred - score(None)).max() > 1e-4
