"""CO-SPY's staged recipe through train.py: a semantic stage, then the fusion stage started from it."""

from __future__ import annotations

import pytest
import torch

from inference.runtime import load_checkpoint
from tests.helpers import TINY_NPR, prepare_train_config, small_train_overrides
from train import train


def overrides(manifest, stage: str, *extra: str) -> list[str]:
    base = [o for o in small_train_overrides(manifest) if o not in TINY_NPR]
    return [
        *base,
        "detector=cospy_progan_tiny",
        f"detector.net.stage={stage}",
        "detector.net.preprocess.size=32",
        "detector.net.preprocess.load_size=40",
        *extra,
    ]


@pytest.mark.slow  # two training stages
def test_semantic_stage_then_fusion_stage_from_its_checkpoint(small_dataset, tmp_path):
    train(
        prepare_train_config(overrides(small_dataset, "semantic", "detector.optimizer.lr=1e-2"), tmp_path / "semantic")
    )
    semantic = load_checkpoint(tmp_path / "semantic" / "checkpoints" / "last.ckpt").net
    assert semantic.stage == "semantic"

    ckpt = tmp_path / "semantic" / "checkpoints" / "last.ckpt"
    metrics = train(
        prepare_train_config(
            overrides(small_dataset, "fusion", f"detector.net.init_semantic={ckpt}", "detector.optimizer.lr=0.1"),
            tmp_path / "fusion",
        )
    )
    fused = load_checkpoint(tmp_path / "fusion" / "checkpoints" / "last.ckpt").net
    assert fused.stage == "fusion" and 0.0 <= metrics["auroc"] <= 1.0
    # the fusion stage kept the semantic head it was given (only the fusion layer trains)
    torch.testing.assert_close(fused.semantic_head.weight, semantic.semantic_head.weight)
    torch.testing.assert_close(fused.semantic_head.bias, semantic.semantic_head.bias)
