"""IN2R's losses (``vse.py`` and ``co_train.py`` of github.com/liuyyy111/IN2R at 909e532).

* ``infonce`` - the function the official code names ``infonce`` is not plain InfoNCE but
  L2RM's reverse cross-entropy plus cross-entropy on the bidirectional softmax at ``tau``
  0.05: with ``P = softmax_row(S / tau)``, ``T = softmax_row(S^T / tau)`` and ``eps`` 1e-7,
  ``0.5 * (-(1/B) sum_ij log(I_ij + eps) (P_ij + T_ij) - (1/B) sum_i (log P_ii + log T_ii))``,
  symmetric in ``S`` and ``S^T``: :func:`ncl.losses.l2rm.rce_warmup_loss`, used as it is.
* :func:`warmup_loss` - ``infonce(S) + infonce(S_II) + infonce(S_TT)``: the image-caption
  matrix of one forward pass and the image-image / caption-caption matrices between two
  forward passes (two dropout views) of the same batch.
* :func:`labelled_loss` - ``triplet(S, alpha) + triplet(S_II, beta) + triplet(S_TT, beta)``:
  VSE++'s hardest-negative hinge summed over the batch, alpha 0.2 on the pairs, beta 0.3
  (hard-coded officially) on the intra-modal matrices.
* :func:`rectified_loss` - ``lambda * infonce(Q T^T)`` between the unlabelled queries ``Q`` and
  their rectified targets ``T`` (``lambda`` 0.5, hard-coded officially).

Shapes: ``(B, E)`` unit embeddings, ``(B, B)`` similarity matrices; every loss is a 0-d tensor.
"""

from __future__ import annotations

from torch import Tensor

from ncl.losses.l2rm import rce_warmup_loss
from ncl.losses.triplet import triplet_loss

#: Official constants: the ``infonce`` temperature, the labelled loss's margins, the
#: rectification weight.
IN2R_TAU = 0.05
INTRA_MARGIN = 0.3
CORRECTION_WEIGHT = 0.5


def cross_view_sims(first: Tensor, second: Tensor) -> Tensor:
    """``(B, B)`` ``first @ second^T`` of two ``(B, E)`` forward passes of one modality."""
    return first @ second.t()


def warmup_loss(img: tuple[Tensor, Tensor], cap: tuple[Tensor, Tensor], tau: float = IN2R_TAU,
                intra: bool = True) -> dict[str, Tensor]:
    """The warm-up terms (official ``VSE.train(mode="warmup")``).

    Args:
        img, cap: the ``(B, E)`` image / caption embeddings of two forward passes of a batch.
        tau: the ``infonce`` temperature.
        intra: add the two intra-modal terms (official: always).

    Returns:
        ``{"pair": infonce(I_1 C_1^T), "image": infonce(I_1 I_2^T), "caption": infonce(C_1 C_2^T)}``
        (the last two only with ``intra``); the loss is their sum.
    """
    terms = {"pair": rce_warmup_loss(img[0] @ cap[0].t(), tau)}
    if intra:
        terms["image"] = rce_warmup_loss(cross_view_sims(*img), tau)
        terms["caption"] = rce_warmup_loss(cross_view_sims(*cap), tau)
    return terms


def labelled_loss(img: tuple[Tensor, Tensor], cap: tuple[Tensor, Tensor], margin: float = 0.2,
                  intra_margin: float = INTRA_MARGIN, intra: bool = True) -> dict[str, Tensor]:
    """The loss on the labelled (predicted-clean) pairs (official ``train`` in ``co_train.py``).

    ``pair = sum_i max_j [alpha + S_ij - S_ii]_+ + sum_j max_i [alpha + S_ij - S_jj]_+`` on
    ``S = I_1 C_1^T`` (diagonals excluded), and the same with ``beta`` on ``I_1 I_2^T`` and
    ``C_1 C_2^T`` (``intra``). The clean probabilities do not weight it (official).

    Returns:
        ``{"pair", "image", "caption"}`` 0-d terms (the last two only with ``intra``).
    """
    terms = {"pair": triplet_loss(img[0] @ cap[0].t(), margin, "hardest").sum()}
    if intra:
        terms["image"] = triplet_loss(cross_view_sims(*img), intra_margin, "hardest").sum()
        terms["caption"] = triplet_loss(cross_view_sims(*cap), intra_margin, "hardest").sum()
    return terms


def rectified_loss(queries: Tensor, targets: Tensor, weight: float = CORRECTION_WEIGHT,
                   tau: float = IN2R_TAU) -> Tensor:
    """``weight * infonce(Q T^T)``: ``(B, E)`` unlabelled embeddings of one modality against
    their ``(B, E)`` rectified other-modality targets (row ``b`` of ``T`` is query ``b``'s)."""
    return weight * rce_warmup_loss(queries @ targets.to(queries.dtype).t(), tau)
