"""Effort: exact at initialization, only the residual trains, the authors' checkpoints load."""

from __future__ import annotations

import pytest
import torch
import transformers
from torch import nn

from detectors.blocks.svd_adapter import SVDResidualLinear, svd_regularization
from detectors.blocks.weights import MissingWeightsError
from detectors.effort import Effort, effort_state_dict

TINY = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    image_size=32,
    patch_size=8,
    projection_dim=16,
    hidden_act="quick_gelu",
)
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")


@pytest.fixture
def clip_folder(tmp_path):
    """A random Hugging Face CLIP vision tower saved as a local folder, as users keep the real one."""
    torch.manual_seed(0)
    tower = transformers.CLIPVisionModel(transformers.CLIPVisionConfig(**TINY))
    tower.save_pretrained(tmp_path / "clip")
    return str(tmp_path / "clip"), {k: v.clone() for k, v in tower.state_dict().items()}


def _strip(key: str) -> str:
    return key[len("vision_model.") :] if key.startswith("vision_model.") else key


def authors_checkpoint(original: dict, frozen_copies: bool = True, seed: int = 1) -> dict:
    """A checkpoint with the authors' key names and shapes: their SVD layers keep W_main (top n-1
    directions), the trained rank-1 residual and frozen copies U_r, S_r, V_r; `module.` prefixes."""
    g = torch.Generator().manual_seed(seed)
    state = {}
    for key, value in original.items():
        key = _strip(key)
        layer, _, leaf = key.rpartition(".")
        if layer.endswith(PROJECTIONS) and leaf == "weight":
            u, s, vh = torch.linalg.svd(value, full_matrices=False)
            r = len(s) - 1
            state[f"module.backbone.{layer}.weight_main"] = u[:, :r] @ torch.diag(s[:r]) @ vh[:r]
            state[f"module.backbone.{layer}.U_residual"] = u[:, r:] + 0.1 * torch.randn(u[:, r:].shape, generator=g)
            state[f"module.backbone.{layer}.S_residual"] = s[r:] * 2.0
            state[f"module.backbone.{layer}.V_residual"] = vh[r:] + 0.1 * torch.randn(vh[r:].shape, generator=g)
            if frozen_copies:
                state[f"module.backbone.{layer}.U_r"], state[f"module.backbone.{layer}.S_r"] = u[:, :r], s[:r]
                state[f"module.backbone.{layer}.V_r"] = vh[:r]
        else:
            state[f"module.backbone.{key}"] = value
    state["module.head.weight"] = torch.randn(2, TINY["hidden_size"], generator=g)
    state["module.head.bias"] = torch.randn(2, generator=g)
    return state


def reference_score(state: dict, original: dict, image: torch.Tensor) -> torch.Tensor:
    """The authors' computation on a plain HF tower: W = W_main + U diag(S) V, softmax of class 1."""
    tower = transformers.CLIPVisionModel(transformers.CLIPVisionConfig(**TINY)).eval()
    weights = {}
    for key in original:
        key = _strip(key)
        layer, _, leaf = key.rpartition(".")
        if layer.endswith(PROJECTIONS) and leaf == "weight":
            p = f"module.backbone.{layer}."
            main = state.get(p + "weight_main")
            if main is None:  # top n-1 reconstruction of the original weight
                u, s, vh = torch.linalg.svd(original.get(key, original.get("vision_model." + key)), full_matrices=False)
                main = u[:, :-1] @ torch.diag(s[:-1]) @ vh[:-1]
            weights[key] = (
                main + state[p + "U_residual"] @ torch.diag(state[p + "S_residual"]) @ state[p + "V_residual"]
            )
        else:
            weights[key] = state[f"module.backbone.{key}"]
    target = getattr(tower, "vision_model", tower)
    target.load_state_dict(weights, strict=False)
    mean = torch.tensor([0.48145466, 0.4578275, 0.40821073]).view(1, 3, 1, 1)
    std = torch.tensor([0.26862954, 0.26130258, 0.27577711]).view(1, 3, 1, 1)
    with torch.no_grad():
        pooled = target(pixel_values=(image - mean) / std).pooler_output
        logits = nn.functional.linear(pooled, state["module.head.weight"], state["module.head.bias"])
    return logits.softmax(1)[:, 1]


