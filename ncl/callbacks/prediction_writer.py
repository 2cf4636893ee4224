"""The writer of ``ncl predict``: per-pair values from the predicted batch matrices, the
ranking's values over the whole split, the ranked table (:mod:`ncl.evaluation.ranking` holds
the pure parts and the :class:`~ncl.evaluation.ranking.Ranking` interface).

It works through small protocols and the ranking strategy: the method gives each batch's
matrices and the rankings it offers (:class:`BatchScorer`: every method,
:class:`~ncl.methods.scoring.BatchScoring`), the chosen :class:`~ncl.evaluation.ranking.Ranking`
says what to compute, order and print, and the DataModule serves the chosen split
(:class:`PredictData`, :class:`~ncl.data.datamodule.PrecompDataModule`). Nothing here names a
ranking other than through that interface.
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
from ncl.evaluation.ranked_output import check_options, report, write_outputs
from ncl.evaluation.ranking import (
    DEFAULT_MARGIN,
    GMM,
    Ranking,
    Values,
    choose_ranking,
    pair_values,
    ranked_table,
    ranking_summary,
)


@runtime_checkable
class BatchScorer(Protocol):
    """A method whose ``predict_step`` returns ``{"index": (B,) int64, "scores": (B, B), ...}``:
    the batch's averaged score matrix, images x captions, pair ``i`` on the diagonal, plus
    what :attr:`predict_ranking` needs (its :meth:`~ncl.evaluation.ranking.Ranking.predict`);
    every method has one (:class:`~ncl.methods.scoring.BatchScoring`). ``rankings`` are the
    rankings it offers, its own first (the default of ``--ranking``)."""

    rankings: tuple[Ranking, ...]
    predict_ranking: Ranking | None

    def batch_scores(self, batch: dict[str, Tensor]) -> Tensor: ...


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
    and the ranking's own per-pair values (:meth:`~ncl.evaluation.ranking.Ranking.batch_values`)
    as the batch arrives; at the end of the epoch the ranking computes what needs the whole
    split (:meth:`~ncl.evaluation.ranking.Ranking.split_values`: ``gmm``'s two-component GMM
    of the losses), and the table (and its metrics, when the ground truth is known) is
    written and summarised on screen. One device only: the ranking needs the whole split in
    one process.

    Args:
        out: the table to write, ``.csv`` or ``.parquet`` (Parquet needs pyarrow); a
            ``<stem>.metrics.json`` beside it holds the detection metrics when the clean mask
            is known.
        split: the pairs to rank: ``train`` (with the data's noise), ``dev`` or ``test`` (the
            stored evaluation pairs, all images).
        batch_size: pairs per scoring batch (the in-batch negatives of the mean hinge);
            default ``data.batch_size``, the co-divide's.
        margin: margin of the mean hinge (NCR's 0.2).
        ranking: one of the rankings the model offers (its ``rankings``); ``None`` (default):
            the model's own, how it divides. ``gmm`` (every model): the GMM clean probability
            of the mean hinge, ascending. Methods declare their own: ``uncertainty`` (DECL,
            and ``eval_*`` configs over DECL checkpoints: DECL's Dirichlet uncertainty of the
            batch's evidence, descending), ``structure`` (GSC: the structure-consistency
            GMM's clean probability, ascending); see docs/usage.md.
    """

    #: The constructor's options, which are ``ncl predict``'s own (``--out`` ...).
    OPTIONS = ("out", "split", "batch_size", "margin", "ranking")

    def __init__(self, out: str | None = None, split: str = "train", batch_size: int | None = None,
                 margin: float = DEFAULT_MARGIN, ranking: str | None = None) -> None:
        super().__init__(write_interval="batch")
        self.out = check_options(out, split, batch_size)
        self.split, self.batch_size, self.margin, self.ranking = split, batch_size, margin, ranking
        self.strategy: Ranking = GMM  # chosen in setup, from the model's rankings
        self._pairs: PairDataset | None = None
        self._true_clean: np.ndarray | None = None
        self._values: Values = {}  # (N,) each once set up: similarity, loss, the ranking's own
        self._batch_sizes: list[int] = []  # the size of every scored batch

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Check the run, choose the ranking among the model's, tell the model, choose the
        DataModule's split and make room for its values."""
        if stage != "predict":
            return
        data = _check_run(trainer, pl_module)
        self.strategy = choose_ranking(pl_module.rankings, self.ranking)  # type: ignore[union-attr]
        self.strategy.check(pl_module)
        pl_module.predict_ranking = self.strategy  # type: ignore[union-attr]
        data.use_predict_split(self.split, self.batch_size)
        self._pairs, self._true_clean = data.predict_pairs(), data.predict_clean_mask()
        n = len(self._pairs)
        self._values = {"similarity": np.full(n, np.nan), "loss": np.full(n, np.nan)}  # float64
        self._batch_sizes = []

    def write_on_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           prediction: dict[str, Tensor], batch_indices: Sequence[int] | None,
                           batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Keep the batch's per-pair values at their caption indices (``prediction`` of
        :class:`BatchScorer`)."""
        similarity, loss = pair_values(prediction["scores"], self.margin)  # (B,), (B,)
        index = prediction["index"].cpu().numpy()
        self._store(index, {"similarity": similarity, "loss": loss,
                            **self.strategy.batch_values(prediction)})
        self._batch_sizes.append(len(index))

    def _store(self, index: np.ndarray, batch_values: dict[str, Tensor]) -> None:
        """Each ``(B,)`` value at its caption indices, in an ``(N,)`` array made on first sight
        (floats: NaN until scored; other dtypes: zero)."""
        n = len(self._pairs) if self._pairs is not None else 0
        for key, value in batch_values.items():
            array = value.detach().cpu().numpy()
            if key not in self._values:
                fill = np.nan if np.issubdtype(array.dtype, np.floating) else 0
                self._values[key] = np.full(n, fill, dtype=array.dtype)
            self._values[key][index] = array

    def on_predict_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Every pair scored: the ranking's split values, the table, the metrics."""
        pairs = self._pairs
        if pairs is None:
            return
        loss = self._values["loss"]
        if np.isnan(loss).any():  # a loader that skipped pairs (limit_predict_batches)
            missing = int(np.isnan(loss).sum())
            raise ConfigError(f"ncl predict scored {len(pairs) - missing} of {len(pairs)} pairs; "
                              "the ranking needs them all (remove trainer.limit_predict_batches)")
        values = {"image": np.asarray(pairs.cap2img, dtype=np.int64), **self._values}
        values.update(self.strategy.split_values(values))
        summary = (None if self._true_clean is None
                   else ranking_summary(self.strategy, values, self._true_clean))
        write_outputs(ranked_table(self.strategy, values, pairs.split.captions), summary, self.out)
        report(self.strategy, values, summary, self.split, self._batch_sizes, self.out)


def _check_run(trainer: L.Trainer, pl_module: L.LightningModule) -> PredictData:
    """The DataModule, once the run is one that can be ranked; one ConfigError otherwise."""
    if trainer.world_size > 1:
        raise ConfigError(f"ncl predict runs on one device (the ranking needs the whole split "
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
