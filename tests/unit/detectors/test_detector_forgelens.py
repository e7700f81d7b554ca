"""ForgeLens: stages train what the authors train, modules are shared as theirs, released files load."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from datamodules.preprocess import Preprocess
from datamodules.transforms import build_transform
from detectors.blocks.released import IncompatibleWeightsError
from detectors.build import build_detector
from detectors.registry import net_config
from tests.helpers import compose_config

TINY = net_config("forgelens_tiny")


def tiny(**overrides):
    torch.manual_seed(0)
    return build_detector({**TINY, **overrides})


def deep_tower(layers: int) -> dict:
    return {
        "embed_dim": 32,
        "vision_cfg": {"image_size": 32, "layers": layers, "width": 64, "patch_size": 16, "head_width": 32},
    }


def trained_names(net) -> set[str]:
    return {name.split(".")[0] for name, p in net.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}


@pytest.mark.parametrize(
    "stage, trained", [(1, {"wsgm", "stage1_head"}), (2, {"faformer", "faformer_norm", "cls_token", "head"})]
)
def test_each_stage_trains_only_its_own_parts(stage, trained):
    net = tiny(stage=stage).train()
    logit = net(torch.rand(3, 3, 32, 32))["logit"]
    assert logit.shape == (3,) and torch.isfinite(logit).all()
    net.loss({"logit": logit}, {"label": torch.tensor([0, 1, 1])}).backward()
    assert trained_names(net) == trained
    assert all(p.grad is None for p in net.tower.parameters())


@pytest.mark.parametrize("layers, count", [(24, 4), (24, 12), (24, 24), (4, 3), (5, 2)])
def test_block_i_uses_guidance_module_i_times_count_over_depth(layers, count):
    net = tiny(model=deep_tower(layers), wsgm_count=count, stage=1).eval()
    calls = Counter()
    for index, module in enumerate(net.wsgm):
        module.register_forward_hook(lambda *_, index=index: calls.update([index]))
    with torch.no_grad():
        net(torch.rand(1, 3, 32, 32))
    expected = Counter(i * count // layers for i in range(layers))
    assert calls == expected and len(net.wsgm) == count


def test_faformer_sees_one_cls_per_block_plus_its_own():
    net = tiny(model=deep_tower(6), stage=2).eval()
    seen = []
    net.faformer[0].register_forward_pre_hook(lambda module, args: seen.append(args[0].shape))
    with torch.no_grad():
        net(torch.rand(2, 3, 32, 32))
    assert seen == [torch.Size([2, 6 + 1, 32])]


def test_last_layer_cls_is_the_stage_one_feature():
    """The per-layer tokens go through ln_post and proj, so the last one is encode_image's output."""
    net = tiny(stage=1).eval()
    image = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        tokens, per_layer = net.layer_cls(net.normalize(image))
        last = net.tower.ln_post(per_layer[-1][:, 0]) @ net.tower.proj
    assert torch.allclose(last, net.tower.ln_post(tokens[:, 0]) @ net.tower.proj)


def authors_state_dict(net, wsgm: int, layers: int) -> dict[str, torch.Tensor]:
    """A stage-2 `model_state_dict` with the authors' names (net_stage2 nesting net_stage1 and the
    whole OpenAI CLIP), fp16 where their CLIP conversion makes it so, built from random tensors."""
    generator = torch.Generator().manual_seed(3)
    rand = lambda *shape: torch.randn(*shape, generator=generator)  # noqa: E731
    width, embed, depth = 64, 32, len(net.tower.transformer.resblocks)
    state = {
        f"backbone.backbone.visual.{k}": rand(*v.shape).half() if v.dim() > 1 else rand(*v.shape)
        for k, v in net.tower.state_dict().items()
    }
    modules = {
        j: {
            "down": (rand(16, width), rand(16)),
            "middle": (rand(16, 16), rand(16)),
            "up": (rand(width, 16), rand(width)),
        }
        for j in range(wsgm)
    }
    for j, parts in modules.items():
        for part, (weight, bias) in parts.items():
            state[f"backbone.backbone.visual.transformer.WSGM_modules.{j}.{part}.weight"] = weight.half()
            state[f"backbone.backbone.visual.transformer.WSGM_modules.{j}.{part}.bias"] = bias.half()
            for i in range(depth):  # every block's alias of the module it shares
                if i * wsgm // depth == j:
                    state[f"backbone.backbone.visual.transformer.resblocks.{i}.wsgm_module.{part}.weight"] = (
                        weight.half()
                    )
    state.update(
        {
            "backbone.backbone.transformer.resblocks.0.attn.in_proj_weight": rand(3 * 16, 16),
            "backbone.backbone.token_embedding.weight": rand(10, 16),
            "backbone.backbone.logit_scale": rand(()),
            "backbone.backbone.ln_final.weight": rand(16),
            "backbone.backbone.text_projection": rand(16, embed),
            "backbone.ln_post.weight": rand(embed),
            "backbone.ln_post.bias": rand(embed),
            "backbone.fc.1.weight": rand(1, embed),
            "backbone.fc.1.bias": rand(1),
            "cls_token": rand(embed),
            "ln_post.weight": rand(embed),
            "ln_post.bias": rand(embed),
            "fc.1.weight": rand(1, embed),
            "fc.1.bias": rand(1),
        }
    )
    for k in range(layers):
        block = f"transformer.resblocks.{k}."
        state.update(
            {
                block + "attn.in_proj_weight": rand(3 * embed, embed),
                block + "attn.in_proj_bias": rand(3 * embed),
                block + "attn.out_proj.weight": rand(embed, embed),
                block + "attn.out_proj.bias": rand(embed),
                block + "ln_1.weight": rand(embed),
                block + "ln_1.bias": rand(embed),
                block + "ln_2.weight": rand(embed),
                block + "ln_2.bias": rand(embed),
                block + "mlp.0.weight": rand(embed, embed),
                block + "mlp.0.bias": rand(embed),
                block + "mlp.3.weight": rand(embed, embed),
                block + "mlp.3.bias": rand(embed),
            }
        )
    return state


