"""GSC's ``ncl predict`` ranking, ``structure`` (docs/methods/gsc.md, "Ranking the pairs"):
the pairs of a split ranked by the consistency of their image and caption structures, divided
as GSC's end-of-epoch ``split_batch`` divides them. Declared by :class:`~ncl.methods.gsc.GSC`
(its default); the interface is :class:`ncl.evaluation.ranking.Ranking`.

Per scoring batch of ``B`` pairs (eval mode; the co-divide's batches, ``--batch_size``), as a
GSC training step computes the stored score (:mod:`ncl.losses.gsc`) with every target 1::

    A = sigmoid(S_img)          B = sigmoid(S_cap)          ((B, B): ncl.models.gsc_structure)
    structure_score[i] = cos(A[i, :], B[i, :])

Over the whole split: ``clean_probability`` is the posterior of the higher-mean component of
the official two-component GMM on the min-max normalised scores
(:func:`ncl.division.gsc.structure_posterior`, seed 0). Rows: ``clean_probability``
ascending, ties (the GMM gives many exact 0s and 1s) by ``structure_score`` ascending, then
caption index. Predicted clean iff ``clean_probability > 0.5`` (the official split's print).

Choices (docs/methods/gsc.md): targets are 1, not the run's training targets (those exist for
the training pairs only, and weighting would rank by the run's earlier division again);
scores from eval mode, not the training steps' train-mode values (no dropout draws; any split);
the GMM posterior, not the raw score, as the order (GSC divides with it, and it gives the
detection a threshold), the raw score kept as a column and as the tie-break.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from ncl.division.gsc import structure_posterior
from ncl.errors import ConfigError
from ncl.evaluation.ranking import Ranking, Values, batch_size_range
from ncl.losses.gsc import structure_matrices, structure_scores
from ncl.models.contracts import encode_images
from ncl.models.gsc_structure import caption_structure, image_structure

CLEAN_ABOVE = 0.5  # posterior above this = predicted clean (the official split's ``prob > 0.5``)


def batch_structure_scores(net: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    """``(B,)`` float64 structure score of each pair of a collated batch: the cosine of its
    rows of ``sigmoid(S_img)`` and ``sigmoid(S_cap)`` (every target 1).

    Args:
        net: an SGRAF network (``sim_enc`` scores the structures).
        batch: ``images`` ``(B, R, D)``, ``tokens`` ``(B, L)``, ``lengths`` ``(B,)``.
    """
    img = encode_images(net, batch)  # (B, R, E)
    cap = net.encode_captions(batch["tokens"], batch["lengths"])  # (B, L, E)
    lengths = [int(n) for n in batch["lengths"].tolist()]
    ones = torch.ones(img.shape[0], device=img.device)  # (B,) targets
    a, b = structure_matrices(image_structure(net.sim_enc, img),
                              caption_structure(net.sim_enc, cap, lengths), ones)  # (B, B) each
    return structure_scores(a, b).double()


def structure_order(prob: np.ndarray, score: np.ndarray) -> np.ndarray:
    """``(N,)`` int64 permutation: ``prob`` ascending, then ``score`` ascending, then index."""
    prob, score = np.asarray(prob, dtype=np.float64), np.asarray(score, dtype=np.float64)
    if prob.shape != score.shape or prob.ndim != 1:
        raise ValueError(f"prob and score must be equal-length vectors, got {prob.shape} and {score.shape}")
    index = np.arange(prob.shape[0])
    return np.lexsort((index, score, prob)).astype(np.int64)  # last key is the primary one


class StructureRanking(Ranking):
    """``structure``: GSC's structure-consistency GMM (module docstring)."""

    name = "structure"
    columns = ("clean_probability", "structure_score")
    summary_head: ClassVar[dict[str, object]] = {"ranking": "structure", "threshold": CLEAN_ABOVE}
    noisy_rule = f"structure clean probability <= {CLEAN_ABOVE} (GSC's split)"

    def check(self, model: Any) -> None:
        """Raise ConfigError unless ``model.net`` has SGRAF's similarity head."""
        if not hasattr(getattr(getattr(model, "net", None), "sim_enc", None), "sim_eval_w"):
            raise ConfigError(f"--ranking structure needs one SGRAF network (model.net with a "
                              f"similarity head), got {type(model).__name__}")

    def predict(self, model: Any, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """``{"scores": (B, B) float64, "structure": (B,) float64}``."""
        return {"scores": model.batch_scores(batch), "structure": batch_structure_scores(model.net, batch)}

    def batch_values(self, prediction: dict[str, Tensor]) -> dict[str, Tensor]:
        return {"structure_score": prediction["structure"].double()}

    def split_values(self, values: Values) -> Values:
        posterior = structure_posterior(torch.from_numpy(values["structure_score"]), seed=0)
        return {"clean_probability": posterior.numpy().astype(np.float64)}

    def order(self, values: Values) -> np.ndarray:
        return structure_order(values["clean_probability"], values["structure_score"])

    def predicted_clean(self, values: Values) -> np.ndarray:
        return np.asarray(values["clean_probability"]) > CLEAN_ABOVE

    def headline(self, values: Values, split: str, batch_sizes: Sequence[int]) -> str:
        n_noisy = int((~self.predicted_clean(values)).sum())
        return (f"{len(values['image'])} pairs of the {split} split ranked by GSC structure "
                f"consistency (batches of {batch_size_range(batch_sizes)}), {n_noisy} with "
                f"structure clean probability <= {CLEAN_ABOVE}")


STRUCTURE = StructureRanking()
