import numpy as np
import pytest

from evaluation.robustness import robustness_curves
from imageops import gaussian_blur, jpeg, rescale


def images(n=12, seed=0):
    """Fakes carry fine high-frequency texture; genuines are smooth. Blur and JPEG remove it."""
    rng = np.random.default_rng(seed)
    out, labels = [], []
    yy, xx = np.mgrid[0:32, 0:40]
    smooth = (np.stack([xx * 5, yy * 6, xx + yy], -1) % 256).astype(np.float64)
    for i in range(n):
        fake = i % 2
        im = smooth + rng.normal(0, 2, smooth.shape)
        if fake:
            im += 40 * ((xx + yy) % 2)[..., None]  # a checkerboard artifact
        out.append(np.clip(im, 0, 255).astype(np.uint8))
        labels.append(fake)
    return out, np.array(labels)


def high_freq_score(batch):
    """A toy detector: energy of the pixel-to-pixel difference, squashed to (0, 1)."""
    scores = []
    for im in batch:
        g = im.astype(float).mean(-1)
        energy = np.abs(np.diff(g, axis=1)).mean()
        scores.append(1 - np.exp(-energy / 15))
    return np.array(scores)


def scorer(score_fn, images):
    """`score_perturbed` for images in memory: `score_fn` on every image, perturbed or not."""
    return lambda perturb: score_fn([perturb(im) if perturb else im for im in images])


def test_perturbations_shapes_and_identity():
    im, _ = images(1)
    im = im[0]
    assert jpeg(im, 30).shape == im.shape and jpeg(im, 30).dtype == np.uint8
    assert np.array_equal(gaussian_blur(im, 0), im)
    assert rescale(im, 0.5).shape == (16, 20, 3) and rescale(im, 1.5).shape == (48, 60, 3)
    assert np.array_equal(rescale(im, 1.0), im)
    # Stronger perturbations move the image further from the original.
    err = lambda a: np.abs(a.astype(float) - im).mean()  # noqa: E731
    assert err(jpeg(im, 30)) > err(jpeg(im, 95))
    assert err(gaussian_blur(im, 3)) > err(gaussian_blur(im, 0.5)) > 0
    with pytest.raises(ValueError, match="uint8 H x W x 3"):
        jpeg(im.astype(np.float32), 90)


def test_sweep_curves_degrade_and_reuse_clean_scores():
    ims, y = images()
    calls = []

    def score_fn(batch):
        calls.append(len(batch))
        return high_freq_score(batch)

    out = robustness_curves(scorer(score_fn, ims), y, levels={"blur": (0, 1, 3), "jpeg": (95, 30)})
    assert out["clean"]["auroc"] == 1.0
    blur = out["curves"]["blur"]
    assert blur["levels"] == [0.0, 1.0, 3.0]
    assert blur["metrics"]["auroc"][0] == out["clean"]["auroc"]
    # A checkerboard detector loses the artifact under heavy blur: TPR at 0.5 falls.
    assert blur["metrics"]["tpr"][2] < blur["metrics"]["tpr"][0]
    # Clean pass + blur 1 + blur 3 + two JPEG levels = 5 passes of 12 images: blur 0 reuses the clean scores.
    assert calls == [12] * 5


def test_custom_perturbation_and_errors():
    ims, y = images(6)
    invert = {"invert": lambda im, level: (255 - im) if level else im}
    out = robustness_curves(scorer(high_freq_score, ims), y, levels={"invert": (0, 1)}, perturbations=invert)
    assert out["curves"]["invert"]["metrics"]["auroc"] == [1.0, 1.0]
    with pytest.raises(ValueError, match="unknown perturbation"):
        robustness_curves(scorer(high_freq_score, ims), y, levels={"sharpen": (1,)})
    with pytest.raises(ValueError, match="1 scores for 6 labels"):
        robustness_curves(lambda perturb: np.zeros(1), y, levels={})

    def short_when_perturbed(perturb):  # loses an image under every perturbation
        return high_freq_score(ims[:5] if perturb else ims)

    with pytest.raises(ValueError, match="5 scores for 6 labels under jpeg at 30"):
        robustness_curves(short_when_perturbed, y, levels={"jpeg": (30,)})


def test_pixel_metrics_from_the_scorer_get_curves_beside_the_image_metrics():
    """A localizer's scorer returns {"scores", "pixel"}: each pixel key gets a curve, the identity level
    reuses the clean values, and the image curves are unchanged."""
    ims, labels = images()
    calls = []

    def score_perturbed(perturb):
        batch = [perturb(im) if perturb else im for im in ims]
        scores = high_freq_score(batch)
        calls.append(perturb)
        return {"scores": scores, "pixel": {"pixel_f1": float(scores.mean()), "n_masks": 6}}

    levels = {"rescale": (0.5, 1.0), "jpeg": (30,)}
    result = robustness_curves(score_perturbed, labels, levels)
    plain = robustness_curves(lambda p: score_perturbed(p)["scores"], labels, levels)
    assert len(calls) == 3 + 3  # clean, rescale 0.5, jpeg 30 for each sweep: the identity is not rerun
    clean_f1 = float(high_freq_score(ims).mean())
    assert result["clean"]["pixel_f1"] == clean_f1 and "pixel_f1" not in plain["clean"]
    curve = result["curves"]["rescale"]["metrics"]
    assert curve["pixel_f1"][1] == clean_f1 and curve["pixel_f1"][0] != clean_f1
    assert curve["n_masks"] == [6, 6] and "pixel_iou" not in curve  # only the keys the scorer gave
    assert curve["auroc"] == plain["curves"]["rescale"]["metrics"]["auroc"]


@pytest.mark.filterwarnings("ignore:robustness. 1 of 12 inputs")
def test_an_input_that_fails_at_any_level_is_left_out_of_every_level():
    """Input 0 cannot be scored under JPEG 30 only: the clean figures and every level are then measured on
    the other inputs, as if it had failed everywhere, so the levels stay comparable."""
    ims, y = images()

    def fails_under_heavy_jpeg(perturb):
        scores = high_freq_score([perturb(im) if perturb else im for im in ims])
        if perturb is not None and perturb.args == (jpeg, 30):
            scores[0] = np.nan
        return scores

    def fails_everywhere(perturb):
        scores = high_freq_score([perturb(im) if perturb else im for im in ims])
        scores[0] = np.nan
        return scores

    levels = {"jpeg": (95, 30), "blur": (0, 2)}
    once = robustness_curves(fails_under_heavy_jpeg, y, levels)
    assert once == robustness_curves(fails_everywhere, y, levels)
    assert once["clean"]["n_pos"] + once["clean"]["n_neg"] == 11
    with pytest.warns(UserWarning, match="1 of 12 inputs could not be scored at some level and are left out"):
        robustness_curves(fails_under_heavy_jpeg, y, {"jpeg": (30,)})
