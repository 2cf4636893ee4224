"""``ncl predict``: rank the pairs of a split from most to least likely mismatched.

``ncl predict --config configs/eval_sgraf_f30k.yaml [--config FILE ...] [--key value ...]
--out suspicious.csv [--split train|dev|test] [--batch_size N] [--margin M]``

LightningCLI's ``predict`` subcommand (:class:`ncl.app.NclCLI`). The model section must be
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
:class:`ScoringBatchSampler`; ``Pretrained.predict_step`` gives each batch's averaged score
matrix (and its averaged evidence under ``--ranking uncertainty``);
:class:`ncl.callbacks.prediction_writer.RankedPairsWriter` (whose options are ``--out``,
``--split``, ``--batch_size``, ``--margin``, ``--ranking``) turns the matrices into per-pair
values, fits the GMM once every batch is in (``gmm``), and writes the table with the pure
functions of this module. One device only: the ranking needs the whole split in one process.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import BatchSampler, Sampler

from ncl.division import gmm_clean_probability
from ncl.errors import ConfigError
from ncl.io import atomic_write, atomic_write_text
from ncl.losses import triplet_loss
from ncl.losses.decl import correspondence_statistics
from ncl.metrics.noise_detection import detection_metrics
from ncl.training.passes import deal_batches
from ncl.training.plans import DIVISION_STREAM, rng_for

SPLITS = ("train", "dev", "test")
RANKINGS = ("gmm", "uncertainty")
COLUMNS = ("caption_index", "image_index", "caption", "clean_probability", "similarity", "loss")
UNCERTAINTY_COLUMNS = ("caption_index", "image_index", "caption", "uncertainty", "predicted_clean",
                       "similarity", "loss")
NOISY_BELOW = 0.5  # clean probability under this = predicted noisy (the methods' threshold)
TOP_K = 100
DEFAULT_MARGIN = 0.2  # NCR's margin of the mean hinge its co-divide fits the GMM on
SCORING_SEED = 0  # seed of the scoring pass's shuffle (the co-divide's stream, epoch 0)


# ------------------------------------------------------------------ options
def check_out(out: Path) -> None:
    """Raise ConfigError when ``--out`` names no table ncl can write (the folder's
    writability is checked by the application, :func:`ncl.parser.check_prediction_options`)."""
    if out.suffix not in (".csv", ".parquet"):
        raise ConfigError(f"--out {out}: the name must end with .csv or .parquet")
    if out.suffix == ".parquet":
        try:
            import pyarrow.parquet  # noqa: F401
        except ImportError:
            raise ConfigError(f"--out {out}: Parquet needs pyarrow, which is not installed; "
                              "use a .csv name") from None
    if out.is_dir():
        raise ConfigError(f"--out {out} is a folder; give a file name")


def check_options(out: str | Path | None, split: str, batch_size: int | None,
                  ranking: str = "gmm") -> Path:
    """The options of ``ncl predict``, checked before anything is loaded.

    Returns:
        ``out`` as a Path.

    Raises:
        ConfigError: no ``--out``, an unknown split or ranking, a batch of fewer than 2 pairs
            (the mean hinge needs an in-batch negative), or an output name :func:`check_out`
            refuses.
    """
    if out is None:
        raise ConfigError("ncl predict needs --out FILE (.csv or .parquet)")
    if split not in SPLITS:
        raise ConfigError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    if ranking not in RANKINGS:
        raise ConfigError(f"--ranking must be one of {', '.join(RANKINGS)}, got {ranking!r}")
    if batch_size is not None and batch_size < 2:
        raise ConfigError(f"--batch_size must be at least 2, got {batch_size}")
    check_out(Path(out))
    return Path(out)


# ------------------------------------------------------------------ the batches
def scoring_batches(indices: np.ndarray, batch_size: int, seed: int = SCORING_SEED) -> list[np.ndarray]:
    """The scoring pass's batches over ``indices`` ``(N,)``: shuffled as the co-divide's pass
    of epoch 0 (:func:`ncl.training.plans.rng_for`, ``DIVISION_STREAM``), cut into
    ``batch_size`` batches, a last batch of one joining the one before
    (:func:`ncl.training.passes.deal_batches`). The mean hinge depends on the in-batch
    negatives, so these batches are part of what a pair's loss means."""
    order = np.asarray(indices, dtype=np.int64)
    order = order[rng_for(seed, 0, DIVISION_STREAM, 0).permutation(len(order))]
    return deal_batches(order, batch_size)


