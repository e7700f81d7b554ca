"""Which operations each genuine panel receives, and with which splicing partner.

The plan is drawn from per-panel generators seeded by (seed, panel), with one draw per operation
whether it is active or not, so switching operations on or off keeps the other operations' plans.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from datamodules.io import SPLITS, read_image
from synthesis.families import FAMILY_OPERATIONS, family_group, family_item_options
from synthesis.items import item_rng
from synthesis.spec import OPERATIONS, DatasetSpec

__all__ = ["plan_items", "similarity_features", "feature_similarity", "similar_partner"]


def similarity_features(image: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """What `synthesis.splicing.pair_similarity` looks at, computed once per panel: the 224 x 224
    grey image, its 256-bin histogram and the original size (a few dozen KB instead of the panel)."""
    grey = cv2.resize(cv2.cvtColor(image, cv2.COLOR_RGB2GRAY), (224, 224), interpolation=cv2.INTER_AREA)
    return grey.astype(np.float64) / 255.0, cv2.calcHist([grey], [0], None, [256], [0, 256]), image.shape[:2]


def feature_similarity(a: tuple, b: tuple) -> float:
    """`pair_similarity` on precomputed features (same formula; a test checks they agree)."""
    (x, ha, (h1, w1)), (y, hb, (h2, w2)) = a, b
    hist = (cv2.compareHist(ha, hb, cv2.HISTCMP_CORREL) + 1.0) / 2.0
    c1, c2 = 0.01**2, 0.03**2
    mx, my = x.mean(), y.mean()
    cov = ((x - mx) * (y - my)).mean()
    ssim = ((2 * mx * my + c1) * (2 * cov + c2)) / ((mx**2 + my**2 + c1) * (x.var() + y.var() + c2))
    size = (1 - abs(h1 - h2) / max(h1, h2)) * (1 - abs(w1 - w2) / max(w1, w2))
    return float(0.4 * hist + 0.4 * max(ssim, 0.0) + 0.2 * size)


def similar_partner(
    panel: dict[str, Any],
    pool: list[dict[str, Any]],
    rng: np.random.Generator,
    features: dict[str, tuple],
    used: set,
    limit: int,
) -> dict[str, Any] | None:
    """The most similar panel (THEMIS score) among `limit` random panels of other photos, pair unused."""
    others = [p for p in pool if p["source"] != panel["source"]]
    if not others:
        return None
    picks = rng.choice(len(others), size=min(limit, len(others)), replace=False)
    scored = sorted(
        ((feature_similarity(features[others[j]["path"]], features[panel["path"]]), others[j]["path"]) for j in picks),
        reverse=True,
    )
    for _, path in scored:
        if frozenset((path, panel["path"])) not in used:
            used.add(frozenset((path, panel["path"])))
            return next(p for p in others if p["path"] == path)
    return None


def plan_items(
    spec: DatasetSpec,
    output: Path,
    panels: list[dict[str, Any]],
    generators: dict[str, str],
    families: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Items of every panel; `generators` and `families` map model names to their weights.

    Kept in one piece: one pass over the panels plans every operation with the same random stream.
    """
    active = spec.active
    variants = list(spec.generator.variants)
    features = (
        {p["path"]: similarity_features(read_image(output / p["path"])) for p in panels} if "splicing" in active else {}
    )
    by_split = {s: [p for p in panels if p["split"] == s] for s in SPLITS}
    used: set = set()
    items = []
    base = {"type": "item", "output": str(output), "seed": spec.seed}
    options = {
        "local_min_side": spec.local_min_side,
        "d15_fraction": spec.d15_fraction,
        **spec.changed_forgery_options(),
    }
    for panel in panels:
        stem = Path(panel["path"]).stem
        rng = item_rng(spec.seed, f"plan/{stem}")
        offset = int(rng.integers(len(variants))) if variants else 0
        for op in OPERATIONS:
            draw = rng.random()  # drawn whatever is active, so switching ops off keeps the others' plans
            rate = active.get(op, 0.0)
            if op == "duplication_local" and min(panel["height"], panel["width"]) < spec.local_min_side:
                rate = 0.0
            count = int(math.floor(rate)) + int(draw < rate - math.floor(rate))
            for j in range(count):
                item = {
                    **base,
                    "op": op,
                    "id": f"{op}/{stem}_{j}",
                    "name": f"{stem}_{j}",
                    "panels": [panel],
                    "options": options,
                }
                if op in ("rerender", "region_edit"):
                    variant = variants[(offset + j) % len(variants)]
                    item["options"] = {**options, "variant": variant, "generator_path": generators[variant]}
                    item["name"] = f"{stem}_{variant}_{j}"
                    item["id"] = f"{op}/{item['name']}"
                if op in FAMILY_OPERATIONS:  # settings (space, strength) take turns like decoder variants
                    setting = family_item_options(op, spec.diffusion, families or {}, offset + j)
                    item["options"] = {**options, **setting}
                    item["name"] = f"{stem}_{family_group(op, setting.get('space'), setting.get('strength'))}_{j}"
                    item["id"] = f"{op}/{item['name']}"
                if op == "splicing":
                    partner = similar_partner(
                        panel,
                        by_split[panel["split"]],
                        item_rng(spec.seed, item["id"]),
                        features,
                        used,
                        spec.splice_candidates,
                    )
                    if partner is None:
                        continue
                    item["panels"] = [panel, partner]
                items.append(item)
    return items
