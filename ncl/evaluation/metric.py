"""Evaluation as a :class:`torchmetrics.Metric`: embeddings in, similarity matrices and
retrieval results out (spec 5.2-5.4).

:class:`RetrievalEvaluation` stores what the evaluation steps encode (per network: every
image's and every caption's embeddings, with their dataset indices and the caption lengths).
``compute`` gathers them over the DDP ranks through torchmetrics (``dist_reduce_fx="cat"``
list states, rank order), puts every row at its dataset index (the DistributedSampler's
padded repeats land on their own index, so each sample counts once), keeps the images whose
captions were all encoded (``limit_val_batches``), hands the embeddings to a *scorer* (the
method's: :func:`score_networks` for a plain method, sharded over the ranks by
:func:`~ncl.evaluation.sharded.rank_sharded_similarity`) and runs the retrieval protocols.

Caption embeddings are ``(B, L_b, E)`` with ``L_b`` the batch's longest caption, so batches
(and ranks) differ in ``L_b``. A list state must concatenate along dim 0, so each 3-D
embedding is stored *folded*: its ``(B * L_b, E)`` rows plus each sample's width ``L_b``;
``compute`` unfolds them into ``(N, max L_b, E)`` with zeros beyond each sample's own batch
width, exactly the tensor the unsharded code padded, so the matrices are bit-identical to
one process's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from ncl.evaluation.nonfinite import EvalSite, check_finite_embeddings, check_finite_similarities
from ncl.evaluation.protocol import Protocol, Results, evaluate_systems
from ncl.evaluation.sharded import rank_sharded_similarity
from ncl.evaluation.similarity import SimFn, ensemble
from ncl.training.distributed import last_occurrences

#: The metrics logged per system and split (the protocol also returns median/mean ranks).
LOGGED_KEYS: tuple[str, ...] = ("rsum", "i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10")


class Embeddings(NamedTuple):
    """One split's evaluation embeddings in dataset order, built one network at a time when
    asked (a split's padded caption embeddings can take gigabytes; as the unsharded code,
    only one network's are materialised at once).

    Attributes:
        image: network ``k`` -> ``(N_img, R, E)`` (or pooled ``(N_img, E)``).
        caption: network ``k`` -> ``(N_img * im_div, L, E)`` padded (or pooled ``(N_cap, E)``).
        lengths: ``(N_img * im_div,)`` caption lengths.
    """

    image: Callable[[int], Tensor]
    caption: Callable[[int], Tensor]
    lengths: Tensor


class Evaluation:
    """``similarities``: system name -> ``(N_img, N_cap)`` matrix (networks, then
    ensembles); ``results``: system -> protocol -> metric (:func:`evaluate_systems`).

    A plain class on purpose: torchmetrics' ``compute`` wrapper clones every tensor of a
    returned tuple, dict or dataclass, and the matrices can take gigabytes (COCO 5K).
    """

    __slots__ = ("results", "similarities")

    def __init__(self, similarities: dict[str, Tensor], results: Results) -> None:
        self.similarities, self.results = similarities, results


Scorer = Callable[[Embeddings], dict[str, Tensor]]


def fold(emb: Tensor) -> tuple[Tensor, Tensor]:
    """``(B, W, ...)`` -> its ``(B * W, ...)`` rows and ``(B,)`` widths ``W``; a pooled
    ``(B, E)`` stays as it is, with widths 0 (no token axis)."""
    if emb.dim() < 3:
        return emb, torch.zeros(emb.shape[0], dtype=torch.long, device=emb.device)
    return emb.flatten(0, 1), torch.full((emb.shape[0],), emb.shape[1], dtype=torch.long,
                                         device=emb.device)


def unfold(rows: Tensor, widths: Tensor) -> Tensor:
    """Inverse of :func:`fold` for a concatenation of folded batches: ``(N, max W, ...)``,
    zero beyond each sample's own width."""
    if not bool((widths > 0).any()):
        return rows
    width = int(widths.max())
    out = rows.new_zeros((widths.shape[0], width, *rows.shape[1:]))
    out[torch.arange(width, device=widths.device)[None, :] < widths[:, None]] = rows  # row-major
    return out


def by_index(index: Tensor, rows: Tensor) -> Tensor:
    """``(max index + 1, ...)``: every row at its dataset index (a repeated index keeps the
    last row in rank order, on every device; the repeats are the same sample, padded in by
    the DistributedSampler and encoded in another batch)."""
    out = rows.new_zeros((int(index.max()) + 1, *rows.shape[1:]))
    last = last_occurrences(index)
    out[index[last]] = rows[last]  # unique indices: CUDA's racing writes cannot pick another
    return out


def unfold_by_index(index: Tensor, rows: Tensor, widths: Tensor) -> Tensor:
    """``by_index(index, unfold(rows, widths))`` without the intermediate padded tensor.

    The padded caption embeddings of a split are its largest tensor (gigabytes for COCO 5K,
    on every rank's device); unfolding straight into dataset order holds one padded copy at
    a time instead of two. Only copies: bit-identical to the two-step version, a repeated
    index keeping its last sample (:func:`~ncl.training.distributed.last_occurrences`).

    Args:
        index: ``(n,)`` dataset index of each sample, in the order of ``rows``.
        rows: ``(sum of widths, ...)`` folded rows (:func:`fold`), or pooled ``(n, ...)``.
        widths: ``(n,)`` each sample's width (all 0 for pooled rows).

    Returns:
        ``(max index + 1, max width, ...)``, zero beyond each sample's width (pooled:
        ``(max index + 1, ...)``).
    """
    if not bool((widths > 0).any()):
        return by_index(index, rows)
    kept = torch.zeros(index.shape[0], dtype=torch.bool, device=index.device)
    kept[last_occurrences(index)] = True  # padded repeats: the last one, as by_index
    width = int(widths.max())
    cells = torch.arange(width, device=widths.device)[None, :] < widths[:, None]  # (n, W)
    sample, slot = (cells & kept[:, None]).nonzero(as_tuple=True)  # row-major, as rows are
    out = rows.new_zeros((int(index.max()) + 1, width, *rows.shape[1:]))
    out[index[sample], slot] = rows[kept.repeat_interleave(widths)]
    return out


class RetrievalEvaluation(Metric):
    """Stores one split's embeddings over an epoch; ``compute`` scores them (see module).

    Args:
        n_networks: networks whose embeddings each ``update`` brings.
        **kwargs: torchmetrics options (``process_group``, ``dist_sync_fn``, ...).
    """

    full_state_update = False

    def __init__(self, n_networks: int, **kwargs: Any) -> None:
        super().__init__(compute_with_cache=False, **kwargs)
        self.n_networks = n_networks
        for side in ("img", "cap"):
            self.add_state(f"{side}_index", default=[], dist_reduce_fx="cat")
            for k in range(n_networks):
                self.add_state(f"{side}{k}", default=[], dist_reduce_fx="cat")
                self.add_state(f"{side}{k}_width", default=[], dist_reduce_fx="cat")
        self.add_state("cap_lengths", default=[], dist_reduce_fx="cat")

    def update(self, index: Tensor, embeddings: Sequence[Tensor], lengths: Tensor | None = None) -> None:
        """Add one batch: images (``lengths`` None) or captions.

        Args:
            index: ``(B,)`` dataset indices.
            embeddings: per network ``(B, R, E)`` image or ``(B, L_b, E)`` caption
                embeddings (or pooled ``(B, E)``).
            lengths: ``(B,)`` caption lengths, for a caption batch.
        """
        if len(embeddings) != self.n_networks:
            raise ValueError(f"expected {self.n_networks} embeddings (one per network), "
                             f"got {len(embeddings)}")
        side = "img" if lengths is None else "cap"
        getattr(self, f"{side}_index").append(index)
        if lengths is not None:
            self.cap_lengths.append(lengths)
        for k, emb in enumerate(embeddings):
            rows, widths = fold(emb)
            getattr(self, f"{side}{k}").append(rows)
            getattr(self, f"{side}{k}_width").append(widths)

    def _side(self, side: str, k: int) -> Tensor:
        """Network ``k``'s ``img``/``cap`` embeddings, every sample at its dataset index."""
        rows = dim_zero_cat(getattr(self, f"{side}{k}"))  # lists in one process, tensors after a sync
        widths = dim_zero_cat(getattr(self, f"{side}{k}_width"))
        return unfold_by_index(dim_zero_cat(getattr(self, f"{side}_index")), rows, widths)

    def embeddings(self, captions_per_image: int) -> Embeddings:
        """The (gathered) embeddings of the first images whose captions were all encoded."""
        lengths = by_index(dim_zero_cat(self.cap_index), dim_zero_cat(self.cap_lengths))
        n_img = min(int(dim_zero_cat(self.img_index).max()) + 1, lengths.shape[0] // captions_per_image)
        n_cap = n_img * captions_per_image
        return Embeddings(lambda k: self._side("img", k)[:n_img], lambda k: self._side("cap", k)[:n_cap],
                          lengths[:n_cap])

    def compute(self, scorer: Scorer, captions_per_image: int, protocols: Sequence[Protocol]) -> Evaluation:
        """Score the epoch's embeddings (all ranks) with ``scorer`` and run ``protocols``."""
        sims = scorer(self.embeddings(captions_per_image))
        return Evaluation(sims, evaluate_systems(sims, captions_per_image, protocols))


def score_networks(networks: Sequence[tuple[str, SimFn]], emb: Embeddings, shard_size: int,
                   device: torch.device, site: EvalSite) -> dict[str, Tensor]:
    """The standard scorer: each network's ``(N_img, N_cap)`` float32 matrix (sharded over
    the ranks), checked for NaN/Inf, then their mean (spec 5.4) when there are several.

    Args:
        networks: ``(name, sim_fn)`` of network ``k`` of ``emb``, for each ``k``.
        emb: the gathered embeddings.
        shard_size, device: as :func:`~ncl.evaluation.sharded.rank_sharded_similarity`.
        site: the split and method, for error messages and the progress bar.
    """
    sims: dict[str, Tensor] = {}
    for k, (name, sim_fn) in enumerate(networks):
        img, cap = emb.image(k), emb.caption(k)
        check_finite_embeddings(site, name, img, cap, emb.lengths)
        sims[name] = rank_sharded_similarity(sim_fn, img, cap, emb.lengths, shard_size, device=device,
                                             description=f"{site.label} similarity ({name})")
        check_finite_similarities(site, name, sims[name])
    if len(sims) > 1:
        sims["+".join(sims)] = ensemble(list(sims.values()))
    return sims


def logged_val_metrics(results: Results, selected: str) -> dict[str, float]:
    """``val/<key>`` of the ``selected`` system, ``val_<name>/<key>`` of the others."""
    return {f"{'val' if name == selected else f'val_{name}'}/{key}": by_protocol["1k"][key]
            for name, by_protocol in results.items() for key in LOGGED_KEYS}


def logged_test_metrics(results: Results) -> dict[str, float]:
    """``test/<system>/<protocol>/<key>`` of every system and protocol."""
    return {f"test/{name}/{protocol}/{key}": metrics[key] for name, by_protocol in results.items()
            for protocol, metrics in by_protocol.items() for key in LOGGED_KEYS}


def summary_line(epoch: int, name: str, m: dict[str, float]) -> str:
    """One printed line of validation results."""
    return (f"epoch {epoch} validation [{name}]: i2t R@1/5/10 {m['i2t_r1']:.1f}/{m['i2t_r5']:.1f}/"
            f"{m['i2t_r10']:.1f}  t2i R@1/5/10 {m['t2i_r1']:.1f}/{m['t2i_r5']:.1f}/"
            f"{m['t2i_r10']:.1f}  rSum {m['rsum']:.1f}")
