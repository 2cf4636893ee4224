"""RCL's complementary contrastive loss (CCL) and the loss swaps of its ablations, per sample.

Conventions: ``sims`` is a (B, B) similarity matrix, rows = images, columns = captions,
diagonal = annotated pairs; losses return (B,) per-sample tensors (sample ``i`` = image query
``i`` plus caption query ``i``).

Spec: reference_spec.md section 4.3.2; RCL (Hu et al., TPAMI 2023) Eq. 1-2, 8, 14-18 and
Tables 6-7.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

from ncl.losses._checks import check_choice, check_square
from ncl.losses.contrastive import info_nce, log_matching_probabilities
from ncl.losses.triplet import triplet_loss

ComplementaryKind = Literal["log", "exp", "gce", "tan", "mae"]
AblationVariant = Literal["tr", "tr_hn", "cl", "nl", "mae_single", "ccl"]

#: How the official code reduces each ablation variant over the batch (see rcl_ablation_loss).
RCL_ABLATION_REDUCTION: dict[str, Literal["sum", "mean"]] = {
    "tr": "sum",
    "tr_hn": "sum",
    "cl": "mean",
    "nl": "mean",
    "mae_single": "mean",
    "ccl": "mean",
}


def matching_probabilities(
    sims: Tensor, tau: float = 0.05, eps: float = 1e-10
) -> tuple[Tensor, Tensor]:
    """RCL's cross-modal matching probabilities (RCL Eq. 1-2, spec 4.3.2).

    With ``E = exp(S / tau)``: ``P_i2t[i, j] = E_ij / (sum_k E_ik + eps)`` and
    ``P_t2i[i, j] = E_ji / (sum_k E_ki + eps)``.

    Numerics: computed as ``exp(z_ij - logaddexp(logsumexp_k z_ik, log eps))`` with
    ``z = S / tau``, which is algebraically identical to the official form (same ``eps``
    semantics, including ``P -> 0`` for a whole row when every ``E_ik`` is far below ``eps``)
    but cannot overflow. The official form itself is safe for sigmoid sims in [0, 1] at
    tau = 0.05 (``E <= e^20``), but not for raw logits (ReCon) or a smaller tau. Half-precision
    inputs are computed in float32.

    Args:
        sims: (B, B) similarities.
        tau: temperature > 0.
        eps: denominator guard >= 0; 0 gives the paper's plain softmax.

    Returns:
        ``(P_i2t, P_t2i)``, each (B, B), rows are queries.
    """
    log_i2t, log_t2i = log_matching_probabilities(sims, tau, eps)
    return log_i2t.exp(), log_t2i.exp()


def num_negatives_from_ratio(batch_size: int, negative_ratio: float) -> int:
    """Number of negatives per query for RCL's ``--ratio`` (spec 4.3.2).

    ``ratio <= 0`` or ``ratio >= 1`` (default -1) keeps all ``B - 1`` off-diagonal entries;
    otherwise ``int(ratio * B)`` (may be 0, in which case the CCL loss is 0, as officially).
    """
    if batch_size < 1:
        raise ValueError(f"`batch_size` must be >= 1, got {batch_size}")
    if negative_ratio <= 0 or negative_ratio >= 1:
        return batch_size - 1
    return int(negative_ratio * batch_size)


def sample_negatives(
    batch_size: int,
    num_negatives: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Column indices of the negatives kept for each query (RCL's mask Omega, spec 4.3.2).

    With ``num_negatives = B - 1`` every off-diagonal entry is returned and nothing is drawn.
    Otherwise each row keeps ``num_negatives`` distinct off-diagonal columns drawn uniformly at
    random and independently per row (the official code takes the top-k of uniform noise with the
    diagonal forced lowest; this does the same). The noise is drawn on ``generator``'s device
    (global RNG on ``device`` when ``generator`` is None) and moved to ``device``.

    Args:
        batch_size: B.
        num_negatives: k in [0, B - 1].
        generator: optional torch RNG for reproducible draws.
        device: where the indices should live (e.g. ``sims.device``).

    Returns:
        (B, k) int64 tensor; row ``i`` never contains ``i``.
    """
    if batch_size < 1:
        raise ValueError(f"`batch_size` must be >= 1, got {batch_size}")
    if not 0 <= num_negatives <= batch_size - 1:
        raise ValueError(
            f"`num_negatives` must lie in [0, B-1] = [0, {batch_size - 1}], got {num_negatives}"
        )
    if num_negatives == batch_size - 1:
        cols = torch.arange(batch_size - 1, device=device).unsqueeze(0)  # (1, B-1)
        rows = torch.arange(batch_size, device=device).unsqueeze(1)  # (B, 1)
        return cols + (cols >= rows).long()  # skip the diagonal: (B, B-1)
    noise_device = generator.device if generator is not None else device
    noise = torch.rand((batch_size, batch_size), generator=generator, device=noise_device)
    noise.fill_diagonal_(-1.0)  # uniform noise is in [0, 1): the diagonal is never picked
    return noise.topk(num_negatives, dim=1).indices.to(device)  # (B, k)


