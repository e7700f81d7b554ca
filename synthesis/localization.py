"""The embedded localization default: forgeries with masks made from the bundled photographs.

`python train.py detector=<a localizer>` with no data argument trains on this set, so a fresh
machine can train and test a localizer offline in minutes. It is the full generator
(`synthesis.dataset`) at a small size, restricted to the operations that need no trained image
generator (copy-move, splicing, inpainting, damage), with the processing traces real edits leave
(`forgery_options`), at most 256 px; splits are drawn per authentic photo.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

EMBEDDED_LOCALIZATION = {
    "kind": "forgery",
    "ops": {"copy_move": 1.0, "splicing": 0.5, "inpainting": 0.5, "damage": 0.5},
    "max_side": 256,
    "crops_per_photo": 3,
    "crop_size": 192,
    "crop_scales": (0.5, 1.0),
    "min_panel_side": 96,
    # the traces real edits leave: a copy scaled and rotated (so resampled), a donor with another
    # processing history (compressed, downscaled or blurred before it was pasted)
    "forgery_options": {
        "copy_move": {"scale": [0.8, 1.25], "rotation": [-30.0, 30.0], "interpolation": "bilinear"},
        "splicing": {"donor_chains": ["jpeg75", "resize0.5_area", "blur1.0"]},
    },
}


def make_embedded_localization_manifest(
    output: str | os.PathLike,
    seed: int = 0,
    split_fractions: Sequence[float] = (0.7, 0.15, 0.15),
    photos: Sequence[str | os.PathLike] | None = None,
    progress: bool = False,
    **spec: Any,
) -> Path:
    """Generate the set under `output` and write its `manifest.csv` (with masks); returns its path.

    `spec` overrides `EMBEDDED_LOCALIZATION` (any `DatasetSpec` field). The localization data
    config hands this function to the DataModule as a Hydra `_partial_`, called on first use.
    """
    from synthesis.dataset import DatasetSpec, make_generated_manifest

    settings = {**EMBEDDED_LOCALIZATION, **spec, "seed": seed, "split_fractions": tuple(split_fractions)}
    manifest, _ = make_generated_manifest(output, DatasetSpec(**settings), photos=photos, progress=progress)
    return manifest
