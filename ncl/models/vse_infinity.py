"""VSE-infinity backbone: pooled region and word embeddings, cosine similarity (spec 3.6).

VSE-infinity (Chen et al., CVPR 2021) as CRCL ships it (``model/VSEinfty.py``): each image
and each caption becomes one unit vector, pooled by GPO (:mod:`ncl.models.gpo`), and the
score of a pair is their inner product. No cross-attention, so a batch matrix is one matmul.

Official parameter names (the spec describes the layers but names no tensor; the names
below are those of CRCL's ``VSEinfty.py``, which are those of the original VSE-infinity
code, so an official state dict loads one-to-one)::

    img_enc.fc                  Linear(img_dim -> E)                     2,098,176
    img_enc.mlp.layers.0        Linear(img_dim -> E/2)                   1,049,088
    img_enc.mlp.bns.0           BatchNorm1d(E/2)                             1,024
    img_enc.mlp.layers.1        Linear(E/2 -> E)                           525,312
    img_enc.mlp.bns.1           BatchNorm1d(E), created but never used       2,048
    img_enc.gpool.{gru, linear} GPO                                         12,704
    txt_enc.embed               Embedding(V (+1), word_dim)                   300 V
    txt_enc.rnn                 bi-GRU(word_dim -> E)                    8,146,944
    txt_enc.gpool.{gru, linear} GPO                                         12,704

(counts at the official 2048 / 300 / 1024). An official model is saved as the list of two
state dicts ``[img_enc, txt_enc]`` (``VSEModel.state_dict``; CRCL saves it under
``checkpoint["model"]``); :meth:`VSEInfinity.load_official_state` reads that list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ncl.errors import ConfigError
from ncl.models.gpo import GPO
from ncl.models.layers import (
    at_least_float32,
    float32_region,
    init_linear_uniform,
    l2norm,
)
from ncl.models.state_dicts import prepare_state, strip_prefix

#: Size of GPO's positional encodings and of its GRU (hard-wired in the official code).
GPO_DIM = 32
PARTS = ("img_enc", "txt_enc")


class MLP(nn.Module):
    """Two-layer MLP ``Linear -> BN -> ReLU -> Linear`` over every region (spec 3.6).

    ``bns`` holds a BatchNorm per layer, as the official class builds it, but the last one
    (``bns.1``) is never applied: it exists so that the state dict, and the parameter count,
    match the official model. Default PyTorch initialisation (spec 3.6).

    Args:
        in_dim: Input size (img_dim).
        hidden_dim: Hidden size (E / 2).
        out_dim: Output size (E).
    """

    def __init__(self, in_dim: int, hidden_dim: int, out_dim: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(in_dim, hidden_dim), nn.Linear(hidden_dim, out_dim)])
        self.bns = nn.ModuleList([nn.BatchNorm1d(hidden_dim), nn.BatchNorm1d(out_dim)])

    def forward(self, x: Tensor) -> Tensor:
        """``(B, N, in_dim) -> (B, N, out_dim)``.

        The BatchNorm sees all ``B * N`` rows, zero-padded regions included, as the official
        code does (spec 3.6): in train mode the padding shifts the batch statistics.
        """
        batch, regions, _ = x.shape
        hidden = self.layers[0](x.reshape(batch * regions, -1))  # (B*N, H)
        hidden = torch.relu(self.bns[0](hidden))
        return self.layers[1](hidden).reshape(batch, regions, -1)  # (B, N, out_dim)


class EncoderImageAggr(nn.Module):
    """Region features -> one unit-norm image embedding (spec 3.6).

    ``f_r = fc(x_r) + MLP(x_r)`` per region, ``v = GPO(f_1..f_n)``, then ``l2norm(v)``.

    Args:
        img_dim: Region feature size (2048).
        embed_size: Joint embedding size E (1024); the MLP's hidden size is E // 2.
        no_imgnorm: Skip the final l2norm (official ``--no_imgnorm``; default off).
    """

    def __init__(self, img_dim: int, embed_size: int, no_imgnorm: bool = False) -> None:
        super().__init__()
        self.no_imgnorm = no_imgnorm
        self.fc = nn.Linear(img_dim, embed_size)
        init_linear_uniform(self.fc)  # same uniform init as SGRAF's fc (spec 3.1)
        self.mlp = MLP(img_dim, embed_size // 2, embed_size)
        self.gpool = GPO(GPO_DIM, GPO_DIM)

    def forward(self, images: Tensor, image_lengths: Tensor) -> Tensor:
        """``(B, N, img_dim)`` zero-padded features and ``(B,)`` counts -> ``(B, E)``."""
        features = self.fc(images) + self.mlp(images)  # (B, N, E)
        pooled = self.gpool(features, image_lengths)  # (B, E)
        return pooled if self.no_imgnorm else l2norm(pooled, dim=-1)


class EncoderTextGPO(nn.Module):
    """Token ids -> one unit-norm caption embedding (spec 3.6).

    Word embedding (``U(-0.1, 0.1)``, no dropout), bi-GRU with the two directions averaged,
    GPO over the tokens, ``l2norm``. Unlike SGRAF there is no per-token l2norm.

    Args:
        vocab_size: Embedding rows (``+1`` with ``<mask>``).
        word_dim: Word-embedding size (300).
        embed_size: GRU hidden size = joint embedding size (1024).
        no_txtnorm: Skip the final l2norm (official ``--no_txtnorm``; default off).
    """

    def __init__(self, vocab_size: int, word_dim: int, embed_size: int,
                 no_txtnorm: bool = False) -> None:
        super().__init__()
        self.embed_size = embed_size
        self.no_txtnorm = no_txtnorm
        self.embed = nn.Embedding(vocab_size, word_dim)
        # PyTorch's default GRU initialisation, as the official code.
        self.rnn = nn.GRU(word_dim, embed_size, num_layers=1, batch_first=True, bidirectional=True)
        self.gpool = GPO(GPO_DIM, GPO_DIM)
        with torch.no_grad():
            self.embed.weight.uniform_(-0.1, 0.1)

    def forward(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """``(B, L)`` zero-padded ids and ``(B,)`` lengths (any order) -> ``(B, E)``."""
        words = self.embed(tokens)  # (B, L, word_dim)
        # The official packer needs descending lengths (its collate sorts); enforce_sorted=False
        # sorts internally and restores the order, so callers need not.
        packed = pack_padded_sequence(words, lengths.detach().cpu().long(), batch_first=True,
                                      enforce_sorted=False)
        out, _ = self.rnn(packed)
        hidden, _ = pad_packed_sequence(out, batch_first=True, total_length=tokens.shape[1])
        hidden = (hidden[..., : self.embed_size] + hidden[..., self.embed_size:]) / 2  # (B, L, E)
        pooled = self.gpool(hidden, lengths)  # (B, E)
        return pooled if self.no_txtnorm else l2norm(pooled, dim=-1)


class VSEInfinity(nn.Module):
    """VSE-infinity image-text matching network on precomputed region features (spec 3.6).

    Satisfies :class:`~ncl.models.contracts.RetrievalBackbone` with pooled embeddings:
    :meth:`encode_images` and :meth:`encode_captions` return ``(B, E)`` unit vectors and
    :meth:`similarity` their cosine ``S = I C^T``. Images may have different region counts
    (``image_lengths``, e.g. CRCL's region-removing augmentation): GPO pools over the first
    ``image_lengths[b]`` rows only. There is deliberately no ``num_regions`` attribute: the
    region count is free.

    Args:
        vocab_size: Size of the official vocabulary (8,481 F30K; 11,353 COCO; 12,072 CC152K).
        img_dim: Region feature size (official: 2048, hard-wired there).
        word_dim: Word-embedding size (300).
        embed_size: Joint embedding size (1024); must be even (the MLP's hidden is half).
        add_mask_token: Add one embedding row for ``<mask>`` (id ``vocab_size``), as CRCL
            does (spec 1.4); needed with CRCL's caption augmentation.
        no_imgnorm: Skip the image embedding's l2norm (official default off).
        no_txtnorm: Skip the caption embedding's l2norm (official default off).

    Attributes:
        img_dim: Region feature size (checked against the data before training).
        vocab_size: Rows of the word embedding (including ``<mask>`` if added).
        embed_size: Joint embedding size.
    """

    def __init__(self, vocab_size: int, img_dim: int = 2048, word_dim: int = 300,
                 embed_size: int = 1024, add_mask_token: bool = False, no_imgnorm: bool = False,
                 no_txtnorm: bool = False) -> None:
        super().__init__()
        _check_config(vocab_size, img_dim, word_dim, embed_size)
        self.img_dim = img_dim
        self.embed_size = embed_size
        self.vocab_size = vocab_size + int(add_mask_token)
        self.img_enc = EncoderImageAggr(img_dim, embed_size, no_imgnorm)
        self.txt_enc = EncoderTextGPO(self.vocab_size, word_dim, embed_size, no_txtnorm)

    # ------------------------------------------------------------------ contract
    def encode_images(self, images: Tensor, image_lengths: Tensor | None = None) -> Tensor:
        """Region features -> pooled image embeddings (spec 3.6).

        Args:
            images: ``(B, R, img_dim)``, zero-padded beyond ``image_lengths``.
            image_lengths: ``(B,)`` integer region counts in ``[1, R]``, any order; ``None``
                means every image has all ``R`` rows.

        Returns:
            ``(B, E)``, unit norm unless ``no_imgnorm``.
        """
        if images.dim() != 3 or images.shape[-1] != self.img_dim or images.shape[1] < 1:
            raise ValueError(f"images must have shape (B, R >= 1, {self.img_dim}), "
                             f"got {tuple(images.shape)}")
        if image_lengths is None:
            image_lengths = torch.full((images.shape[0],), images.shape[1], dtype=torch.long,
                                       device=images.device)
        image_lengths = _check_lengths(image_lengths, images.shape[0], images.shape[1],
                                       "image_lengths", "R").to(images.device)
        return self.img_enc(images, image_lengths)

    def encode_captions(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """Token ids -> pooled caption embeddings (spec 3.6).

        Args:
            tokens: ``(B, L)`` long ids, zero-padded; ``L >= max(lengths)``.
            lengths: ``(B,)`` lengths counting ``<start>``/``<end>``; any order.

        Returns:
            ``(B, E)``, unit norm unless ``no_txtnorm``.
        """
        if tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(f"tokens must be a 2-D long tensor, got shape "
                             f"{tuple(tokens.shape)} and dtype {tokens.dtype}")
        lengths = _check_lengths(lengths, tokens.shape[0], tokens.shape[1], "lengths", "L")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size):
            raise ValueError(f"tokens must lie in [0, {self.vocab_size}) (vocab_size), got "
                             f"[{int(tokens.min())}, {int(tokens.max())}]")
        return self.txt_enc(tokens, lengths.to(tokens.device))

    def similarity(self, img_emb: Tensor, cap_emb: Tensor,
                   cap_lengths: Tensor | None = None) -> Tensor:
        """Cosine similarity of pooled embeddings: ``S = I C^T`` (spec 3.6).

        Both sides are unit vectors (unless a ``no_*norm`` switch is on), so the inner
        product is the cosine, in ``[-1, 1]``.

        Args:
            img_emb: ``(B_img, E)`` from :meth:`encode_images`.
            cap_emb: ``(B_cap, E)`` from :meth:`encode_captions`.
            cap_lengths: ``(B_cap,)``; unused (the contract passes it).

        Returns:
            ``(B_img, B_cap)``; rows images, columns captions.
        """
        if img_emb.dim() != 2 or cap_emb.dim() != 2 or img_emb.shape[1] != cap_emb.shape[1]:
            raise ValueError(f"VSEInfinity.similarity needs pooled (B_img, E) and (B_cap, E) "
                             f"embeddings, got {tuple(img_emb.shape)} and {tuple(cap_emb.shape)}")
        with float32_region(img_emb.device):  # the score in float32 (docs/precision.md)
            return at_least_float32(img_emb) @ at_least_float32(cap_emb).t()

    def forward(self, images: Tensor, tokens: Tensor, lengths: Tensor,
                image_lengths: Tensor | None = None) -> Tensor:
        """``(B, B)`` cosine similarity of every image/caption pair of a batch.

        Args:
            images: ``(B, R, img_dim)``; ``image_lengths``: ``(B,)`` or ``None``.
            tokens: ``(B, L)`` long ids; ``lengths``: ``(B,)``.
        """
        return self.similarity(self.encode_images(images, image_lengths),
                               self.encode_captions(tokens, lengths), lengths)

    # ------------------------------------------------------------------ official weights
    def load_official_state(self, state_dicts: Sequence[Mapping[str, Tensor]]) -> None:
        """Copy an official VSE-infinity model, ``[img_enc, txt_enc]`` state dicts, into self.

        The layout is ``VSEModel.state_dict()`` of CRCL's ``VSEinfty.py`` (and of the original
        VSE-infinity code), which CRCL stores as ``checkpoint["model"]``; spec 3.4 documents
        only SGRAF's three-part list. Everything is checked before anything is copied. Tolerated
        differences: a ``module.`` prefix (DataParallel), missing BatchNorm
        ``num_batches_tracked`` counters, and a checkpoint without the ``<mask>`` row loaded
        into a model with it (the first ``V`` rows are copied, a warning says so).

        Args:
            state_dicts: ``[img_enc_state, txt_enc_state]``.

        Raises:
            ConfigError: Not two state dicts, missing or unexpected keys (all named), or the
                first tensor whose shape differs (both shapes named).
        """
        if (isinstance(state_dicts, Mapping) or not isinstance(state_dicts, Sequence)
                or len(state_dicts) != 2 or not all(isinstance(s, Mapping) for s in state_dicts)):
            got = (len(state_dicts) if isinstance(state_dicts, Sequence)
                   else type(state_dicts).__name__)
            raise ConfigError("VSEInfinity.load_official_state needs a list of 2 state dicts "
                              f"[img_enc, txt_enc] (spec 3.6), got {got}")
        try:
            ready = [prepare_state(part, getattr(self, part), strip_prefix(state))
                     for part, state in zip(PARTS, state_dicts)]
        except ValueError as err:
            raise ConfigError(f"VSEInfinity.load_official_state: {err}") from None
        for part, state in zip(PARTS, ready):
            getattr(self, part).load_state_dict(state, strict=True)


# ---------------------------------------------------------------------- validation helpers
def _check_config(vocab_size: int, img_dim: int, word_dim: int, embed_size: int) -> None:
    """Raise ConfigError naming the first invalid constructor argument."""
    sizes = {"vocab_size": vocab_size, "img_dim": img_dim, "word_dim": word_dim,
             "embed_size": embed_size}
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"VSEInfinity {name} must be a positive int, got {value!r}")
    if embed_size % 2:
        raise ConfigError(f"VSEInfinity embed_size must be even (the image MLP's hidden size "
                          f"is embed_size / 2), got {embed_size}")


def _check_lengths(lengths: Tensor, batch: int, limit: int, name: str, axis: str) -> Tensor:
    """``lengths`` as an int64 tensor of shape ``(batch,)`` with values in ``[1, limit]``."""
    lengths = torch.as_tensor(lengths)
    if lengths.dtype.is_floating_point:  # the official collate passes float lengths
        if not bool((lengths == lengths.round()).all()):
            raise ValueError(f"{name} must hold whole numbers, got {lengths.tolist()}")
    lengths = lengths.long()
    if lengths.shape != (batch,):
        raise ValueError(f"{name} must have shape ({batch},), got {tuple(lengths.shape)}")
    if batch and (int(lengths.min()) < 1 or int(lengths.max()) > limit):
        raise ValueError(f"{name} must lie in [1, {limit}] ({axis}), got "
                         f"[{int(lengths.min())}, {int(lengths.max())}]")
    return lengths
