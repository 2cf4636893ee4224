"""Pure-tensor metrics: retrieval ranks and recalls, 5-fold protocol, noise detection."""

from ncl.metrics.noise_detection import detection_metrics
from ncl.metrics.retrieval import (
    RECALL_KS,
    RETRIEVAL_KEYS,
    fold5_metrics,
    i2t_ranks,
    retrieval_metrics,
    t2i_ranks,
)

__all__ = [
    "RECALL_KS",
    "RETRIEVAL_KEYS",
    "detection_metrics",
    "fold5_metrics",
    "i2t_ranks",
    "retrieval_metrics",
    "t2i_ranks",
]
