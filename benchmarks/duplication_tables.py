"""The tables of `benchmarks/duplication.py`'s report, as docs/duplication.md shows them."""

from __future__ import annotations

THEMIS_TABLE_12 = {"best MLLM (THEMIS Table 12)": (0.4513, 0.1799, 0.1995)}
SUBSETS = {"test_base": "ordinary test pairs", "test_group": "pairs inside figure groups", "test": "all test pairs"}


def operation_rows(pairs: dict, max_side: int) -> list[str]:
    lines = ["| method | pairs | set-F1 | EM | SPC |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {name} | - | {f1:.4f} | {em:.4f} | {spc:.4f} |" for name, (f1, em, spc) in THEMIS_TABLE_12.items()]
    for key, label in SUBSETS.items():
        if key in pairs:
            ops = pairs[key]["operations"]
            lines.append(
                f"| dup_sift ({max_side} px), {label}, duplicated (n={ops['n']}) | {pairs[key]['n_pairs']} "
                f"| {ops['set_f1']:.4f} | {ops['exact_match']:.4f} | {ops['spc']:.4f} |"
            )
    test = pairs["test_base"] if "test_base" in pairs else pairs["test"]
    lines += ["", "| operation (ordinary test pairs) | n | recall | precision |", "| --- | --- | --- | --- |"]
    lines += [
        f"| {op} | {v['n']} | {v['recall']:.3f} | {v['precision']:.3f} |" for op, v in test["by_operation"].items()
    ]
    return lines


def pair_rows(pairs: dict) -> list[str]:
    keys = [key for key in SUBSETS if key in pairs]
    lines = ["", "| pair figure | " + " | ".join(SUBSETS[k] for k in keys) + " |", "| --- |" + " --- |" * len(keys)]

    def row(name: str, cell) -> None:
        lines.append(f"| {name} | " + " | ".join(cell(pairs[k]) for k in keys) + " |")

    row("pairs (duplicated / not)", lambda m: f"{m['operations']['n']} / {m['n_pairs'] - m['operations']['n']}")
    row("TPR at 1 % FPR (threshold-free)", lambda m: f"{m['pair_tpr@fpr=0.01']:.4f}")
    row("AUROC", lambda m: f"{m['pair_auroc']:.4f}")
    row("TPR / TNR at the calibrated threshold", lambda m: f"{m['pair_tpr']:.4f} / {m['pair_tnr']:.4f}")
    row("pair F1 / MCC", lambda m: f"{m['pair_f1']:.4f} / {m['pair_mcc']:.4f}")
    row("mask pixel F1 / MCC (duplicated pairs)", lambda m: f"{m['pixel_f1']:.4f} / {m['pixel_mcc']:.4f}")
    return lines


def calibration_rows(pairs: dict) -> list[str]:
    check, test = pairs["calibration"], pairs["test_fpr"]
    low, high = check["fpr_interval"]
    t_low, t_high = test["interval"]
    return [
        "",
        "| calibration (target 1 % FPR) | negatives | false positives | FPR | 95 % Clopper-Pearson |",
        "| --- | --- | --- | --- | --- |",
        f"| val (threshold {pairs['threshold']:.4f} set here; {check['genuine_needed']} needed) | "
        f"{check['n_genuine']} | {check['false_positives']} | {check['fpr']:.4f} | [{low:.4f}, {high:.4f}] |",
        f"| test, at that threshold | {test['negatives']} | {test['false_positives']} | "
        f"{test['false_positives'] / max(1, test['negatives']):.4f} | [{t_low:.4f}, {t_high:.4f}] |",
    ]


def kind_rows(pairs: dict) -> list[str]:
    lines = ["", "| test subset / kind of pair | n | flagged |", "| --- | --- | --- |"]
    for key, value in pairs["by_subset_kind"].items():
        subset, kind, label = key.split("/")
        lines.append(
            f"| {subset} / {kind} ({'duplicated' if label == '1' else 'not duplicated'}) | {value['n']} | "
            f"{value['flagged']:.3f} |"
        )
    return lines


def speed_rows(speed: dict) -> list[str]:
    names = [name for name in ("reference", "gated", "gated_capped", "gated_small") if name in speed]
    lines = [
        "",
        f"| speed, group of {speed['panels']} panels of 512 px ({speed['pairs']} pairs), {speed['rounds']} rounds | "
        + " | ".join(
            f"{n} ({', '.join(f'{k}={v}' for k, v in speed[n]['settings'].items() if k != 'max_side')})" for n in names
        )
        + " |",
        "| --- |" + " --- |" * len(names),
    ]
    for key, label in (
        ("describe_seconds_per_panel", "seconds to describe one panel"),
        ("match_seconds_per_pair", "seconds to match one pair (panels described)"),
        ("matching_pairs_per_s", "pairs/s, panels described once (matching only)"),
        ("group_pairs_per_s", "pairs/s, all pairs of the group (describing included)"),
        ("fresh_pairs_per_s", "pairs/s, a lone pair (both panels described)"),
    ):
        reference = speed["reference"][key]
        cells = [
            f"{speed[n][key]:.3f}" + ("" if n == "reference" else f" ({speed[n][key] / reference:.2f}x)") for n in names
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append(
        f"| one SIFT extraction of a 512 px panel (s) | {speed['sift_seconds_per_panel']:.3f} |"
        + " |" * (len(names) - 1)
    )
    return lines


def markdown(report: dict) -> str:
    """The report's tables (docs/duplication.md)."""
    lines: list[str] = []
    pairs = report.get("pairs")
    if pairs:
        lines += operation_rows(pairs, report["args"]["max_side"]) + pair_rows(pairs)
        lines += calibration_rows(pairs) + kind_rows(pairs) + [""]
    move = report.get("copy_move")
    if move:
        lines += [
            "| copy-move (rotation +-30 deg, scale 0.8-1.25) | value |",
            "| --- | --- |",
            f"| forged images | {move['images']} |",
            f"| pixel F1, target marked | {move['pixel_f1_target']:.4f} |",
            f"| pixel F1, both copies marked | {move['pixel_f1_both_marked']:.4f} |",
            f"| genuine panels flagged (image logit >= 0) | {move['genuine_flagged_at_logit_0']:.3f} |",
            f"| genuine pixel FPR | {move['genuine_pixel_fpr']:.4f} |",
            "",
        ]
    if report.get("speed"):
        lines += speed_rows(report["speed"])
    return "\n".join(lines)
