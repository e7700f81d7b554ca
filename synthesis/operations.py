"""One dataset item at a time: run a forgery operation on genuine panels and write its files.

`synthesis.dataset` plans the items and runs them (in parallel, resumably); this module is what one
item does. Every function takes plain values (paths, names, a seeded generator) and returns plain
manifest rows, so items can run in worker processes and their results can be stored as JSON.

Files of an item (paths relative to the dataset folder):
- the image under `fake/<operation>/`, its mask (white = manipulated) under `masks/<operation>/`
  and, beside the mask, a JSON with its regions (bbox, polygon, area) and the operation's parameters;
- FraudBench damage also writes the D.1.5 half-difference ground truth (`*_d15.png`); its manifest
  mask is the C.4 mask derived from the (source, edited) pair, never the drawing;
- duplication writes both panels of a pair and returns a pair row for `duplication_pairs.csv`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from datamodules.io import read_image, write_image
from synthesis.copy_move import copy_move, inpaint_region
from synthesis.damage import damage_edit
from synthesis.duplication import cmo_categories, global_duplication, local_duplication
from synthesis.families import FAMILY_OPERATIONS, run_family_operation
from synthesis.generator import AutoencoderGenerator, edit_region, load_generator, psnr, rerender_image
from synthesis.masks import half_difference_mask, mask_iou, region_masks_from_pair
from synthesis.splicing import splice

__all__ = ["regions_from_mask", "run_operation", "OPERATION_GROUPS"]

# the manifest `group` of each operation ({variant} = the generator's decoder variant)
OPERATION_GROUPS = {
    "rerender": "ae_{variant}",
    "region_edit": "ae_{variant}_region",
    "splicing": "splicing",
    "copy_move": "copy_move",
    "inpainting": "inpainting",
    "duplication_global": "duplication_global",
    "duplication_local": "duplication_local",
    "damage": "damage",
    # synthesis.families: latent_ae, ddpm_<space>_sdedit_<strength>, ddpm_<space>_inpaint
    "latent_rerender": "latent_ae",
    "diffusion_sdedit": "ddpm_{space}_sdedit_{strength}",
    "diffusion_inpaint": "ddpm_{space}_inpaint",
}
_MODELS: dict[str, AutoencoderGenerator] = {}  # per process: generators are loaded once


def regions_from_mask(mask: np.ndarray, rdp_epsilon: float = 0.005) -> list[dict[str, Any]]:
    """Region records of a known mask, in the schema of `region_masks_from_pair` (minus z-scores).

    Connected components, largest first, with bbox [x0, y0, x1, y1] (exclusive end), normalized bbox,
    RDP-simplified polygon and area fraction; `machine_derived` is false because the edit is known.
    """
    mask = np.asarray(mask).astype(np.uint8)
    h, w = mask.shape
    n, labels, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
    order = sorted(range(1, n), key=lambda i: -int(stats[i, cv2.CC_STAT_AREA]))
    regions = []
    for i in order:
        x0, y0 = int(stats[i, cv2.CC_STAT_LEFT]), int(stats[i, cv2.CC_STAT_TOP])
        x1, y1 = x0 + int(stats[i, cv2.CC_STAT_WIDTH]), y0 + int(stats[i, cv2.CC_STAT_HEIGHT])
        contours, _ = cv2.findContours((labels == i).astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
        contour = max(contours, key=cv2.contourArea)
        poly = cv2.approxPolyDP(contour, rdp_epsilon * cv2.arcLength(contour, True), True).reshape(-1, 2)
        regions.append(
            {
                "id": len(regions) + 1,
                "bbox": [x0, y0, x1, y1],
                "bbox_norm": [round(x0 / w, 6), round(y0 / h, 6), round(x1 / w, 6), round(y1 / h, 6)],
                "polygon": [[int(x), int(y)] for x, y in poly],
                "area_fraction": round(float(stats[i, cv2.CC_STAT_AREA]) / (h * w), 6),
                "primary": not regions,
                "machine_derived": False,
            }
        )
    return regions


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=True))
    os.replace(tmp, path)


def _mask_png(mask: np.ndarray) -> np.ndarray:
    return np.asarray(mask).astype(np.uint8) * 255


def _write_fake(
    out: Path,
    op: str,
    name: str,
    image: np.ndarray,
    mask: np.ndarray,
    panel: dict[str, Any],
    group: str,
    meta: dict[str, Any],
    regions: list[dict[str, Any]] | None = None,
    review: str | None = None,
) -> dict[str, Any]:
    """Write image, mask and region JSON; return the manifest row (paths relative to `out`)."""
    image_rel, mask_rel = f"fake/{op}/{name}.png", f"masks/{op}/{name}.png"
    write_image(out / image_rel, image)
    write_image(out / mask_rel, _mask_png(mask))
    _write_json(
        out / f"masks/{op}/{name}.json",
        {
            "image": image_rel,
            "mask": mask_rel,
            "source_panel": panel["path"],
            "operation": op,
            "group": group,
            "regions": regions if regions is not None else regions_from_mask(mask),
            "meta": _jsonable(meta),
        },
    )
    return {
        "path": image_rel,
        "label": 1,
        "mask": mask_rel,
        "group": group,
        "category": panel["category"],
        "source": panel["source"],
        "split": panel["split"],
        "review": review,
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _model(path: str) -> AutoencoderGenerator:
    if path not in _MODELS:
        _MODELS[path] = load_generator(path)
    return _MODELS[path]


def _read(out: Path, panel: dict[str, Any]) -> np.ndarray:
    return np.array(read_image(out / panel["path"]))  # a writable copy: torch warns on read-only arrays


def run_operation(
    op: str, name: str, out: Path, panels: list[dict[str, Any]], rng: np.random.Generator, options: dict[str, Any]
) -> dict[str, Any]:
    """Run `op` on `panels` (genuine panel rows: path, source, split, category) and write its files.

    Returns {"rows": manifest rows, "pairs": duplication pair rows}. Operations that cannot apply
    to these panels (no object of the right size, ...) raise ValueError; the caller records a skip.
    """
    panel = panels[0]
    image = _read(out, panel)
    if op in FAMILY_OPERATIONS:
        fake, mask, group, meta = run_family_operation(op, image, rng, options)
        return {
            "rows": [_write_fake(out, op, name, fake, mask, panel, group, meta)],
            "pairs": [],
            "psnr": {group: round(psnr(fake, image), 3)},
        }  # fidelity to the source panel
    if op in ("rerender", "region_edit"):
        variant = options["variant"]
        model = _model(options["generator_path"])
        group = OPERATION_GROUPS[op].format(variant=variant)
        if op == "rerender":
            fake = rerender_image(model, image)
            full = np.ones(image.shape[:2], bool)  # every pixel was generated
            meta = {"operation": "ai_rerender", "generator": variant}
            return {
                "rows": [_write_fake(out, op, name, fake, full, panel, group, meta)],
                "pairs": [],
                "psnr": {group: round(psnr(fake, image), 3)},
            }
        edit = edit_region(model, image, rng)
        return {
            "rows": [_write_fake(out, op, name, edit.image, edit.mask, panel, group, edit.meta)],
            "pairs": [],
            "psnr": {group: round(psnr(edit.image, image), 3)},
        }
    if op == "splicing":
        donor = _read(out, panels[1])
        result = splice(donor, image, rng, **options.get("splicing", {}))
        result.meta["object_panel"] = panels[1]["path"]
        return {
            "rows": [_write_fake(out, op, name, result.image, result.mask, panel, "splicing", result.meta)],
            "pairs": [],
        }
    if op in ("copy_move", "inpainting"):
        result = (
            copy_move(image, rng, **options.get("copy_move", {})) if op == "copy_move" else inpaint_region(image, rng)
        )
        return {"rows": [_write_fake(out, op, name, result.image, result.mask, panel, op, result.meta)], "pairs": []}
    if op == "damage":
        return {"rows": [_damage(out, name, image, panel, rng, options)], "pairs": []}
    if op in ("duplication_global", "duplication_local"):
        return _duplication(op, out, name, image, panel, rng, options)
    raise ValueError(f"unknown operation {op!r}; expected one of {sorted(OPERATION_GROUPS)}")


def _damage(
    out: Path, name: str, image: np.ndarray, panel: dict[str, Any], rng: np.random.Generator, options: dict[str, Any]
) -> dict[str, Any]:
    """FraudBench-style: damage + re-render; masks derived from the pair (C.4), D.1.5 ground truth beside."""
    result = damage_edit(image, rng)
    derived = region_masks_from_pair(image, result.image)
    if not derived.mask.any():
        raise ValueError("the C.4 derivation found no edited region")
    d15 = half_difference_mask(image, result.image, fraction=float(options.get("d15_fraction", 0.5)))
    write_image(out / f"masks/damage/{name}_d15.png", _mask_png(d15))
    meta = {
        **result.meta,
        "mask_origin": "c4_from_pair",
        "ground_truth_d15": f"masks/damage/{name}_d15.png",
        # agreement with the drawing, which is known here but never used as the label
        "drawn_iou_c4": round(mask_iou(derived.mask, result.mask), 4),
        "drawn_iou_d15": round(mask_iou(d15, result.mask), 4),
    }
    return _write_fake(out, "damage", name, result.image, derived.mask, panel, "damage", meta, derived.regions)


def _duplication(
    op: str,
    out: Path,
    name: str,
    image: np.ndarray,
    panel: dict[str, Any],
    rng: np.random.Generator,
    options: dict[str, Any],
) -> dict[str, Any]:
    """Both panels of a pair (one `review`), the shared content as each panel's mask, and the pair row."""
    if op == "duplication_global":
        pair = global_duplication(image, rng)
    else:
        pair = local_duplication(image, rng, min_side=int(options.get("local_min_side", 350)))
    review = f"{op}/{name}"
    meta = {**pair.meta, "operations": list(pair.operations), "scope": pair.scope}
    rows = [
        _write_fake(out, op, f"{name}_{side}", pixels, mask, panel, op, {**meta, "panel": side}, review=review)
        for side, pixels, mask in (("a", pair.panel_a, pair.mask_a), ("b", pair.panel_b, pair.mask_b))
    ]
    pair_row = {
        "pair": review,
        "panel_a": rows[0]["path"],
        "panel_b": rows[1]["path"],
        "mask_a": rows[0]["mask"],
        "mask_b": rows[1]["mask"],
        "scope": pair.scope,
        "operations": ";".join(pair.operations),
        "categories": ";".join(sorted(cmo_categories(pair.operations))),
        "source": panel["source"],
        "split": panel["split"],
    }
    return {"rows": rows, "pairs": [pair_row]}