def _complementary_phi(log_p: Tensor, loss: str, q: float, eps: float) -> Tensor:
    """phi(p) of RCL Eq. 14-18, evaluated from log p (so 1 - p is exact near p = 1)."""
    log_p = log_p.clamp(max=0.0)
    if loss == "mae":
        return log_p.exp()
    if loss == "tan":
        return torch.tan(log_p.exp())
    if loss == "exp":
        return torch.exp(log_p.exp() - 1.0)
    one_minus_p = -torch.expm1(log_p)  # 1 - p without cancellation
    if loss == "log":
        return -torch.log(one_minus_p + eps)
    return (1.0 - torch.pow(one_minus_p + eps, q)) / q  # gce


def _complementary_terms(
    log_i2t: Tensor, log_t2i: Tensor, negatives: Tensor, loss: str, q: float, eps: float
) -> Tensor:
    """Per-sample sum of phi over the kept negatives, both directions -> (B,)."""
    phi_i2t = _complementary_phi(log_i2t.gather(1, negatives), loss, q, eps)  # (B, k)
    phi_t2i = _complementary_phi(log_t2i.gather(1, negatives), loss, q, eps)  # (B, k)
    return phi_i2t.sum(dim=1) + phi_t2i.sum(dim=1)


def _check_ccl_args(loss: str, q: float) -> None:
    check_choice(loss, get_args(ComplementaryKind), "loss")
    if not 0.0 < float(q) <= 1.0:
        raise ValueError(f"`q` (GCE exponent) must lie in (0, 1], got {q}")


def complementary_contrastive_loss(
    sims: Tensor,
    tau: float = 0.05,
    loss: ComplementaryKind = "log",
    q: float = 0.2,
    negative_ratio: float = -1.0,
    generator: torch.Generator | None = None,
    eps: float = 1e-10,
) -> Tensor:
    """RCL's complementary contrastive loss (CCL), per sample (RCL Eq. 14-18, spec 4.3.2).

    ``l_i = sum_{j in Omega_i} phi(P_i2t[i, j]) + sum_{j in Omega_i} phi(P_t2i[i, j])``

    with the matching probabilities of :func:`matching_probabilities` and ``phi``:

    ==========  ==============================  ==============================================
    ``loss``    official code (default)          paper
    ==========  ==============================  ==============================================
    ``"mae"``   ``p`` (``--loss abs``)           Eq. 14, identical
    ``"log"``   ``-log(1 - p + eps)``            Eq. 15, ``-log(1 - p)``
    ``"exp"``   ``exp(-(1 - p)) = exp(p - 1)``   Eq. 16, identical
    ``"gce"``   ``(1 - (1 - p + eps)^q) / q``    Eq. 17, ``(1 - (1 - p)^q) / q``
    ``"tan"``   ``tan(p)``                       Eq. 18, identical
    ==========  ==============================  ==============================================

    Paper versus code: they differ only by ``eps`` (1e-10), which the code adds both in the
    softmax denominator and inside ``log``/GCE; ``eps = 0`` is the paper's equations exactly
    (then ``log``/``gce`` are unbounded as p -> 1 and may give ``inf``). There is no positive
    term: the positive is pushed up only through the normalisation.

    ``Omega_i``: with ``negative_ratio <= 0`` or ``>= 1`` (default) every ``j != i``; otherwise
    ``int(negative_ratio * B)`` random off-diagonal columns per row (:func:`sample_negatives`).
    The **same** ``Omega`` is used for both directions, as in the official code (row ``i`` of
    ``P_t2i`` is caption ``i`` querying images).

    Reduction: the official scalar is ``mean_i sum_j phi(P_i2t) + mean_i sum_j phi(P_t2i)``,
    which equals ``mean_i l_i``: take the **mean** over samples (Eq. 14-18 carry ``1/N``).

    Args:
        sims: (B, B) similarities (sigmoid outputs in the official SGRAF).
        tau: temperature > 0 (0.05).
        loss: phi, see the table.
        q: GCE exponent in (0, 1] (official ``--margin``, 0.2).
        negative_ratio: RCL ``--ratio`` (-1: all negatives).
        generator: torch RNG for the random negatives (only used when some are dropped).
        eps: the official guard (1e-10); 0 for the paper's equations.

    Returns:
        (B,) per-sample losses (float32 or wider).
    """
    batch = check_square(sims)
    _check_ccl_args(loss, q)
    log_i2t, log_t2i = log_matching_probabilities(sims, tau, eps)
    k = num_negatives_from_ratio(batch, negative_ratio)
    negatives = sample_negatives(batch, k, generator=generator, device=sims.device)
    return _complementary_terms(log_i2t, log_t2i, negatives, loss, q, eps)