def test_released_file_loads_with_counts_read_from_the_weights(tmp_path):
    state = authors_state_dict(tiny(), wsgm=3, layers=2)
    path = tmp_path / "GenImage.pth"
    torch.save({"epoch": 4, "model_state_dict": state, "optimizer_state_dict": {}, "loss": 0.1}, path)
    net = tiny(pretrained=str(path), wsgm_count=1, faformer_layers=5)  # the configured counts are overridden
    assert len(net.wsgm) == 3 and len(net.faformer) == 2
    pairs = {
        "wsgm.2.hidden.weight": "backbone.backbone.visual.transformer.WSGM_modules.2.middle.weight",
        "tower.conv1.weight": "backbone.backbone.visual.conv1.weight",
        "tower.transformer.resblocks.3.mlp.c_fc.weight": "backbone.backbone.visual.transformer.resblocks.3.mlp.c_fc.weight",
        "stage1_head.weight": "backbone.fc.1.weight",
        "faformer.1.fc2.weight": "transformer.resblocks.1.mlp.3.weight",
        "faformer.0.norm2.bias": "transformer.resblocks.0.ln_2.bias",
        "faformer_norm.weight": "ln_post.weight",
        "head.bias": "fc.1.bias",
        "cls_token": "cls_token",
    }
    ours = net.state_dict()
    for mine, theirs in pairs.items():
        assert ours[mine].dtype == torch.float32 and torch.equal(ours[mine], state[theirs].float()), mine


def test_released_file_with_a_foreign_or_missing_key_is_refused(tmp_path):
    state = authors_state_dict(tiny(), wsgm=2, layers=1)
    torch.save({"model_state_dict": {**state, "backbone.extra.weight": torch.zeros(1)}}, tmp_path / "extra.pth")
    with pytest.raises(IncompatibleWeightsError, match="unexpected key 'backbone.extra.weight'"):
        tiny(pretrained=str(tmp_path / "extra.pth"))
    del state["transformer.resblocks.0.mlp.0.weight"]
    torch.save({"model_state_dict": state}, tmp_path / "missing.pth")
    with pytest.raises(IncompatibleWeightsError, match="faformer.0.fc1.weight"):
        tiny(pretrained=str(tmp_path / "missing.pth"))


def test_stage_one_file_starts_stage_two_with_a_fresh_faformer(tmp_path):
    state = authors_state_dict(tiny(), wsgm=2, layers=1)
    stage1 = {k[len("backbone.") :]: v for k, v in state.items() if k.startswith("backbone.")}
    stage1["ln_post.weight"] = torch.ones(32)  # net_stage1's own unused LayerNorm
    torch.save({"model_state_dict": stage1}, tmp_path / "intermediate_model_best.pth")
    net = tiny(pretrained=str(tmp_path / "intermediate_model_best.pth"), stage=2)
    assert torch.equal(net.wsgm[1].up.weight, stage1["backbone.visual.transformer.WSGM_modules.1.up.weight"].float())
    assert torch.equal(net.faformer[0].fc1.bias, torch.zeros(32))  # initialised as the authors do


def test_own_state_dict_rebuilds_module_counts():
    source, target = tiny(wsgm_count=4, faformer_layers=2).eval(), tiny(wsgm_count=1, faformer_layers=1).eval()
    target.load_state_dict(source.state_dict())
    assert len(target.wsgm) == 4 and len(target.faformer) == 2
    image = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(source(image)["logit"], target(image)["logit"])


