"""Scoring panel pairs with a pair detector (`infer.py model=<dup_sift checkpoint> ...`).

Pairs come from a pair manifest (CSV / JSONL with `path_a, path_b` and, when known, `label`,
`operations`, `mask_a`, `mask_b`; paths relative to the manifest's folder) or are formed inside
each group of an ordinary input: every pair of images sharing a `review` (or the column named by
`group_by`; a plain folder: every pair inside each folder). One row per pair, streamed as it goes
and safe to resume: `path` (the pair's key, `path_a <-> path_b`), `path_a`, `path_b`, `score`,
`label`, `status`, `error`, `operations` (THEMIS CMO-I answers joined by `;`, empty when not
duplicated), `geometric`, `transform` (JSON: A -> B matrix in pixels, rotation, scale, flip,
brightness, matched points), `method`, `reason`, and `mask_a` / `mask_b` when masks are saved
(always with `report=html`, whose page outlines them). Each panel is described once per group (of up
to 1,024 panels).
With truth (labels or operations) the run also writes `<output>.metrics.json`.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterable

from datamodules.io import ImageReadError, read_image, read_mask
from datamodules.records import LayoutError
from evaluation.protocols.duplication import parse_operations
from evaluation.summary import figure_text
from inference.masks import write_pair_masks
from inference.pair_inputs import group_pairs, is_pair_manifest, read_pair_manifest
from inference.run_report import image_run_options, stamp, without_own_outputs
from inference.writer import SIGNATURE_COLUMN, TRUTH_COLUMN, ResultWriter, read_results

log = logging.getLogger(__name__)

PAIR_COLUMNS = (
    "path",
    "path_a",
    "path_b",
    "score",
    "label",
    "status",
    "error",
    "operations",
    "geometric",
    "transform",
    "method",
    "reason",
    SIGNATURE_COLUMN,
)
SEPARATOR = " <-> "


def pair_key(path_a: str, path_b: str) -> str:
    return f"{path_a}{SEPARATOR}{path_b}"


class PanelCache:
    """Described panels (or their read error), the most recent `size` kept."""

    def __init__(self, detector: Any, size: int = 64) -> None:
        self.detector, self.size = detector, size
        self.items: OrderedDict[str, Any] = OrderedDict()

    def get(self, path: str) -> Any:
        if path in self.items:
            self.items.move_to_end(path)
            return self.items[path]
        try:
            value = self.detector.describe(read_image(path))
        except ImageReadError as error:
            value = error
        except (OSError, ValueError) as error:
            value = ImageReadError(path, str(error))
        self.items[path] = value
        if len(self.items) > self.size:
            self.items.popitem(last=False)
        return value


def cache_size(pairs: list[dict[str, Any]], least: int = 64, most: int = 1024) -> int:
    """Panels kept described: every panel of the largest group (its pairs come in an order that
    returns to each panel after all the others), within [least, most]."""
    members: dict[str, set[str]] = {}
    for pair in pairs:
        members.setdefault(pair.get("group", ""), set()).update((pair["path_a"], pair["path_b"]))
    return max(least, min(most, max((len(m) for m in members.values()), default=0)))


def score_pair(
    detector: Any, cache: PanelCache, pair: dict[str, Any], threshold: float, index: int, masks_dir: Path | None
) -> dict[str, Any]:
    key = pair_key(pair["path_a"], pair["path_b"])
    row: dict[str, Any] = {
        "path": key,
        "path_a": pair["path_a"],
        "path_b": pair["path_b"],
        "score": "",
        "label": "",
        "status": "error",
        "error": "",
    }
    panels = [cache.get(pair["path_a"]), cache.get(pair["path_b"])]
    broken = [p for p in panels if isinstance(p, Exception)]
    if broken:
        row["error"] = "; ".join(str(p) for p in broken)
        return row
    try:
        found = detector.predict_pair(panels[0], panels[1], threshold)
    except Exception as error:  # one pair's failure is its row, not the run's end
        log.error("%s: %s", key, error)
        row["error"] = f"model error: {error}"
        return row
    row.update(
        {
            "score": found.score,
            "label": int(found.duplicated),
            "status": "ok",
            "operations": ";".join(found.operations),
            "geometric": ";".join(found.geometric),
            "transform": json.dumps(found.transform) if found.transform else "",
            "method": found.method,
            "reason": found.reason,
        }
    )
    if masks_dir is not None:
        row.update(write_pair_masks(masks_dir, key, (pair["path_a"], pair["path_b"]), (found.mask_a, found.mask_b)))
    return row


def pairs_of(cfg: Any, output: Path) -> list[dict[str, Any]]:
    """The pairs `cfg.input` asks for (a pair manifest, or every pair inside each group); options that
    do not apply to pairs, and inputs holding no pair, refused."""
    if asked := image_run_options(cfg, ("shard", "merge", "devices", "robustness", "tiles", "overlays")):
        raise ValueError(
            f"a pair detector scores its pairs in one process, without perturbations, tiles or overlays: "
            f"{', '.join(asked)} do not apply to it (save_masks=true writes both panels' masks)"
        )
    try:
        pairs = (
            read_pair_manifest(cfg.input)
            if is_pair_manifest(cfg.input)
            else group_pairs(
                cfg.input,
                cfg.get("layout", "auto"),
                cfg.get("group_by"),
                keep=lambda records: without_own_outputs(records, cfg, output),
            )
        )
    except (LayoutError, ValueError, OSError) as error:
        raise ValueError(str(error)) from None
    if not pairs:
        raise ValueError(
            f"no pairs in {cfg.input}: give a pair manifest (path_a, path_b) or groups of two "
            "or more images (a review column, or folders)"
        )
    return pairs


def infer_pairs(cfg: Any, runtime: Any) -> dict[str, Any]:
    """infer.py for a pair detector: score the pairs, stream rows, print found duplications, report."""
    output = Path(cfg.output)
    pairs = pairs_of(cfg, output)
    stamp(cfg, output, runtime)  # a resume with another model or threshold is refused
    threshold = runtime.threshold if cfg.threshold is None else float(cfg.threshold)
    has_masks = any(p.get("mask_a") or p.get("mask_b") for p in pairs)
    html = cfg.get("report") == "html"
    masks_dir = None
    if cfg.save_masks or has_masks or html:  # the page outlines the shared regions from the saved masks
        masks_dir = Path(cfg.masks_dir) if cfg.masks_dir else output.with_name(f"{output.stem}_masks")
        masks_dir.mkdir(parents=True, exist_ok=True)
    truth = {pair_key(p["path_a"], p["path_b"]): truth_label(p) for p in pairs}  # None: unknown
    truth = {key: label for key, label in truth.items() if label is not None}
    columns = [
        *PAIR_COLUMNS,
        *(["mask_a", "mask_b"] if masks_dir is not None else []),
        *(["group"] if any(p.get("group") for p in pairs) else []),  # the review or folder the pair is from
        *([TRUTH_COLUMN] if truth else []),  # the truth beside the decision
    ]
    detector = runtime.net
    log.info("%s (threshold %.4f): %d pairs -> %s", runtime.name, threshold, len(pairs), output)
    counts = {"ok": 0, "error": 0, "skipped": 0, "duplicated": 0}
    cache = PanelCache(detector, cache_size(pairs))
    with ResultWriter(output, columns, resume=cfg.resume, truth=truth, rescore=True) as writer:
        for index, pair in enumerate(pairs):
            if pair_key(pair["path_a"], pair["path_b"]) in writer.done:
                counts["skipped"] += 1
                continue
            row = {**score_pair(detector, cache, pair, threshold, index, masks_dir), "group": pair.get("group", "")}
            writer.write([row])
            counts[row["status"]] += 1
            if row["status"] == "error":
                log.warning("%s: %s", row["path"], row["error"])
            elif row["label"]:
                counts["duplicated"] += 1
                log.info(
                    "DUPLICATION %s  score %.3f  %s  %s",
                    row["path"],
                    row["score"],
                    row["operations"],
                    describe_transform(row["transform"]),
                )
    log.info("pairs scored %(ok)d, duplicated %(duplicated)d, unreadable %(error)d, already done %(skipped)d", counts)
    results = this_inputs_rows(read_results(output), pairs, output)
    if not any(r["status"] == "ok" for r in results):
        raise ValueError(f"nothing could be scored: all {len(pairs)} pairs failed (see {output})")
    metrics = pair_report(pairs, results, threshold, output, truth)
    if html:
        pair_page(cfg, runtime, results, threshold, metrics)
    else:
        from inference.run_report import warn_earlier_page

        warn_earlier_page(output)
    return {"counts": counts, "metrics": metrics, "reviews": None}


def this_inputs_rows(results: list[dict[str, Any]], pairs: list[dict[str, Any]], output: Path) -> list[dict[str, Any]]:
    """The rows of this input's pairs: a resume with another input keeps the earlier run's rows in the
    file, but the page and the metrics speak of the pairs asked for (said, as image runs say it)."""
    asked = {pair_key(p["path_a"], p["path_b"]) for p in pairs}
    stray = [r["path"] for r in results if r["path"] not in asked]
    if stray:
        log.warning(
            "%d rows of %s are no pair of this input (an earlier run's, kept in the file, left out of the "
            "report), e.g. %s",
            len(stray),
            output,
            stray[0],
        )
    return [r for r in results if r["path"] in asked]


def pair_page(
    cfg: Any, runtime: Any, results: list[dict[str, Any]], threshold: float, metrics: dict[str, Any] | None
) -> Path:
    """`report=html` for pairs: `<output stem>_report.html`, each pair's A and B side by side with the
    shared regions outlined, the matched points joined and the transform in words."""
    from inference.html_report import read_calibration, write_run_report
    from inference.run_report import page_path

    page = write_run_report(
        page_path(Path(cfg.output)),
        [],
        model=str(cfg.model),
        detector=runtime.name,
        threshold=threshold,
        calibration=read_calibration(cfg.model),
        threshold_from_user=cfg.threshold is not None,
        input=str(cfg.input),
        metrics=metrics,
        pairs=results,
        blinded=bool(cfg.get("blinded", False)),
    )
    log.info("report for people to read: %s", page)
    return page


def describe_transform(transform: str) -> str:
    if not transform:
        return ""
    t = json.loads(transform)
    return f"(rotation {t['rotation']:.1f} deg, scale {t['scale']:.3f}{', mirrored' if t['flipped'] else ''})"


def pair_report(
    pairs: list[dict[str, Any]],
    results: Iterable[dict[str, Any]],
    threshold: float,
    output: Path,
    labels: dict[str, int],
) -> dict[str, Any] | None:
    """`<output>.metrics.json` when the pairs carry truth (`labels`: pair key -> `truth_label`); masks
    scored from the written files, so a resumed run is scored as a whole."""
    from evaluation import write_metrics_json
    from evaluation.protocols.duplication import duplication_metrics

    by_key = {r["path"]: r for r in results if r.get("status") == "ok"}
    rows, counts = [], []
    for pair in pairs:
        key = pair_key(pair["path_a"], pair["path_b"])
        result, label = by_key.get(key), labels.get(key)
        if result is None or label is None:
            continue
        truth = parse_operations(pair["operations"]) if "operations" in pair else None
        rows.append(
            {
                "label": label,
                "score": float(result["score"]),
                "truth": truth,
                "predicted": parse_operations(result.get("operations") or ""),
            }
        )
        counts.append(mask_counts(pair, result))
    if not rows:
        return None
    metrics = duplication_metrics(rows, threshold, counts)
    write_metrics_json(output.with_suffix(".metrics.json"), metrics)
    operations = metrics.get("operations", {})
    # undefined (n/a) where no truth of that kind was given
    shown = [figure_text(v) for v in (operations.get("set_f1"), operations.get("exact_match"), metrics.get("pixel_f1"))]
    log.info(
        "pairs: f1 %.4f mcc %.4f; operations set-F1 %s EM %s; pixel F1 %s -> %s",
        metrics["pair_f1"],
        metrics["pair_mcc"],
        *shown,
        output.with_suffix(".metrics.json"),
    )
    return metrics


def truth_label(pair: dict[str, Any]) -> int | None:
    """1 duplicated, 0 not, None unknown: the label given, else what the operations say, else what
    the true masks say (a pair whose masks mark nothing is no duplication)."""
    if "label" in pair:
        return int(pair["label"])
    if "operations" in pair:
        return int(bool(parse_operations(pair["operations"])))
    if not (pair.get("mask_a") and pair.get("mask_b")):
        return None
    try:
        return int(any(read_mask(pair[key]).any() for key in ("mask_a", "mask_b")))
    except (ImageReadError, OSError) as error:
        log.warning("%s / %s: truth not read from its masks: %s", pair["path_a"], pair["path_b"], error)
        return None


def mask_counts(pair: dict[str, Any], result: dict[str, Any]) -> tuple[int, int, int, int] | None:
    """Pixel counts of a pair with both true masks and both predicted mask files (else None)."""
    from evaluation.protocols.duplication import pair_pixel_counts

    if not (pair.get("mask_a") and pair.get("mask_b") and result.get("mask_a") and result.get("mask_b")):
        return None
    try:
        truth = [read_mask(pair["mask_a"]), read_mask(pair["mask_b"])]
        predicted = [read_mask(result["mask_a"]), read_mask(result["mask_b"])]
    except (ImageReadError, OSError) as error:
        log.warning("masks of %s not scored: %s", result["path"], error)
        return None
    if any(t.shape != p.shape for t, p in zip(truth, predicted)):
        log.warning("masks of %s not scored: true and predicted masks differ in size", result["path"])
        return None
    return pair_pixel_counts(truth[0], truth[1], predicted[0], predicted[1])
