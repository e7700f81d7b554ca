"""trufor: the fingerprint extractor, CMX fusion, the detection head's statistics, phases, and the
published-weight mapping (on a synthetic state dict carrying the published names and shapes)."""

from __future__ import annotations

import math

import pytest
import torch

from detectors.blocks.cmx import ConvStem, DualMiTEncoder, Fuse, Rectify, build_mit, weighted_statistics
from detectors.blocks.noiseprint import NoiseFingerprint
from detectors.blocks.weights import MissingWeightsError
from detectors.build import build_detector
from detectors.registry import create_detector, create_module, net_config
from detectors.trufor import TRAINED_PARTS, TruFor
from detectors.trufor_weights import map_published_state_dict, to_published_state_dict
from tests.helpers import compose_config

TINY_NET = net_config("trufor_tiny")


def tiny_net(**overrides) -> TruFor:
    return build_detector({**TINY_NET, **overrides})


def tiny_published_layout(**overrides) -> TruFor:
    """The tiny sizes without the convolutional stem, which the published model does not have."""
    return tiny_net(encoder={**TINY_NET["encoder"], "stem_width": None}, **overrides)


def count(module: torch.nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


# ------------------------------------------------------------------ fingerprint extractor
@pytest.mark.parametrize("size", [(33, 47), (16, 16)])
def test_fingerprint_keeps_the_input_size_with_one_channel(size):
    extractor = NoiseFingerprint(depth=4, width=8).eval()
    assert extractor(torch.rand(2, 3, *size)).shape == (2, 1, *size)


def test_fingerprint_receptive_field_is_the_stack_of_3x3_convolutions():
    torch.manual_seed(0)
    extractor = NoiseFingerprint(depth=4, width=16).eval()
    image = torch.rand(1, 3, 41, 41, requires_grad=True)
    extractor(image)[0, 0, 20, 20].backward()
    rows, cols = torch.nonzero(image.grad.abs().sum(1)[0], as_tuple=True)
    assert extractor.receptive_field == 9
    assert int(rows.max() - rows.min() + 1) == extractor.receptive_field
    assert int(cols.max() - cols.min() + 1) == extractor.receptive_field


def test_fingerprint_layout_matches_the_published_dncnn():
    extractor = NoiseFingerprint()  # 17 layers, 64 channels
    convs = [m for m in extractor.layers if isinstance(m, torch.nn.Conv2d)]
    norms = [m for m in extractor.layers if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(convs) == 17 and len(norms) == 15
    assert convs[0].bias is not None and convs[-1].bias is not None and convs[1].bias is None
    assert convs[-1].out_channels == 1 and not isinstance(extractor.layers[-1], torch.nn.ReLU)


# ------------------------------------------------------------------ fusion
def test_rectify_adds_each_stream_to_the_other():
    torch.manual_seed(0)
    rectify = Rectify(8)
    rgb, noise = torch.rand(2, 8, 6, 5), torch.rand(2, 8, 6, 5)
    rgb_out, noise_out = rectify(rgb, noise)
    assert rgb_out.shape == rgb.shape and noise_out.shape == noise.shape
    rgb_alone, noise_alone = rectify(rgb, torch.zeros_like(noise))
    assert torch.equal(rgb_alone, rgb)  # nothing to add from a silent noise stream
    assert not torch.allclose(rgb_out, rgb_alone)
    assert not torch.allclose(noise_out, rectify(torch.zeros_like(rgb), noise)[1])


def test_fuse_output_depends_on_both_streams():
    torch.manual_seed(0)
    fuse = Fuse(16, num_heads=2).eval()
    rgb, noise = torch.randn(2, 16, 5, 7), torch.randn(2, 16, 5, 7)
    fused = fuse(rgb, noise)
    assert fused.shape == (2, 16, 5, 7)
    assert (fused - fuse(torch.zeros_like(rgb), noise)).abs().max() > 1e-3
    assert (fused - fuse(rgb, torch.zeros_like(noise))).abs().max() > 1e-3


def test_dual_encoder_stage_outputs_and_noise_stream_reaches_every_stage():
    torch.manual_seed(0)
    sizes = {
        "embed_dims": (8, 16, 24, 32),
        "depths": (1, 1, 1, 1),
        "num_heads": (1, 2, 2, 4),
        "sr_ratios": (8, 4, 2, 1),
    }
    encoder = DualMiTEncoder(build_mit(**sizes), build_mit(**sizes), sizes["embed_dims"], sizes["num_heads"]).eval()
    rgb, noise = torch.rand(1, 3, 64, 96), torch.rand(1, 3, 64, 96)
    features = encoder(rgb, noise)
    assert [tuple(f.shape[1:]) for f in features] == [(8, 16, 24), (16, 8, 12), (24, 4, 6), (32, 2, 3)]
    changed = encoder(rgb, torch.zeros_like(noise))
    assert all((a - b).abs().max() > 1e-4 for a, b in zip(features, changed))


# ------------------------------------------------------------------ detection head statistics
def test_statistics_of_a_constant_map_are_the_constant_and_its_square():
    stats = weighted_statistics(torch.full((2, 1, 4, 6), 0.7))
    assert torch.allclose(stats, torch.tensor([[0.7, 0.7, 0.7, 0.49]] * 2), atol=1e-6)


def test_statistics_of_one_hot_pixel():
    value, pixels = 3.0, 4 * 6
    hot = torch.zeros(1, 1, 4, 6)
    hot[0, 0, 2, 3] = value
    soft_min, soft_max, mean, mean_square = weighted_statistics(hot)[0].tolist()
    assert soft_max == pytest.approx(math.log((pixels - 1 + math.exp(value)) / pixels), abs=1e-5)
    assert soft_min == pytest.approx(-math.log((pixels - 1 + math.exp(-value)) / pixels), abs=1e-5)
    assert mean == pytest.approx(value / pixels, abs=1e-6)
    assert mean_square == pytest.approx(value**2 / pixels, abs=1e-6)
    assert 0 < soft_min < mean < soft_max < value  # the hot pixel lifts the soft-max most


def test_statistics_follow_the_weights():
    values = torch.arange(6.0).reshape(1, 1, 2, 3)
    log_weight = torch.full((1, 1, 2, 3), -50.0)
    log_weight[0, 0, 1, 2] = 50.0  # all the weight on the pixel of value 5
    assert torch.allclose(weighted_statistics(values, log_weight), torch.tensor([[5.0, 5.0, 5.0, 25.0]]), atol=1e-4)


# ------------------------------------------------------------------ the network and its phases
def test_tiny_trufor_outputs_at_any_size_and_score_from_its_head():
    torch.manual_seed(0)
    net = tiny_net().eval()
    with torch.no_grad():
        outputs = net(torch.rand(2, 3, 45, 70))
    for key in ("mask_logit", "confidence_logit", "fingerprint"):
        assert outputs[key].shape == (2, 1, 45, 70)
    assert outputs["logit"].shape == (2,)
    confidence, mask = outputs["confidence_logit"], outputs["mask_logit"]
    statistics = torch.cat(
        (weighted_statistics(confidence), weighted_statistics(mask, torch.nn.functional.logsigmoid(confidence))), 1
    )
    assert torch.allclose(outputs["logit"], net.detection_head(statistics).reshape(-1), atol=1e-6)


def test_the_stem_works_at_full_resolution_before_the_first_patch_embedding():
    torch.manual_seed(0)
    stream = tiny_net().encoder.rgb
    stem, embed = stream.patch_embed1.proj
    assert isinstance(stem, ConvStem) and embed.in_channels == 16 and embed.stride == (4, 4)
    image = torch.rand(1, 3, 40, 40)
    assert stem(image).shape == (1, 16, 40, 40)
    assert stream.patch_embed1(image).shape == (1, 16, 10, 10)  # stride 4 comes after the stem
    without = tiny_published_layout().encoder.rgb.patch_embed1.proj
    assert isinstance(without, torch.nn.Conv2d) and without.in_channels == 3


@pytest.mark.parametrize("phase", ["fingerprint", "localize", "detect", "full"])
def test_each_phase_trains_exactly_its_parts(phase):
    net = tiny_net(phase=phase)
    expected = sum(count(getattr(net, part)) for part in TRAINED_PARTS[phase])
    assert count(net, trainable_only=True) == expected > 0
    net.train()
    frozen = [part for part in TRAINED_PARTS["full"] if part not in TRAINED_PARTS[phase]]
    assert all(not getattr(net, part).training for part in frozen)  # frozen BatchNorm statistics stay put


def test_phase_losses_reach_only_the_trained_parts():
    torch.manual_seed(0)
    batch = {"image": torch.rand(2, 3, 64, 64), "label": torch.tensor([0, 1]), "mask": torch.zeros(2, 1, 64, 64)}
    batch["mask"][1, :, 16:48, 16:48] = 1
    for phase in ("localize", "detect"):
        net = tiny_net(phase=phase).train()
        net.loss(net(batch["image"]), batch).backward()
        with_grad = {name.split(".")[0] for name, p in net.named_parameters() if p.grad is not None}
        assert with_grad == set(TRAINED_PARTS[phase])


def test_no_fingerprint_ablation_feeds_rgb_to_the_second_stream():
    torch.manual_seed(0)
    net = tiny_net(noise_input="rgb").eval()
    image = torch.rand(1, 3, 32, 32)
    with torch.no_grad():
        before = net(image)["mask_logit"]
        torch.nn.init.normal_(net.fingerprint.layers[0].weight)
        after = net(image)["mask_logit"]
    assert torch.equal(before, after)


def test_unknown_phase_is_refused():
    with pytest.raises(ValueError, match="phase"):
        tiny_net(phase="everything")


# ------------------------------------------------------------------ published weights
PUBLISHED_SHAPES = {  # from the authors' released model (MiT-B2, 17-layer DnCNN, decoder 512)
    "dncnn.0.weight": (64, 3, 3, 3),
    "dncnn.47.bias": (1,),
    "backbone.extra_block3.5.attn.sr.weight": (320, 320, 2, 2),
    "backbone.FRMs.0.channel_weights.mlp.0.weight": (256, 256),
    "backbone.FFMs.2.cross.cross_attn.kv2.weight": (640, 320),
    "backbone.FFMs.3.channel_emb.channel_embed.4.running_var": (512,),
    "decode_head.linear_c4.proj.weight": (512, 512),
    "decode_head_conf.linear_pred.weight": (1, 512, 1, 1),
    "detection.3.weight": (1, 128),
}
PUBLISHED_KEY_COUNT = 952


def test_published_names_and_shapes_round_trip_through_the_mapping():
    net = create_detector("trufor", ["net.encoder_weights=null"])
    ours = net.state_dict()
    published = to_published_state_dict(ours)
    assert len(published) == PUBLISHED_KEY_COUNT
    assert {k: tuple(published[k].shape) for k in PUBLISHED_SHAPES} == PUBLISHED_SHAPES
    mapped = map_published_state_dict(published)
    assert mapped.keys() == ours.keys()
    assert all(torch.equal(mapped[k], ours[k]) for k in ours)


def test_published_checkpoint_loads_and_reproduces_the_model(tmp_path):
    torch.manual_seed(0)
    source = tiny_published_layout().eval()
    path = tmp_path / "trufor.pth.tar"
    torch.save({"state_dict": to_published_state_dict(source.state_dict())}, path)
    loaded = tiny_published_layout(pretrained=str(path)).eval()
    image = torch.rand(1, 3, 40, 40)
    with torch.no_grad():
        expected, actual = source(image), loaded(image)
    assert all(torch.equal(expected[k], actual[k]) for k in ("logit", "mask_logit", "confidence_logit"))


def test_published_checkpoint_with_unknown_keys_is_refused(tmp_path):
    state = to_published_state_dict(tiny_published_layout().state_dict())
    state["aux_head.weight"] = torch.zeros(1)
    path = tmp_path / "other.pth"
    torch.save({"state_dict": state}, path)
    with pytest.raises(ValueError, match="no mapping"):
        tiny_published_layout(pretrained=str(path))


def test_missing_published_file_says_so():
    with pytest.raises(MissingWeightsError, match="does not exist"):
        tiny_published_layout(pretrained="/nonexistent/trufor.pth.tar")


def test_a_convolutional_stem_cannot_take_published_weights():
    with pytest.raises(ValueError, match="stem_width"):
        tiny_net(pretrained="/some/trufor.pth.tar")
    with pytest.raises(ValueError, match="stem_width"):
        tiny_net(encoder_weights="imagenet")


# ------------------------------------------------------------------ export
@pytest.mark.slow  # the dynamo ONNX export of two MiT streams takes about a minute on a shared CPU
def test_export_reproduces_score_mask_and_confidence_at_two_sizes(tmp_path):
    import numpy as np

    ort = pytest.importorskip("onnxruntime")
    from exporting.onnx_export import export_onnx

    torch.manual_seed(0)
    module = create_module("trufor_tiny").eval()
    report = export_onnx(module, tmp_path / "trufor_tiny.onnx")
    assert report.outputs == ["score", "mask", "confidence"]
    session = ort.InferenceSession(str(report.path), providers=["CPUExecutionProvider"])
    for size in ((64, 64), (72, 104)):
        image = torch.rand(2, 3, *size)
        with torch.no_grad():
            outputs = module.net(image)
        score, mask, confidence = session.run(["score", "mask", "confidence"], {"image": image.numpy()})
        assert mask.shape == confidence.shape == (2, 1, *size)
        assert np.abs(score - torch.sigmoid(outputs["logit"]).numpy()).max() <= 1e-4
        assert np.abs(mask - torch.sigmoid(outputs["mask_logit"]).numpy()).max() <= 1e-3
        assert np.abs(confidence - torch.sigmoid(outputs["confidence_logit"]).numpy()).max() <= 1e-3


# ------------------------------------------------------------------ phases chained by checkpoints
def save_phase(net: TruFor, path) -> None:
    torch.save({"state_dict": {f"net.{k}": v for k, v in net.state_dict().items()}}, path)


def same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_each_phase_takes_what_earlier_phases_trained_from_the_previous_checkpoint(tmp_path):
    torch.manual_seed(0)
    first = tiny_net(phase="fingerprint")
    save_phase(first, tmp_path / "phase1.ckpt")
    torch.manual_seed(1)
    second = tiny_net(phase="localize", init_from=str(tmp_path / "phase1.ckpt"))
    assert same(second.fingerprint, first.fingerprint) and not same(second.encoder, first.encoder)
    save_phase(second, tmp_path / "phase2.ckpt")
    torch.manual_seed(2)
    third = tiny_net(phase="detect", init_from=str(tmp_path / "phase2.ckpt"))
    for part in ("fingerprint", "encoder", "anomaly_decoder"):
        assert same(getattr(third, part), getattr(second, part))
    assert not same(third.confidence_decoder, second.confidence_decoder)


@pytest.mark.parametrize(
    "recipe,phase",
    [("trufor_fingerprint", "fingerprint"), ("trufor_localize", "localize"), ("trufor_detect", "detect")],
)
def test_phase_recipes_compose_and_build_the_tiny_network(recipe, phase, tmp_path):
    torch.manual_seed(0)
    save_phase(tiny_net(), tmp_path / "previous.ckpt")
    overrides = [f"experiment={recipe}", "detector=trufor_tiny", "trainer=cpu"]
    if phase != "fingerprint":
        overrides += ["data.root=/data/forgeries", f"detector.net.init_from={tmp_path / 'previous.ckpt'}"]
    cfg = compose_config("train", overrides)
    assert cfg.detector.net.phase == phase
    net = build_detector(cfg.detector.net)
    assert count(net, trainable_only=True) == sum(count(getattr(net, p)) for p in TRAINED_PARTS[phase])
    if phase == "fingerprint":
        assert cfg.data._target_.endswith("ChainPatchDataModule")
        assert (
            cfg.callbacks.model_checkpoint.monitor == "val/chain_auroc" and cfg.callbacks.model_checkpoint.mode == "max"
        )
    else:
        assert cfg.detector.optimizer.name == "SGD" and cfg.detector.optimizer.lr == 0.005
        assert cfg.detector.optimizer.momentum == 0.9 and cfg.detector.optimizer.weight_decay == 5e-4


def test_fingerprint_phase_reports_chain_separation_on_evaluation_batches_and_only_there():
    torch.manual_seed(0)
    image = torch.rand(4, 3, 64, 64)
    batch = {"chain": torch.tensor([0, 1, 0, 1]), "photo": torch.tensor([0, 0, 1, 1])}
    fingerprint_phase = tiny_net(phase="fingerprint", fingerprint_patch=16).eval()
    with torch.no_grad():
        figures = fingerprint_phase.evaluation_metrics(fingerprint_phase(image), batch)
    assert set(figures) == {"chain_auroc"} and 0.0 <= figures["chain_auroc"] <= 1.0
    localize_phase = tiny_net(phase="localize").eval()
    with torch.no_grad():
        assert localize_phase.evaluation_metrics(localize_phase(image), batch) == {}


def test_the_full_size_fingerprint_recipe_builds_its_adam_optimizer():
    """Its Adam inherited trufor's SGD momentum: the documented command ended in a TypeError."""
    from omegaconf import OmegaConf

    from detectors.module import DetectorModule

    recipe = compose_config("train", ["experiment=trufor_fingerprint"])  # detector=trufor, full size
    tiny = compose_config("train", ["experiment=trufor_fingerprint", "detector=trufor_tiny"])
    module = DetectorModule(
        net=OmegaConf.to_container(tiny.detector.net, resolve=True),
        optimizer=OmegaConf.to_container(recipe.detector.optimizer, resolve=True),
        scheduler={"name": "step", "step_size": 1, "gamma": 0.5},
    )
    optimizer = module.configure_optimizers()["optimizer"]
    assert isinstance(optimizer, torch.optim.Adam) and optimizer.defaults["lr"] == recipe.detector.optimizer.lr
