"""The learned pair detector (`pairnet`, detectors/pair_net.py): two panels in, a pair logit, five
THEMIS operation logits and a mask per panel out; its loss, gradients, pair contract (`describe`,
`predict_pair`), honest weights loading and ONNX export with two inputs."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from detectors.blocks.weights import MissingWeightsError, architecture_only
from detectors.registry import create_detector, create_module, detector_class, list_detectors
from evaluation.protocols.duplication import CMO_OPERATIONS, operations_from_probabilities
from exporting.onnx_export import export_onnx

SIZE = 64


def pair_batch(n: int = 2) -> dict[str, torch.Tensor]:
    """A duplicated pair (B = A mirrored, whole panels shared, a flip) and a pair sharing nothing."""
    generator = torch.Generator().manual_seed(0)
    image_a = torch.rand(n, 3, SIZE, SIZE, generator=generator)
    image_b = torch.rand(n, 3, SIZE, SIZE, generator=generator)
    image_b[0] = image_a[0].flip(-1)
    operations = torch.zeros(n, len(CMO_OPERATIONS))
    operations[0, CMO_OPERATIONS.index("flip")] = 1
    masks = torch.zeros(n, 1, SIZE, SIZE)
    masks[0] = 1
    return {
        "image_a": image_a,
        "image_b": image_b,
        "label": torch.tensor([1] + [0] * (n - 1)),
        "operations": operations,
        "has_operations": torch.tensor([True] + [False] * (n - 1)),
        "mask_a": masks,
        "mask_b": masks.clone(),
    }


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    return create_detector("pairnet_tiny")


def test_the_registry_lists_it_as_a_trainable_pair_detector():
    assert "pairnet_tiny" in list_detectors(tiny=True, gradients=True)
    assert detector_class("pairnet").is_pair_detector and not detector_class("pairnet").is_localizer


def test_forward_gives_a_pair_logit_five_operation_logits_and_a_mask_per_panel(net):
    outputs = net(*net.batch_inputs(pair_batch(3)))
    assert outputs["logit"].shape == (3,)
    assert outputs["operation_logit"].shape == (3, len(CMO_OPERATIONS))
    assert outputs["mask_logit_a"].shape == outputs["mask_logit_b"].shape == (3, 1, SIZE, SIZE)
    assert all(torch.isfinite(v).all() for v in outputs.values())


def test_the_loss_rewards_the_truth_and_ignores_operations_of_pairs_without_duplication(net):
    batch = pair_batch()
    right = {
        "logit": torch.tensor([8.0, -8.0]),
        "operation_logit": (batch["operations"] * 16 - 8),
        "mask_logit_a": batch["mask_a"] * 16 - 8,
        "mask_logit_b": batch["mask_b"] * 16 - 8,
    }
    wrong = {key: -value for key, value in right.items()}
    assert net.loss(right, batch) < 0.05 < 5 < net.loss(wrong, batch)
    changed = {**right, "operation_logit": right["operation_logit"].clone()}
    changed["operation_logit"][1] = 8.0  # the pair that shares nothing has no operations to learn
    assert net.loss(changed, batch) == pytest.approx(float(net.loss(right, batch)))


def test_every_trainable_parameter_receives_a_gradient_after_one_step():
    torch.manual_seed(0)
    net = create_detector("pairnet_tiny")
    batch = pair_batch()

    def without_gradient() -> list[str]:
        net.zero_grad(set_to_none=True)
        net.loss(net(*net.batch_inputs(batch)), batch).backward()
        return [n for n, p in net.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]

    if without_gradient():  # timm's zero-initialized last batch-norm scales open after one step
        torch.optim.SGD(net.parameters(), lr=0.1).step()
    assert without_gradient() == []


def test_operations_are_the_confident_ones_and_direct_reuse_when_none_is():
    assert operations_from_probabilities(np.array([0.9, 0.1, 0.2, 0.3, 0.4])) == ["direct"]
    assert operations_from_probabilities(np.array([0.9, 0.1, 0.7, 0.8, 0.1])) == ["flip", "rotation"]


def test_predict_pair_gives_masks_at_each_panels_own_size_and_nothing_below_the_threshold(net):
    net.eval()
    rng = np.random.default_rng(0)
    a = rng.integers(0, 255, (90, 130, 3), dtype=np.uint8)
    b = np.ascontiguousarray(a[:, ::-1])
    flagged = net.predict_pair(net.describe(a), net.describe(b), threshold=0.0)
    assert flagged.duplicated and flagged.operations and flagged.method == "pairnet"
    assert flagged.mask_a.shape == (90, 130) and flagged.mask_b.shape == (90, 130)
    passed = net.predict_pair(net.describe(a), net.describe(b), threshold=1.01)
    assert not passed.duplicated and passed.operations == [] and not passed.mask_a.any() and not passed.mask_b.any()
    assert passed.score == pytest.approx(flagged.score) and passed.reason == "score below threshold"


def test_pretrained_weights_that_are_not_there_are_an_error_never_random_weights(tmp_path):
    missing = str(tmp_path / "resnet50.safetensors")
    with pytest.raises(MissingWeightsError, match="does not exist"):
        create_detector("pairnet", [f"net.pretrained={missing}"])
    with architecture_only():  # rebuilding from a checkpoint, whose weights replace the encoder's
        assert create_detector("pairnet", [f"net.pretrained={missing}"]).encoder is not None


def test_a_square_resize_is_required():
    with pytest.raises(ValueError, match="preprocess.mode must be resize"):
        create_detector("pairnet_tiny", ["net.preprocess.mode=center_crop"])


@pytest.mark.slow  # the dynamo exporter takes minutes on two busy cores
def test_onnx_export_takes_two_images_and_reproduces_pytorch(tmp_path):
    torch.manual_seed(0)
    module = create_module("pairnet_tiny")
    module.net.train()
    with torch.no_grad():  # non-trivial batch-norm statistics
        module.net(*module.net.batch_inputs(pair_batch(4)))
    module.threshold.fill_(0.42)
    report = export_onnx(module, tmp_path / "pair.onnx")
    assert report.outputs == ["score", "operations", "mask_a", "mask_b"] and report.max_score_difference <= 1e-4
    model = onnx.load(str(report.path))
    meta = {p.key: p.value for p in model.metadata_props}
    assert [i.name for i in model.graph.input] == ["image_a", "image_b"]
    assert float(meta["threshold"]) == pytest.approx(0.42) and json.loads(meta["operations"]) == list(CMO_OPERATIONS)
    batch = pair_batch(5)  # a batch size the graph was not traced with
    session = ort.InferenceSession(str(report.path), providers=["CPUExecutionProvider"])
    produced = session.run(None, {"image_a": batch["image_a"].numpy(), "image_b": batch["image_b"].numpy()})
    module.eval()
    with torch.inference_mode():
        outputs = module.net(batch["image_a"], batch["image_b"])
    expected = [outputs["logit"], outputs["operation_logit"], outputs["mask_logit_a"], outputs["mask_logit_b"]]
    for got, logit in zip(produced, expected):
        np.testing.assert_allclose(got, torch.sigmoid(logit).numpy(), rtol=0, atol=1e-4)


def test_export_py_refuses_variants_a_pair_graph_does_not_have(tmp_path):
    from detectors.training_free import save_checkpoint
    from export import export
    from exporting.onnx_export import ExportError
    from tests.helpers import compose_config

    checkpoint = save_checkpoint(create_module("pairnet_tiny"), tmp_path / "pair.ckpt", None)
    with pytest.raises(ExportError, match="pair detector exports as fp32"):
        export(compose_config("export", [f"model={checkpoint}", f"output={tmp_path / 'p.onnx'}", "precision=fp16"]))
    assert not (tmp_path / "p.onnx").exists()
