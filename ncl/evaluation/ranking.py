"""``ncl predict``: rank the pairs of a split from most to least likely mismatched.

``ncl predict --config configs/eval_sgraf_f30k.yaml [--config FILE ...] [--key value ...]
--out suspicious.csv [--split train|dev|test] [--batch_size N] [--margin M]``

LightningCLI's ``predict`` subcommand (:class:`ncl.cli.app.NclCLI`). The model section must be
:class:`ncl.methods.pretrained.Pretrained` (the ``eval_*`` configs): its ``model.checkpoints``
(ncl ``.ckpt`` of any method, official ``.pth.tar``) give the networks. The data section is the
DataModule the checkpoints were trained on; on the training split its noise is injected exactly
as ``ncl fit`` injects it (``noise_type``, ``noise_ratio``, ``noise_seed`` or ``noise_file``),
and CC152K's noise is the real one.

Per pair, over batches of the training batch size in eval mode (as NCR's co-divide):

* similarity: the diagonal entry of the networks' batch score matrix, averaged as
  ``ncl test`` averages (within a checkpoint, then over checkpoints);
* loss: NCR's per-sample mean hinge (:func:`ncl.losses.triplet_loss`, ``negatives="mean"``)
  of that averaged matrix;
* clean probability: the official two-component GMM on the losses of the whole split
  (:func:`ncl.division.gmm_clean_probability`).

The rows (caption index, image index, caption, clean probability, similarity, loss) are
written sorted by clean probability ascending. When the DataModule knows its clean mask
(synthetic or injected noise), the precision/recall/F1 of "clean probability < 0.5 = noisy"
and the precision of the top-k rows go to the screen and to ``<out stem>.metrics.json``.

``--ranking uncertainty`` (DECL checkpoints, spec 4.6) ranks by DECL's Dirichlet uncertainty
instead; no GMM is fitted. It needs the batch matrices to be DECL evidence: the Pretrained
model's ``combine`` must resolve to ``"evidence"`` (every checkpoint a DECL one under
``auto``, or ``model.combine: evidence``). From a batch's averaged evidence ``e`` (``B x B``,
images x captions, float64; :meth:`~ncl.methods.pretrained.Pretrained.batch_evidence`), with
``K = B`` the batch's size:

* uncertainty ``u_i = K / sum_j alpha_i2t[i, j] + K / sum_j alpha_t2i[i, j]``,
  ``alpha_i2t = e + 1``, ``alpha_t2i = e^T + 1`` (both directions, as DECL's code sums them);
  in ``(0, 2]``, larger = less evidence = more suspicious;
* prediction: ``N = e + e^T`` normalised by its row sums; pair ``i`` is predicted clean iff
  ``argmax_j N[i, j] == i`` (the first maximum on ties), i.e. its own caption holds the top
  evidence of the batch (DECL's per-epoch correspondence prediction).

The rows (caption index, image index, caption, uncertainty, predicted clean, similarity,
loss) are written by uncertainty descending, ties by caption index ascending. The metrics are
the precision/recall/F1 of DECL's prediction (noisy = not the argmax) and the top-k precision
of the uncertainty order. Both values depend on the batch: ``K`` is the scoring batch's size
(``--batch_size``, default the training batch size, 128 in DECL's configs; the last batch
holds the rest, one more pair when one would be left alone), and the other pairs of the batch
are the "classes" of the Dirichlet.

Who does what: the DataModule's ``predict_dataloader`` serves the split in the batches of
:class:`~ncl.data.predict_split.ScoringBatchSampler`; ``Pretrained.predict_step`` gives each
batch's averaged score matrix (and its averaged evidence under ``--ranking uncertainty``);
:class:`ncl.callbacks.prediction_writer.RankedPairsWriter` (whose options are ``--out``,
``--split``, ``--batch_size``, ``--margin``, ``--ranking``) turns the matrices into per-pair
values, fits the GMM once every batch is in (``gmm``), and writes the table with the pure
functions of this module. One device only: the ranking needs the whole split in one process.

This module holds the pure parts (no files, no printing, no Lightning): per-pair values,
orders, detection summaries and the table's columns. The split's batches live with the
data (:mod:`ncl.data.predict_split`); the options, the files and the lines printed about
them in :mod:`ncl.evaluation.ranked_output`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ncl.division import gmm_clean_probability
from ncl.losses import triplet_loss
from ncl.losses.decl import correspondence_statistics
from ncl.metrics.noise_detection import detection_metrics

RANKINGS = ("gmm", "uncertainty")
COLUMNS = ("caption_index", "image_index", "caption", "clean_probability", "similarity", "loss")
UNCERTAINTY_COLUMNS = ("caption_index", "image_index", "caption", "uncertainty", "predicted_clean",
                       "similarity", "loss")
NOISY_BELOW = 0.5  # clean probability under this = predicted noisy (the methods' threshold)
TOP_K = 100
DEFAULT_MARGIN = 0.2  # NCR's margin of the mean hinge its co-divide fits the GMM on


# ------------------------------------------------------------------ per-pair values
def pair_values(scores: Tensor, margin: float = DEFAULT_MARGIN) -> tuple[Tensor, Tensor]:
    """``(similarity, loss)``, each ``(B,)``, of a batch's pairs from its ``(B, B)`` score
    matrix (images x captions, pair ``i`` on the diagonal): the diagonal, and NCR's mean
    hinge with in-batch negatives."""
    return scores.diagonal(), triplet_loss(scores, margin=margin, negatives="mean")


def _check_square(evidence: Tensor) -> None:
    if evidence.ndim != 2 or evidence.shape[0] != evidence.shape[1] or evidence.shape[0] == 0:
        raise ValueError(f"evidence must be a non-empty (B, B) matrix, got {tuple(evidence.shape)}")


def dirichlet_uncertainty(evidence: Tensor) -> Tensor:
    """DECL's uncertainty of each pair of a batch (spec 4.6.1, both directions summed):
    ``u_i = K / sum_j alpha_i2t[i, j] + K / sum_j alpha_t2i[i, j]`` with ``alpha_i2t = e + 1``,
    ``alpha_t2i = e^T + 1`` and ``K = B``, from
    :func:`ncl.losses.decl.correspondence_statistics` (the values DECL trains with, here in
    float64; DECL's own pass computes in ``model.prediction_precision``, float32 by default).

    Args:
        evidence: ``(B, B)`` evidence ``e`` (images x captions, pair ``i`` on the diagonal).

    Returns:
        ``(B,)`` float64 in ``(0, 2]``; 2 when the batch holds no evidence at all.
    """
    _check_square(evidence)
    # float64 as ever: the ensemble's evidence is float64 (docs/switches.md, "Ensemble precision")
    stats = correspondence_statistics(evidence.double())
    return stats[:, 1] + stats[:, 2]


def decl_predicted_clean(evidence: Tensor) -> Tensor:
    """DECL's correspondence prediction for each pair of a batch (spec 4.6.4):
    ``N = (e + e^T) / rowsum(e + e^T)``; pair ``i`` is predicted clean iff
    ``argmax_j N[i, j] == i`` (the first maximum when several tie), from
    :func:`ncl.losses.decl.correspondence_statistics`.

    Args:
        evidence: ``(B, B)`` evidence ``e`` (images x captions, pair ``i`` on the diagonal).

    Returns:
        ``(B,)`` bool, True = predicted clean.
    """
    _check_square(evidence)
    return correspondence_statistics(evidence.double())[:, 0] > 0.5


def uncertainty_values(evidence: Tensor) -> tuple[Tensor, Tensor]:
    """``(uncertainty, predicted_clean)``, each ``(B,)``, of a batch's pairs from its
    ``(B, B)`` evidence (:func:`dirichlet_uncertainty`, :func:`decl_predicted_clean`)."""
    return dirichlet_uncertainty(evidence), decl_predicted_clean(evidence)


@dataclass
class PairScores:
    """Per-pair values of one split, in caption order.

    Attributes:
        image: ``(N,)`` int64 image paired with each caption (after the noise).
        similarity: ``(N,)`` float64 averaged score of the pair.
        loss: ``(N,)`` float64 per-sample mean hinge.
        uncertainty: ``(N,)`` float64 DECL uncertainty (``--ranking uncertainty`` only).
        predicted_clean: ``(N,)`` bool DECL prediction (``--ranking uncertainty`` only).
    """

    image: np.ndarray
    similarity: np.ndarray
    loss: np.ndarray
    uncertainty: np.ndarray | None = None
    predicted_clean: np.ndarray | None = None


def clean_probability(loss: np.ndarray) -> np.ndarray:
    """``(N,)`` float64 GMM clean probability of every pair from its ``(N,)`` loss, fitted on
    the whole split at once (as the co-divide does)."""
    return gmm_clean_probability(torch.from_numpy(loss)).numpy().astype(np.float64)


# ------------------------------------------------------------------ pure ranking and metrics
def suspicion_order(prob: np.ndarray, loss: np.ndarray) -> np.ndarray:
    """Row order from most to least suspicious.

    Args:
        prob: ``(N,)`` clean probabilities.
        loss: ``(N,)`` per-sample losses; break ties of ``prob`` (many pairs get exactly 0
            or 1 from the GMM), the larger loss first.

    Returns:
        ``(N,)`` int64 permutation: ``prob`` ascending, then ``loss`` descending, then index.
    """
    prob, loss = np.asarray(prob, dtype=np.float64), np.asarray(loss, dtype=np.float64)
    if prob.shape != loss.shape or prob.ndim != 1:
        raise ValueError(f"prob and loss must be equal-length vectors, got {prob.shape} and {loss.shape}")
    index = np.arange(prob.shape[0])
    return np.lexsort((index, -loss, prob)).astype(np.int64)  # last key is the primary one


def uncertainty_order(uncertainty: np.ndarray) -> np.ndarray:
    """Row order from most to least suspicious under ``--ranking uncertainty``.

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


def top_k_precision(order: np.ndarray, true_clean: np.ndarray, k: int) -> float:
    """Fraction of truly noisy pairs among the first ``k`` of ``order`` (``k`` capped at N;
    0.0 for ``k = 0``)."""
    k = min(int(k), order.shape[0])
    if k <= 0:
        return 0.0
    return float((~true_clean[order[:k]]).mean())


def detection_summary(prob: np.ndarray, loss: np.ndarray, true_clean: np.ndarray,
                      top_k: int = TOP_K) -> dict[str, object]:
    """Noise-detection quality of a ranking against the ground truth (positives = noisy).

    Args:
        prob: ``(N,)`` clean probabilities; ``prob < 0.5`` is predicted noisy.
        loss: ``(N,)`` per-sample losses (tie-break of the ranking).
        true_clean: ``(N,)`` bool ground-truth clean mask.
        top_k: the fixed k of the top-k precision (100).

    Returns:
        ``precision``, ``recall``, ``f1`` (of the < 0.5 rule), counts, and
        ``top_k_precision``: ``{"k=<n_noisy>": ..., "k=<top_k>": ...}``.
    """
    true_clean = np.asarray(true_clean, dtype=bool)
    if true_clean.shape != np.shape(prob):
        raise ValueError(f"true_clean has shape {true_clean.shape}, prob {np.shape(prob)}")
    pred_clean = torch.from_numpy(np.asarray(prob) >= NOISY_BELOW)
    m = detection_metrics(pred_clean, torch.from_numpy(true_clean))
    order = suspicion_order(prob, loss)
    n_noisy = int((~true_clean).sum())
    return {"threshold": NOISY_BELOW, "n_pairs": int(true_clean.shape[0]), "n_noisy": n_noisy,
            "predicted_noisy": m["tp"] + m["fp"], "precision": m["precision"],
            "recall": m["recall"], "f1": m["f1"],
            "top_k_precision": {f"k={k}": top_k_precision(order, true_clean, k)
                                for k in (n_noisy, top_k)}}


def uncertainty_summary(uncertainty: np.ndarray, predicted_clean: np.ndarray,
                        true_clean: np.ndarray, top_k: int = TOP_K) -> dict[str, object]:
    """Noise-detection quality of DECL's prediction and uncertainty ranking (positives = noisy).

    Args:
        uncertainty: ``(N,)`` DECL uncertainties (the ranking, :func:`uncertainty_order`).
        predicted_clean: ``(N,)`` bool DECL prediction; not clean = predicted noisy.
        true_clean: ``(N,)`` bool ground-truth clean mask.
        top_k: the fixed k of the top-k precision (100).

    Returns:
        ``ranking``, ``prediction``, counts, ``precision``, ``recall``, ``f1`` (of the
        prediction), and ``top_k_precision``: ``{"k=<n_noisy>": ..., "k=<top_k>": ...}`` (of
        the uncertainty order).
    """
    true_clean = np.asarray(true_clean, dtype=bool)
    predicted_clean = np.asarray(predicted_clean, dtype=bool)
    if true_clean.shape != predicted_clean.shape or true_clean.shape != np.shape(uncertainty):
        raise ValueError(f"true_clean {true_clean.shape}, predicted_clean {predicted_clean.shape} "
                         f"and uncertainty {np.shape(uncertainty)} must have one shape")
    m = detection_metrics(torch.from_numpy(predicted_clean), torch.from_numpy(true_clean))
    order = uncertainty_order(uncertainty)
    n_noisy = int((~true_clean).sum())
    return {"ranking": "uncertainty", "prediction": "argmax", "n_pairs": int(true_clean.shape[0]),
            "n_noisy": n_noisy, "predicted_noisy": m["tp"] + m["fp"], "precision": m["precision"],
            "recall": m["recall"], "f1": m["f1"],
            "top_k_precision": {f"k={k}": top_k_precision(order, true_clean, k)
                                for k in (n_noisy, top_k)}}


# ------------------------------------------------------------------ output
def uncertainty_table(scores: PairScores, captions: Sequence[str]) -> dict[str, list]:
    """The ``--ranking uncertainty`` columns (:data:`UNCERTAINTY_COLUMNS`), rows most
    uncertain first (:func:`uncertainty_order`)."""
    if scores.uncertainty is None or scores.predicted_clean is None:
        raise ValueError("uncertainty_table needs scores.uncertainty and scores.predicted_clean")
    order = uncertainty_order(scores.uncertainty)
    return {"caption_index": order.tolist(), "image_index": scores.image[order].tolist(),
            "caption": [captions[i] for i in order],
            "uncertainty": scores.uncertainty[order].tolist(),
            "predicted_clean": scores.predicted_clean[order].tolist(),
            "similarity": scores.similarity[order].tolist(), "loss": scores.loss[order].tolist()}


def ranked_table(scores: PairScores, prob: np.ndarray, captions: Sequence[str]) -> dict[str, list]:
    """The output columns (:data:`COLUMNS`), rows most suspicious first."""
    order = suspicion_order(prob, scores.loss)
    return {"caption_index": order.tolist(), "image_index": scores.image[order].tolist(),
            "caption": [captions[i] for i in order], "clean_probability": prob[order].tolist(),
            "similarity": scores.similarity[order].tolist(), "loss": scores.loss[order].tolist()}
