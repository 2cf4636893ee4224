"""How evaluation batches a method's networks when an embedding depends on its batch
(:class:`~ncl.models.contracts.BatchDependentBackbone`; IN2R's centred VSE).

* ``separate``: image and caption loaders of their own (any backbone whose embeddings do not
  depend on the batch is evaluated so);
* ``pairs``: the DataModule serves batches of pairs in caption order
  (:mod:`ncl.data.eval_batches`) and the evaluation step encodes both sides of each;
* ``split``: each sample is encoded without the batch statistics (:func:`encoding_context`)
  and, once the split is gathered, the statistics are taken over all of it
  (:func:`with_split_statistics`).

``pairs`` gives the same embeddings whatever the number of DDP processes (the same batches),
``split`` up to the last bits any encoder's kernels leave with another batch size; ``separate``
with a batch-dependent backbone does not (each rank's share forms other batches, and the
batch statistics differ).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack

from torch import Tensor, nn

from ncl.errors import ConfigError
from ncl.evaluation.metric import Embeddings
from ncl.models.contracts import BatchDependentBackbone, EvalBatching, eval_batching


def networks_batching(nets: Sequence[nn.Module]) -> EvalBatching:
    """The one evaluation batching of a method's networks (they must agree: one loader)."""
    kinds = {eval_batching(net) for net in nets}
    if len(kinds) > 1:
        raise ConfigError(f"the networks ask for different evaluation batches ({', '.join(sorted(kinds))}); "
                          f"give every backbone the same eval_batches")
    return kinds.pop() if kinds else "separate"


def encoding_context(nets: Sequence[nn.Module]) -> ExitStack:
    """The context an evaluation step encodes in: with ``split`` batching, every network's
    :meth:`~ncl.models.contracts.BatchDependentBackbone.batch_free`; else nothing."""
    stack = ExitStack()
    for net in nets:
        if eval_batching(net) == "split" and isinstance(net, BatchDependentBackbone):
            stack.enter_context(net.batch_free())
    return stack


def with_split_statistics(emb: Embeddings, nets: Sequence[nn.Module]) -> Embeddings:
    """``emb`` with each ``split`` network's images and captions passed through its
    :meth:`~ncl.models.contracts.BatchDependentBackbone.split_statistics` (over every image,
    every caption of the gathered split); the others unchanged."""
    split = [eval_batching(net) == "split" for net in nets]
    if not any(split):
        return emb

    def image(k: int) -> Tensor:
        out = emb.image(k)
        return nets[k].split_statistics(out) if split[k] else out

    def caption(k: int) -> Tensor:
        out = emb.caption(k)
        return nets[k].split_statistics(out) if split[k] else out

    return Embeddings(image, caption, emb.lengths)
