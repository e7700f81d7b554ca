"""ForgeLens (Chen, Zhang & Niu, ICCV 2025): a frozen CLIP ViT guided towards forgery cues.

Stage 1 adds a small weight-shared guidance module (WSGM) as a residual after the attention of
every block (block i of L uses module i * count // L) and trains it with a linear head on the final
projected CLS. Stage 2 freezes all of that and trains FAFormer: the per-layer CLS tokens, each
through the tower's `ln_post` and `proj`, plus a learnable CLS token, go through a few small
transformer blocks whose CLS feeds a linear head. Images are never resized: smaller ones are
tiled, then centre-cropped to 224 (`preprocess.mode: tile`), as in the authors' code.

Released checkpoints (`pretrained: /path/file.pth`, their `model_state_dict`) load through
`authors_key_map`; module counts and widths are read from the file. Those files carry the
whole frozen tower, so `clip_pretrained` may be null when loading them.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Mapping

import torch
from torch import nn

from datamodules.preprocess import Preprocess
from detectors.base import Detector
from detectors.blocks.clip import clip_preprocess, load_clip_visual
from detectors.blocks.clip_tower import (
    check_plain_vit,
    exportable_attention,
    freeze,
    patch_tokens,
    project_cls,
    resize_to_tower,
    run_block,
)
from detectors.blocks.released import (
    IncompatibleWeightsError,
    load_mapped,
    map_state_dict,
    read_state_dict,
    regex_key_map,
)
from detectors.blocks.weights import weights_deferred

log = logging.getLogger(__name__)

TOWER = r"backbone\.visual\."
TEXT_TOWER = r"backbone\.(transformer|token_embedding|positional_embedding|ln_final|text_projection|logit_scale)\b.*"


class GuidanceModule(nn.Module):
    """WSGM: width -> hidden -> hidden -> width with ReLU and dropout, N(0, 0.01) weights and zero
    biases so that the frozen tower starts (almost) unchanged."""

    def __init__(self, width: int, hidden: int, dropout: float = 0.5) -> None:
        super().__init__()
        self.down, self.hidden, self.up = nn.Linear(width, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, width)
        self.dropout = nn.Dropout(dropout)
        for layer in (self.down, self.hidden, self.up):
            nn.init.normal_(layer.weight, std=0.01)
            nn.init.zeros_(layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.dropout(torch.relu(self.down(x)))
        return self.up(self.dropout(torch.relu(self.hidden(x))))


class FAFormerBlock(nn.Module):
    """Pre-norm transformer block over the layer-CLS sequence: attention, then a ReLU MLP with
    dropout after each of its two linears."""

    def __init__(self, dim: int, heads: int, hidden: int, dropout: float = 0.5) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)
        self.dropout = nn.Dropout(dropout)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.01)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.dropout(self.fc2(self.dropout(torch.relu(self.fc1(self.norm2(x))))))


class ForgeLens(Detector):
    """`stage: 1` scores with the WSGM-guided final CLS, `stage: 2` with FAFormer; each stage
    trains only its own parts (stage 2 starts from a stage-1 file given as `pretrained`)."""

    def __init__(
        self,
        model: str | Mapping[str, Any] = "ViT-L-14",
        clip_pretrained: str | None = "openai",
        pretrained: str | None = None,
        stage: int = 2,
        wsgm_count: int = 4,
        wsgm_hidden: int | None = None,
        faformer_layers: int = 2,
        faformer_heads: int = 2,
        faformer_hidden: int | None = None,
        dropout: float = 0.5,
        cache_dir: str | None = None,
        quick_gelu: bool = True,
        preprocess: Preprocess | Mapping[str, Any] | None = None,
    ) -> None:
        if stage not in (1, 2):
            raise ValueError(f"ForgeLens stage must be 1 or 2, got {stage!r}")
        visual, spec = load_clip_visual(model, clip_pretrained, cache_dir, quick_gelu)
        overrides = preprocess.to_dict() if isinstance(preprocess, Preprocess) else dict(preprocess or {})
        super().__init__(clip_preprocess(spec, {"mode": "tile", **overrides}))
        check_plain_vit(visual)
        self.tower, self.image_size, self.stage, self.dropout_p = visual, spec.image_size, stage, dropout
        self.width, self.embed_dim = visual.conv1.out_channels, spec.embed_dim
        self.depth, self.faformer_heads = len(visual.transformer.resblocks), faformer_heads
        freeze(self.tower)
        self.head_dropout = nn.Dropout(dropout)
        self.stage1_head = nn.Linear(self.embed_dim, 1)
        self.cls_token = nn.Parameter(torch.randn(self.embed_dim) * 0.02)
        self.faformer_norm = nn.LayerNorm(self.embed_dim)
        self.head = nn.Linear(self.embed_dim, 1)
        nn.init.normal_(self.head.weight, std=0.01)
        nn.init.zeros_(self.head.bias)
        self.wsgm, self.faformer = nn.ModuleList(), nn.ModuleList()
        state = None
        if pretrained and not weights_deferred():
            fmt, raw = read_state_dict(pretrained, ("model_state_dict",))
            state = raw if fmt == "toolkit" else map_state_dict(raw, authors_key_map(raw))
            wsgm_count, wsgm_hidden, faformer_layers, faformer_hidden = counts_from_weights(
                state, wsgm_count, wsgm_hidden, faformer_layers, faformer_hidden
            )
        self.build_wsgm(wsgm_count, wsgm_hidden or self.width // 4)
        self.build_faformer(faformer_layers, faformer_hidden or self.embed_dim)
        self.set_stage(stage)
        self._register_load_state_dict_pre_hook(self._fit_counts_to_state)
        if state is not None:
            optional = ("tower.",) if clip_pretrained else ()
            if not any(k.startswith("faformer.") for k in state):  # a stage-1 file: FAFormer starts fresh
                optional += ("faformer.", "faformer_norm.", "cls_token", "head.")
            kept = load_mapped(self, state, optional, source=str(pretrained))
            log.info(
                "ForgeLens: loaded %s (%d WSGM, %d FAFormer layers); kept initial values for %d tensors",
                pretrained,
                wsgm_count,
                faformer_layers,
                len(kept),
            )

    def build_wsgm(self, count: int, hidden: int) -> None:
        if not 1 <= count <= self.depth:
            raise ValueError(f"wsgm_count must be between 1 and the tower depth {self.depth}, got {count}")
        self.wsgm = nn.ModuleList(GuidanceModule(self.width, hidden, self.dropout_p) for _ in range(count))
        self.wsgm.train(self.training)

    def build_faformer(self, layers: int, hidden: int) -> None:
        self.faformer = nn.ModuleList(
            FAFormerBlock(self.embed_dim, self.faformer_heads, hidden, self.dropout_p) for _ in range(layers)
        )
        self.faformer.train(self.training)

    def set_stage(self, stage: int) -> None:
        """Stage 1 trains the guidance modules and their head; stage 2 only FAFormer and its head."""
        self.stage = stage
        for part, trains in (
            (self.wsgm, stage == 1),
            (self.stage1_head, stage == 1),
            (self.faformer, stage == 2),
            (self.faformer_norm, stage == 2),
            (self.head, stage == 2),
        ):
            part.requires_grad_(trains)
        self.cls_token.requires_grad_(stage == 2)

    def module_index(self, block: int) -> int:
        """The shared guidance module block `block` uses (the authors' i * count // depth)."""
        return block * len(self.wsgm) // self.depth

    def _fit_counts_to_state(self, state: Mapping[str, torch.Tensor], prefix: str, *args: Any) -> None:
        """Our own checkpoints describe their module counts by their keys: rebuild to fit them."""
        wsgm = {int(m.group(1)) for k in state if (m := re.match(re.escape(prefix) + r"wsgm\.(\d+)\.", k))}
        former = {int(m.group(1)) for k in state if (m := re.match(re.escape(prefix) + r"faformer\.(\d+)\.", k))}
        if wsgm and len(wsgm) != len(self.wsgm):
            self.build_wsgm(len(wsgm), state[f"{prefix}wsgm.0.down.weight"].shape[0])
        if former and len(former) != len(self.faformer):
            self.build_faformer(len(former), state[f"{prefix}faformer.0.fc1.weight"].shape[0])
        if wsgm or former:
            self.set_stage(self.stage)

    def layer_cls(self, image: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Final tokens and the CLS token after every block, with the guidance modules applied."""
        tokens = self.tower.ln_pre(patch_tokens(self.tower, image))
        per_layer = []
        for index, block in enumerate(self.tower.transformer.resblocks):
            tokens = run_block(block, tokens, after_attention=self.wsgm[self.module_index(index)])
            per_layer.append(tokens[:, :1])
        return tokens, per_layer

    def forward(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        image = resize_to_tower(self.normalize(image), self.image_size)
        with exportable_attention():
            if self.stage == 1:
                tokens, _ = self.layer_cls(image)
                return {"logit": self.stage1_head(self.head_dropout(project_cls(self.tower, tokens))).squeeze(1)}
            with torch.no_grad():  # nothing before FAFormer trains in stage 2
                _, per_layer = self.layer_cls(image)
                layer_tokens = self.tower.ln_post(torch.cat(per_layer, dim=1)) @ self.tower.proj
            cls = self.cls_token.view(1, 1, -1).expand(image.shape[0], 1, -1).to(layer_tokens.dtype)
            sequence = torch.cat([cls, layer_tokens], dim=1)
            for block in self.faformer:
                sequence = block(sequence)
            return {"logit": self.head(self.head_dropout(self.faformer_norm(sequence[:, 0]))).squeeze(1)}


def authors_key_map(state: Mapping[str, torch.Tensor]):
    """The authors' `model_state_dict` keys -> ours, for stage-1 (`net_stage1`) and stage-2
    (`net_stage2`, which nests the stage-1 net under `backbone.`) files.

    WSGM_modules.j -> wsgm.j; visual.* -> tower.*; the stage-1 head fc.1 -> stage1_head; FAFormer
    transformer.resblocks.k.{ln_1, attn, ln_2, mlp.0, mlp.3} -> faformer.k.{norm1, attn, norm2, fc1,
    fc2}; cls_token, ln_post, fc.1 -> cls_token, faformer_norm, head. Dropped: each block's
    `wsgm_module` alias of the shared module, the text tower, and the stage-1 net's `ln_post`,
    which its forward never uses.
    """
    nested = any(k.startswith("backbone.backbone.") for k in state)
    inner = r"backbone\." if nested else ""
    rules = [
        (inner + TOWER + r"transformer\.WSGM_modules\.(\d+)\.(down|up)\.(weight|bias)", r"wsgm.\1.\2.\3"),
        (inner + TOWER + r"transformer\.WSGM_modules\.(\d+)\.middle\.(weight|bias)", r"wsgm.\1.hidden.\2"),
        (inner + TOWER + r"transformer\.resblocks\.\d+\.wsgm_module\..*", None),
        (inner + TOWER + r"(.*)", r"tower.\1"),
        (inner + TEXT_TOWER, None),
        (inner + r"backbone\.(input_resolution|context_length|vocab_size)", None),
        (inner + r"fc\.1\.(weight|bias)", r"stage1_head.\1"),
        (inner + r"ln_post\.(weight|bias)", None),
    ]
    if nested:
        rules += [
            (r"transformer\.resblocks\.(\d+)\.ln_1\.(.*)", r"faformer.\1.norm1.\2"),
            (r"transformer\.resblocks\.(\d+)\.ln_2\.(.*)", r"faformer.\1.norm2.\2"),
            (r"transformer\.resblocks\.(\d+)\.attn\.(.*)", r"faformer.\1.attn.\2"),
            (r"transformer\.resblocks\.(\d+)\.mlp\.0\.(.*)", r"faformer.\1.fc1.\2"),
            (r"transformer\.resblocks\.(\d+)\.mlp\.3\.(.*)", r"faformer.\1.fc2.\2"),
            (r"cls_token", "cls_token"),
            (r"ln_post\.(weight|bias)", r"faformer_norm.\1"),
            (r"fc\.1\.(weight|bias)", r"head.\1"),
        ]
    return regex_key_map(rules)


def counts_from_weights(
    state: Mapping[str, torch.Tensor],
    wsgm_count: int,
    wsgm_hidden: int | None,
    faformer_layers: int,
    faformer_hidden: int | None,
) -> tuple[int, int | None, int, int | None]:
    """Module counts and widths as the weights say (configured values only where the file has no
    such part, e.g. FAFormer in a stage-1 file); a disagreeing configured value is logged."""
    found_wsgm = {int(k.split(".")[1]) for k in state if k.startswith("wsgm.")}
    found_former = {int(k.split(".")[1]) for k in state if k.startswith("faformer.")}
    if not found_wsgm:
        raise IncompatibleWeightsError("the weights hold no guidance modules (WSGM_modules): not a ForgeLens file")
    if found_wsgm != set(range(len(found_wsgm))) or (found_former and found_former != set(range(len(found_former)))):
        raise IncompatibleWeightsError("the weights number their WSGM / FAFormer modules with gaps")
    read = {"wsgm_count": len(found_wsgm), "wsgm_hidden": _rows(state, r"wsgm\.\d+\.down\.weight")}
    if found_former:
        read.update(faformer_layers=len(found_former), faformer_hidden=_rows(state, r"faformer\.\d+\.fc1\.weight"))
    configured = {
        "wsgm_count": wsgm_count,
        "wsgm_hidden": wsgm_hidden,
        "faformer_layers": faformer_layers,
        "faformer_hidden": faformer_hidden,
    }
    for name, value in read.items():
        if configured[name] is not None and configured[name] != value:
            log.info("ForgeLens: %s=%s from the weights (configured %s)", name, value, configured[name])
    configured.update({k: v for k, v in read.items() if v is not None})
    return (
        configured["wsgm_count"],
        configured["wsgm_hidden"],
        configured["faformer_layers"],
        configured["faformer_hidden"],
    )


def _rows(state: Mapping[str, torch.Tensor], pattern: str) -> int | None:
    """Output width of the first matching linear layer (None when the file has none: the load
    then reports the missing keys)."""
    return next((v.shape[0] for k, v in state.items() if re.fullmatch(pattern, k)), None)
