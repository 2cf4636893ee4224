"""``ncl predict``: rank the pairs of a split from most to least likely mismatched.

``ncl predict --config <fit config> --ckpt_path best|last|FILE [--out FILE]`` or
``ncl predict --config configs/eval_sgraf_f30k.yaml [--config FILE ...] [--key value ...]
--out suspicious.csv [--split train|dev|test] [--batch_size N] [--margin M] [--ranking NAME]``

LightningCLI's ``predict`` subcommand (:class:`ncl.cli.app.NclCLI`). The model is a trained
method (a fit config and its checkpoint) or :class:`ncl.methods.pretrained.Pretrained` (the
``eval_*`` configs: ncl ``.ckpt`` of any method, official ``.pth.tar``). The data section is
the DataModule the checkpoints were trained on; on the training split its noise is injected
exactly as ``ncl fit`` injects it, and CC152K's noise is the real one.

Per pair, over batches of the training batch size in eval mode (as NCR's co-divide), every
ranking has:

* similarity: the diagonal entry of the networks' batch score matrix, averaged as
  ``ncl test`` averages (within a checkpoint, then over checkpoints);
* loss: NCR's per-sample mean hinge (:func:`ncl.losses.triplet_loss`, ``negatives="mean"``)
  of that averaged matrix.

**Rankings are strategies the methods declare.** A :class:`Ranking` says, in one object,
everything ``ncl predict`` needs to rank one way: its name (the value of ``--ranking``), what
the method must compute per batch (:meth:`Ranking.predict`, called by the method's
``predict_step``), the per-pair values it takes from that (:meth:`Ranking.batch_values`),
what it computes over the whole split (:meth:`Ranking.split_values`, e.g. a GMM), its own
table columns, the row order, which pairs it predicts clean, and the lines it prints. A
method lists the rankings it offers in its class attribute ``rankings``
(:class:`~ncl.methods.scoring.BatchScoring`; the first is the default of ``--ranking``): a
method adds a ranking by declaring a :class:`Ranking` in its own files and naming it there;
nothing here lists methods or rankings. The writer
(:class:`ncl.callbacks.prediction_writer.RankedPairsWriter`) and the output
(:mod:`ncl.evaluation.ranked_output`) work only through this interface.

The generic ranking, :data:`GMM` (``gmm``, every method's; the default of all but those that
divide otherwise): the official two-component GMM on the losses of the whole split
(:func:`ncl.division.gmm_clean_probability`) gives each pair its clean probability; the rows
(caption index, image index, caption, clean probability, similarity, loss) are sorted by
clean probability ascending, ties by loss descending, then caption index. Others live with
their methods: DECL's ``uncertainty`` (:mod:`ncl.methods.decl_ranking`), GSC's ``structure``
(:mod:`ncl.methods.gsc_ranking`).

When the DataModule knows its clean mask (synthetic or injected noise), the precision/recall/F1
of the ranking's prediction (noisy = not predicted clean; ``gmm``: clean probability < 0.5)
and the precision of the top-k rows of its order go to the screen and to
``<out stem>.metrics.json`` (:func:`ranking_summary`).

Who does what: the DataModule's ``predict_dataloader`` serves the split in the batches of
:class:`~ncl.data.predict_split.ScoringBatchSampler`; the method's ``predict_step`` gives
each batch's matrices (:meth:`Ranking.predict`); the writer turns them into per-pair values,
calls :meth:`Ranking.split_values` once every batch is in, and writes the table with the
pure functions of this module. One device only: the ranking needs the whole split in one
process.

This module holds the pure parts (no files, no printing, no Lightning): the interface, the
generic values, orders, detection summaries and the table. The split's batches live with the
data (:mod:`ncl.data.predict_split`); the options, the files and the lines printed about
them in :mod:`ncl.evaluation.ranked_output`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from ncl.division import gmm_clean_probability
from ncl.errors import ConfigError
from ncl.losses import triplet_loss
from ncl.metrics.noise_detection import detection_metrics

#: The first columns of every table, then the ranking's own (:attr:`Ranking.columns`), then
#: :data:`PAIR_COLUMNS`.
KEY_COLUMNS = ("caption_index", "image_index", "caption")
PAIR_COLUMNS = ("similarity", "loss")
NOISY_BELOW = 0.5  # clean probability under this = predicted noisy (the methods' threshold)
TOP_K = 100
DEFAULT_MARGIN = 0.2  # NCR's margin of the mean hinge its co-divide fits the GMM on

#: Per-pair values of a whole split, each ``(N,)`` in caption order: ``image`` (int64, the
#: image paired with each caption after the noise), ``similarity`` and ``loss`` (float64),
#: and the ranking's own (:meth:`Ranking.batch_values`, :meth:`Ranking.split_values`).
Values = dict[str, np.ndarray]


class Ranking(ABC):
    """One way ``ncl predict`` ranks pairs, declared by the method that divides that way.

    Class attributes: :attr:`name` (the value of ``--ranking``), :attr:`columns` (the
    ranking's own columns of the table, between the caption and the similarity),
    :attr:`summary_head` (the first keys of the metrics JSON), :attr:`noisy_rule` and
    :attr:`order_label` (words of the metrics line). Subclasses define :meth:`order`,
    :meth:`predicted_clean` and :meth:`headline`; the other methods default to the generic
    (the method's score matrix only, no values of their own).
    """

    name: ClassVar[str]
    columns: ClassVar[tuple[str, ...]]
    summary_head: ClassVar[dict[str, object]] = {}
    noisy_rule: ClassVar[str] = f"clean probability < {NOISY_BELOW}"
    order_label: ClassVar[str] = ""

    def table_columns(self) -> tuple[str, ...]:
        """Every column of the table, in order."""
        return (*KEY_COLUMNS, *self.columns, *PAIR_COLUMNS)

    def check(self, model: Any) -> None:
        """Raise ConfigError when ``model`` cannot give what this ranking needs (default:
        every model can)."""

    def predict(self, model: Any, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """The method's side of ``predict_step`` for this ranking: ``{"scores": (B, B)
        float64}`` (images x captions, pair ``i`` on the diagonal; the model's
        ``batch_scores``) plus whatever :meth:`batch_values` reads."""
        return {"scores": model.batch_scores(batch)}

    def batch_values(self, prediction: dict[str, Tensor]) -> dict[str, Tensor]:
        """The ranking's per-pair values of one batch, each ``(B,)``, from ``predict_step``'s
        output (default: none)."""
        return {}

    def split_values(self, values: Values) -> Values:
        """The ranking's values computed over the whole split, each ``(N,)`` (default: none)."""
        return {}

    @abstractmethod
    def order(self, values: Values) -> np.ndarray:
        """``(N,)`` int64 permutation of the pairs, most suspicious first."""

    @abstractmethod
    def predicted_clean(self, values: Values) -> np.ndarray:
        """``(N,)`` bool: the pairs the ranking predicts clean."""

    @abstractmethod
    def headline(self, values: Values, split: str, batch_sizes: Sequence[int]) -> str:
        """What was ranked, for the line that names the table (``batch_sizes``: the size of
        every scoring batch)."""


def choose_ranking(offered: Sequence[Ranking], name: str | None) -> Ranking:
    """The ranking named ``name`` among the model's ``offered`` ones (``None``: the first,
    the model's own); a ConfigError naming ``--ranking`` and the choices otherwise."""
    if name is None:
        return offered[0]
    for ranking in offered:
        if ranking.name == name:
            return ranking
    raise ConfigError(f"--ranking must be one of {', '.join(r.name for r in offered)}, got {name!r}")


def batch_size_range(batch_sizes: Sequence[int]) -> str:
    """``"13"`` for batches of one size, ``"13..14"`` for several."""
    sizes = sorted({int(b) for b in batch_sizes})
    return str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}..{sizes[-1]}"