def single_negative_loss(
    sims: Tensor,
    tau: float = 0.05,
    loss: ComplementaryKind = "log",
    q: float = 0.2,
    generator: torch.Generator | None = None,
    eps: float = 1e-10,
) -> Tensor:
    """Vanilla complementary (negative) learning: one random negative per query, per sample.

    ``l_i = phi(P_i2t[i, j_i]) + phi(P_t2i[i, j_i])`` with one uniformly drawn ``j_i != i``
    (the same for both directions), i.e. :func:`complementary_contrastive_loss` with
    ``|Omega_i| = 1``. ``loss="log"`` is NLNL's negative learning ``-log(1 - p)`` (RCL Table 7
    "NL"); ``loss="mae"`` is RCL Table 6's ``L*_mae`` (the "vanilla" MAE that the text
    contrasts with the multi-negative one). Needs B >= 2. Reduction: **mean** over samples.
    """
    batch = check_square(sims)
    if batch < 2:
        raise ValueError(f"`sims` needs B >= 2 to draw a negative, got B={batch}")
    _check_ccl_args(loss, q)
    log_i2t, log_t2i = log_matching_probabilities(sims, tau, eps)
    negatives = sample_negatives(batch, 1, generator=generator, device=sims.device)  # (B, 1)
    return _complementary_terms(log_i2t, log_t2i, negatives, loss, q, eps)


def rcl_ablation_loss(
    sims: Tensor,
    variant: AblationVariant,
    tau: float = 0.05,
    margin: float = 0.2,
    generator: torch.Generator | None = None,
    eps: float = 1e-10,
) -> Tensor:
    """The loss swaps of RCL's ablations (Table 7, plus Table 6's single-negative MAE), per sample.

    * ``"tr"``: Table 7 "TR", hinge triplet summed over all negatives, margin ``margin``
      (official ``--loss max-margin`` with ``max_violation`` off). Official reduction: **sum**.
    * ``"tr_hn"``: Table 7 "TR-HN", the same with the hardest negative (VSE++). **sum**.
    * ``"cl"``: Table 7 "CL", contrastive loss Eq. 8 = symmetric InfoNCE (official
      ``--loss infoNCE``). **mean**.
    * ``"nl"``: Table 7 "NL", negative learning with one random negative,
      ``-log(1 - p + eps)``. **mean**.
    * ``"mae_single"``: Table 6 ``L*_mae``, MAE with one random negative. **mean**.
    * ``"ccl"``: Table 7 "CCL" (= Table 6 ``L_log``), :func:`complementary_contrastive_loss`
      with ``loss="log"`` and all negatives. **mean**.

    Table 6's other rows (``L_mae``, ``L_exp``, ``L_log``, ``L_gce``, ``L_tan``) are
    :func:`complementary_contrastive_loss` with the matching ``loss``. ``RCL_ABLATION_REDUCTION``
    maps each variant to its official reduction.

    Args:
        sims: (B, B) similarities.
        variant: see above.
        tau: temperature for the softmax-based variants.
        margin: triplet margin for ``tr``/``tr_hn``.
        generator: RNG for the single-negative variants.
        eps: the official guard of the softmax-based variants.

    Returns:
        (B,) per-sample losses.
    """
    check_choice(variant, get_args(AblationVariant), "variant")
    if variant == "tr":
        return triplet_loss(sims, margin, negatives="sum")
    if variant == "tr_hn":
        return triplet_loss(sims, margin, negatives="hardest")
    if variant == "cl":
        return info_nce(sims, tau, eps=eps).loss
    if variant == "ccl":
        return complementary_contrastive_loss(sims, tau, loss="log", eps=eps)
    kind: ComplementaryKind = "log" if variant == "nl" else "mae"
    return single_negative_loss(sims, tau, loss=kind, generator=generator, eps=eps)
