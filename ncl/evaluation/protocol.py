"""Evaluation protocols: F30K/CC152K "1k", COCO "5fold1k" and "5k" (spec section 5.3).

The protocol is chosen by name; the matrix itself already is the split being evaluated
(F30K or CC152K ``test``: 1,000 images; COCO ``testall``: 5,000 images).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, get_args

from torch import Tensor

from ncl.metrics.retrieval import fold5_metrics, retrieval_metrics

Protocol = Literal["1k", "5fold1k", "5k"]
PROTOCOLS: tuple[str, ...] = get_args(Protocol)

Results = dict[str, dict[str, dict[str, float]]]
"""system name -> protocol -> metric name -> value."""


def _check_protocol(protocol: str) -> None:
    """Raise ValueError unless ``protocol`` is one of :data:`PROTOCOLS`."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")


def evaluate_sims(sims: Tensor, captions_per_image: int, protocol: Protocol) -> dict[str, float]:
    """Retrieval metrics of one similarity matrix under one protocol (spec section 5.3).

    ``"1k"`` and ``"5k"`` evaluate the whole matrix (the names only say which split it is);
    ``"5fold1k"`` averages five contiguous image folds (COCO 1K).

    Args:
        sims: Similarity matrix, shape (N_img, N_img * captions_per_image).
        captions_per_image: Captions per image (5 for COCO/F30K, 1 for CC152K).
        protocol: ``"1k"``, ``"5fold1k"`` or ``"5k"``.

    Returns:
        Metrics keyed as :data:`ncl.metrics.RETRIEVAL_KEYS`.

    Raises:
        ValueError: On an unknown protocol or an invalid matrix.
    """
    _check_protocol(protocol)
    if protocol == "5fold1k":
        return fold5_metrics(sims, captions_per_image, n_folds=5)
    return retrieval_metrics(sims, captions_per_image)


def evaluate_systems(
    systems: Mapping[str, Tensor],
    captions_per_image: int,
    protocols: Sequence[Protocol],
) -> Results:
    """Evaluate several systems (single models and ensembles) under several protocols.

    Args:
        systems: Name -> similarity matrix (N_img, N_cap), e.g.
            ``{"SGR": S1, "SAF": S2, "SGRAF": ensemble([S1, S2])}`` (spec section 5.4).
        captions_per_image: Captions per image.
        protocols: Protocols to run for every system, e.g. ``("5fold1k", "5k")``.

    Returns:
        ``results[system][protocol][metric]``, in the order given.

    Raises:
        ValueError: If ``systems`` or ``protocols`` is empty, a protocol is unknown or
            repeated, or a matrix is invalid. Protocols are checked before any work starts.
    """
    if len(systems) == 0:
        raise ValueError("systems must contain at least one named similarity matrix")
    if isinstance(protocols, str) or len(protocols) == 0:
        raise ValueError(f"protocols must be a non-empty sequence of names, got {protocols!r}")
    for protocol in protocols:
        _check_protocol(protocol)
    if len(set(protocols)) != len(protocols):
        raise ValueError(f"protocols must not repeat a name, got {list(protocols)}")
    return {
        name: {p: evaluate_sims(sims, captions_per_image, p) for p in protocols}
        for name, sims in systems.items()
    }
