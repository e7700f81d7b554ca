"""Evaluation protocols of the seed papers: FraudBench (App. D.2), MFC-Bench, THEMIS (B.3), and
review-level aggregation of multi-image evidence."""

from .fraudbench import fraudbench_protocol, fraudbench_table, fraudbench_table_markdown
from .mfcbench import mfcbench_protocol
from .review import aggregate_reviews, review_metrics
from .themis import (
    balanced_robustness_index,
    block_localization,
    exact_match,
    forged_regions,
    grid_partition,
    multilabel_set_metrics,
    set_f1,
    set_iou,
    subset_partial_credit,
)

__all__ = [
    "aggregate_reviews",
    "balanced_robustness_index",
    "block_localization",
    "exact_match",
    "forged_regions",
    "fraudbench_protocol",
    "fraudbench_table",
    "fraudbench_table_markdown",
    "grid_partition",
    "mfcbench_protocol",
    "multilabel_set_metrics",
    "review_metrics",
    "set_f1",
    "set_iou",
    "subset_partial_credit",
]
