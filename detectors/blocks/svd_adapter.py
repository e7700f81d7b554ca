"""Effort-style orthogonal subspace fine-tuning of attention projections, and the other adapters.

Effort (Yan et al., ICML 2025) decomposes every attention projection W = U S V^T, freezes the
principal part (the top singular directions, which carry the pretrained knowledge) and trains only
the residual of the smallest `residual_rank` directions. With rank 1 this is about 0.2 M trainable
parameters for ViT-L/14, so the detector learns forgery cues without overwriting what CLIP knows.

`apply_adapter(module, "frozen" | "svd" | "full")` is the one entry point detectors use.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from detectors.blocks.weights import weights_deferred

log = logging.getLogger(__name__)

ADAPTERS = ("frozen", "svd", "full")


def smallest_singular_triplets(matrix: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The `rank` smallest singular triplets (u: m x r, s: r, vh: r x n) of `matrix`, in float64.

    Computed from the eigen-decomposition of the smaller Gram matrix, which is several times
    faster than a full SVD on CPU (96 projections of ViT-L/14 at start-up). Precision is not
    critical here: the frozen part is defined as W minus this residual, so W is reproduced exactly.
    """
    # On a GPU machine the backbone is still on the CPU at construction; decompose on the GPU anyway.
    device = "cuda" if torch.cuda.is_available() else matrix.device
    w = matrix.detach().to(device=device, dtype=torch.float64)
    transpose = w.shape[0] < w.shape[1]
    if transpose:
        w = w.T
    eigenvalues, eigenvectors = torch.linalg.eigh(w.T @ w)  # ascending; w is tall, so no spurious zeros
    v = eigenvectors[:, :rank]
    s = eigenvalues[:rank].clamp_min(0).sqrt()
    u = (w @ v) / s.clamp_min(torch.finfo(torch.float64).eps)
    if transpose:
        u, v = v, u
    return u.to(matrix.device), s.to(matrix.device), v.T.to(matrix.device)


