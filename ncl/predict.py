"""``ncl predict``: rank the pairs of a split from most to least likely mismatched.

``ncl predict --config configs/eval_sgraf_f30k.yaml [--config FILE ...] [--key value ...]
--out suspicious.csv [--split train|dev|test]``

The model section must be :class:`ncl.methods.pretrained.Pretrained` (the ``eval_*``
configs): its ``model.checkpoints`` (ncl ``.ckpt`` of any method, official ``.pth.tar``)
give the networks. The data section is the DataModule the checkpoints were trained on; on
the training split its noise is injected exactly as ``ncl fit`` injects it (``noise_type``,
``noise_ratio``, ``noise_seed`` or ``noise_file``), and CC152K's noise is the real one.

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
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from ncl.errors import ConfigError
from ncl.io import atomic_write, atomic_write_text

SPLITS = ("train", "dev", "test")
COLUMNS = ("caption_index", "image_index", "caption", "clean_probability", "similarity", "loss")
NOISY_BELOW = 0.5  # clean probability under this = predicted noisy (the methods' threshold)
TOP_K = 100
USAGE = ("usage: ncl predict --config FILE [--config FILE ...] [--key value ...] --out FILE "
         "[--split train|dev|test] [--batch_size N] [--margin M]")


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
    from ncl.metrics.noise_detection import detection_metrics

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


# ------------------------------------------------------------------ the per-sample pass
@dataclass
class PairScores:
    """Per-pair values of one split, in caption order.

    Attributes:
        image: ``(N,)`` int64 image paired with each caption (after the noise).
        similarity: ``(N,)`` float64 averaged score of the pair.
        loss: ``(N,)`` float64 per-sample mean hinge.
    """

    image: np.ndarray
    similarity: np.ndarray
    loss: np.ndarray


def averaged_batch_scores(nets: Sequence[nn.Module], sizes: Sequence[int],
                          batch: dict[str, Tensor]) -> Tensor:
    """``(B, B)`` float64 score matrix of a batch: the mean of each checkpoint's networks,
    then the equal-weight mean of the checkpoints (as ``ncl test``'s ensemble)."""
    from ncl.evaluation.combine import hierarchical_mean

    from ncl.models.contracts import forward_batch

    sims = [forward_batch(net, batch).double() for net in nets]
    groups, start = [], 0
    for size in sizes:
        groups.append(sims[start:start + size])
        start += size
    return hierarchical_mean(groups)[1]


@torch.no_grad()
def score_pairs(nets: Sequence[nn.Module], sizes: Sequence[int], pairs: torch.utils.data.Dataset,
                cap2img: np.ndarray, batch_size: int, margin: float, seed: int,
                device: torch.device) -> PairScores:
    """Similarity and mean hinge of every pair, in eval mode, one batch in memory at a time.

    The batches are the co-divide's (shuffled with ``seed``, the training batch size): the
    mean hinge depends on the in-batch negatives, so this is the loss the methods divide on.
    """
    from ncl.losses import triplet_loss
    from ncl.training.passes import deal_batches, eval_mode, to_device
    from ncl.training.plans import DIVISION_STREAM, IndexBatches, iterate, rng_for

    n = len(pairs)
    sim, loss = np.zeros(n), np.zeros(n)
    batches = deal_batches(rng_for(seed, 0, DIVISION_STREAM, 0).permutation(n), batch_size)
    with eval_mode(*nets):
        for batch in iterate(IndexBatches(pairs, batches)):
            batch = to_device(batch, device)
            scores = averaged_batch_scores(nets, sizes, batch)  # (B, B), images x captions
            index = batch["index"].cpu().numpy()
            sim[index] = scores.diagonal().cpu().numpy()
            loss[index] = triplet_loss(scores, margin=margin, negatives="mean").cpu().numpy()
    return PairScores(np.asarray(cap2img, dtype=np.int64), sim, loss)


# ------------------------------------------------------------------ output
def ranked_table(scores: PairScores, prob: np.ndarray, captions: Sequence[str]) -> dict[str, list]:
    """The output columns (:data:`COLUMNS`), rows most suspicious first."""
    order = suspicion_order(prob, scores.loss)
    return {"caption_index": order.tolist(), "image_index": scores.image[order].tolist(),
            "caption": [captions[i] for i in order], "clean_probability": prob[order].tolist(),
            "similarity": scores.similarity[order].tolist(), "loss": scores.loss[order].tolist()}


def write_table(table: dict[str, list], out: Path) -> None:
    """CSV, or Parquet for a ``.parquet`` name; written to a temporary name and renamed."""
    if out.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        atomic_write(out, lambda h: pq.write_table(pa.table(table), h))
        return
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows(zip(*(table[c] for c in COLUMNS)))
    atomic_write_text(out, text.getvalue())


def metrics_path(out: Path) -> Path:
    """``suspicious.csv`` -> ``suspicious.metrics.json`` (beside the table)."""
    return out.with_name(f"{out.stem}.metrics.json")


def check_out(out: Path) -> None:
    """Raise ConfigError before any work when ``--out`` cannot be written."""
    from ncl.app import _unwritable

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
    reason = _unwritable(out.parent.absolute())
    if reason is not None:
        raise ConfigError(f"--out {out} cannot be written: {reason}")


# ------------------------------------------------------------------ command
def parse_own_options(args: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """``--out``, ``--split``, ``--batch_size``, ``--margin``; the rest is the LightningCLI's."""
    parser = argparse.ArgumentParser(prog="ncl predict", add_help=False, allow_abbrev=False)
    parser.add_argument("--out", default=None)
    parser.add_argument("--split", default="train")
    parser.add_argument("--batch_size", type=int, default=None)
    parser.add_argument("--margin", type=float, default=0.2)
    own, rest = parser.parse_known_args(list(args))
    if own.out is None:
        raise ConfigError("ncl predict needs --out FILE (.csv or .parquet)")
    if own.split not in SPLITS:
        raise ConfigError(f"--split must be one of {', '.join(SPLITS)}, got {own.split!r}")
    if own.batch_size is not None and own.batch_size < 2:
        raise ConfigError(f"--batch_size must be at least 2, got {own.batch_size}")
    return own, rest


def split_pairs(datamodule: object, split: str) -> tuple[torch.utils.data.Dataset, np.ndarray,
                                                         list[str], np.ndarray | None]:
    """``(pairs, cap2img, captions, true clean mask or None)`` of ``split``.

    The training split carries the DataModule's noise; dev/test pairs are as stored (no
    ground truth: nothing is known to be mismatched there).
    """
    from ncl.data.datasets import PairDataset

    if split == "train":
        datamodule.setup("fit")
        pairs = datamodule.train_pairs()
        known = getattr(datamodule, "clean_mask_known", True)
        clean = np.asarray(datamodule.clean_mask, dtype=bool) if known else None
        return pairs, np.asarray(pairs.cap2img), pairs.split.captions, clean
    name = datamodule.val_split if split == "dev" else datamodule.test_split
    data = datamodule._load(name)  # the whole split, as stored
    cap2img = np.arange(data.n_captions) // data.im_div
    return PairDataset(data, cap2img), cap2img, data.captions, None


def run_predict(args: Sequence[str]) -> None:
    """Parse, build the model and data from the config, score, rank and write."""
    import lightning as L

    from ncl.app import NclArgumentParser, NclCLI
    from ncl.division import gmm_clean_probability
    from ncl.methods.base import RetrievalMethod
    from ncl.methods.pretrained import Pretrained

    if any(a in ("-h", "--help") for a in args):
        print(USAGE + "\n\n" + __doc__)
        return
    own, rest = parse_own_options(args)
    out = Path(own.out)
    check_out(out)
    with warnings.catch_warnings():
        # The arguments come from ``ncl predict``'s own command line, not a Python caller.
        warnings.filterwarnings("ignore", message=r"LightningCLI's args parameter is intended")
        cli = NclCLI(RetrievalMethod, L.LightningDataModule, subclass_mode_model=True,
                     subclass_mode_data=True, args=[*rest, "--trainer.logger=false"], run=False,
                     auto_configure_optimizers=False, parser_class=NclArgumentParser,
                     save_config_callback=None)
    model, data = cli.model, cli.datamodule
    if not isinstance(model, Pretrained):
        raise ConfigError(f"ncl predict needs model ncl.methods.pretrained.Pretrained with "
                          f"model.checkpoints (e.g. --config configs/eval_sgraf_f30k.yaml), got "
                          f"{type(model).__module__}.{type(model).__name__}")
    device = cli.trainer.strategy.root_device
    model.to(device)
    pairs, cap2img, captions, true_clean = split_pairs(data, own.split)
    batch_size = own.batch_size or data.batch_size
    scores = score_pairs(list(model.nets), model.model_sizes, pairs, cap2img, batch_size,
                         own.margin, seed=0, device=device)
    prob = gmm_clean_probability(torch.from_numpy(scores.loss)).numpy().astype(np.float64)
    summary = None if true_clean is None else detection_summary(prob, scores.loss, true_clean)
    write_outputs(ranked_table(scores, prob, captions), summary, out)
    report(prob, summary, own.split, out)


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
