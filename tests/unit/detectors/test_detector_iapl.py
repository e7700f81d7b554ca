"""IAPL: what trains, gates that start closed, the DCT condition, released files, test-time adaptation."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
import torch

from detectors.build import build_detector
from detectors.iapl import BRANCH_PARTS, BRANCH_STAGES, dct_matrix, srm_kernels
from detectors.registry import create_module, net_config
from inference.runtime import ModelLoadError, OnnxRuntime, TorchRuntime
from inference.tta import ContextAdapter, TTASettings

TINY_NET = net_config("iapl_tiny")


def tiny(**overrides):
    torch.manual_seed(0)
    return build_detector({**TINY_NET, **overrides})


def test_forward_backward_trains_prompts_gates_adapters_condition_and_head_only():
    net = tiny().train()
    outputs = net(torch.rand(4, 3, 64, 64))
    assert outputs["logit"].shape == (4,) and outputs["aux_logit"].shape == (4,)
    net.loss(outputs, {"label": torch.tensor([0, 1, 0, 1])}).backward()
    trained = {name.split(".")[0] for name, p in net.named_parameters() if p.grad is not None}
    assert trained == {"context", "deep_prompts", "gates", "adapters", "condition", "head"}
    assert all(not p.requires_grad for p in net.tower.parameters())


def test_loss_is_label_smoothed_on_both_heads():
    net = tiny()
    logits = {"logit": torch.tensor([0.0, 2.0]), "aux_logit": torch.tensor([1.0, -1.0])}
    target = torch.tensor([0.05, 0.95])  # labels 0, 1 smoothed by 0.1 towards 0.5
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    expected = bce(logits["logit"], target) + bce(logits["aux_logit"], target)
    assert torch.isclose(net.loss(logits, {"label": torch.tensor([0, 1])}), expected)


def test_gates_start_near_zero_so_training_starts_from_plain_prompts():
    net = tiny()
    assert len(net.gates) == TINY_NET["prompt_depth"] - 1
    assert all(gate.abs().max() <= 1e-6 for gate in net.gates)
    assert net.condition.gate_min.abs().max() <= 1e-6 and net.condition.gate_max.abs().max() <= 1e-6
    image = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        bias, _ = net.eval().condition(net.normalize(image))
    assert bias.abs().max() < 1e-4  # the image-specific bias is negligible at the start
    assert all(torch.count_nonzero(adapter.up.weight) == 0 for adapter in net.adapters.values())


def test_srm_bank_and_dct_basis():
    kernels = srm_kernels()
    assert kernels.shape == (30, 5, 5)
    assert torch.allclose(kernels.sum(dim=(1, 2)), torch.zeros(30), atol=1e-6)  # all high-pass
    assert len({tuple(k.flatten().tolist()) for k in kernels}) == 30
    basis = dct_matrix(32)
    assert torch.allclose(basis @ basis.T, torch.eye(32), atol=1e-5)


def test_condition_picks_the_window_with_the_most_high_frequency_energy():
    net = tiny()
    image = torch.full((1, 3, 64, 64), 0.5)
    image[:, :, 32:64, 16:48] = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(0)).round()
    window = net.condition.richest_window(image)
    assert torch.equal(window, image[:, :, 32:64, 16:48])


def authors_checkpoint(net) -> dict:
    """IAPL's `model` entry with the authors' names, random values, and their saved extras."""
    g = torch.Generator().manual_seed(5)
    rand = lambda shape: torch.randn(*shape, generator=g)  # noqa: E731
    own = net.state_dict()
    state = {
        "prompt_learner.ctx": rand(own["context"].shape),
        "fc_binary.weight": rand((1, 32)),
        "fc_binary.bias": rand((1,)),
    }
    state.update({f"prompt_learner.compound_prompts_vision.{k}": rand(p.shape) for k, p in enumerate(net.deep_prompts)})
    state.update({f"image_encoder.{k}": rand(v.shape) for k, v in net.tower.state_dict().items()})
    state.update(
        {f"image_encoder.transformer.resblocks.{k + 1}.gamma": rand(g_.shape) for k, g_ in enumerate(net.gates)}
    )
    for i in net.adapters:
        for part in ("down", "up"):
            for kind in ("weight", "bias"):
                state[f"image_encoder.transformer.resblocks.{i}.adapter.{part}_proj.{kind}"] = rand(
                    own[f"adapters.{i}.{part}.{kind}"].shape
                )
    theirs_part = {v: k for k, v in BRANCH_PARTS.items()}
    theirs_stage = {v: k for k, v in BRANCH_STAGES.items()}
    for key, value in own.items():
        if key.startswith("condition.branch_"):
            side, _, stage, *part, kind = key.split(".")[1:]
            name = f"conditional_ctx.model_{side[len('branch_') :]}.{theirs_stage[int(stage)]}.{theirs_part['.'.join(part)]}.{kind}"
            state[name] = (
                value.clone()
                if kind == "num_batches_tracked"
                else rand(value.shape).abs() + 0.5
                if kind == "running_var"
                else rand(value.shape)
            )
    state.update(
        {
            "conditional_ctx.gamma": rand((64,)),
            "conditional_ctx.gamma_2": rand((64,)),
            "conditional_ctx.sup.weight": rand((1, 64)),
            "conditional_ctx.sup.bias": rand((1,)),
            "conditional_ctx.hpf.hpf.weight": rand((30, 3, 5, 5)),
            "conditional_ctx._DCT_patch": dct_matrix(32),
            "conditional_ctx._DCT_patch_T": dct_matrix(32).T,
            "conditional_ctx.level_filters.0.base": torch.ones(32, 32),
            **{f"conditional_ctx.grade_filters.{k}.{n}": torch.ones(32, 32) for k in range(6) for n in ("base",)},
            **{f"conditional_ctx.grade_filters.{k}.ft_num": torch.tensor(1.0) for k in range(6)},
        }
    )
    return state


def test_released_checkpoint_loads_through_the_documented_mapping(tmp_path):
    state = authors_checkpoint(tiny())
    path = tmp_path / "checkpoint_best_acc.pth"
    torch.save({"model": state, "optimizer": {}, "epoch": 4, "args": argparse.Namespace(lr=5e-5, n_ctx=2)}, path)
    ours = tiny(pretrained=str(path)).state_dict()
    pairs = {
        "context": "prompt_learner.ctx",
        "deep_prompts.1": "prompt_learner.compound_prompts_vision.1",
        "gates.0": "image_encoder.transformer.resblocks.1.gamma",
        "adapters.3.up.weight": "image_encoder.transformer.resblocks.3.adapter.up_proj.weight",
        "tower.transformer.resblocks.2.attn.in_proj_weight": "image_encoder.transformer.resblocks.2.attn.in_proj_weight",
        "tower.proj": "image_encoder.proj",
        "condition.branch_max.blocks.3.shortcut.1.running_var": "conditional_ctx.model_max.conv60.conv1x1.1.running_var",
        "condition.branch_min.blocks.0.conv1.weight": "conditional_ctx.model_min.conv00.conv.weight",
        "condition.gate_max": "conditional_ctx.gamma_2",
        "condition.aux_head.weight": "conditional_ctx.sup.weight",
        "condition.hpf_weight": "conditional_ctx.hpf.hpf.weight",
        "head.bias": "fc_binary.bias",
    }
    for mine, theirs in pairs.items():
        assert torch.equal(ours[mine], state[theirs]), mine
    del state["conditional_ctx.gamma"]
    torch.save({"model": state}, path)
    with pytest.raises(ValueError, match="condition.gate_min"):
        tiny(pretrained=str(path))


@pytest.mark.slow  # per-image adaptation steps (~10 s)
def test_context_adaptation_restores_the_context_and_keeps_batchnorm_statistics():
    net = tiny()
    with torch.no_grad():  # a head that responds to the context, so adaptation has something to move
        net.head.weight.normal_(0, 1.0)
        net.context.normal_(0, 1.0)
    before_context = net.context.detach().clone()
    statistics = {k: v.clone() for k, v in net.state_dict().items() if "running_" in k or "num_batches" in k}
    seen = []
    net.register_forward_pre_hook(lambda module, args: seen.append(module.context.detach().clone()))
    adapter = ContextAdapter(net, size=64, settings=TTASettings(views=10, steps=2, load_size=80))
    scores = [adapter.score(torch.rand(3, 80, 80)) for _ in range(2)]
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert len(seen) == 2 * 3  # per image: two adaptation steps, then the final scoring pass
    assert not torch.equal(seen[2], before_context)  # the final pass used an adapted context ...
    assert torch.equal(seen[3], before_context)  # ... and the next image started from the trained one
    assert torch.equal(net.context, before_context) and net.context.grad is None
    for key, value in net.state_dict().items():
        if key in statistics:
            assert torch.equal(value, statistics[key]), key
    assert all(p.grad is None for p in net.parameters())


def write_checkpoint(tmp_path, name: str) -> Path:
    module = create_module(name)
    path = tmp_path / f"{name}.ckpt"
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}, path)
    return path


def test_ckpt_runtime_adapts_per_image_and_onnx_refuses(tmp_path):
    runtime = TorchRuntime(write_checkpoint(tmp_path, "iapl_tiny"), device="cpu", tta=True)
    assert (runtime.preprocess.mode, runtime.preprocess.size, runtime.preprocess.interpolation) == (
        "resize",
        256,
        "bilinear",
    )  # views are cut from this resize, as the authors' are
    runtime.adapter = ContextAdapter(runtime.net, size=64, settings=TTASettings(views=6, steps=1, load_size=80))
    scores = runtime.predict(torch.rand(2, 3, 80, 80))["score"]
    assert scores.shape == (2,) and ((scores >= 0) & (scores <= 1)).all()
    with pytest.raises(ModelLoadError, match="ONNX graph cannot"):
        OnnxRuntime(tmp_path / "iapl_tiny.onnx", device="cpu", tta=True)


def test_an_adapted_score_is_the_same_scored_first_after_another_image_or_inside_a_batch(tmp_path):
    """Every image draws its views from the seed alone, so `devices=N`, `resume=true` and any batch
    size give the rows a one-process run gives."""
    runtime = TorchRuntime(write_checkpoint(tmp_path, "iapl_tiny"), device="cpu", tta=True)
    runtime.adapter = ContextAdapter(runtime.net, size=64, settings=TTASettings(views=6, steps=1, load_size=80))
    image, other, third = torch.rand(3, 3, 80, 80, generator=torch.Generator().manual_seed(1))
    first = runtime.adapter.score(image)
    runtime.adapter.score(other)
    assert runtime.adapter.score(image) == first
    batch = runtime.predict(torch.stack([other, third, image]))["score"]
    assert batch[2] == np.float32(first)


def test_tta_is_refused_for_detectors_without_context(tmp_path):
    with pytest.raises(ModelLoadError, match="no test-time adaptation"):
        TorchRuntime(write_checkpoint(tmp_path, "clip_linear_tiny"), device="cpu", tta=True)


@pytest.mark.slow  # adaptation per image through infer.py (~10 s)
def test_infer_with_tta_scores_every_image(tmp_path):
    from infer import infer
    from inference.writer import read_results
    from tests.helpers import compose_config, write_images

    model = write_checkpoint(tmp_path, "iapl_tiny")
    images = write_images(tmp_path / "images", [(300, 260), (40, 90)])
    cfg = compose_config(
        "infer",
        [
            f"model={model}",
            f"input={tmp_path / 'images'}",
            f"output={tmp_path / 's.csv'}",
            "tta=true",
            "device=cpu",
            "num_workers=0",
            "progress=false",
            "batch_size=2",
        ],
    )
    infer(cfg)
    rows = read_results(tmp_path / "s.csv")
    assert sorted(Path(r["path"]).name for r in rows) == sorted(p.name for p in images)
    assert all(r["status"] == "ok" and 0.0 <= float(r["score"]) <= 1.0 for r in rows)


def test_iapl_recipe_composes_with_the_authors_settings():
    from tests.helpers import compose_config

    cfg = compose_config("train", ["experiment=iapl", "data.manifest=/data/m.csv"])
    assert cfg.detector.net._target_ == "detectors.iapl.IAPL" and list(cfg.detector.net.adapter_layers) == [
        3,
        7,
        11,
        15,
        19,
        23,
    ]
    assert (cfg.detector.optimizer.name, cfg.detector.optimizer.lr, cfg.data.batch_size) == ("Adam", 5e-5, 32)
    assert cfg.detector.net.label_smoothing == 0.1 and cfg.trainer.max_epochs == 5