class SVDResidualLinear(nn.Module):
    """A linear layer whose weight is frozen principal part + trainable low-rank residual.

    `weight = weight_main + U_res diag(S_res) V_res` where the residual starts as the smallest
    `residual_rank` singular directions of the original weight and `weight_main` is the original
    minus that residual, so the layer reproduces the original exactly at initialization.
    `chunks` splits the rows first (a fused q/k/v projection gets one decomposition per part, as
    Effort does with separate q, k and v projections).
    """

    def __init__(
        self, weight: torch.Tensor, bias: Optional[torch.Tensor], residual_rank: int = 1, chunks: int = 1
    ) -> None:
        super().__init__()
        out_features, in_features = weight.shape
        if out_features % chunks:
            raise ValueError(f"cannot split {out_features} output rows into {chunks} chunks")
        rows = out_features // chunks
        if not 1 <= residual_rank <= min(rows, in_features):
            raise ValueError(f"residual_rank must lie in [1, {min(rows, in_features)}], got {residual_rank}")
        self.in_features, self.out_features = in_features, out_features
        self.residual_rank, self.chunks = residual_rank, chunks
        us, ss, vs, residual = [], [], [], []
        with torch.no_grad():
            for part in weight.detach().chunk(chunks, dim=0):
                if weights_deferred():  # a checkpoint overwrites every factor: skip the decomposition
                    u, s, vh = (
                        torch.zeros(rows, residual_rank, dtype=torch.float64),
                        torch.zeros(residual_rank, dtype=torch.float64),
                        torch.zeros(residual_rank, in_features, dtype=torch.float64),
                    )
                else:
                    u, s, vh = smallest_singular_triplets(part, residual_rank)
                us.append(u), ss.append(s), vs.append(vh)
                residual.append(u @ torch.diag(s) @ vh)
            dtype = weight.dtype
            main = weight.detach() - torch.cat(residual).to(dtype)
        self.weight_main = nn.Parameter(main.clone(), requires_grad=False)
        self.U_residual = nn.Parameter(torch.stack(us).to(dtype))  # chunks x rows x r
        self.S_residual = nn.Parameter(torch.stack(ss).to(dtype))  # chunks x r
        self.V_residual = nn.Parameter(torch.stack(vs).to(dtype))  # chunks x r x in
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)
        # The starting residual and the original norm, for Effort's regularizers only. Not saved:
        # they are recomputed from the pretrained weights whenever training can start.
        self.register_buffer("U_initial", self.U_residual.detach().clone(), persistent=False)
        self.register_buffer("V_initial", self.V_residual.detach().clone(), persistent=False)
        self.register_buffer(
            "weight_norm_squared", weight.detach().double().square().sum().to(weight.dtype), persistent=False
        )

    @property
    def weight(self) -> torch.Tensor:
        residual = torch.matmul(self.U_residual * self.S_residual.unsqueeze(1), self.V_residual)
        return self.weight_main + residual.reshape(self.out_features, self.in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)

    def orthogonality_loss(self) -> torch.Tensor:
        """Effort's 0.5 ||U U^T - I||_F + 0.5 ||V V^T - I||_F, U = [U_main, U_residual] (same for V),
        averaged over chunks.

        The frozen top singular vectors are not stored (they would double the tower's memory):
        for a square part, U_main U_main^T = I - U0 U0^T with U0 the starting residual, so the
        Frobenius norms follow from the rank-2r matrices [U_residual, U0] alone.
        """
        rows = self.U_residual.shape[1]
        if rows != self.in_features:
            raise ValueError(f"the orthogonality loss needs square projections, got {rows} x {self.in_features}")

        def deviation(residual: torch.Tensor, initial: torch.Tensor) -> torch.Tensor:
            # ||R R^T - U0 U0^T||_F^2 = tr((D G)^2), G the Gram matrix of [R, U0], D = diag(I, -I)
            stacked = torch.cat([residual, initial], dim=-1)
            sign = torch.cat([torch.ones(self.residual_rank), -torch.ones(self.residual_rank)]).to(stacked)
            signed_gram = sign.unsqueeze(-1) * (stacked.transpose(-1, -2) @ stacked)
            squared = torch.diagonal(signed_gram @ signed_gram, dim1=-2, dim2=-1).sum(-1)
            return squared.clamp_min(0).add(1e-12).sqrt()

        u_term = deviation(self.U_residual, self.U_initial.to(self.U_residual))
        v_term = deviation(self.V_residual.transpose(-1, -2), self.V_initial.transpose(-1, -2).to(self.V_residual))
        return (0.5 * u_term + 0.5 * v_term).mean()

    def keep_singular_values_loss(self) -> torch.Tensor:
        """Effort's | ||W||_F^2 - ||W_original||_F^2 |: the adapted weight keeps its energy."""
        return (self.weight.square().sum() - self.weight_norm_squared).abs()

    @classmethod
    def from_linear(cls, linear: nn.Linear, residual_rank: int = 1, chunks: int = 1) -> "SVDResidualLinear":
        return cls(linear.weight, linear.bias, residual_rank, chunks)

    def extra_repr(self) -> str:
        return (
            f"in={self.in_features}, out={self.out_features}, residual_rank={self.residual_rank}, chunks={self.chunks}"
        )


