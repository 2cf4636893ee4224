"""SGRAF backbone: image encoder, text encoder and SGR/SAF similarity (spec 3.1-3.5)."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from ncl.models.encoders import EncoderImage, EncoderText
from ncl.models.similarity import EncoderSimilarity, Strategy

# Captions per chunk of the automatic path on CPU: the measured optimum on a 2-core Xeon
# (chunks of 1, 2, 4 and 32 compared; docs/benchmarks/similarity.md). Larger chunks build
# (B_img, chunk * L, 1024) intermediates that no longer fit in cache.
CPU_CHUNK_SIZE = 2


class SGRAF(nn.Module):
    """SGR or SAF image-text matching network on precomputed region features.

    The three submodules ``img_enc``, ``txt_enc`` and ``sim_enc`` have the official
    parameter names, so an official checkpoint's three state dicts load one-to-one
    (spec 3.4; see :mod:`ncl.models.checkpoint`).

    Args:
        vocab_size: Size of the official vocabulary (8,481 F30K; 11,353 COCO; 12,072 CC152K).
        module_name: Reasoning head, ``"SGR"`` or ``"SAF"``.
        img_dim: Region feature size (2048).
        word_dim: Word-embedding size (300).
        embed_size: Joint embedding size (1024).
        sim_dim: Similarity-vector size (256).
        num_regions: Regions per image (36); fixed by VisualSA's ``BatchNorm1d``.
        sgr_step: Unshared SGR steps (3).
        dropout: Dropout on word embeddings and inside VisualSA/TextSA (0.4).
        bi_gru: Bidirectional caption GRU, directions averaged (official default True).
        no_imgnorm: Skip the per-region l2norm of the image encoder.
        add_mask_token: Add one embedding row for ``<mask>`` (id ``vocab_size``), as RCL,
            CRCL and ReCon do.
        similarity_strategy: ``"loop"`` (the official per-caption loop, the reference),
            ``"chunked"`` (chunks of captions against all images at once, with exact
            algebraic savings) or ``"auto"`` (chunked; on CPU with chunks of at most
            ``CPU_CHUNK_SIZE`` captions). See ``docs/benchmarks/similarity.md``.
        chunk_size: Captions per chunk for the chunked path.

    Attributes:
        img_dim: Region feature size.
        num_regions: Regions per image.
        vocab_size: Rows of the word embedding (including ``<mask>`` if added).
    """

    def __init__(self, vocab_size: int, module_name: Literal["SGR", "SAF"] = "SGR",
                 img_dim: int = 2048, word_dim: int = 300, embed_size: int = 1024,
                 sim_dim: int = 256, num_regions: int = 36, sgr_step: int = 3,
                 dropout: float = 0.4, bi_gru: bool = True, no_imgnorm: bool = False,
                 add_mask_token: bool = False,
                 similarity_strategy: Literal["auto", "loop", "chunked"] = "auto",
                 chunk_size: int = 32) -> None:
        super().__init__()
        _check_config(vocab_size, module_name, img_dim, word_dim, embed_size, sim_dim,
                      num_regions, sgr_step, dropout, similarity_strategy, chunk_size)
        self.img_dim = img_dim
        self.num_regions = num_regions
        self.vocab_size = vocab_size + int(add_mask_token)
        self.module_name = module_name
        self.similarity_strategy = similarity_strategy
        self.chunk_size = chunk_size
        self.img_enc = EncoderImage(img_dim, embed_size, no_imgnorm)
        self.txt_enc = EncoderText(self.vocab_size, word_dim, embed_size, bi_gru, dropout)
        self.sim_enc = EncoderSimilarity(embed_size, sim_dim, module_name, sgr_step,
                                         num_regions, dropout)

    def encode_images(self, images: Tensor, image_lengths: Tensor | None = None) -> Tensor:
        """``(B, R, img_dim)`` region features -> ``(B, R, E)`` region embeddings (spec 3.1).

        ``image_lengths`` (``(B,)``, from ``collate`` when region counts differ) is accepted
        for the :class:`~ncl.models.contracts.RetrievalBackbone` contract, but SGR/SAF attend
        over a fixed region count (the official BUTD features have 36 per image): padded
        regions would be attended as real ones, so a batch with fewer regions than ``R`` for
        some image is refused.
        """
        if images.dim() != 3 or images.shape[-1] != self.img_dim:
            raise ValueError(f"images must have shape (B, R, {self.img_dim}), "
                             f"got {tuple(images.shape)}")
        if image_lengths is not None and bool((torch.as_tensor(image_lengths) < images.shape[1]).any()):
            raise ValueError("SGRAF needs the same region count for every image (SGR/SAF have no "
                             "region mask); got variable image_lengths")
        return self.img_enc(images)

    def encode_captions(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """Token ids -> per-token embeddings (spec 3.2).

        Args:
            tokens: ``(B, L)`` long ids, zero-padded; ``L >= max(lengths)``.
            lengths: ``(B,)`` lengths counting ``<start>``/``<end>``; any order.

        Returns:
            ``(B, L, E)``; padded positions are zero.
        """
        return self._encode_checked(tokens, self.host_lengths(tokens, lengths))

    def host_lengths(self, tokens: Tensor, lengths: Tensor) -> list[int]:
        """Validate a caption batch; return its lengths as Python ints.

        The lengths (for packing the GRU input and chunking the captions) and the token
        range (an id out of range would be a CUDA device-side assert, not a clear error) come
        to the host in one copy: one device sync per caption batch.

        Args:
            tokens: ``(B, L)`` long ids.
            lengths: ``(B,)`` caption lengths.

        Returns:
            ``B`` lengths, unchecked when ``tokens`` is empty (``B = 0`` or ``L = 0``).
        """
        lengths = torch.as_tensor(lengths)
        if tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(f"tokens must be a 2-D long tensor, got shape "
                             f"{tuple(tokens.shape)} and dtype {tokens.dtype}")
        if lengths.shape != (tokens.shape[0],):
            raise ValueError(f"lengths must have shape ({tokens.shape[0]},), "
                             f"got {tuple(lengths.shape)}")
        if not tokens.numel():
            return [int(n) for n in lengths.tolist()]
        lens, (low, high) = _lengths_and_range(tokens, lengths)
        if min(lens) < 1 or max(lens) > tokens.shape[1]:
            raise ValueError(f"lengths must lie in [1, {tokens.shape[1]}] (tokens.shape[1])")
        if low < 0 or high >= self.vocab_size:
            raise ValueError(f"tokens must lie in [0, {self.vocab_size}) (vocab_size), got "
                             f"[{low}, {high}]")
        return lens

    def _encode_checked(self, tokens: Tensor, lens: list[int]) -> Tensor:
        """``(B, L, E)`` embeddings of validated tokens; ``lens`` from :meth:`host_lengths`."""
        # A host tensor: packing reads the lengths on the host, so no copy back is needed.
        return self.txt_enc(tokens, torch.tensor(lens, dtype=torch.long))

    def similarity_logits(self, img_emb: Tensor, cap_emb: Tensor, lengths: Tensor) -> Tensor:
        """Raw scores ``w_e . vec + b_e`` before the sigmoid (spec 3.3).

        Args:
            img_emb: ``(B_img, R, E)`` from :meth:`encode_images`.
            cap_emb: ``(B_cap, L, E)`` from :meth:`encode_captions`.
            lengths: ``(B_cap,)`` caption lengths.

        Returns:
            ``(B_img, B_cap)``; rows images, columns captions.
        """
        return self._logits(img_emb, cap_emb, lengths)

    def _logits(self, img_emb: Tensor, cap_emb: Tensor, lengths: Tensor,
                lens: list[int] | None = None) -> Tensor:
        """:meth:`similarity_logits`, given the lengths on the host too when known
        (``lens``: then the similarity encoder copies nothing back)."""
        strategy, chunk_size = self.similarity_plan(img_emb.device)
        return self.sim_enc(img_emb, cap_emb, lengths, strategy, chunk_size, host_lengths=lens)

    def similarity(self, img_emb: Tensor, cap_emb: Tensor, lengths: Tensor) -> Tensor:
        """``sigmoid`` of :meth:`similarity_logits`, ``(B_img, B_cap)`` in ``(0, 1)``."""
        return torch.sigmoid(self.similarity_logits(img_emb, cap_emb, lengths))

    def forward(self, images: Tensor, tokens: Tensor, lengths: Tensor,
                image_lengths: Tensor | None = None) -> Tensor:
        """``(B, B)`` similarity of every image/caption pair of a batch.

        The caption lengths come to the host once (:meth:`host_lengths`) and serve both the
        caption encoder and the similarity encoder.

        Args:
            images: ``(B, R, img_dim)``.
            tokens: ``(B, L)`` long ids.
            lengths: ``(B,)``.
            image_lengths: ``(B,)`` region counts, or ``None`` (see :meth:`encode_images`).
        """
        img_emb = self.encode_images(images, image_lengths)
        lens = self.host_lengths(tokens, lengths)
        cap_emb = self._encode_checked(tokens, lens)
        return torch.sigmoid(self._logits(img_emb, cap_emb, lengths, lens))

    def similarity_plan(self, device: torch.device) -> tuple[Strategy, int]:
        """The strategy and chunk size used on ``device`` (resolves ``"auto"``; spec 6.1).

        ``auto`` is the chunked path everywhere: on CUDA with ``chunk_size`` captions per
        chunk (spec 6.1: the loop is launch-bound there; not measured in this project yet);
        on CPU with at most ``CPU_CHUNK_SIZE``, because larger chunks spill out of cache.
        Measured in docs/benchmarks/similarity.md: on CPU this is faster than the loop and
        no larger in memory.

        Args:
            device: Where the embeddings live.

        Returns:
            ``("loop" | "chunked", chunk_size)``.
        """
        if self.similarity_strategy != "auto":
            return self.similarity_strategy, self.chunk_size
        if device.type == "cpu":
            return "chunked", min(self.chunk_size, CPU_CHUNK_SIZE)
        return "chunked", self.chunk_size


def _lengths_and_range(tokens: Tensor, lengths: Tensor) -> tuple[list[int], list[int]]:
    """``lengths`` as ints and ``[min, max]`` of a non-empty ``tokens``, in one host copy.

    Args:
        tokens: ``(B, L)`` long ids, ``B L > 0``.
        lengths: ``(B,)``; whole numbers (a float length is truncated, as ``int()`` does).

    Returns:
        ``B`` lengths and the smallest and largest token id.
    """
    extremes = torch.stack([tokens.min(), tokens.max()])  # (2,), on the tokens' device
    if lengths.device != tokens.device:  # already elsewhere (the host): two copies, rare
        return [int(n) for n in lengths.tolist()], extremes.tolist()
    values = torch.cat([lengths.to(torch.long), extremes]).tolist()  # (B + 2,): one sync
    return values[:-2], values[-2:]


def _check_config(vocab_size: int, module_name: str, img_dim: int, word_dim: int,
                  embed_size: int, sim_dim: int, num_regions: int, sgr_step: int,
                  dropout: float, similarity_strategy: str, chunk_size: int) -> None:
    """Raise ValueError on an invalid constructor argument."""
    if module_name not in ("SGR", "SAF"):
        raise ValueError(f"module_name must be 'SGR' or 'SAF', got {module_name!r}")
    if similarity_strategy not in ("auto", "loop", "chunked"):
        raise ValueError("similarity_strategy must be 'auto', 'loop' or 'chunked', "
                         f"got {similarity_strategy!r}")
    sizes = {"vocab_size": vocab_size, "img_dim": img_dim, "word_dim": word_dim,
             "embed_size": embed_size, "sim_dim": sim_dim, "num_regions": num_regions,
             "sgr_step": sgr_step, "chunk_size": chunk_size}
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must lie in [0, 1), got {dropout!r}")