# ------------------------------------------------------------------ per-pair values
def pair_values(scores: Tensor, margin: float = DEFAULT_MARGIN) -> tuple[Tensor, Tensor]:
    """``(similarity, loss)``, each ``(B,)``, of a batch's pairs from its ``(B, B)`` score
    matrix (images x captions, pair ``i`` on the diagonal): the diagonal, and NCR's mean
    hinge with in-batch negatives."""
    return scores.diagonal(), triplet_loss(scores, margin=margin, negatives="mean")


def clean_probability(loss: np.ndarray) -> np.ndarray:
    """``(N,)`` float64 GMM clean probability of every pair from its ``(N,)`` loss, fitted on
    the whole split at once (as the co-divide does)."""
    return gmm_clean_probability(torch.from_numpy(loss)).numpy().astype(np.float64)


# ------------------------------------------------------------------ orders and metrics
def suspicion_order(prob: np.ndarray, tie: np.ndarray) -> np.ndarray:
    """Row order from most to least suspicious by a clean probability.

    Args:
        prob: ``(N,)`` clean probabilities.
        tie: ``(N,)`` breaks ties of ``prob`` (many pairs get exactly 0 or 1 from a GMM), the
            larger first (``gmm``: the loss).

    Returns:
        ``(N,)`` int64 permutation: ``prob`` ascending, then ``tie`` descending, then index.
    """
    prob, tie = np.asarray(prob, dtype=np.float64), np.asarray(tie, dtype=np.float64)
    if prob.shape != tie.shape or prob.ndim != 1:
        raise ValueError(f"prob and tie must be equal-length vectors, got {prob.shape} and {tie.shape}")
    index = np.arange(prob.shape[0])
    return np.lexsort((index, -tie, prob)).astype(np.int64)  # last key is the primary one


