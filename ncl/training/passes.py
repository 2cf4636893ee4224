"""A per-sample pass: one value (or row) per training pair, computed in eval mode without
gradients over the whole training set, sharded over ranks and gathered by sample index.

NCR/LNC's co-divide feeds it the mean hinge of each pair (spec 4.2.4); CRCL and ReCon plug
in their own per-sample quantity the same way: a function ``(net, batch) -> (B, ...)``,
described with its batching by a :class:`PassSpec` and run by :func:`run_pass`.

Batches of a pass are formed over the **whole** (optionally shuffled) training set first and
then dealt whole to ranks (:func:`deal_batches`), so a sample's in-batch negatives, and so its
value, do not depend on the number of processes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import Dataset

from ncl.data.samplers import deal_batches  # noqa: F401 - also imported from here
from ncl.progress import track
from ncl.training.distributed import broadcast_buffers_, gather_by_index
from ncl.training.plans import IndexBatches, iterate

# (net, batch on device) -> (B, ...) per-sample values, in the batch's order.
PerSampleFn = Callable[[nn.Module, dict[str, Tensor]], Tensor]


@dataclass(frozen=True)
class PassSpec:
    """One per-sample pass over the whole training set, in eval mode, without gradients.

    Attributes:
        fn: the per-sample quantity.
        nets: indices of the method's networks to run it with (one output row each).
        batch_size: batch size of the pass (in-batch negatives make values depend on it).
        shuffle: shuffle the set before cutting batches (the official co-divide does).
        stream: stream id mixed into the shuffle's seed (ids in use: ``ncl.data.samplers``).
        seed: seed of the shuffle (the run's ``training_seed`` unless the method says).
        per_net_shuffle: a shuffle of its own for every network (NCR: one loader per net),
            seeded ``(seed, epoch, stream, net, 0)``; otherwise one shuffle seeded
            ``(seed, epoch, stream)`` shared by all networks.
        view: what the pass reads instead of the training pairs, from them and the epoch
            (IN2R: the pairs augmented as the official training loader augments them); it
            must give the same items on every rank and after a resume. ``None``: the pairs.
    """

    fn: PerSampleFn
    nets: tuple[int, ...]
    batch_size: int
    shuffle: bool
    stream: int
    seed: int
    per_net_shuffle: bool = False
    view: Callable[[Dataset, int], Dataset] | None = None


def pass_order(spec: PassSpec, num_samples: int, epoch: int, net: int) -> np.ndarray:
    """The order in which network ``net``'s pass of epoch ``epoch`` visits the samples."""
    if not spec.shuffle:
        return np.arange(num_samples)
    key = [spec.seed, epoch, spec.stream, net, 0] if spec.per_net_shuffle else [spec.seed, epoch, spec.stream]
    return np.random.default_rng(key).permutation(num_samples)


def run_pass(spec: PassSpec, nets: Sequence[nn.Module], pairs: Dataset, epoch: int,
             device: torch.device, rank: int = 0, world: int = 1, num_workers: int = 0,
             description: str = "per-sample pass") -> Tensor:
    """Run ``spec`` with ``nets[k]`` for every ``k`` in ``spec.nets``.

    Returns:
        ``(len(spec.nets), N, ...)`` on ``device``, identical on every rank.
    """
    chosen = [nets[k] for k in spec.nets]
    if spec.view is not None:
        pairs = spec.view(pairs, epoch)
    batches = [deal_batches(pass_order(spec, len(pairs), epoch, k), spec.batch_size, rank, world)
               for k in spec.nets]
    return per_sample_pass(chosen, pairs, batches, spec.fn, device, num_workers, description)


@contextmanager
def eval_mode(*modules: nn.Module) -> Iterator[None]:
    """Put ``modules`` in eval mode and restore each submodule's previous mode afterwards."""
    saved = [[(m, m.training) for m in module.modules()] for module in modules]
    try:
        for module in modules:
            module.eval()
        yield
    finally:
        for pairs in saved:
            for m, mode in pairs:
                m.training = mode


def to_device(batch: dict[str, Tensor], device: torch.device) -> dict[str, Tensor]:
    return {k: v.to(device) for k, v in batch.items()}


@torch.no_grad()
def local_values(net: nn.Module, pairs: Dataset, batches: Sequence[np.ndarray], fn: PerSampleFn,
                 device: torch.device, num_workers: int = 0,
                 description: str = "per-sample pass") -> tuple[Tensor, Tensor]:
    """``fn`` over this rank's batches of ``pairs``; ``net`` must already be in eval mode.

    Shows a progress bar labelled ``description`` on rank 0 of a terminal
    (:func:`ncl.progress.track`); silent otherwise.

    Returns:
        ``(index, values)``: ``(n,)`` int64 dataset indices and ``(n, ...)`` values, on ``device``.
        A rank dealt no batch returns ``(0,)`` placeholders: it cannot know the shape of a
        value (ReCon's rows have 3 columns, DECL's 4) without running ``fn``, so the gather
        gives them the other ranks' row shape and dtype
        (:func:`~ncl.training.distributed.all_gather_cat`).
    """
    index, values = [], []
    loader = iterate(IndexBatches(pairs, batches), num_workers, pin_memory=device.type == "cuda")
    for batch in track(loader, description, total=len(batches)):
        batch = to_device(batch, device)
        values.append(fn(net, batch))
        index.append(batch["index"])
    if not index:
        return torch.zeros(0, dtype=torch.long, device=device), torch.zeros(0, device=device)
    return torch.cat(index), torch.cat(values)


def per_sample_pass(nets: Sequence[nn.Module], pairs: Dataset, batches: Sequence[Sequence[np.ndarray]],
                    fn: PerSampleFn, device: torch.device, num_workers: int = 0,
                    description: str = "per-sample pass") -> Tensor:
    """Per-sample values of every network over the whole training set, identical on all ranks.

    Args:
        nets: the networks (eval mode during the pass; their modes are restored afterwards).
        pairs: the training pairs (items as :class:`~ncl.data.datasets.PairDataset`).
        batches: per network, the dataset-index batches *this rank* computes (every sample
            must be covered by some rank; see :func:`deal_batches`).
        fn: the per-sample quantity.
        device: where the networks live.
        num_workers: DataLoader workers for reading the pairs.
        description: label of the progress bar (rank 0 of a terminal only), one bar per
            network, suffixed with its number when there are several.

    Returns:
        ``(K, N, ...)`` on ``device``: row ``k`` from network ``k``, gathered by index.
    """
    n = len(pairs)
    rows = []
    broadcast_buffers_(*nets)  # every rank scores its share with rank 0's BatchNorm statistics
    with eval_mode(*nets):
        for k, (net, net_batches) in enumerate(zip(nets, batches)):
            label = f"{description} ({k})" if len(nets) > 1 else description
            index, values = local_values(net, pairs, net_batches, fn, device, num_workers, label)
            rows.append(gather_by_index(index, values, n))
    return torch.stack(rows)
