"""CRCL's Active Complementary Loss (ACL), per sample.

Conventions: ``sims`` is a (B, B) similarity matrix, rows = images, columns = captions,
diagonal = annotated pairs; ``labels`` are the (B,) corrected soft correspondence labels
``y_hat`` of the diagonal pairs (from :mod:`ncl.division.correction`); losses return (B,)
per-sample tensors and the caller reduces with the **mean** (CRCL Eq. 9).

Paper versus official code (``form``):

* ``"paper"``: Eq. 3 is a plain softmax, no guard.
* ``"official"``: the released ``train_self`` adds ``eps = 1e-10`` to both softmax
  denominators (spec 4.4.2 step 2), exactly as RCL does.

Everything else agrees once Eq. 8 is read literally: the exponent of Eq. 6 is the per-sample
``q_i = 1 - y_hat_i`` in both (Eq. 8 writes ``L_r(I_i, T_i, 1 - y_hat_ii)``; the generic ``q`` of
Eq. 6-7 is the theory), the denominators of Eq. 6 run over ``k = 1..N`` and so include the
diagonal in both, and the active term carries the label in both. The paper gives no value for
``lambda`` (the supplement's table is not available); the code hard-codes 5, which is the
default ``weight`` here. Two typos of the paper are read as the code reads them: ``L_d`` and
``p_hat`` (Eq. 10) write ``p_ii^o`` twice; the second is the text-to-image ``p_ii^<>``.

Spec: reference_spec.md section 4.4.2 and 9.4; CRCL (Qin et al., NeurIPS 2023) Eq. 3, 6, 8-10.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, get_args

import torch
from torch import Tensor

from ncl.losses._checks import check_choice, check_non_negative, check_square
from ncl.losses.contrastive import diagonal_info_nce, log_matching_probabilities

AclForm = Literal["paper", "official"]

#: The official code's guard in the softmax denominators (spec 4.4.2 step 2).
OFFICIAL_EPS = 1e-10
#: The official code's hard-coded weight lambda of the complementary term (spec 4.4.2 step 7).
OFFICIAL_COMPLEMENTARY_WEIGHT = 5.0


class ACLTerms(NamedTuple):
    """Named per-sample terms of the ACL (each (B,)); ``loss = active + weight * complementary``.

    Attributes:
        loss: Eq. 8 per sample; the caller's ``.mean()`` is Eq. 9.
        active: the weighted active term ``L_d = -y_hat (log p_ii^o + log p_ii^<>)``.
        complementary: the robust complementary term ``L_r`` of Eq. 6, unweighted.
    """

    loss: Tensor
    active: Tensor
    complementary: Tensor


def form_eps(form: AclForm) -> float:
    """The softmax-denominator guard of each ``form``: 0 (paper) or 1e-10 (official)."""
    check_choice(form, get_args(AclForm), "form")
    return OFFICIAL_EPS if form == "official" else 0.0


def _log_probabilities(sims: Tensor, tau: float, form: AclForm) -> tuple[Tensor, Tensor]:
    """``(log P_i2t, log P_t2i)``, each (B, B), rows = queries (Eq. 3; official: ``+eps``).

    Row ``i`` of ``P_t2i`` is caption ``i`` querying the images, so ``P_t2i[i, j]`` is the
    paper's ``p_ji^<>`` (column softmax written as rows, the official ``P^2``).
    """
    return log_matching_probabilities(sims, tau, form_eps(form))


def average_matching_probability(
    sims: Tensor, tau: float = 0.05, form: AclForm = "official"
) -> Tensor:
    """The per-pair estimate ``p_hat_i = (p_ii^o + p_ii^<>) / 2`` that SCC corrects with (Eq. 10).

    Detached: it is a target for the label table, never something to back-propagate through
    (the official code detaches it too, spec 4.4.2 step 3).

    Args:
        sims: (B, B) similarities.
        tau: temperature > 0 (0.05).
        form: ``"paper"`` (plain softmax) or ``"official"`` (``+1e-10`` in the denominators).

    Returns:
        (B,) values in [0, 1], detached, float32 or wider.
    """
    check_square(sims)
    return diagonal_info_nce(*_log_probabilities(sims, tau, form)).probability


def _check_labels(labels: Tensor, batch: int, name: str = "labels") -> None:
    if not isinstance(labels, Tensor):
        raise ValueError(f"`{name}` must be a torch.Tensor, got {type(labels).__name__}")
    if not labels.is_floating_point():
        raise ValueError(f"`{name}` must be a floating-point tensor, got dtype {labels.dtype}")
    if labels.shape != (batch,):
        raise ValueError(
            f"`{name}` must have shape (B,) = ({batch},) to match `sims`, "
            f"got {tuple(labels.shape)}"
        )
    if not bool(((labels >= 0) & (labels <= 1)).all()):  # also rejects NaN
        raise ValueError(f"`{name}` must lie in [0, 1] (soft correspondence labels)")


def _exponent(labels: Tensor, q: float | None) -> Tensor:
    """The per-sample exponent of Eq. 6: ``1 - y_hat`` (Eq. 8) or a fixed ``q`` (ablations)."""
    if q is None:
        return 1.0 - labels
    if not 0.0 <= float(q) <= 1.0:
        raise ValueError(f"`q` must lie in [0, 1] or be None (q = 1 - labels), got {q}")
    return torch.full_like(labels, float(q))


def _complementary_direction(log_p: Tensor, exponent: Tensor) -> Tensor:
    """One direction of Eq. 6: ``sum_{j != i} tan(p_ij) / (sum_k tan(p_ik))^{q_i}`` -> (B,).

    The denominator includes the diagonal (``k = 1..N``). It is at least ``sum_k p_ik`` (tan
    x >= x on [0, 1]), i.e. about 1, so the power is well conditioned for q in [0, 1]. The one
    exception is the official ``eps`` dominating a whole row (``S / tau`` below about -700, raw
    logits only): every ``p`` underflows to 0 and the code's ratio is ``0 / 0 = NaN``; here the
    denominator is floored at the smallest normal number, so the row's term is 0.
    """
    tan_p = torch.tan(log_p.exp())  # (B, B); p <= 1 so tan(p) <= tan(1) ~ 1.557
    off_diagonal = ~torch.eye(tan_p.shape[0], dtype=torch.bool, device=tan_p.device)
    negatives = (tan_p * off_diagonal).sum(dim=1)  # masked, not total - diagonal: no cancellation
    total = tan_p.sum(dim=1).clamp_min(torch.finfo(tan_p.dtype).tiny)  # (B,)
    return negatives / total.pow(exponent)


def robust_complementary_loss(
    sims: Tensor, q: Tensor | float, tau: float = 0.05, form: AclForm = "official"
) -> Tensor:
    """The robust complementary loss ``L_r(I_i, T_i, q)`` of CRCL Eq. 6, per sample.

    ``L_r = sum_{j != i} tan(p_ij^o) / (sum_k tan(p_ik^o))^q
    + sum_{j != i} tan(p_ji^<>) / (sum_k tan(p_ki^<>))^q``.

    ``q = 0`` is the unnormalised complementary contrastive loss with ``phi = tan`` (RCL's
    ``tan`` CCL); ``q = 1`` is the fully normalised, provably noise-tolerant ratio (Lemma 1).
    There is no positive term: the positive moves only through the normalisation.

    Args:
        sims: (B, B) similarities.
        q: exponent in [0, 1]; a float, or a (B,) tensor for a per-sample exponent (ACL uses
            ``1 - y_hat``, Eq. 8).
        tau: temperature > 0 (0.05).
        form: ``"paper"`` or ``"official"`` (the latter adds 1e-10 to the softmax denominators).

    Returns:
        (B,) non-negative per-sample losses, float32 or wider.
    """
    batch = check_square(sims)
    log_i2t, log_t2i = _log_probabilities(sims, tau, form)
    if isinstance(q, Tensor):
        _check_labels(q, batch, "q")
        exponent = q.detach().to(log_i2t.dtype)
    elif q is None or not 0.0 <= float(q) <= 1.0:
        raise ValueError(f"`q` must be a number in [0, 1] or a (B,) tensor, got {q}")
    else:
        exponent = torch.full((batch,), float(q), dtype=log_i2t.dtype, device=sims.device)
    return _complementary_direction(log_i2t, exponent) + _complementary_direction(
        log_t2i, exponent
    )


def active_complementary_terms(
    sims: Tensor,
    labels: Tensor,
    tau: float = 0.05,
    weight: float = OFFICIAL_COMPLEMENTARY_WEIGHT,
    q: float | None = None,
    form: AclForm = "official",
) -> ACLTerms:
    """CRCL's Active Complementary Loss and its two terms, per sample (Eq. 8; spec 4.4.2 step 7).

    ``loss_i = L_d,i + weight * L_r,i`` with

    * ``L_d,i = -y_hat_i (log p_ii^o + log p_ii^<>)`` (the official ``y * Lpos``);
    * ``L_r,i`` = :func:`robust_complementary_loss` with the per-sample exponent
      ``q_i = 1 - y_hat_i`` (Eq. 8 and the official ``(...)^(1 - y)``), or a fixed ``q`` for
      Table 4's ``L_r(q=0)`` / ``L_r(q=1)`` ablations.

    The official scalar ``mean_i(y_i Lpos_i) + 5 mean_i(Lneg_i)`` equals ``loss.mean()``; Eq. 9
    is the same mean. Labels are state: they are detached here, so gradients flow only through
    ``sims`` (also into the denominators of Eq. 6, as in the official code).

    Args:
        sims: (B, B) similarities (sigmoid SGRAF scores or VSE-inf cosines).
        labels: (B,) corrected labels ``y_hat`` in [0, 1] (Eq. 12).
        tau: temperature > 0 (0.05).
        weight: lambda >= 0 of Eq. 8 (the code's hard-coded 5; the paper gives no value).
        q: None for ``1 - labels`` (Eq. 8), or a fixed exponent in [0, 1].
        form: ``"paper"`` (plain softmax) or ``"official"`` (``+1e-10`` denominators).

    Returns:
        :class:`ACLTerms` of (B,) tensors (float32 or wider).
    """
    batch = check_square(sims)
    _check_labels(labels, batch)
    check_non_negative(weight, "weight")
    log_i2t, log_t2i = _log_probabilities(sims, tau, form)
    y = labels.detach().to(log_i2t.dtype)  # (B,)
    active = diagonal_info_nce(log_i2t, log_t2i, weights=y).loss  # (B,) log-space: never log(0)
    exponent = _exponent(y, q)
    complementary = _complementary_direction(log_i2t, exponent) + _complementary_direction(
        log_t2i, exponent
    )
    return ACLTerms(active + weight * complementary, active, complementary)


def active_complementary_loss(
    sims: Tensor,
    labels: Tensor,
    tau: float = 0.05,
    weight: float = OFFICIAL_COMPLEMENTARY_WEIGHT,
    q: float | None = None,
    form: AclForm = "official",
) -> Tensor:
    """CRCL's ACL per sample, ``(B,)``: :func:`active_complementary_terms`'s ``loss``.

    Reduce with the **mean** (Eq. 9, and the official reduction).
    """
    return active_complementary_terms(sims, labels, tau, weight, q, form).loss
