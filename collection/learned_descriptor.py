"""`pairnet`: a learned panel descriptor, the encoder of a trained `pairnet` checkpoint, region-pooled.

`PairCorrelationNet.features` gives per-position unit features that the network was trained to
correlate between copies of the same content (under the THEMIS transforms), so they should recur
where a copy recurs. Each region of `REGIONS` keeps its positions' maximum (R-MAC style, as `cnn`),
unit-normalized; flips and the 180 degree rotation are handled at query time by the four variants.

The checkpoint is the user's (`descriptor_checkpoint=PATH`): it is read weights-only and the
network is rebuilt from its own hyper-parameters (`inference.runtime.load_detector`). The
descriptor's name carries the first 12 hex digits of the file's SHA-256, so an index built with one
checkpoint refuses a descriptor of another; the index stores the file's path and hash
(`stored_meta`), and a search finds the checkpoint there and refuses a file that has changed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from collection.descriptors import region_boxes, unit
from datamodules.io import file_sha256, looked_for


class PairNetEmbedding:
    """A trained `pairnet`'s projected encoder features, max-pooled per region at the network's input size."""

    invariant, aggregate = False, "max"

    def __init__(self, checkpoint: str | Path, device: str = "cpu") -> None:
        from detectors.pair_net import PairCorrelationNet
        from inference.runtime import ModelLoadError, load_detector, resolve_device

        path = Path(checkpoint).expanduser()
        if not path.is_file():
            raise ValueError(
                f"descriptor_checkpoint {path} does not exist{looked_for(path)}: "
                "give a pairnet checkpoint from train.py"
            )
        try:
            loaded = load_detector(path)
        except ModelLoadError as error:
            raise ValueError(f"descriptor_checkpoint: {error}") from None
        if not isinstance(loaded.net, PairCorrelationNet):
            raise ValueError(
                f"descriptor_checkpoint {path} holds a {type(loaded.net).__name__} ({loaded.name}), not a pairnet "
                "(PairCorrelationNet) checkpoint: the pairnet descriptor embeds panels with a trained pairnet's encoder"
            )
        self.device = resolve_device(device)
        self.net = loaded.net.eval().to(self.device)
        self.checkpoint = str(path.resolve())
        self.sha256 = file_sha256(path)
        self.size = int(self.net.preprocess.size)
        self.dim = int(self.net.project[-1].out_channels)
        self.name = f"pairnet-v1-{self.sha256[:12]}-{self.size}px"
        self.stored_meta = {"descriptor_checkpoint": self.checkpoint, "descriptor_checkpoint_sha256": self.sha256}

    def describe(self, image: np.ndarray) -> np.ndarray:
        import torch

        tensor = self.net.describe(np.ascontiguousarray(image[..., :3])).tensor[None].to(self.device)
        with torch.inference_mode():
            features = self.net.features(tensor)[0].cpu().numpy()  # dim x h x w, unit per position
        _, height, width = features.shape
        rows = [features[:, y0:y1, x0:x1].max(axis=(1, 2)) for x0, y0, x1, y1 in region_boxes(height, width)]
        return unit(np.stack(rows))


def pairnet_descriptor(
    checkpoint: str | Path | None, index_dir: str | Path | None, device: str = "cpu"
) -> PairNetEmbedding:
    """The descriptor of `checkpoint`, else of the checkpoint an existing index at `index_dir` (or
    its shard parts) was built with (meta.json), refused when that file no longer has the hash
    recorded there."""
    from collection.store import IndexRefused

    if checkpoint:
        return PairNetEmbedding(checkpoint, device)
    folder = Path(index_dir) if index_dir is not None else None
    metas = [folder / "meta.json", *sorted(folder.glob("parts/*-of-*/meta.json"))] if folder is not None else []
    found = [path for path in metas if path.is_file()]  # the index's own, else its shard parts' (before a merge)
    meta: dict[str, Any] = json.loads(found[0].read_text()) if found else {}
    stored = meta.get("descriptor_checkpoint")
    if not stored:
        raise ValueError(
            "descriptor=pairnet needs descriptor_checkpoint=PATH (a pairnet checkpoint written by train.py)"
        )
    if not Path(stored).is_file():
        raise IndexRefused(
            f"{index_dir} was built with the pairnet checkpoint {stored}, which no longer exists: "
            "give descriptor_checkpoint=PATH of the same file"
        )
    expected, actual = meta.get("descriptor_checkpoint_sha256", ""), file_sha256(stored)
    if actual != expected:
        raise IndexRefused(
            f"{index_dir} was built with the pairnet checkpoint {stored} of SHA-256 {expected[:12]}, but that file "
            f"now has SHA-256 {actual[:12]}: its vectors are not comparable; give descriptor_checkpoint=PATH of the "
            "original file, or build another index"
        )
    return PairNetEmbedding(stored, device)
