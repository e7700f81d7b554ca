"""A short CPU training run of every localizer beats the trivial maps on held-out data.

Two data sets. Bright pasted squares (fast, every run). And copy-move and splicing forgeries made
by the toolkit's own generators from the bundled photographs at 64 px, held out by source photo
(slow): 16 photos give 474 copy-moves and 264 splices for training, 6 others 139 and 66 for scoring.

The generated forgeries carry processing traces, set through the generators' options: a copy-move
copy is scaled by U(0.8, 1.25), rotated by U(-30, 30) degrees and resampled bilinearly; a splice
donor first goes through one of the non-genuine processing chains of `datamodules.chains`
(JPEG 90/75/60, resampling, median, bilateral, blur). With the seed's recipe (a purely translated
copy, a donor with its host's history) none of the tiny variants beat the whole-image map on
splicing after 200 steps, and on copy-move by 0.04 at most (held-out pixel F1 vs whole-image map,
copy-move / splicing: seg_tiny 0.023 / 0.117, mvss_tiny 0.159 / 0.082, trufor_tiny before its stem
0.184 / 0.108, against 0.144 / 0.228): what is left to learn there is matching and semantics, not a
local trace.

Recipe: one model per localizer on both operations mixed, 600 Adam steps of 16 panels, learning rate
3e-3 decayed to 0 by a cosine (a steadier end point: with a constant rate the figures moved by up to
0.04 between neighbouring checkpoints); for trufor_tiny, whose encoder is a transformer, the rate
first warms up linearly over 5 % of the steps (train.py's schedule, `warmup_cosine`). On one thread:
the float summation order, and so the trajectory, changes with the thread count, so the test pins it
and a run is reproducible on a machine. Measured (held-out pixel F1, copy-move then splicing;
whole-image map 0.163 and 0.259, all-zero 0; torch 2.14, the other core busy), seed 0 (the test's):
seg_tiny 0.296 and 0.393, mvss_tiny 0.267 and 0.419, trufor_tiny 0.408 and 0.560; seed 1 (another
initialization and batch order): seg_tiny 0.329 and 0.507, mvss_tiny 0.269 and 0.424, trufor_tiny
0.363 and 0.470. On two threads trufor_tiny gave 0.410 / 0.429 (seed 0) and 0.363 / 0.496 (seed 1).
The margin, 0.05 above the better trivial map, leaves at least 0.05 of room in every case at seed 0
on one thread, where it is asserted (the closest: mvss_tiny on copy-move, 0.054). The warm-up is for
trufor_tiny only: in the test's earlier formula (which divided by the warm-up length) it helped
seg_tiny too (0.346 / 0.495 at seed 0) but cost mvss_tiny on copy-move (0.262 / 0.228 at seeds 0 /
1); with its stem trufor_tiny needs it less (without: 0.423 / 0.536 and 0.330 / 0.473).

trufor_tiny clears the margin on copy-move because of the convolutional stem in front of each MiT
stream (`detectors.blocks.cmx.ConvStem`). Without it, it fell short at one seed or thread count in
every setting tried (0.17-0.27 against 0.163 + 0.05; pixel AUROC 0.69-0.79): MiT's first step, a
linear 7 x 7 convolution at stride 4 followed by a per-token LayerNorm, passes a resampled copy's
smoothing on only as an aliased linear mix whose amplitude the norm removes. The README's
learning-check section lists the levers tried before the stem.

The trivial maps are the all-zero map (pixel F1 0 on every manipulated image) and the whole-image
map (pixel F1 2a / (1 + a) for a region covering a fraction a of the frame). Pixel F1 is per
manipulated image at probability 0.5, averaged (the toolkit's `pixel_f1`). Localizers are the
registry's tiny variants (`list_detectors(tiny=True, localizer=True)`).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from datamodules.chains import DEFAULT_CHAINS
from detectors.module import warmup_cosine
from detectors.registry import create_detector, detector_class, detector_config, list_detectors
from evaluation import pixel_metrics
from synthesis.embedded import bundled_photo_paths
from tests.localization_helpers import SquaresDataset, generated_forgeries

# the training-free localizers learn nothing by gradient steps (tests/unit/detectors/test_training_free.py);
# evidence_tiny learns corrections to their maps, starting from the maps' sum, and these checks'
# images (bright squares on uniform noise, 64 px panels) carry no trace the maps see: in 30 steps
# it stays at pixel F1 0 on the squares. What it reaches on the embedded set is measured by
# benchmarks/localization_default.py (docs/guides/localizers.md).
LOCALIZERS = [
    name
    for name in list_detectors(tiny=True, localizer=True)
    if not getattr(detector_class(name), "fit_without_gradients", False) and name != "evidence_tiny"
]
MARGIN = 0.10  # pixel F1 above the better of the two trivial maps


def train_briefly(
    name: str,
    samples: list[dict],
    steps: int,
    batch_size: int,
    lr: float,
    seed: int = 0,
    cosine: bool = False,
    warmup: float = 0.0,
) -> torch.nn.Module:
    """`steps` of Adam on random batches of `samples`; `seed` fixes the initialization and the batches;
    `cosine` decays the learning rate to 0 over the run (a steadier end point than a constant rate),
    after a linear warm-up over the first `warmup` fraction of the steps."""
    torch.manual_seed(seed)
    net = create_detector(name)
    optimizer = torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=lr)
    rate = functools.partial(warmup_cosine, total=steps, warmup=int(warmup * steps))  # train.py's schedule
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, rate) if cosine else None
    rng = np.random.default_rng(seed)
    net.train()
    for _ in range(steps):
        chosen = rng.choice(len(samples), batch_size, replace=False)
        batch = {
            key: torch.stack([torch.as_tensor(samples[i][key]) for i in chosen])
            for key in ("image", "mask", "edge", "label")
        }
        loss = net.loss(net(batch["image"]), batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if schedule is not None:
            schedule.step()
    return net.eval()


def f1_against_trivial_maps(net: torch.nn.Module, held_out: list[dict]) -> tuple[float, float, float]:
    """(model pixel F1, all-zero map pixel F1, whole-image map pixel F1) on held-out samples."""
    with torch.no_grad():
        probs = torch.sigmoid(net(torch.stack([s["image"] for s in held_out]))["mask_logit"])[:, 0].numpy()
    masks = [s["mask"][0].numpy() if s["label"] else None for s in held_out]
    scores = [pixel_metrics(masks, maps)["pixel_f1"] for maps in (probs, np.zeros_like(probs), np.ones_like(probs))]
    return tuple(scores)


@pytest.mark.slow  # a learning check: 30 training steps per localizer (10 s to a minute each on 2 cores)
@pytest.mark.parametrize("name", LOCALIZERS)
def test_a_few_steps_find_pasted_bright_regions(name):
    """Regions pasted with a brightness offset (a splice from a brighter source), held out by seed."""
    # the crop size the tiny variant trains on; 64 px for those that take each image whole
    size = int(detector_config(name).net.preprocess.size or 64)
    train = SquaresDataset(48, size=size, seed=0).samples
    held_out = SquaresDataset(18, size=size, seed=1).samples
    model, zero, whole = f1_against_trivial_maps(train_briefly(name, train, steps=30, batch_size=8, lr=3e-3), held_out)
    assert zero == 0.0
    assert model >= max(zero, whole) + MARGIN, f"{name}: pixel F1 {model:.3f} vs whole-image {whole:.3f}"


GENERATED_SIZE = 64  # panel side: forgeries are made, trained on and scored whole at this size
COPY_MOVE_TRACES = {"scale": (0.8, 1.25), "rotation": (-30.0, 30.0), "interpolation": "bilinear"}
SPLICE_TRACES = {"donor_chains": tuple(chain for chain in DEFAULT_CHAINS if chain != "genuine")}
GENERATED_STEPS = 600  # batches of 16, one model per localizer on both operations mixed
GENERATED_MARGIN = 0.05  # pixel F1 above the better trivial map, per operation
# A transformer encoder wants its learning rate warmed up (the CNN localizers do not: mvss_tiny
# loses on copy-move with it); see the module docstring.
GENERATED_WARMUP = {"trufor_tiny": 0.05}


@functools.lru_cache(maxsize=1)
def generated_split() -> tuple[dict, dict]:
    """Every fourth bundled photo is held out: no held-out photo gives a training panel or a donor."""
    photos = bundled_photo_paths()
    held_out_photos = photos[1::4]
    training_photos = [photo for photo in photos if photo not in held_out_photos]
    assert held_out_photos and not set(held_out_photos) & set(training_photos)
    traces = {"copy_move_options": COPY_MOVE_TRACES, "splice_options": SPLICE_TRACES}
    return (
        generated_forgeries(training_photos, panels_per_photo=32, size=GENERATED_SIZE, seed=0, **traces),
        generated_forgeries(held_out_photos, panels_per_photo=24, size=GENERATED_SIZE, seed=1, **traces),
    )


@functools.lru_cache(maxsize=None)
def trained_on_generated(name: str) -> torch.nn.Module:
    """One training run per localizer on both operations mixed, shared by the per-operation checks."""
    train, _ = generated_split()
    return train_briefly(
        name,
        train["copy_move"] + train["splicing"],
        steps=GENERATED_STEPS,
        batch_size=16,
        lr=3e-3,
        cosine=True,
        warmup=GENERATED_WARMUP.get(name, 0.0),
    )


@pytest.mark.slow  # minutes of CPU per localizer (600 steps at 64 px)
@pytest.mark.parametrize("operation", ["copy_move", "splicing"])
@pytest.mark.parametrize("name", LOCALIZERS)
def test_short_training_localizes_held_out_generated_forgeries(name, operation, one_thread):
    """Copy-move and splicing with processing traces, made by the toolkit's generators; each
    held-out panel is scored whole."""
    samples = generated_split()[1][operation]
    assert len(samples) >= 50, f"only {len(samples)} held-out {operation} forgeries"
    model, zero, whole = f1_against_trivial_maps(trained_on_generated(name), samples)
    print(f"{name} {operation}: pixel F1 {model:.3f}, all-zero {zero:.3f}, whole-image {whole:.3f}")
    assert zero == 0.0
    assert model >= max(zero, whole) + GENERATED_MARGIN, (
        f"{name} on {operation}: pixel F1 {model:.3f} vs whole-image {whole:.3f}"
    )
