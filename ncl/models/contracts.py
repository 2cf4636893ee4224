"""What methods may rely on in a backbone: the :class:`RetrievalBackbone` contract.

A method is handed a backbone factory (``vocab_size -> nn.Module``, ``class_path`` in YAML)
and uses the networks it builds only through these four methods: training calls
:meth:`~RetrievalBackbone.forward` on a batch; evaluation encodes every image and caption
once, then scores shards of embeddings with :meth:`~RetrievalBackbone.similarity`
(:func:`ncl.evaluation.similarity.sharded_similarity`). :class:`~ncl.models.sgraf.SGRAF`
satisfies it.

Optional attributes read when present: ``num_regions`` and ``img_dim`` (checked against the
features before training), ``vocab_size`` (word-embedding rows, ``<mask>`` included; checked
when ``data.augment`` masks tokens).

Variable region counts: batches whose images have different region counts carry
``image_lengths (B,)`` (:func:`ncl.data.datasets.collate`), and only those; callers pass
``image_lengths`` only when it is not ``None`` (:func:`forward_batch`, :func:`encode_images`:
the one adaptor from a collated batch to these calls). A backbone with a fixed region count (SGR/SAF's
``BatchNorm1d(R)``) never receives it; a VSE-infinity or video backbone pools over the first
``image_lengths[b]`` rows of image ``b`` and ignores the zero padding.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Literal, Protocol, runtime_checkable

from torch import Tensor, nn

#: How evaluation forms the batches a backbone encodes (:func:`eval_batching`): ``separate``
#: loaders of images and of captions; ``pairs`` of ``eval_batch_size`` (image, caption) pairs
#: in caption order, each image once per caption (the official ``encode_data`` of IN2R);
#: ``split``: each sample encoded without the batch's statistics, which are then taken over
#: the whole split.
EvalBatching = Literal["separate", "pairs", "split"]
EVAL_BATCHINGS: tuple[str, ...] = ("separate", "pairs", "split")


@runtime_checkable
class RetrievalBackbone(Protocol):
    """An image-text matching network: encoders plus a similarity on their embeddings.

    Positional parameters are positional-only here, so implementations may name them freely.
    """

    def encode_images(self, images: Tensor, /, image_lengths: Tensor | None = None) -> Tensor:
        """Encode region features.

        Args:
            images: ``(B, R, D)`` region features (zero-padded beyond ``image_lengths``).
            image_lengths: ``(B,)`` int64 true region counts, or ``None`` when every image
                has all ``R`` rows.

        Returns:
            ``(B, R, E)`` region embeddings (SGR/SAF) or pooled ``(B, E)`` (VSE-infinity);
            whatever :meth:`similarity` takes as ``img_emb``.
        """

    def encode_captions(self, tokens: Tensor, lengths: Tensor, /) -> Tensor:
        """Encode token ids.

        Args:
            tokens: ``(B, L)`` int64 ids, zero-padded (``<pad>`` = 0), ``L >= max(lengths)``.
            lengths: ``(B,)`` int64 true lengths (``<start>``/``<end>`` included), any order.

        Returns:
            ``(B, L, E)`` word embeddings (zero beyond each length) or pooled ``(B, E)``.
        """

    def similarity(self, img_emb: Tensor, cap_emb: Tensor, cap_lengths: Tensor, /) -> Tensor:
        """Score every image against every caption.

        Args:
            img_emb: ``(B_img, ...)`` from :meth:`encode_images`.
            cap_emb: ``(B_cap, L', E)`` from :meth:`encode_captions`, possibly trimmed to the
                shard's longest caption (``L' >= max(cap_lengths)``), or pooled ``(B_cap, E)``.
            cap_lengths: ``(B_cap,)`` int64 caption lengths.

        Returns:
            ``(B_img, B_cap)`` float scores; rows images, columns captions; higher is more
            similar (SGRAF: sigmoid in ``(0, 1)``).
        """

    def forward(self, images: Tensor, tokens: Tensor, lengths: Tensor, /,
                image_lengths: Tensor | None = None) -> Tensor:
        """``(B, B)`` scores of every image/caption pair of a training batch.

        Args:
            images: ``(B, R, D)``; ``image_lengths`` as in :meth:`encode_images`.
            tokens: ``(B, L)``; ``lengths``: ``(B,)``, as in :meth:`encode_captions`.

        Returns:
            ``similarity(encode_images(images), encode_captions(tokens, lengths), lengths)``;
            entry ``(i, j)`` scores image ``i`` against caption ``j``; the diagonal holds the
            batch's (possibly mismatched) pairs.
        """


@runtime_checkable
class BatchDependentBackbone(Protocol):
    """A backbone whose embedding of a sample may depend on the other samples of its batch
    (IN2R's VSE centres every batch: :class:`~ncl.models.in2r_vse.In2rVSE`). Evaluation reads
    this declaration (:func:`eval_batching`), never the method's or the backbone's name.

    Attributes:
        batch_dependent: whether, as configured, an embedding depends on its batch.
        eval_batches: the evaluation batching the backbone asks for (:data:`EvalBatching`).
    """

    batch_dependent: bool
    eval_batches: EvalBatching

    def batch_free(self) -> AbstractContextManager[None]:
        """A context in which :meth:`~RetrievalBackbone.encode_images` and
        :meth:`~RetrievalBackbone.encode_captions` leave the batch statistics out."""

    def split_statistics(self, emb: Tensor, /) -> Tensor:
        """The batch statistics applied over a whole split's ``(N, E)`` embeddings, encoded
        in :meth:`batch_free`: ``(N, E)``."""


def eval_batching(net: nn.Module) -> EvalBatching:
    """How evaluation batches ``net``'s inputs: the backbone's ``eval_batches`` when it
    declares a batch-dependent encoding (:class:`BatchDependentBackbone`), else ``separate``
    (each image and each caption encoded once; the batching cannot change an embedding)."""
    if isinstance(net, BatchDependentBackbone) and net.batch_dependent:
        return net.eval_batches
    return "separate"


def forward_batch(net: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    """``(B, B)`` similarities of every image/caption pair of a collated batch.

    ``image_lengths`` is passed only when the batch has it (region counts differ within the
    batch, :func:`ncl.data.datasets.collate`), for backbones that mask padded regions.
    """
    extra = {"image_lengths": batch["image_lengths"]} if "image_lengths" in batch else {}
    return net(batch["images"], batch["tokens"], batch["lengths"], **extra)


def encode_images(net: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    """``net.encode_images`` of a batch's images, with ``image_lengths`` when the batch has it
    (the same rule as :func:`forward_batch`)."""
    extra = {"image_lengths": batch["image_lengths"]} if "image_lengths" in batch else {}
    return net.encode_images(batch["images"], **extra)


def forward_logits(net: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    """``(B, B)`` raw scores (before the sigmoid) of a collated batch, from a backbone with
    ``similarity_logits`` (SGRAF: DECL's evidence and ReCon's scores are computed from them);
    images encoded as :func:`encode_images` encodes them."""
    img = encode_images(net, batch)
    cap = net.encode_captions(batch["tokens"], batch["lengths"])
    return net.similarity_logits(img, cap, batch["lengths"])
