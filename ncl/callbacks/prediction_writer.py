"""The writer of ``ncl predict``: per-pair values from the predicted batch matrices, the GMM
over the whole split (or DECL's uncertainty, ``--ranking uncertainty``), the ranked table
(:mod:`ncl.evaluation.ranking` holds the pure parts).

It works through two small protocols: the method gives each batch's score matrix and its
default ranking (:class:`BatchScorer`: every method, :class:`~ncl.methods.scoring.BatchScoring`),
the DataModule serves the
chosen split (:class:`PredictData`, :class:`~ncl.data.datamodule.PrecompDataModule`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import lightning as L
import numpy as np
from lightning.pytorch.callbacks import BasePredictionWriter
from torch import Tensor

from ncl.data.datasets import PairDataset
from ncl.errors import ConfigError
from ncl.evaluation.ranked_output import (
    check_options,
    check_ranking,
    report,
    report_uncertainty,
    write_outputs,
)
from ncl.evaluation.ranking import (
    DEFAULT_MARGIN,
    PairScores,
    clean_probability,
    detection_summary,
    pair_values,
    ranked_table,
    uncertainty_summary,
    uncertainty_table,
    uncertainty_values,
)


@runtime_checkable
class BatchScorer(Protocol):
    """A method whose ``predict_step`` returns ``{"index": (B,) int64, "scores": (B, B)}``:
    the batch's averaged score matrix, images x captions, pair ``i`` on the diagonal; every
    method has one (:class:`~ncl.methods.scoring.BatchScoring`). ``ranking`` is the ranking
    it divides with, the default of ``--ranking``."""

    ranking: str

    def batch_scores(self, batch: dict[str, Tensor]) -> Tensor: ...


@runtime_checkable
class EvidenceScorer(Protocol):
    """A :class:`BatchScorer` that can also return DECL evidence: with ``predict_evidence``
    set, its ``predict_step`` adds ``"evidence": (B, B)`` float64, the batch's averaged
    ``exp(tanh(z) / tau)``; ``rule`` says whether its matrices are evidence (``"evidence"``)."""

    rule: str
    predict_evidence: bool

    def batch_evidence(self, batch: dict[str, Tensor]) -> Tensor: ...


@runtime_checkable
class PredictData(Protocol):
    """A DataModule that serves one chosen split to ``predict_dataloader``."""

    def use_predict_split(self, split: str = "train", batch_size: int | None = None) -> None: ...

    def predict_pairs(self) -> PairDataset:
        """The split's pairs: ``split.captions``, ``cap2img`` ``(N,)``, ``len`` = N."""

    def predict_clean_mask(self) -> np.ndarray | None:
        """``(N,)`` bool ground truth, or ``None`` when unknown."""