class ScoringBatchSampler(BatchSampler):
    """:func:`scoring_batches` over the indices of ``sampler``, as a batch sampler.

    Lightning re-creates a prediction loader's batch sampler (to record the indices it
    yields) with the ``sampler`` and ``drop_last`` replaced by the loader's sequential sampler
    and ``False``; the shuffle is therefore drawn here from ``seed``, not by the sampler, and
    no pair is ever dropped (``drop_last`` must be false).

    Args:
        sampler: the dataset's indices, in order (a ``SequentialSampler``).
        batch_size: pairs per batch (the last batch may hold one more).
        drop_last: accepted for Lightning; must be false.
        seed: seed of the shuffle.
    """

    def __init__(self, sampler: Sampler[int] | Iterable[int], batch_size: int,
                 drop_last: bool = False, seed: int = SCORING_SEED) -> None:
        if drop_last:
            raise ValueError("the scoring pass scores every pair: drop_last must be false")
        super().__init__(sampler, batch_size, drop_last)
        self.seed = seed

    def __iter__(self) -> Iterator[list[int]]:
        indices = np.fromiter(iter(self.sampler), dtype=np.int64)
        for batch in scoring_batches(indices, self.batch_size, self.seed):
            yield batch.tolist()

    def __len__(self) -> int:
        n = len(self.sampler)
        count = -(-n // self.batch_size)
        return count - 1 if count > 1 and n % self.batch_size == 1 else count  # merged tail


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
    :func:`ncl.losses.decl.correspondence_statistics` (the values DECL trains with).

    Args:
        evidence: ``(B, B)`` evidence ``e`` (images x captions, pair ``i`` on the diagonal).

    Returns:
        ``(B,)`` float64 in ``(0, 2]``; 2 when the batch holds no evidence at all.
    """
    _check_square(evidence)
    stats = correspondence_statistics(evidence)
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
    return correspondence_statistics(evidence)[:, 0] > 0.5


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


def write_table(table: dict[str, list], out: Path) -> None:
    """CSV, or Parquet for a ``.parquet`` name, the columns in the order of ``table``'s keys;
    written to a temporary name and renamed."""
    if out.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        atomic_write(out, lambda h: pq.write_table(pa.table(table), h))
        return
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(list(table))
    writer.writerows(zip(*table.values()))
    atomic_write_text(out, text.getvalue())


def metrics_path(out: Path) -> Path:
    """``suspicious.csv`` -> ``suspicious.metrics.json`` (beside the table)."""
    return out.with_name(f"{out.stem}.metrics.json")


def write_outputs(table: dict[str, list], summary: dict[str, object] | None, out: Path) -> None:
    """The table, then its metrics JSON (when there is a ground truth). A metrics file left
    beside ``out`` by an earlier run is removed: it would describe another ranking."""
    metrics_path(out).unlink(missing_ok=True)  # first: a failed write must not leave it
    write_table(table, out)
    if summary is not None:
        atomic_write_text(metrics_path(out), json.dumps(summary, indent=2) + "\n")


def report(prob: np.ndarray, summary: dict[str, object] | None, split: str, out: Path) -> None:
    """What was written, and the detection metrics when there is a ground truth."""
    n_susp = int((prob < NOISY_BELOW).sum())
    print(f"ncl predict: {len(prob)} pairs of the {split} split ranked, {n_susp} with clean "
          f"probability < {NOISY_BELOW}: {out}")
    if summary is None:
        print("ncl predict: no ground-truth clean mask (real noise or an evaluation split); "
              "no detection metrics")
    else:
        tops = ", ".join(f"{k} {v:.4f}" for k, v in summary["top_k_precision"].items())
        print(f"ncl predict: noisy = clean probability < {NOISY_BELOW}: precision "
              f"{summary['precision']:.4f}, recall {summary['recall']:.4f}, F1 {summary['f1']:.4f} "
              f"({summary['n_noisy']} truly noisy); top-k precision: {tops}; {metrics_path(out)}")
    sys.stdout.flush()


def report_uncertainty(scores: PairScores, summary: dict[str, object] | None, split: str,
                       batch_sizes: Sequence[int], out: Path) -> None:
    """What ``--ranking uncertainty`` wrote, and its detection metrics when there is a ground
    truth; ``batch_sizes`` are the sizes ``K`` of the scoring batches seen."""
    if scores.predicted_clean is None:
        raise ValueError("report_uncertainty needs scores.predicted_clean")
    n_noisy = int((~scores.predicted_clean).sum())
    sizes = sorted({int(b) for b in batch_sizes})
    k = str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}..{sizes[-1]}"
    print(f"ncl predict: {len(scores.image)} pairs of the {split} split ranked by DECL uncertainty "
          f"(K = batch size {k}), {n_noisy} predicted noisy (own caption not the batch's top "
          f"evidence): {out}")
    if summary is None:
        print("ncl predict: no ground-truth clean mask (real noise or an evaluation split); "
              "no detection metrics")
    else:
        tops = ", ".join(f"{key} {v:.4f}" for key, v in summary["top_k_precision"].items())
        print(f"ncl predict: noisy = not the argmax (DECL): precision {summary['precision']:.4f}, "
              f"recall {summary['recall']:.4f}, F1 {summary['f1']:.4f} ({summary['n_noisy']} truly "
              f"noisy); top-k precision of the uncertainty order: {tops}; {metrics_path(out)}")
    sys.stdout.flush()