class SVDMultiheadAttention(nn.Module):
    """Drop-in for `nn.MultiheadAttention` (same call signature) with SVD-residual projections.

    `nn.MultiheadAttention` keeps q/k/v as one raw `in_proj_weight` parameter that its forward
    reads directly, so it cannot simply be given a new linear layer; this module recomputes the
    same attention with `F.multi_head_attention_forward` from the adapted weights.
    """

    def __init__(self, attention: nn.MultiheadAttention, residual_rank: int = 1) -> None:
        super().__init__()
        if not attention._qkv_same_embed_dim or attention.bias_k is not None or attention.add_zero_attn:
            raise ValueError("only self-attention with a packed in_proj_weight can be adapted")
        self.embed_dim, self.num_heads = attention.embed_dim, attention.num_heads
        self.dropout, self.batch_first = attention.dropout, attention.batch_first
        self.in_proj = SVDResidualLinear(attention.in_proj_weight, attention.in_proj_bias, residual_rank, chunks=3)
        self.out_proj = SVDResidualLinear.from_linear(attention.out_proj, residual_rank)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        key_padding_mask: Optional[torch.Tensor] = None,
        need_weights: bool = True,
        attn_mask: Optional[torch.Tensor] = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        if self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        output, weights = F.multi_head_attention_forward(
            query,
            key,
            value,
            self.embed_dim,
            self.num_heads,
            self.in_proj.weight,
            self.in_proj.bias,
            None,
            None,
            False,
            self.dropout,
            self.out_proj.weight,
            self.out_proj.bias,
            training=self.training,
            key_padding_mask=key_padding_mask,
            need_weights=need_weights,
            attn_mask=attn_mask,
            average_attn_weights=average_attn_weights,
            is_causal=is_causal,
        )
        if self.batch_first:
            output = output.transpose(0, 1)
        return output, weights


def _is_attention(module: nn.Module) -> bool:
    return "attention" in type(module).__name__.lower()


def apply_svd_adapter(module: nn.Module, residual_rank: int = 1) -> int:
    """Replace every attention projection under `module` in place; returns how many were adapted.

    Handles `nn.MultiheadAttention` (open_clip ViTs) and `nn.Linear` children of any module whose
    class name contains "Attention" (timm `qkv`/`proj`, Hugging Face `q_proj`/.../`out_proj`); a fused
    `qkv` linear gets one decomposition per q, k and v. Everything else is frozen; only the
    residual factors train. Raises when nothing was adapted, since a silent no-op would train
    nothing at all.
    """
    module.requires_grad_(False)
    count = 0
    for parent in list(module.modules()):
        if isinstance(parent, nn.MultiheadAttention):
            continue  # replaced as a whole by its own parent
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.MultiheadAttention):
                setattr(parent, name, SVDMultiheadAttention(child, residual_rank))
                count += 4
            elif isinstance(child, nn.Linear) and _is_attention(parent):
                fused = child.out_features == 3 * child.in_features and "qkv" in name
                setattr(parent, name, SVDResidualLinear.from_linear(child, residual_rank, 3 if fused else 1))
                count += 3 if fused else 1
    if count == 0:
        raise ValueError(f"no attention projections found in {type(module).__name__} for the SVD adapter")
    return count


def apply_adapter(module: nn.Module, adapter: str = "frozen", residual_rank: int = 1) -> dict[str, int]:
    """Make `module` frozen, SVD-adapted or fully trainable; returns and logs parameter counts."""
    if adapter not in ADAPTERS:
        raise ValueError(f"adapter must be one of {ADAPTERS}, got {adapter!r}")
    adapted = 0
    if adapter == "frozen":
        module.requires_grad_(False)
    elif adapter == "full":
        module.requires_grad_(True)
    else:
        adapted = apply_svd_adapter(module, residual_rank)
    counts = parameter_counts(module)
    counts["adapted_projections"] = adapted
    log.info(
        "backbone adapter %s: %s trainable of %s parameters%s",
        adapter,
        f"{counts['trainable']:,}",
        f"{counts['total']:,}",
        f" ({adapted} projections, residual rank {residual_rank})" if adapted else "",
    )
    return counts


def svd_regularization(module: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean orthogonality and singular-value-keeping losses over the SVD-adapted layers of `module`."""
    layers = [m for m in module.modules() if isinstance(m, SVDResidualLinear)]
    if not layers:
        raise ValueError("no SVD-adapted layers to regularize")
    orthogonality = torch.stack([layer.orthogonality_loss() for layer in layers]).mean()
    keep = torch.stack([layer.keep_singular_values_loss() for layer in layers]).mean()
    return orthogonality, keep


def parameter_counts(module: nn.Module) -> dict[str, int]:
    params = list(module.parameters())
    return {"trainable": sum(p.numel() for p in params if p.requires_grad), "total": sum(p.numel() for p in params)}