class RankedPairsWriter(BasePredictionWriter):
    """Ranks the pairs of a split by how likely they are mismatched (``ncl predict``).

    Every batch's pairs get their similarity and mean hinge (:func:`ncl.evaluation.ranking.pair_values`)
    as the batch arrives; at the end of the epoch the two-component GMM of the losses of the
    whole split gives each pair its clean probability, and the table (and its metrics, when
    the ground truth is known) is written and summarised on screen. One device only: the
    mixture is fitted on the whole split in one process.

    With ``ranking="uncertainty"`` each batch's pairs also get DECL's uncertainty and
    prediction from the batch's evidence (:func:`ncl.evaluation.ranking.uncertainty_values`, ``K`` = the
    batch's size); no mixture is fitted, and the table has ``uncertainty`` and
    ``predicted_clean`` instead of ``clean_probability``, most uncertain first.

    Args:
        out: the table to write, ``.csv`` or ``.parquet`` (Parquet needs pyarrow); a
            ``<stem>.metrics.json`` beside it holds the detection metrics when the clean mask
            is known.
        split: the pairs to rank: ``train`` (with the data's noise), ``dev`` or ``test`` (the
            stored evaluation pairs, all images).
        batch_size: pairs per scoring batch (the in-batch negatives of the mean hinge);
            default ``data.batch_size``, the co-divide's.
        margin: margin of the mean hinge (NCR's 0.2).
        ranking: ``None`` (default): the method's own (:attr:`BatchScorer.ranking`: ``gmm``
            for most, ``uncertainty`` for DECL). ``gmm``: the GMM clean probability of the mean hinge, ascending.
            ``uncertainty``: DECL's Dirichlet uncertainty of the batch's evidence, descending
            (ties by caption index), with DECL's argmax prediction; needs DECL evidence
            (a DECL run, or ``model.combine`` resolving to ``evidence``: DECL checkpoints, or
            ``--model.combine evidence``). ``K`` is the scoring batch's size
            (``batch_size``).
    """

    #: The constructor's options, which are ``ncl predict``'s own (``--out`` ...).
    OPTIONS = ("out", "split", "batch_size", "margin", "ranking")

    def __init__(self, out: str | None = None, split: str = "train", batch_size: int | None = None,
                 margin: float = DEFAULT_MARGIN, ranking: str | None = None) -> None:
        super().__init__(write_interval="batch")
        self.out = check_options(out, split, batch_size, ranking)
        self.split, self.batch_size, self.margin, self.ranking = split, batch_size, margin, ranking
        self._pairs: PairDataset | None = None
        self._true_clean: np.ndarray | None = None
        self._similarity, self._loss = np.zeros(0), np.zeros(0)  # (N,) each once set up
        self._uncertainty, self._predicted_clean = np.zeros(0), np.zeros(0, dtype=bool)
        self._batch_sizes: list[int] = []  # K of every scored batch (uncertainty ranking)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Check the run, choose the DataModule's split and make room for its values."""
        if stage != "predict":
            return
        data = _check_run(trainer, pl_module)
        if self.ranking is None:  # the method's own
            self.ranking = check_ranking(pl_module.ranking, f"{_name(pl_module)}.ranking")  # type: ignore[union-attr]
        if self.ranking == "uncertainty":
            check_evidence(pl_module)
            pl_module.predict_evidence = True  # type: ignore[union-attr]
        data.use_predict_split(self.split, self.batch_size)
        self._pairs, self._true_clean = data.predict_pairs(), data.predict_clean_mask()
        self._similarity = np.full(len(self._pairs), np.nan)  # (N,) float64
        self._loss = np.full(len(self._pairs), np.nan)  # (N,) float64
        self._uncertainty = np.full(len(self._pairs), np.nan)  # (N,) float64
        self._predicted_clean = np.zeros(len(self._pairs), dtype=bool)  # (N,)
        self._batch_sizes = []

    def write_on_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           prediction: dict[str, Tensor], batch_indices: Sequence[int] | None,
                           batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Keep the batch's per-pair values at their caption indices (``prediction`` of
        :class:`BatchScorer`)."""
        similarity, loss = pair_values(prediction["scores"], self.margin)  # (B,), (B,)
        index = prediction["index"].cpu().numpy()
        self._similarity[index] = similarity.cpu().numpy()
        self._loss[index] = loss.cpu().numpy()
        if self.ranking == "uncertainty":
            uncertainty, predicted_clean = uncertainty_values(prediction["evidence"])  # (B,), (B,)
            self._uncertainty[index] = uncertainty.cpu().numpy()
            self._predicted_clean[index] = predicted_clean.cpu().numpy()
            self._batch_sizes.append(len(index))

    def on_predict_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Every pair scored: the mixture over the whole split, the table, the metrics."""
        pairs = self._pairs
        if pairs is None:
            return
        if np.isnan(self._loss).any():  # a loader that skipped pairs (limit_predict_batches)
            missing = int(np.isnan(self._loss).sum())
            raise ConfigError(f"ncl predict scored {len(pairs) - missing} of {len(pairs)} pairs; "
                              "the ranking needs them all (remove trainer.limit_predict_batches)")
        scores = PairScores(np.asarray(pairs.cap2img, dtype=np.int64), self._similarity, self._loss)
        if self.ranking == "uncertainty":
            self._write_uncertainty(scores, pairs)
            return
        prob = clean_probability(scores.loss)
        summary = (None if self._true_clean is None
                   else detection_summary(prob, scores.loss, self._true_clean))
        write_outputs(ranked_table(scores, prob, pairs.split.captions), summary, self.out)
        report(prob, summary, self.split, self.out)

    def _write_uncertainty(self, scores: PairScores, pairs: PairDataset) -> None:
        """``--ranking uncertainty``: the table by DECL uncertainty and its metrics (no GMM)."""
        scores.uncertainty, scores.predicted_clean = self._uncertainty, self._predicted_clean
        summary = (None if self._true_clean is None
                   else uncertainty_summary(scores.uncertainty, scores.predicted_clean, self._true_clean))
        write_outputs(uncertainty_table(scores, pairs.split.captions), summary, self.out)
        report_uncertainty(scores, summary, self.split, self._batch_sizes, self.out)