def test_adapted_weights_equal_the_original_at_init_and_only_the_residual_and_head_train(clip_folder):
    folder, original = clip_folder
    net = Effort(clip=folder)
    adapted = {name: m for name, m in net.backbone.named_modules() if isinstance(m, SVDResidualLinear)}
    assert len(adapted) == 4 * TINY["num_hidden_layers"]
    for name, layer in adapted.items():
        weight = original.get(f"{name}.weight", original.get(f"vision_model.{name}.weight"))
        torch.testing.assert_close(layer.weight, weight, rtol=0, atol=1e-5)
        assert not layer.weight_main.requires_grad and not layer.bias.requires_grad
    trainable = {n for n, p in net.named_parameters() if p.requires_grad}
    assert trainable == {f"backbone.{n}.{f}" for n in adapted for f in ("U_residual", "S_residual", "V_residual")} | {
        "head.weight",
        "head.bias",
    }
    net.train()
    out = net(torch.rand(2, 3, 40, 40))  # resized to 32 inside
    net.loss(out, {"label": torch.tensor([0, 1])}).backward()
    zero = [n for n, p in net.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.abs().sum() > 0)]
    assert zero == []  # every trainable parameter receives a non-zero gradient


@pytest.mark.parametrize("frozen_copies", [True, False])
def test_authors_checkpoint_gives_their_scores(clip_folder, tmp_path, frozen_copies):
    folder, original = clip_folder
    state = authors_checkpoint(original, frozen_copies)
    path = tmp_path / "effort.pth"
    torch.save(state, path)
    net = Effort(clip=folder, pretrained=str(path)).eval()
    image = torch.rand(3, 3, 32, 32)
    with torch.no_grad():
        score = net(image)["logit"].sigmoid()
    torch.testing.assert_close(score, reference_score(state, original, image), rtol=0, atol=1e-4)


def test_mapping_reshapes_factors_and_drops_frozen_copies():
    state = {
        "module.backbone.encoder.layers.0.self_attn.q_proj.U_residual": torch.zeros(8, 1),
        "module.backbone.encoder.layers.0.self_attn.q_proj.S_residual": torch.zeros(1),
        "module.backbone.encoder.layers.0.self_attn.q_proj.V_residual": torch.zeros(1, 8),
        "module.backbone.encoder.layers.0.self_attn.q_proj.U_r": torch.zeros(8, 7),
        "module.backbone.embeddings.position_ids": torch.zeros(1, 5),
        "module.head.weight": torch.zeros(2, 8),
    }
    ours = effort_state_dict({"state_dict": state})
    assert {k: tuple(v.shape) for k, v in ours.items()} == {
        "backbone.encoder.layers.0.self_attn.q_proj.U_residual": (1, 8, 1),
        "backbone.encoder.layers.0.self_attn.q_proj.S_residual": (1, 1),
        "backbone.encoder.layers.0.self_attn.q_proj.V_residual": (1, 1, 8),
        "head.weight": (2, 8),
    }


def test_checkpoint_without_the_trained_head_or_file_is_refused(clip_folder, tmp_path):
    folder, original = clip_folder
    state = authors_checkpoint(original)
    del state["module.head.weight"], state["module.head.bias"]
    torch.save(state, tmp_path / "no_head.pth")
    with pytest.raises(ValueError, match="head"):
        Effort(clip=folder, pretrained=str(tmp_path / "no_head.pth"))
    with pytest.raises(MissingWeightsError):
        Effort(clip=folder, pretrained=str(tmp_path / "absent.pth"))


