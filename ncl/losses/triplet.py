"""Hinge-based triplet ranking losses (VSE++ / NCR / LNC), per sample.

Conventions: ``sims`` is a (B, B) similarity matrix, rows = images, columns = captions,
diagonal = annotated pairs. Every loss returns a per-sample tensor of shape (B,), where sample
``i`` is pair ``i`` (row ``i`` and column ``i``); the caller reduces it.

Spec: reference_spec.md section 4.2.1 (hinge matrix with a possibly soft margin), 4.2.7
(paper-intent versus official 2023 soft margins); LNC (IJCV 2024) Eq. 10-11.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from torch import Tensor

from ncl.losses._checks import check_choice, check_square

Negatives = Literal["hardest", "sum", "mean"]
SoftMarginMode = Literal["per_sample", "official_2023"]
RecastKind = Literal["linear", "exponential", "sin", "sigmoid"]
#: NCR's soft margins (spec 4.2.7): the paper's per sample, or one of three released codes.
NcrMarginMode = Literal["per_sample", "official_2023", "official_2022_p0", "official_2021_fixed"]


def _margin_tensor(margin: float | Tensor, batch: int, like: Tensor, name: str) -> Tensor:
    """Turn a margin into a tensor broadcastable against (B, B): scalar, (B,1), (1,B) or (B,B).

    A 1-D (B,) margin is refused on purpose: it would silently broadcast as a row (1, B),
    i.e. be indexed by the caption, which is rarely what the caller meant.
    """
    if isinstance(margin, Tensor):
        allowed = {(), (batch, 1), (1, batch), (batch, batch)}
        if tuple(margin.shape) not in allowed:
            raise ValueError(
                f"`{name}` must be a scalar or have shape (B, 1), (1, B) or (B, B) with "
                f"B={batch}, got shape {tuple(margin.shape)}"
            )
        return margin.to(device=like.device, dtype=like.dtype)
    if isinstance(margin, bool) or not isinstance(margin, (int, float)):
        raise ValueError(f"`{name}` must be a float or a tensor, got {type(margin).__name__}")
    if not math.isfinite(float(margin)):
        raise ValueError(f"`{name}` must be finite, got {margin}")
    # torch.full, not torch.tensor(value, device=...): no blocking host-to-device copy
    return torch.full((), float(margin), device=like.device, dtype=like.dtype)


def _hinge_pair(sims: Tensor, margin_s: Tensor, margin_im: Tensor) -> tuple[Tensor, Tensor]:
    """Both hinge matrices with (possibly different) broadcastable margins; diagonals zeroed."""
    diag = sims.diagonal()  # (B,)
    cost_s = (margin_s + sims - diag.unsqueeze(1)).clamp(min=0)  # anchor image i: S_ii per row
    cost_im = (margin_im + sims - diag.unsqueeze(0)).clamp(min=0)  # anchor caption j: S_jj per col
    eye = torch.eye(sims.shape[0], dtype=torch.bool, device=sims.device)
    # masked_fill (not multiply) so that the zeroed diagonal carries no gradient at all.
    return cost_s.masked_fill(eye, 0.0), cost_im.masked_fill(eye, 0.0)


def _aggregate(cost_s: Tensor, cost_im: Tensor, negatives: str) -> Tensor:
    """Per-sample l_i = agg_j C_s[i, j] + agg_r C_im[r, i]  -> (B,)."""
    if negatives == "hardest":
        return cost_s.max(dim=1).values + cost_im.max(dim=0).values
    if negatives == "sum":
        return cost_s.sum(dim=1) + cost_im.sum(dim=0)
    # "mean": over all B entries including the zero diagonal (divides by B, not B-1).
    return cost_s.mean(dim=1) + cost_im.mean(dim=0)


def hinge_matrices(sims: Tensor, margin: float | Tensor) -> tuple[Tensor, Tensor]:
    """The two hinge (violation) matrices of spec 4.2.1.

    ``C_s[i, j]  = [M_ij + S_ij - S_ii]_+``  (image i is the anchor, caption j the negative)
    ``C_im[i, j] = [M_ij + S_ij - S_jj]_+``  (caption j is the anchor, image i the negative)

    Both diagonals are set to 0.

    Args:
        sims: (B, B) similarities, rows = images, columns = captions.
        margin: a float, a 0-d tensor, or a tensor of shape (B, 1), (1, B) or (B, B),
            broadcast against ``sims`` exactly as the official code does.

    Returns:
        ``(C_s, C_im)``, each (B, B).

    Raises:
        ValueError: on a non-square ``sims`` or a margin of another shape.
    """
    batch = check_square(sims)
    m = _margin_tensor(margin, batch, sims, "margin")
    return _hinge_pair(sims, m, m)


def triplet_loss(
    sims: Tensor, margin: float | Tensor = 0.2, negatives: Negatives = "hardest"
) -> Tensor:
    """Per-sample hinge triplet ranking loss (VSE++ and NCR's fixed-margin modes).

    ``l_i = agg_j C_s[i, j] + agg_r C_im[r, i]`` with the matrices of :func:`hinge_matrices`.

    * ``"hardest"``: agg = max (VSE++ max-violation; NCR "train" mode, RCL ``max-margin`` with
      ``max_violation`` on, RCL Table 7 "TR-HN").
    * ``"sum"``: agg = sum over the B-1 negatives (RCL ``max-margin`` with ``max_violation``
      off, RCL Table 7 "TR").
    * ``"mean"``: agg = mean over all B entries *including the zero diagonal*, i.e. divided by B
      (NCR "warmup" and "eval_loss" modes, spec 4.2.1).

    Reduction used by the official code: a **sum** over samples (NCR warm-up/train, VSE++,
    RCL ``max-margin``); NCR's eval_loss keeps the per-sample vector for the GMM.

    Args:
        sims: (B, B) similarities.
        margin: scalar or broadcastable margin (see :func:`hinge_matrices`); default 0.2.
        negatives: aggregation over negatives, see above.

    Returns:
        (B,) per-sample losses.
    """
    check_choice(negatives, get_args(Negatives), "negatives")
    cost_s, cost_im = hinge_matrices(sims, margin)
    return _aggregate(cost_s, cost_im, negatives)


def soft_margin_triplet_loss(
    sims: Tensor,
    soft_margins: Tensor,
    mode: SoftMarginMode = "per_sample",
    negatives: Negatives = "hardest",
) -> Tensor:
    """Soft-margin triplet loss of NCR / LNC Eq. 10 (hardest negatives by default).

    LNC Eq. 10: ``L_i = [a_i - S(v_i,t_i) + S(v_i, t_h)]_+ + [a_i - S(v_i,t_i) + S(v_h, t_i)]_+``
    with ``t_h``/``v_h`` the hardest in-batch negatives of the pair ``i``.

    * ``mode="per_sample"`` (paper intent, spec 4.2.7): ``soft_margins`` has shape (B,) and
      holds ``a_i = Psi(y_i)`` for pair ``i``. The margin of ``C_s`` row ``i`` (anchor image
      ``i``) is ``a_i``; the margin of ``C_im`` column ``j`` (anchor caption ``j``) is ``a_j``.
      So each anchor always uses its own pair's margin, in both directions.
    * ``mode="official_2023"`` (released NCR code since commit 60256ba, spec 4.2.7):
      ``soft_margins`` is a (B, B) matrix ``M`` used element-wise in **both** hinge matrices:
      ``C_s[i,j] = [M_ij + S_ij - S_ii]_+`` and ``C_im[i,j] = [M_ij + S_ij - S_jj]_+``. In the
      labelled branch of the code ``M_ij = Psi(w_i + (1 - w_i) P_j)``, mixing the anchor's clean
      probability with the *negative's* memorisation score. A (B, 1) column is also accepted; it
      reproduces the code's unlabelled branch, where ``M_ij = Psi(y_i)`` is indexed by the image
      row, so ``C_im[i, j]`` (anchor caption ``j``) uses the *negative image's* margin, and the
      labelled branch of the 2022 code (``T_i = w_i + (1 - w_i) P_0``; the method's
      ``ncr_margin_mode="official_2022_p0"``).

    Reduction used by the official code: a **sum** over samples (NCR ``train`` mode).

    Args:
        sims: (B, B) similarities.
        soft_margins: (B,) for ``per_sample``; (B, B) or (B, 1) for ``official_2023``.
        mode: which of the two definitions above.
        negatives: aggregation over negatives; the papers use ``"hardest"``.

    Returns:
        (B,) per-sample losses.

    Raises:
        ValueError: on an unknown mode or a ``soft_margins`` shape that does not fit the mode.
    """
    batch = check_square(sims)
    check_choice(mode, get_args(SoftMarginMode), "mode")
    check_choice(negatives, get_args(Negatives), "negatives")
    if not isinstance(soft_margins, Tensor):
        raise ValueError(f"`soft_margins` must be a tensor, got {type(soft_margins).__name__}")
    if mode == "per_sample":
        if tuple(soft_margins.shape) != (batch,):
            raise ValueError(
                f"`soft_margins` must have shape (B,)=({batch},) in mode 'per_sample', "
                f"got {tuple(soft_margins.shape)}"
            )
        m = soft_margins.to(device=sims.device, dtype=sims.dtype)
        cost_s, cost_im = _hinge_pair(sims, m.unsqueeze(1), m.unsqueeze(0))
    else:
        if tuple(soft_margins.shape) not in {(batch, batch), (batch, 1)}:
            raise ValueError(
                f"`soft_margins` must have shape (B, B) or (B, 1) with B={batch} in mode "
                f"'official_2023', got {tuple(soft_margins.shape)}"
            )
        m = soft_margins.to(device=sims.device, dtype=sims.dtype)
        cost_s, cost_im = _hinge_pair(sims, m, m)
    return _aggregate(cost_s, cost_im, negatives)


def psi4_boundary(target_clean: Tensor, target_noisy: Tensor | None) -> float:
    """``div`` of Psi4 (LNC Eq. 11): midpoint of the mean rectified label of the clean batch
    and that of the noisy batch ("adaptively determined by average values of noisy and clean
    subsets obtained by co-divide", LNC Sect. 3.4); the clean mean alone without a noisy batch.
    """
    clean = float(target_clean.mean())
    div = clean if target_noisy is None else (clean + float(target_noisy.mean())) / 2
    return min(max(div, 0.0), 1.0)


def soft_margin(
    labels: Tensor,
    alpha: float = 0.2,
    kind: RecastKind = "exponential",
    base: float = 10.0,
    div: float | None = None,
    sigmoid_slope: float = 10.0,
    sigmoid_slope_gain: float = 100.0,
) -> Tensor:
    """Recast rectified correspondence labels ``y`` in [0, 1] into margins (LNC Eq. 11).

    * ``"linear"``       Psi1 = ``alpha * y``
    * ``"exponential"``  Psi2 = ``alpha * (m^y - 1) / (m - 1)`` with ``m = base`` (LNC uses
      m = 10; NCR's ``--soft_margin exponential`` default, spec 4.2.1)
    * ``"sin"``          Psi3 = ``alpha * (sin(pi*y - pi/2) / 2 + 1/2)``
    * ``"sigmoid"``      Psi4 = ``alpha * sigmoid((c + g*(div - 0.5)) * (y - div))`` with
      ``c = sigmoid_slope`` (10 in LNC) and ``g = sigmoid_slope_gain`` (100 in LNC); ``div`` is
      the clean/noisy boundary, "the average value of the rectified correspondence to divide
      noisy subset and clean subset" (LNC Sect. 3.4), computed by the caller from co-divide.
      Note Psi4 is not 0 at y = 0 (it is ``alpha * sigmoid(-(c + g(div-0.5)) div)``).

    Args:
        labels: rectified labels of any shape, values in [0, 1] (e.g. (B,) per-sample targets or
            the (B, B) official_2023 target matrix).
        alpha: the largest margin (0.2 in NCR/LNC).
        kind: recasting function.
        base: ``m`` of Psi2, must be > 1.
        div: boundary of Psi4, in [0, 1]; required for ``"sigmoid"``, ignored otherwise.
        sigmoid_slope: ``c`` of Psi4.
        sigmoid_slope_gain: ``g`` of Psi4.

    Returns:
        Margins with the shape of ``labels``.

    Raises:
        ValueError: on labels outside [0, 1], ``base <= 1``, a missing ``div`` for sigmoid, etc.
    """
    check_choice(kind, get_args(RecastKind), "kind")
    if not isinstance(labels, Tensor) or not labels.is_floating_point():
        raise ValueError("`labels` must be a floating-point tensor")
    if labels.numel() and bool((labels < 0).any() | (labels > 1).any() | labels.isnan().any()):
        raise ValueError("`labels` must lie in [0, 1] (rectified correspondence)")
    if not math.isfinite(float(alpha)) or alpha < 0:
        raise ValueError(f"`alpha` must be a finite number >= 0, got {alpha}")
    if kind == "linear":
        return alpha * labels
    if kind == "exponential":
        if not (math.isfinite(float(base)) and base > 1.0):
            raise ValueError(f"`base` (m of Psi2) must be a finite number > 1, got {base}")
        return alpha * (torch.pow(base, labels) - 1.0) / (base - 1.0)
    if kind == "sin":
        return alpha * (torch.sin(math.pi * labels - math.pi / 2) / 2 + 0.5)
    if div is None or not 0.0 <= float(div) <= 1.0:
        raise ValueError(f"`div` must be a float in [0, 1] for kind='sigmoid', got {div}")
    slope = sigmoid_slope + sigmoid_slope_gain * (float(div) - 0.5)
    return alpha * torch.sigmoid(slope * (labels - float(div)))


def ncr_soft_margins(target: Tensor, mode: NcrMarginMode, alpha: float = 0.2,
                     kind: RecastKind = "exponential", base: float = 10.0,
                     div: float | None = None) -> Tensor:
    """Soft margins ``Psi(target)`` (LNC Eq. 11) shaped for NCR's margin ``mode`` (spec 4.2.7).

    A ``(B,)`` target stays ``(B,)`` in ``per_sample`` mode (each anchor its own margin) and
    becomes the code's ``(B, 1)`` column, indexed by the image row in both hinges, in the
    ``official_*`` modes; ``official_2023``'s ``(B, B)`` labelled targets stay ``(B, B)``.
    ``official_2021_fixed`` gives the fixed ``alpha`` as a ``(B, 1)`` column whatever the
    targets: the code of 2021 built ``Psi(target)`` and then used its fixed margin.
    """
    check_choice(mode, get_args(NcrMarginMode), "mode")
    if mode == "official_2021_fixed":
        return torch.full((target.shape[0], 1), float(alpha), dtype=target.dtype,
                          device=target.device)
    m = soft_margin(target, alpha=alpha, kind=kind, base=base, div=div)
    return m.unsqueeze(1) if mode != "per_sample" and m.dim() == 1 else m


def ncr_soft_triplet(sims: Tensor, margins: Tensor, mode: NcrMarginMode) -> Tensor:
    """NCR's hardest-negative soft-margin triplet (LNC Eq. 10; spec 4.2.1 "train", which sums
    it) with the margins :func:`ncr_soft_margins` shaped for ``mode``: ``(B,)`` per anchor in
    ``per_sample``, else the code's ``(B, 1)`` column or ``(B, B)`` matrix, both read in
    :func:`soft_margin_triplet_loss`'s ``official_2023`` layout. Returns ``(B,)``."""
    layout = "per_sample" if mode == "per_sample" else "official_2023"
    return soft_margin_triplet_loss(sims, margins, layout, "hardest")