def _check_run(trainer: L.Trainer, pl_module: L.LightningModule) -> PredictData:
    """The DataModule, once the run is one that can be ranked; one ConfigError otherwise."""
    if trainer.world_size > 1:
        raise ConfigError(f"ncl predict runs on one device (the GMM is fitted on the whole split "
                          f"in one process), got {trainer.world_size} processes; set "
                          f"--trainer.devices 1 --trainer.num_nodes 1")
    check_scorer(pl_module)
    data = trainer.datamodule
    if not isinstance(data, PredictData):
        got = "no DataModule" if data is None else f"{type(data).__module__}.{type(data).__name__}"
        raise ConfigError(f"ncl predict needs a DataModule that serves a chosen split "
                          f"(ncl.data.datamodule.PrecompDataModule or a subclass), got {got}")
    return data



def _name(pl_module: Any) -> str:
    return f"{type(pl_module).__module__}.{type(pl_module).__name__}"


def check_scorer(pl_module: L.LightningModule) -> None:
    """Raise ConfigError unless ``pl_module`` predicts batch matrices (:class:`BatchScorer`:
    every ncl method; a foreign LightningModule may not). The application calls it before
    ``Trainer.predict``, whose own check would otherwise ask for a ``forward`` first."""
    if not isinstance(pl_module, BatchScorer):
        raise ConfigError(f"ncl predict needs a method that scores batches (an ncl method, "
                          f"ncl.methods.base.RetrievalMethod), got {_name(pl_module)}")


def check_evidence(pl_module: L.LightningModule) -> None:
    """Raise ConfigError unless ``pl_module``'s batch matrices are DECL evidence
    (:class:`EvidenceScorer` with ``rule == "evidence"``), which ``--ranking uncertainty``
    needs: DECL's uncertainty is defined on evidence, not on sigmoid scores."""
    if not isinstance(pl_module, EvidenceScorer):
        raise ConfigError(f"--ranking uncertainty needs a model that gives DECL evidence "
                          f"(a DECL run, or ncl.methods.pretrained.Pretrained), got {_name(pl_module)}")
    if pl_module.rule != "evidence":
        if "combine" not in pl_module.hparams:  # a trained method: DECL alone gives evidence
            raise ConfigError(f"--ranking uncertainty needs DECL evidence, but "
                              f"{_name(pl_module)} gives sigmoid scores (only DECL's are "
                              f"evidence); use --ranking gmm")
        combine = pl_module.hparams.get("combine", "auto")
        raise ConfigError(f"--ranking uncertainty needs DECL evidence, but model.combine "
                          f"{combine} resolved to {pl_module.rule!r} (not every checkpoint is a "
                          f"DECL checkpoint, or combine is forced to score); use DECL checkpoints, "
                          f"--model.combine evidence, or --ranking gmm")
