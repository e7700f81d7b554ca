"""The recipes in configs/experiment compose with train.yaml and build their (tiny) networks."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from detectors.build import build_detector
from tests.helpers import CONFIGS, compose_config

RECIPES = {  # recipe: (detector, data override, GPU precision, a tiny detector to build on CPU)
    "univfd": ("clip_linear", "data.root=/data/tree", "16-mixed", "clip_linear_tiny"),
    "npr": ("npr", "data.root=/data/tree", "16-mixed", None),
    "clip_freq": ("clip_freq", "data.manifest=/data/manifest.csv", "bf16-mixed", "clip_freq_tiny"),
    "effort": ("effort", "data.manifest=/data/manifest.csv", "bf16-mixed", "effort_tiny"),
    "cospy_semantic": ("cospy", "data.manifest=/data/manifest.csv", "bf16-mixed", "cospy_tiny"),
    "cospy_artifact": ("cospy", "data.manifest=/data/manifest.csv", "bf16-mixed", "cospy_tiny"),
    "cospy_fusion": ("cospy", "data.manifest=/data/manifest.csv", "bf16-mixed", "cospy_tiny"),
}
PREPROCESS_MODE = {
    "effort": "resize",
    "cospy_semantic": "resize_crop",
    "cospy_artifact": "resize_crop",
    "cospy_fusion": "resize_crop",
}


def compose_train(overrides: list[str]):
    return compose_config("train", overrides)


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_recipe_composes_for_gpus(recipe):
    detector, data, precision, _ = RECIPES[recipe]
    assert (CONFIGS / "experiment" / f"{recipe}.yaml").read_text().startswith("# @package _global_")
    cfg = compose_train([f"experiment={recipe}", data])
    assert cfg.detector.name == detector  # the recipe picks its detector (a variant would share the class)
    assert cfg.trainer.precision == precision and cfg.trainer.strategy == "ddp"
    assert cfg.detector.net.preprocess.mode == PREPROCESS_MODE.get(recipe, "center_crop")
    if recipe in ("npr", "clip_freq", "cospy_artifact", "cospy_fusion"):
        assert cfg.data.augment.blur == 0.0  # artifact branches must not be trained on blurred traces
    if recipe == "effort":
        assert cfg.detector.net.residual_rank == 1 and cfg.detector.optimizer.lr == 2.0e-4
    if recipe.startswith("cospy_"):
        assert cfg.detector.net.stage == recipe.split("_")[1]
        assert cfg.detector.optimizer.lr == (0.1 if recipe == "cospy_fusion" else 1.0e-4)


@pytest.mark.parametrize("recipe", ["univfd", "clip_freq"])
def test_recipe_runs_on_cpu_with_a_tiny_detector(recipe):
    _, data, _, tiny = RECIPES[recipe]
    cfg = compose_train([f"experiment={recipe}", data, f"detector={tiny}", "trainer=cpu"])
    assert cfg.trainer.accelerator == "cpu"
    assert OmegaConf.is_dict(cfg.detector.net.model) and cfg.detector.net.pretrained is None  # the tiny tower
    net = build_detector(cfg.detector.net)  # the recipe's settings on top of the tiny architecture
    assert net.preprocess.size == cfg.detector.net.preprocess.size
    adapter = net.encoder.adapter if hasattr(net, "encoder") else net.semantic.adapter
    assert adapter == "frozen"


@pytest.mark.parametrize("recipe", ["effort", "cospy_semantic", "cospy_artifact", "cospy_fusion"])
def test_authors_recipes_build_their_tiny_detector_on_cpu(recipe):
    _, data, _, tiny = RECIPES[recipe]
    cfg = compose_train([f"experiment={recipe}", data, f"detector={tiny}", "trainer=cpu"])
    assert OmegaConf.is_dict(cfg.detector.net.clip) and cfg.detector.net.pretrained is None  # the tiny tower
    net = build_detector(cfg.detector.net)
    assert net.preprocess.size == cfg.detector.net.preprocess.size
    if recipe.startswith("cospy_"):
        trainable = {n.split(".")[0] for n, p in net.named_parameters() if p.requires_grad}
        assert (
            trainable
            == {
                "cospy_semantic": {"semantic_head"},
                "cospy_artifact": {"artifact", "artifact_head"},
                "cospy_fusion": {"fusion"},
            }[recipe]
        )
    else:
        assert net.parameter_counts["adapted_projections"] == 8


@pytest.mark.parametrize(
    ("recipe", "needed"),
    [
        ("forgelens_stage2", ["detector.net.pretrained=/w/stage1.ckpt"]),
        ("cospy_fusion", ["detector.net.init_semantic=/w/sem.ckpt", "detector.net.init_artifact=/w/art.ckpt"]),
    ],
)
def test_a_later_stage_recipe_without_its_earlier_stages_files_is_refused(recipe, needed):
    """It trained on random modules the recipe freezes (pretrained: ??? does not replace a null)."""
    from datamodules.records import LayoutError
    from detectors.run_config import check_required

    common = [f"experiment={recipe}", "data.manifest=/data/m.csv"]
    for given in range(len(needed)):
        with pytest.raises(LayoutError, match=f"set {needed[given].split('=')[0]}=<path>"):
            check_required(compose_train([*common, *needed[:given]]))
    check_required(compose_train([*common, *needed]))
    check_required(compose_train([*common, "ckpt_path=/runs/x/last.ckpt"]))  # a resume has them in its checkpoint


def test_cospy_alone_is_refused_where_its_fusion_stage_would_fuse_two_random_branches():
    from datamodules.records import LayoutError
    from detectors.run_config import check_required

    for detector in ("cospy", "cospy_tiny"):  # the default stage is fusion
        with pytest.raises(LayoutError, match="set detector.net.init_semantic=<path>, detector.net.init_artifact"):
            check_required(compose_train([f"detector={detector}"]))
    check_required(compose_train(["detector=cospy_tiny", "detector.net.init_semantic=/w/sem.ckpt"]))
    check_required(compose_train(["detector=cospy_tiny", "detector.net.stage=semantic"]))  # trains a branch
    check_required(compose_train(["detector=cospy", "detector.net.pretrained=/w/authors"]))
