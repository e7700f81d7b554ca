"""Block-by-block access to an open_clip `VisionTransformer`, for detectors that work inside it.

ForgeLens adds a module after each block's attention, IAPL swaps prompt tokens in between blocks
and adds parallel adapters; both read per-layer CLS tokens. Rather than forking open_clip's model,
these helpers run its own submodules (`conv1`, `ln_pre`, each block's `ln_1`/`attention`/`ls_1`/
`ln_2`/`mlp`/`ls_2`, `ln_post`, `proj`) in open_clip's order, with hooks where the detectors
need them. Weights, names and state-dict keys stay open_clip's (which are OpenAI CLIP's).
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Optional

import torch
import torch.nn.functional as F
from torch import nn

TokenHook = Optional[Callable[[torch.Tensor], torch.Tensor]]


def patch_tokens(visual: nn.Module, image: torch.Tensor) -> torch.Tensor:
    """Normalized image -> (N, 1 + patches, width): class token and patches with positions, before
    `ln_pre` (so callers can append their own tokens first, as IAPL does)."""
    x = visual.conv1(image)
    x = x.flatten(2).transpose(1, 2)
    cls = visual.class_embedding.to(x.dtype).view(1, 1, -1).expand(x.shape[0], -1, -1)
    return torch.cat([cls, x], dim=1) + visual.positional_embedding.to(x.dtype)


def run_block(
    block: nn.Module, x: torch.Tensor, after_attention: TokenHook = None, parallel: TokenHook = None
) -> torch.Tensor:
    """One open_clip `ResidualAttentionBlock` on batch-first tokens, with two insertion points.

    `after_attention(h)` returns what is added to the residual stream between attention and MLP
    (ForgeLens's guidance module); `parallel(h)` is added next to the MLP branch, reading the same
    post-attention stream (IAPL's adapters).
    """
    h = x + block.ls_1(block.attention(block.ln_1(x)))
    if after_attention is not None:
        h = h + after_attention(h)
    out = h + block.ls_2(block.mlp(block.ln_2(h)))
    if parallel is not None:
        out = out + parallel(h)
    return out


def project_cls(visual: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """`ln_post` then `proj` of the class token: what `encode_image` returns for the final layer."""
    pooled = visual.ln_post(tokens[:, 0])
    return pooled @ visual.proj if visual.proj is not None else pooled


def check_plain_vit(visual: nn.Module) -> None:
    """These helpers reproduce the plain CLIP ViT only; say so instead of computing something else."""
    transformer = getattr(visual, "transformer", None)
    if transformer is None or not hasattr(visual, "conv1"):
        raise ValueError("this detector needs an open_clip VisionTransformer image tower")
    if not transformer.batch_first:
        raise ValueError("this detector needs an open_clip build with batch-first transformers (open_clip >= 2.24)")
    if (
        getattr(visual, "attn_pool", None) is not None
        or getattr(visual, "pool_type", "tok") != "tok"
        or getattr(visual, "final_ln_after_pool", False)
    ):
        raise ValueError("this detector needs a CLIP ViT pooled on the class token (OpenAI CLIP layout)")


def resize_to_tower(image: torch.Tensor, size: int) -> torch.Tensor:
    """Bilinear resize inside the graph when the input is not the tower's size (the position
    embedding has a fixed grid); the detectors' preprocessing normally delivers that size."""
    if tuple(image.shape[-2:]) == (size, size):
        return image
    return F.interpolate(image, size=(size, size), mode="bilinear", align_corners=False)


@contextlib.contextmanager
def exportable_attention() -> Iterator[None]:
    """`nn.MultiheadAttention` takes a fused fast path in eval without gradients, and that fused
    operator has no ONNX export; exporters and tracers get the plain path (the same numbers)."""
    if not (torch.onnx.is_in_onnx_export() or torch.jit.is_tracing()):
        yield
        return
    previous = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(previous)


def freeze(module: nn.Module) -> None:
    for parameter in module.parameters():
        parameter.requires_grad_(False)
