"""BiCro's losses (Yang et al., CVPR 2023; docs/methods/bicro.md), per sample.

Conventions as :mod:`ncl.losses.triplet`: ``sims`` is ``(B, B)``, rows images, columns
captions, the diagonal the annotated pairs; every function returns ``(B,)`` and the caller sums
(the official ``ContrastiveLoss`` sums every mode used in training).

* :func:`selected_warmup_loss` - the warm-up's ``warmup_sele``: each pair's mean hinge
  ``l_i = mean_j C_s[i, j] + mean_r C_im[r, i]`` (fixed margin, zeroed diagonals, means over
  all ``B`` entries), kept for the ``int(B * rate)`` smallest and zeroed elsewhere.
* :func:`bicro_soft_triplet` - the co-training loss: the hardest-negative hinge with a soft
  margin ``f(y) = alpha (m^y - 1) / (m - 1)`` per pair (``m`` 10, the exponential recast).
  The official code broadcasts its ``(B,)`` margins as a row in *both* hinges
  (``margin.t()`` is a no-op on a 1-D tensor), so ``C_s[i, j] = [f(y_j) + S_ij - S_ii]_+``
  uses the margin of the negative caption ``j`` (``caption_margin="official"``);
  ``"anchor"`` gives ``C_s`` the anchor image's own ``f(y_i)``.
  ``C_im[i, j] = [f(y_j) + S_ij - S_jj]_+`` (anchor caption ``j``) is the same in both.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

from ncl.losses._checks import check_choice, check_square
from ncl.losses.triplet import RecastKind, soft_margin, soft_margin_triplet_loss, triplet_loss

#: Which margin ``C_s`` (anchor image ``i``, negative caption ``j``) uses.
CaptionMargin = Literal["official", "anchor"]


def selected_warmup_loss(sims: Tensor, margin: float = 0.2, rate: float = 0.3) -> Tensor:
    """BiCro's warm-up loss (official ``warmup_sele``) per pair.

    ``l_i`` is the mean hinge of pair ``i`` (:func:`~ncl.losses.triplet.triplet_loss` with
    ``negatives="mean"``); the ``k = int(B * rate)`` pairs with the smallest ``l_i`` keep it,
    every other pair gets 0 (no gradient). Ties at the cut are broken by ``torch.topk``.

    Args:
        sims: ``(B, B)`` similarities.
        margin: the fixed margin (0.2).
        rate: the kept fraction (official scripts 0.3, parser default 0.5), in [0, 1].

    Returns:
        ``(B,)``; the official loss is its sum.
    """
    batch = check_square(sims)
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"`rate` must lie in [0, 1], got {rate}")
    losses = triplet_loss(sims, margin, negatives="mean")  # (B,)
    k = int(batch * rate)
    keep = torch.zeros(batch, dtype=torch.bool, device=sims.device)
    if k > 0:
        keep[torch.topk(losses.detach(), k, largest=False).indices] = True
    return losses.masked_fill(~keep, 0.0)


def bicro_soft_triplet(sims: Tensor, labels: Tensor, caption_margin: CaptionMargin = "official",
                       alpha: float = 0.2, kind: RecastKind = "exponential",
                       base: float = 10.0) -> Tensor:
    """BiCro's co-training loss per pair (official ``noise_soft`` / ``train`` modes, hardest
    negatives): ``l_i = max_j C_s[i, j] + max_r C_im[r, i]`` with the soft margins of the
    module docstring.

    Args:
        sims: ``(B, B)`` similarities.
        labels: ``(B,)`` soft correspondence labels ``y`` in [0, 1].
        caption_margin: ``official`` (``C_s`` row ``i`` uses ``f(y_j)``, the negative's) or
            ``anchor`` (``f(y_i)``, the anchor's own).
        alpha: the largest margin (0.2).
        kind: the recast ``f`` (``exponential``, official; ``linear`` and ``sin`` too).
        base: ``m`` of the exponential recast (10).

    Returns:
        ``(B,)``; the official loss is its sum.
    """
    batch = check_square(sims)
    check_choice(caption_margin, get_args(CaptionMargin), "caption_margin")
    if kind == "sigmoid":
        raise ValueError("`kind` 'sigmoid' (LNC's Psi4) is not one of BiCro's recasts")
    if not isinstance(labels, Tensor) or tuple(labels.shape) != (batch,):
        raise ValueError(f"`labels` must be a (B,)=({batch},) tensor, "
                         f"got {tuple(getattr(labels, 'shape', ()))}")
    margins = soft_margin(labels.to(sims.dtype), alpha=alpha, kind=kind, base=base)  # (B,)
    if caption_margin == "anchor":
        return soft_margin_triplet_loss(sims, margins, "per_sample", "hardest")
    # the code's row broadcast: M[i, j] = f(y_j) in both hinge matrices
    return soft_margin_triplet_loss(sims, margins.unsqueeze(0).expand(batch, batch),
                                    "official_2023", "hardest")
