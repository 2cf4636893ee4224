"""DECL's ``ncl predict`` ranking, ``uncertainty`` (spec 4.6): the pairs of a split ranked by
DECL's Dirichlet uncertainty of the scoring batch's evidence, with DECL's argmax prediction.
Declared by :class:`~ncl.methods.decl.DECL` (its default) and by
:class:`~ncl.methods.pretrained.Pretrained` (for DECL checkpoints); the interface is
:class:`ncl.evaluation.ranking.Ranking`.

From a batch's averaged evidence ``e`` (``B x B``, images x captions, float64; the model's
``scores_and_evidence``), with ``K = B`` the batch's size
(:func:`ncl.losses.decl.uncertainty_values`):

* uncertainty ``u_i = K / sum_j alpha_i2t[i, j] + K / sum_j alpha_t2i[i, j]``,
  ``alpha_i2t = e + 1``, ``alpha_t2i = e^T + 1`` (both directions, as DECL's code sums them);
  in ``(0, 2]``, larger = less evidence = more suspicious;
* prediction: ``N = e + e^T`` normalised by its row sums; pair ``i`` is predicted clean iff
  ``argmax_j N[i, j] == i`` (the first maximum on ties), i.e. its own caption holds the top
  evidence of the batch (DECL's per-epoch correspondence prediction).

No GMM is fitted. The rows (caption index, image index, caption, uncertainty, predicted clean,
similarity, loss) are written by uncertainty descending, ties by caption index ascending. The
metrics are the precision/recall/F1 of DECL's prediction (noisy = not the argmax) and the
top-k precision of the uncertainty order. Both values depend on the batch: ``K`` is the
scoring batch's size (``--batch_size``, default the training batch size, 128 in DECL's
configs; the last batch holds the rest, one more pair when one would be left alone), and the
other pairs of the batch are the "classes" of the Dirichlet.

The model must give DECL evidence: a DECL run, or ``Pretrained`` whose ``combine`` resolves
to ``"evidence"`` (every checkpoint a DECL one under ``auto``, or ``model.combine:
evidence``); :meth:`UncertaintyRanking.check` says which otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from torch import Tensor

from ncl.errors import ConfigError
from ncl.evaluation.ranking import Ranking, Values, batch_size_range
from ncl.losses.decl import uncertainty_values


def uncertainty_order(uncertainty: np.ndarray) -> np.ndarray:
    """Row order from most to least suspicious by DECL uncertainty.

    Args:
        uncertainty: ``(N,)`` DECL uncertainties.

    Returns:
        ``(N,)`` int64 permutation: ``uncertainty`` descending, ties by index (caption index)
        ascending.
    """
    uncertainty = np.asarray(uncertainty, dtype=np.float64)
    if uncertainty.ndim != 1:
        raise ValueError(f"uncertainty must be a vector, got shape {uncertainty.shape}")
    index = np.arange(uncertainty.shape[0])
    return np.lexsort((index, -uncertainty)).astype(np.int64)  # last key is the primary one


class UncertaintyRanking(Ranking):
    """``uncertainty``: DECL's Dirichlet uncertainty of the batch's evidence (module docstring)."""

    name = "uncertainty"
    columns = ("uncertainty", "predicted_clean")
    summary_head: ClassVar[dict[str, object]] = {"ranking": "uncertainty", "prediction": "argmax"}
    noisy_rule = "not the argmax (DECL)"
    order_label = " of the uncertainty order"

    def check(self, model: Any) -> None:
        """Raise ConfigError unless ``model``'s batch matrices are DECL evidence (its
        ``rule`` is ``"evidence"``): DECL's uncertainty is defined on evidence, not on
        sigmoid scores."""
        rule = getattr(model, "rule", None)
        if rule == "evidence":
            return
        name = f"{type(model).__module__}.{type(model).__name__}"
        if "combine" not in getattr(model, "hparams", {}):  # a trained method: DECL alone gives evidence
            raise ConfigError(f"--ranking uncertainty needs DECL evidence, but {name} gives "
                              f"sigmoid scores (only DECL's are evidence); use --ranking gmm")
        combine = model.hparams.get("combine", "auto")
        raise ConfigError(f"--ranking uncertainty needs DECL evidence, but model.combine "
                          f"{combine} resolved to {rule!r} (not every checkpoint is a DECL "
                          f"checkpoint, or combine is forced to score); use DECL checkpoints, "
                          f"--model.combine evidence, or --ranking gmm")

    def predict(self, model: Any, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """``{"scores", "evidence"}``, each ``(B, B)`` float64, from one pass of the networks."""
        scores, evidence = model.scores_and_evidence(batch)
        return {"scores": scores, "evidence": evidence}

    def batch_values(self, prediction: dict[str, Tensor]) -> dict[str, Tensor]:
        uncertainty, predicted_clean = uncertainty_values(prediction["evidence"])  # (B,), (B,)
        return {"uncertainty": uncertainty, "predicted_clean": predicted_clean}

    def order(self, values: Values) -> np.ndarray:
        return uncertainty_order(values["uncertainty"])

    def predicted_clean(self, values: Values) -> np.ndarray:
        return np.asarray(values["predicted_clean"], dtype=bool)

    def headline(self, values: Values, split: str, batch_sizes: Sequence[int]) -> str:
        n_noisy = int((~self.predicted_clean(values)).sum())
        return (f"{len(values['image'])} pairs of the {split} split ranked by DECL uncertainty "
                f"(K = batch size {batch_size_range(batch_sizes)}), {n_noisy} predicted noisy "
                f"(own caption not the batch's top evidence)")


UNCERTAINTY = UncertaintyRanking()