def test_missing_clip_folder_says_so(tmp_path):
    with pytest.raises(MissingWeightsError, match="not on this machine"):
        Effort(clip=str(tmp_path / "nowhere"))


def test_regularizers_match_the_authors_definitions():
    """0.5 ||[U_r U] [U_r U]^T - I|| + 0.5 ||[V_r; V] [V_r; V]^T - I|| with the frozen top factors of a
    full SVD, and | ||W||^2 - ||W0||^2 |, after the residual has moved."""
    torch.manual_seed(0)
    weight = torch.randn(6, 6)
    layer = SVDResidualLinear(weight, torch.zeros(6), residual_rank=1)
    with torch.no_grad():
        layer.U_residual.add_(0.2 * torch.randn_like(layer.U_residual))
        layer.V_residual.add_(0.2 * torch.randn_like(layer.V_residual))
        layer.S_residual.mul_(1.5)
    u, s, vh = torch.linalg.svd(weight.double())
    u_full = torch.cat([u[:, :-1], layer.U_residual[0].double()], dim=1)
    v_full = torch.cat([vh[:-1], layer.V_residual[0].double()], dim=0)
    eye = torch.eye(6, dtype=torch.float64)
    expected = 0.5 * torch.linalg.norm(u_full @ u_full.T - eye) + 0.5 * torch.linalg.norm(v_full @ v_full.T - eye)
    assert abs(float(layer.orthogonality_loss()) - float(expected)) < 1e-4
    keep = abs(float(layer.weight.square().sum() - weight.square().sum()))
    assert abs(float(layer.keep_singular_values_loss()) - keep) < 1e-3
    container = nn.Sequential(layer)
    orthogonality, kept = svd_regularization(container)
    assert float(orthogonality) == pytest.approx(float(layer.orthogonality_loss()))


def test_regularizer_weights_enter_the_training_loss(clip_folder):
    folder, _ = clip_folder
    torch.manual_seed(0)
    plain = Effort(clip=folder).train()
    regularized = Effort(clip=folder, orthogonality_weight=1.0, singular_value_weight=1.0).train()
    regularized.load_state_dict(plain.state_dict())
    with torch.no_grad():
        for module in regularized.backbone.modules():
            if isinstance(module, SVDResidualLinear):
                module.S_residual.mul_(3.0)
    image, batch = torch.rand(2, 3, 32, 32), {"label": torch.tensor([0, 1])}
    out = regularized(image)
    orthogonality, keep = svd_regularization(regularized.backbone)
    expected = (
        nn.functional.binary_cross_entropy_with_logits(out["logit"], batch["label"].float()) + orthogonality + keep
    )
    assert float(keep) > 0
    torch.testing.assert_close(regularized.loss(out, batch), expected)


def test_mapping_check_tool_reports_agreement_with_an_independent_reference(clip_folder, tmp_path, capsys):
    """`python -m tools.check_mapping effort` on a dump in the authors' format, whose outputs come
    from a plain Hugging Face tower with W = W_main + U S V written in (not from our model)."""
    from tools.check_mapping import main

    _, original = clip_folder
    state = authors_checkpoint(original, seed=4)
    image = torch.rand(2, 3, 32, 32)
    dump = {
        "state_dict": state,
        "clip_config": TINY,
        "input": image,
        "clip_state_dict": {_strip(k): v for k, v in original.items()},
        "outputs": reference_score(state, original, image),
    }
    torch.save(dump, tmp_path / "good.pt")
    torch.save({**dump, "outputs": dump["outputs"] + 0.1}, tmp_path / "wrong.pt")
    assert main(["effort", str(tmp_path / "good.pt")]) == 0  # both the full and the slim file agree
    assert main(["effort", str(tmp_path / "wrong.pt")]) == 1
    assert "FAIL: wrong.pt: largest checked difference 1.00e-01" in capsys.readouterr().out