def test_tile_preprocessing_repeats_small_images_instead_of_resizing():
    image = np.random.default_rng(0).integers(0, 256, (20, 50, 3), dtype=np.uint8)
    out = build_transform(Preprocess(size=32, mode="tile"), train=False)(image=image)["image"]
    tiled = np.tile(image, (2, 1, 1))  # 40 x 50: rows repeated once, the long side left as it is
    top, left = (40 - 32) // 2, (50 - 32) // 2
    assert np.array_equal(out, tiled[top : top + 32, left : left + 32])
    big = np.random.default_rng(1).integers(0, 256, (40, 40, 3), dtype=np.uint8)
    assert np.array_equal(build_transform(Preprocess(size=32, mode="tile"))(image=big)["image"], big[4:36, 4:36])


def test_checkpoint_made_from_a_released_file_rebuilds_without_it(tmp_path):
    """The toolkit checkpoint keeps the configured counts in its hyper-parameters; its weights
    carry the released counts, and loading follows the weights (the released file is gone)."""
    from detectors.module import DetectorModule
    from inference.runtime import load_checkpoint

    released = tmp_path / "setting_1.pth"
    torch.save({"model_state_dict": authors_state_dict(tiny(), wsgm=3, layers=2)}, released)
    module = DetectorModule(net={**TINY, "pretrained": str(released)}, name="forgelens_tiny").eval()
    torch.save({"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict()}, tmp_path / "f.ckpt")
    released.unlink()
    rebuilt = load_checkpoint(tmp_path / "f.ckpt")
    assert len(rebuilt.net.wsgm) == 3 and len(rebuilt.net.faformer) == 2
    image = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(rebuilt.net(image)["logit"], module.net(image)["logit"])


def test_step_schedule_decays_per_epoch_and_optimises_trainable_parameters_only():
    from detectors.module import DetectorModule

    module = DetectorModule(
        net={**TINY, "stage": 1},
        optimizer={"name": "Adam", "lr": 5e-5},
        scheduler={"name": "step", "step_size": 2, "gamma": 0.7},
    )
    configured = module.configure_optimizers()
    scheduler = configured["lr_scheduler"]["scheduler"]
    assert isinstance(scheduler, torch.optim.lr_scheduler.StepLR) and configured["lr_scheduler"]["interval"] == "epoch"
    assert (scheduler.step_size, scheduler.gamma) == (2, 0.7)
    optimised = {id(p) for group in configured["optimizer"].param_groups for p in group["params"]}
    assert optimised == {id(p) for p in module.net.parameters() if p.requires_grad}
    assert optimised == {id(p) for p in [*module.net.wsgm.parameters(), *module.net.stage1_head.parameters()]}


@pytest.mark.parametrize("recipe, stage, lr", [("forgelens_stage1", 1, 5e-5), ("forgelens_stage2", 2, 2.5e-6)])
def test_training_recipes_compose_with_the_authors_settings(recipe, stage, lr):
    overrides = [f"experiment={recipe}", "data.manifest=/data/m.csv", "detector.net.pretrained=/w/stage1.ckpt"]
    cfg = compose_config("train", overrides)
    assert cfg.detector.net._target_ == "detectors.forgelens.ForgeLens" and cfg.detector.net.stage == stage
    assert cfg.detector.optimizer.name == "Adam" and cfg.detector.optimizer.lr == lr
    assert (cfg.detector.scheduler.name, cfg.detector.scheduler.step_size, cfg.detector.scheduler.gamma) == (
        "step",
        2,
        0.7,
    )
    assert cfg.detector.net.preprocess.mode == "tile" and cfg.data.batch_size == 16


def test_mapping_check_tool_compares_scores_through_the_released_file_path(tmp_path, capsys):
    """`python -m tools.check_mapping released`: a dump whose scores our mapping reproduces passes,
    and one whose scores differ fails (exit status 1)."""
    from tools.check_mapping import check_dump, main

    state = authors_state_dict(tiny(), wsgm=2, layers=1)
    config = {**TINY, "clip_pretrained": None}
    released = tmp_path / "released.pth"
    torch.save({"model_state_dict": state}, released)
    image = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        scores = torch.sigmoid(build_detector({**config, "pretrained": str(released)}).eval()(image)["logit"])
    dump = {"state_dict": state, "entry": "model_state_dict", "input": image, "outputs": scores, "detector": config}
    torch.save(dump, tmp_path / "good.pt")
    torch.save({**dump, "outputs": scores + 0.01}, tmp_path / "bad.pt")
    assert check_dump("released", tmp_path / "good.pt")["score"] <= 1e-6
    assert main(["released", str(tmp_path / "good.pt")]) == 0
    assert main(["released", str(tmp_path / "good.pt"), str(tmp_path / "bad.pt")]) == 1
    out = capsys.readouterr().out
    assert "FAIL: bad.pt: largest checked difference 1.00e-02 (score)" in out