def top_k_precision(order: np.ndarray, true_clean: np.ndarray, k: int) -> float:
    """Fraction of truly noisy pairs among the first ``k`` of ``order`` (``k`` capped at N;
    0.0 for ``k = 0``)."""
    k = min(int(k), order.shape[0])
    if k <= 0:
        return 0.0
    return float((~true_clean[order[:k]]).mean())


def detection_summary(predicted_clean: np.ndarray, order: np.ndarray, true_clean: np.ndarray,
                      top_k: int = TOP_K) -> dict[str, object]:
    """Noise-detection quality of a prediction and an order against the ground truth
    (positives = noisy).

    Args:
        predicted_clean: ``(N,)`` bool prediction; not clean = predicted noisy.
        order: ``(N,)`` the ranking's row order, most suspicious first.
        true_clean: ``(N,)`` bool ground-truth clean mask.
        top_k: the fixed k of the top-k precision (100).

    Returns:
        counts, ``precision``, ``recall``, ``f1`` (of the prediction), and
        ``top_k_precision``: ``{"k=<n_noisy>": ..., "k=<top_k>": ...}`` (of the order).
    """
    true_clean = np.asarray(true_clean, dtype=bool)
    predicted_clean = np.asarray(predicted_clean, dtype=bool)
    if true_clean.shape != predicted_clean.shape or true_clean.shape != np.shape(order):
        raise ValueError(f"true_clean {true_clean.shape}, predicted_clean {predicted_clean.shape} "
                         f"and order {np.shape(order)} must have one shape")
    m = detection_metrics(torch.from_numpy(predicted_clean), torch.from_numpy(true_clean))
    n_noisy = int((~true_clean).sum())
    return {"n_pairs": int(true_clean.shape[0]), "n_noisy": n_noisy,
            "predicted_noisy": m["tp"] + m["fp"], "precision": m["precision"],
            "recall": m["recall"], "f1": m["f1"],
            "top_k_precision": {f"k={k}": top_k_precision(order, true_clean, k)
                                for k in (n_noisy, top_k)}}


def ranking_summary(ranking: Ranking, values: Values, true_clean: np.ndarray,
                    top_k: int = TOP_K) -> dict[str, object]:
    """The metrics JSON of ``ranking``: its :attr:`~Ranking.summary_head`, then
    :func:`detection_summary` of its prediction and order."""
    return {**ranking.summary_head, **detection_summary(
        ranking.predicted_clean(values), ranking.order(values), true_clean, top_k)}


def ranked_table(ranking: Ranking, values: Values, captions: Sequence[str]) -> dict[str, list]:
    """The table (:meth:`Ranking.table_columns`), rows in :meth:`Ranking.order`."""
    order = ranking.order(values)
    table: dict[str, list] = {"caption_index": order.tolist(),
                              "image_index": values["image"][order].tolist(),
                              "caption": [captions[i] for i in order]}
    for column in (*ranking.columns, *PAIR_COLUMNS):
        table[column] = values[column][order].tolist()
    return table


# ------------------------------------------------------------------ the generic ranking
class GmmRanking(Ranking):
    """``gmm``: the two-component GMM of the per-pair mean hinge over the whole split (the
    co-divide of NCR and its successors); clean probability ascending, ties by loss
    descending; predicted clean iff the clean probability is at least 0.5."""

    name = "gmm"
    columns = ("clean_probability",)
    summary_head: ClassVar[dict[str, object]] = {"threshold": NOISY_BELOW}

    def split_values(self, values: Values) -> Values:
        return {"clean_probability": clean_probability(values["loss"])}

    def order(self, values: Values) -> np.ndarray:
        return suspicion_order(values["clean_probability"], values["loss"])

    def predicted_clean(self, values: Values) -> np.ndarray:
        return np.asarray(values["clean_probability"]) >= NOISY_BELOW

    def headline(self, values: Values, split: str, batch_sizes: Sequence[int]) -> str:
        n_susp = int((~self.predicted_clean(values)).sum())
        return (f"{len(values['image'])} pairs of the {split} split ranked, {n_susp} with clean "
                f"probability < {NOISY_BELOW}")


GMM = GmmRanking()
COLUMNS = GMM.table_columns()  # the gmm table's columns
