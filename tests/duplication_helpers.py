"""A pair detector with hand-set score models, so tests need no fitting run."""

from __future__ import annotations

import torch

from detectors.module import DetectorModule
from detectors.pair_matching import FEATURE_NAMES, PARAMETER_FEATURE_NAMES
from detectors.registry import net_config


def hand_set_pair_module(threshold: float = 0.5) -> DetectorModule:
    """dup_sift_tiny whose score is sigmoid(log(1 + inliers) - log(13)) (duplicated from 12 inliers)
    and whose parameter model says "changed" when the mean colour difference exceeds 6 levels."""
    module = DetectorModule(net={**net_config("dup_sift"), "max_side": 192, "n_features": 400}, name="dup_sift_tiny")
    score, parameter = module.net.score_model, module.net.parameter_model
    score.coef.zero_()
    score.coef[FEATURE_NAMES.index("log_inliers")] = 1.0
    score.intercept.fill_(-torch.log(torch.tensor(13.0, dtype=torch.float64)))
    parameter.coef.zero_()
    parameter.coef[PARAMETER_FEATURE_NAMES.index("abs_diff")] = 255.0 / 6.0
    parameter.intercept.fill_(-1.0)
    score.fitted.fill_(True)
    parameter.fitted.fill_(True)
    module.threshold.fill_(threshold)
    return module


__all__ = ["hand_set_pair_module"]
