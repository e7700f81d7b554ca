"""Copy-move inside one image by self-matching, a localizer like any other (`forward(image)` ->
image logit and pixel map): the matching of `detectors.duplication`'s pair detector applied to an
image and itself (`detectors.self_matching`), with a dense block fallback for smooth content
(`detectors.dense_copy_move`)."""

from __future__ import annotations

from dataclasses import replace
from itertools import chain
from typing import Any, Iterator, Mapping

import cv2
import numpy as np
import torch

from datamodules.preprocess import Preprocess
from detectors.dense_copy_move import dense_self_match
from detectors.duplication import WHOLE_IMAGE, to_uint8
from detectors.localizer import Localizer
from detectors.matching import EXPORT_REFUSAL, Panel, describe_panel, unmasked_view
from detectors.self_matching import (
    SelfMatch,
    hidden_copy,
    is_pure_shift,
    missed,
    rotates,
    self_match_regions,
    self_matches,
    turns,
)
from imageops import noise_sigma


class SelfMatchLocalizer(Localizer):
    """Copy-move by self-matching: the image matched with itself (and its mirror), a keypoint's own
    neighbourhood excluded. The map marks the target (logit +`confidence`) and the source (logit -1:
    probability 0.27, visible in saved maps, under the 0.5 cut) when the resampling trace tells
    which copy is which (`mark: target`); `mark: both` marks both copies as manipulated. A pure
    shift by whole pixels copies exactly both ways: both copies are marked where its two residuals
    tie (`match_self`), the smaller taken where they do not. The image logit is the evidence:
    inliers above `min_inliers`.

    A match whose two copies overlap by more than `max_copy_overlap` of the smaller is a repeated
    structure matching itself one period away (lines of text, a brick wall), not a copy: dropped, as
    is a shift whose copy repeats once more along it (bars, legend rows; `max_shift_repeat`).
    So is a match whose copy its resampled source reproduces only to more than the residual gate
    (median grey levels): look-alike content, such as the same words typeset twice. The gate is
    `max_copy_residual`, raised to `copy_residual_noise_factor` x the image's noise level
    (`noise_sigma`; JPEG recompression raises a real copy's residual with it), at most
    `copy_residual_ceiling` (look-alike text and texture sit above it however noisy the image).
    A chart's copy is mostly flat fill, which reproduces under any map, so the residual is read
    again on the copy's detailed pixels alone (edges, text, texture; `detail_residual`), gated at
    `max_detail_residual` (None: not read, as checkpoints made before had it).
    A dropped structure can fit more keypoints than a copy beside it, so the maps the remaining
    matches fit are tried next, up to `max_maps` in all (`self_matching.self_matches`), each kept
    only with a turned copy whose residual was measured (`first_kept`; the configs set 3, the
    default 1 keeps the best map only, as checkpoints and evidence maps made before had it).
    Where SIFT finds no consistent self-matches, `dense_min_inliers` > 0 tries the dense block
    fallback (`detectors.dense_copy_move`: Zernike blocks of `dense_radius` px on a grid of at most
    `dense_grid` a side, partners at least `dense_min_distance` of the longer side apart). Smooth
    content resembles itself everywhere, so its map is kept only with `dense_min_inliers` inlier
    blocks, a copy that its resampled source reproduces to `dense_max_residual` grey levels (to
    `dense_apart_residual` where the two copies share no pixel: smooth content resembles itself
    most in overlapping neighbourhoods; None: the same gate), and a turn or rescaling: rendered
    content (bars, ticks, lanes, letters) repeats exactly by pure shifts.
    `hidden_agreement` > 0: the part of a copy pasted over its own source, which matches nothing,
    joins the copy where its fine detail follows the map's resampling phases (`with_hidden_copy`).
    `border_band` > 0: each copy's outline is traced to the pixel within that many px
    (`detectors.self_matching.trace_copy_border`); 0 keeps the correlation windows' outline.
    `furniture_retry`: where no copy was found, the keypoints of text and rulings (masked so far, as
    every chart has them) are matched too, and only a turned or flipped copy that resampling
    reproduces is kept: a turned legend or bar group has no other keypoints.
    `enlarged_retry_side` > 0: where still nothing was found in a panel of at most that many px,
    keypoints are found again on a copy enlarged twice (`enlarged_retry`)."""

    has_image_head = True
    fit_without_gradients = True
    onnx_export_refusal = EXPORT_REFUSAL

    def __init__(
        self,
        preprocess: Preprocess | Mapping[str, Any] | None = None,
        max_side: int = 512,
        n_features: int = 1000,
        ratio: float = 0.8,
        min_distance: float = 0.05,
        min_inliers: int = 6,
        mark: str = "target",
        image_score: str = "head",
        confidence: float = 6.0,
        max_copy_overlap: float = 0.5,
        max_shift_repeat: float = 0.5,
        max_copy_residual: float = 4.0,
        copy_residual_noise_factor: float = 3.0,
        copy_residual_ceiling: float = 5.0,
        dense_min_inliers: int = 30,
        dense_radius: int = 6,
        dense_grid: int = 96,
        dense_min_distance: float = 0.15,
        dense_max_residual: float = 1.0,
        dense_apart_residual: float | None = None,
        hidden_agreement: float = 0.0,
        border_band: int = 6,
        furniture_retry: bool = True,
        max_maps: int = 1,
        max_detail_residual: float | None = None,
        enlarged_retry_side: int = 0,
        enlarged_max_detail_residual: float = 2.0,
    ) -> None:
        super().__init__(preprocess or WHOLE_IMAGE, image_score=image_score)
        self.border_band, self.furniture_retry = int(border_band), bool(furniture_retry)
        self.max_copy_overlap, self.dense_min_inliers = float(max_copy_overlap), int(dense_min_inliers)
        self.max_shift_repeat, self.max_maps = float(max_shift_repeat), int(max_maps)
        self.max_detail_residual = float("inf") if max_detail_residual is None else float(max_detail_residual)
        self.enlarged_retry_side = int(enlarged_retry_side)
        self.enlarged_max_detail_residual = float(enlarged_max_detail_residual)
        self.max_copy_residual = float(max_copy_residual)
        self.copy_residual_noise_factor, self.copy_residual_ceiling = (
            float(copy_residual_noise_factor),
            float(copy_residual_ceiling),
        )
        self.dense_radius, self.dense_grid = int(dense_radius), int(dense_grid)
        self.dense_min_distance, self.dense_max_residual = float(dense_min_distance), float(dense_max_residual)
        self.dense_apart_residual = float(dense_max_residual if dense_apart_residual is None else dense_apart_residual)
        self.hidden_agreement = float(hidden_agreement)
        if mark not in ("target", "both"):
            raise ValueError(f"mark must be target or both, got {mark!r}")
        self.max_side, self.n_features, self.ratio = int(max_side), int(n_features), float(ratio)
        self.min_distance, self.min_inliers, self.mark = float(min_distance), int(min_inliers), mark
        self.confidence = float(confidence)
        self._sift = None

    def locate(self, image: np.ndarray) -> tuple[float, np.ndarray, Any]:
        """(image logit, pixel logits H x W, SelfMatch) of one RGB uint8 image."""
        if self._sift is None:
            self._sift = cv2.SIFT_create(nfeatures=self.n_features)
        panel = first = describe_panel(
            image,
            self.max_side,
            self.n_features,
            mask_furniture=True,
            sift=self._sift,
            keep_unmasked=self.furniture_retry,
        )
        candidates = self.maps_of(panel)
        found = next(candidates)
        if found.matrix is None:  # a copy in faint texture: weaker extrema give it keypoints
            faint = cv2.SIFT_create(nfeatures=self.n_features, contrastThreshold=0.01)
            panel = describe_panel(image, self.max_side, self.n_features, True, faint, 0)
            candidates = self.maps_of(panel)
            found = next(candidates)
        found = self.first_kept(found, candidates, panel)
        if found.matrix is None and self.furniture_retry:
            found = self.furniture_fallback(first, found)
        if found.matrix is None and self.dense_min_inliers > 0:
            found = self.dense_fallback(panel, found)
        if found.matrix is None and 0 < max(image.shape[:2]) <= self.enlarged_retry_side:
            found = self.enlarged_retry(image, found)
        found = self.with_hidden_copy(image, found)
        logits = np.full(image.shape[:2], -self.confidence, np.float32)
        if found.matrix is not None:
            marked_source = self.confidence if (self.mark == "both" or not found.ordered) else -1.0
            logits[found.source] = marked_source
            logits[found.target] = self.confidence
        evidence = -self.confidence
        if found.target.any():  # a dense match counts blocks: put them on the keypoints' scale
            floor = self.dense_min_inliers if found.method == "dense" else self.min_inliers
            evidence = (found.n_inliers - floor) / 2.0 * self.min_inliers / floor
        return float(np.clip(evidence, -self.confidence, 3 * self.confidence)), logits, found

    def with_hidden_copy(self, image: np.ndarray, found: SelfMatch) -> SelfMatch:
        """`found` with the part of its copy pasted over its own source (`self_matching.hidden_copy`),
        where `hidden_agreement` > 0 and the copy was turned or rescaled (a pure shift leaves no
        resampling phases) and ordered."""
        if found.matrix is None or not found.ordered or self.hidden_agreement <= 0 or is_pure_shift(found.matrix):
            return found
        gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float32)
        return replace(found, target=hidden_copy(gray, found.target, found.source, found.matrix, self.hidden_agreement))

    def maps_of(self, panel: Any) -> Iterator[SelfMatch]:
        """The panel's self-matches with this localizer's settings, best map first."""
        return self_matches(
            panel, self.ratio, self.min_distance, self.min_inliers, border_band=self.border_band, max_maps=self.max_maps
        )

    def first_kept(self, found: SelfMatch, others: Iterator[SelfMatch], panel: Any, turned: bool = False) -> SelfMatch:
        """The first of `found` and then `others` that `checked` keeps, or `found`'s miss. A map tried
        after the best one needs a copy that resampling its source was measured to reproduce, turned
        by more than 2 degrees: a runner-up of a few inliers over text is often look-alike words too
        small to measure, the same label rendered twice (a shift) or bars matching their mirror
        image. Where `turned` (text and rulings matched), every map must be such a copy, and turned
        or flipped."""
        first = None
        for rank, candidate in enumerate(chain([found], others)):  # lazily: regions grown only for maps tried
            unfit = None if candidate.matrix is None else self.unfit_map(candidate, runner_up=rank > 0, turned=turned)
            kept = self.checked(candidate if unfit is None else missed(candidate, unfit), panel)
            if kept.matrix is not None:
                return kept
            first = first or kept
        return first

    @staticmethod
    def unfit_map(found: SelfMatch, runner_up: bool, turned: bool) -> str | None:
        """Why `first_kept` may not take this map before the shared rules (`checked`), or None."""
        if (runner_up or turned) and not np.isfinite(found.residual):
            return "no resampling of its source was measured to reproduce the copy"
        if runner_up and not rotates(found.matrix):
            return "a runner-up map that does not turn: rendered marks repeat so"
        if turned and not turns(found.matrix):
            return "not a turned or flipped copy"
        return None

    def checked(self, found: SelfMatch, panel: Any) -> SelfMatch:
        """`found`, or no copy where its copies overlap or repeat again along a shift (a repeated
        structure) or its copy is not its source resampled (look-alike content)."""
        if found.matrix is not None and found.overlap > self.max_copy_overlap:
            return missed(found, "the copies overlap: a repeated structure")
        if found.matrix is not None and found.repeat > self.max_shift_repeat:
            return missed(found, "the copy repeats again one shift further: a repeated structure")
        if found.matrix is not None and np.isfinite(found.residual) and found.residual > self.residual_gate(panel):
            return missed(found, "the copy is not its source resampled: look-alike content")
        return self.detail_checked(found)

    def detail_checked(self, found: SelfMatch) -> SelfMatch:
        """`found`, or no copy where its detailed pixels (edges, text, texture) differ from its
        resampled source by more than `max_detail_residual` grey levels (median): a map whose copy
        is mostly flat fill passes the residual over all pixels whether it is right or not."""
        if found.matrix is not None and found.detail_residual > self.max_detail_residual:  # NaN: too flat to tell
            return missed(found, "the copy's detail is not its source's resampled: look-alike content")
        return found

    def enlarged_retry(self, image: np.ndarray, missed_so_far: SelfMatch) -> SelfMatch:
        """Keypoints found on a copy of a small panel enlarged twice (`enlarged_retry_side`), where
        nothing else found a copy: small rotated text and marks, whose keypoints at the panel's own
        size fit no map. Enlarged, a chart's exact repeats (grid cells, bars, legend rows) match too,
        so only a turned or rescaled copy is kept, and only where its detail is its source
        resampled to `enlarged_max_detail_residual` grey levels (`missed_so_far` otherwise)."""
        side = 2 * max(image.shape[:2])
        panel = describe_panel(
            image, self.max_side, self.n_features, True, self._sift, detect_side=side, keep_unmasked=True
        )
        for view in (panel, unmasked_view(panel)):
            candidates = self.maps_of(view)
            found = self.first_kept(next(candidates), candidates, view)
            if (
                found.matrix is not None
                and not is_pure_shift(found.matrix)
                and found.detail_residual <= self.enlarged_max_detail_residual
            ):
                return found
        return missed_so_far

    def furniture_fallback(self, described: Panel, keypoints: SelfMatch) -> SelfMatch:
        """The keypoints of text and rulings matched too, for a panel (`described` with
        `keep_unmasked`) whose other keypoints found no copy (`keypoints` when this finds none
        either): a turned legend, label or bar group. Rendered marks repeat by shifts and at other
        sizes (bars, error bars, letters), so only a turn or a flip that resampling reproduces (a
        residual measured, and within the gate) counts."""
        panel = unmasked_view(described)
        candidates = self.maps_of(panel)
        found = self.first_kept(next(candidates), candidates, panel, turned=True)
        return keypoints if found.matrix is None else found

    def residual_gate(self, panel: Any) -> float:
        """The most grey levels (median) by which a copy may differ from its resampled source."""
        relative = self.copy_residual_noise_factor * noise_sigma(panel.gray) if self.copy_residual_noise_factor else 0.0
        return max(self.max_copy_residual, min(self.copy_residual_ceiling, relative))

    def dense_fallback(self, panel: Any, keypoints: SelfMatch) -> SelfMatch:
        """The dense block match of a panel whose keypoints found no copy (`keypoints` when it finds none)."""
        gap = self.dense_min_distance * max(panel.shape)
        threshold = max(2.0, 0.01 * max(panel.shape))
        matrix, count = dense_self_match(panel, gap, threshold, self.dense_radius, self.dense_grid)
        if matrix is None or count < self.dense_min_inliers:
            return keypoints
        if is_pure_shift(matrix):
            return missed(keypoints, "dense match is a pure shift: a repeated structure")
        found = self_match_regions(panel, matrix, count, gap, method="dense", border_band=self.border_band)
        gate = self.dense_apart_residual if found.overlap == 0 else self.dense_max_residual
        if not found.target.any() or found.residual > gate:
            return missed(keypoints, "dense match not reproduced by resampling")
        if found.overlap > self.max_copy_overlap:
            return missed(keypoints, "the copies overlap: a repeated structure")
        detailed = self.detail_checked(found)
        return detailed if detailed.matrix is not None else missed(keypoints, detailed.reason)

    def dense_prediction(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        heads, maps = [], []
        for single in image:
            logit, logits, _ = self.locate(to_uint8(single))
            heads.append(logit)
            maps.append(torch.from_numpy(logits))
        mask_logit = torch.stack(maps)[:, None].to(image.device)
        return {"mask_logit": mask_logit, "head_logit": torch.tensor(heads, dtype=torch.float32, device=image.device)}
