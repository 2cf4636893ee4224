"""IN2R's VSE network (``vse.py`` of github.com/liuyyy111/IN2R at 909e532): VSE-infinity with
input dropout, a projection head on the text side and batch-centred embeddings.

What differs from :class:`~ncl.models.vse_infinity.VSEInfinity` (CRCL's VSE-infinity), each as
the official ``VSE`` class has it:

* ``dropout`` (official ``--dropout_rate`` 0.3) on the raw region features before the image
  encoder and on the word embeddings before the GRU;
* the text encoder projects every GRU output with ``fc(h) + MLP(h)`` (``E -> E`` and
  ``E -> E/2 -> E``) before GPO, as the image side does (``text_head``; off: CRCL's encoder);
* ``batch_center``: ``forward_emb`` subtracts the batch mean from the unit image and caption
  embeddings and normalises again, ``v_i <- l2norm(v_i - mean_b v_b)``, in training **and** at
  evaluation (a batch's embeddings then depend on its other members). A batch of one is left
  uncentred here (centring would make it the zero vector).

Because of the centring, evaluation batches decide the embeddings. The backbone declares it
(:class:`~ncl.models.contracts.BatchDependentBackbone`) and asks for ``eval_batches``:
``pairs`` (official ``encode_data``: batches of ``data.eval_batch_size`` pairs in caption
order, each image once per caption), ``separate`` (image and caption loaders of their own) or
``split`` (centred over the whole split: :meth:`In2rVSE.batch_free`, then
:meth:`In2rVSE.split_statistics`).

The official text encoder starts from ``U(-0.1, 0.1)`` and loads GloVe 840B vectors from a
path hard-coded in ``vse.py`` for every vocabulary word it finds; ``glove_path`` does the
same from a local file (:mod:`ncl.models.glove`, :meth:`In2rVSE.load_glove`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ncl.errors import ConfigError
from ncl.models.contracts import EVAL_BATCHINGS, EvalBatching
from ncl.models.glove import check_glove_file, glove_rows, load_glove_, write_rows_
from ncl.models.gpo import GPO
from ncl.models.layers import l2norm
from ncl.models.vse_infinity import GPO_DIM, MLP, EncoderImageAggr, VSEInfinity


class DropoutImageEncoder(EncoderImageAggr):
    """:class:`EncoderImageAggr` with dropout on the ``(B, N, img_dim)`` input regions."""

    def __init__(self, img_dim: int, embed_size: int, dropout: float, no_imgnorm: bool = False) -> None:
        super().__init__(img_dim, embed_size, no_imgnorm)
        self.dropout = nn.Dropout(dropout)

    def forward(self, images: Tensor, image_lengths: Tensor) -> Tensor:
        return super().forward(self.dropout(images), image_lengths)  # (B, E)


class ProjectedTextEncoder(nn.Module):
    """Token ids -> one unit caption embedding, IN2R's ``EncoderText``.

    ``w = dropout(embed(t))``; ``h = (GRU_fwd(w) + GRU_bwd(w)) / 2``; per token
    ``f = fc(h) + MLP(h)`` when ``text_head`` (else ``f = h``); ``c = l2norm(GPO(f))``.

    Args:
        vocab_size: embedding rows (with ``<mask>``).
        word_dim, embed_size: word-embedding and joint sizes (300, 1024).
        dropout: on the word embeddings (0.3).
        text_head: the ``fc + MLP`` projection.
        no_txtnorm: skip the final l2norm.
    """

    def __init__(self, vocab_size: int, word_dim: int, embed_size: int, dropout: float,
                 text_head: bool = True, no_txtnorm: bool = False) -> None:
        super().__init__()
        self.embed_size, self.no_txtnorm = embed_size, no_txtnorm
        self.embed = nn.Embedding(vocab_size, word_dim)
        self.dropout = nn.Dropout(dropout)
        self.rnn = nn.GRU(word_dim, embed_size, num_layers=1, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(embed_size, embed_size) if text_head else None
        self.mlp = MLP(embed_size, embed_size // 2, embed_size) if text_head else None
        self.gpool = GPO(GPO_DIM, GPO_DIM)
        with torch.no_grad():
            self.embed.weight.uniform_(-0.1, 0.1)

    def forward(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """``(B, L)`` zero-padded ids and ``(B,)`` lengths -> ``(B, E)``."""
        words = self.dropout(self.embed(tokens))  # (B, L, word_dim)
        packed = pack_padded_sequence(words, lengths.detach().cpu().long(), batch_first=True,
                                      enforce_sorted=False)
        out, _ = self.rnn(packed)
        hidden, _ = pad_packed_sequence(out, batch_first=True, total_length=tokens.shape[1])
        hidden = (hidden[..., : self.embed_size] + hidden[..., self.embed_size:]) / 2  # (B, L, E)
        if self.fc is not None:
            hidden = self.fc(hidden) + self.mlp(hidden)  # (B, L, E)
        pooled = self.gpool(hidden, lengths)  # (B, E)
        return pooled if self.no_txtnorm else l2norm(pooled, dim=-1)


def center(emb: Tensor) -> Tensor:
    """``l2norm(v_i - mean_b v_b)`` of ``(B, E)`` embeddings (official ``forward_emb``); a batch
    of one comes back unchanged."""
    if emb.shape[0] < 2:
        return emb
    return l2norm(emb - emb.mean(dim=0, keepdim=True), dim=-1)


class In2rVSE(VSEInfinity):
    """IN2R's VSE network on precomputed regions (pooled embeddings, cosine similarity).

    Args:
        vocab_size, img_dim, word_dim, embed_size, add_mask_token, no_imgnorm, no_txtnorm: as
            :class:`~ncl.models.vse_infinity.VSEInfinity` (``add_mask_token`` on: the
            official code adds ``<mask>`` to the vocabulary).
        dropout: on the input regions and the word embeddings (official 0.3).
        text_head: ``fc + MLP`` over the GRU outputs (official: on).
        batch_center: centre each batch's embeddings (official: on, evaluation included).
        eval_batches: the batches evaluation centres over: ``pairs`` (official), ``separate``
            or ``split`` (:data:`~ncl.models.contracts.EvalBatching`); only read with
            ``batch_center``.
        glove_path: a GloVe text file (official: ``glove.840B.300d``) whose vectors replace
            the initial rows of the vocabulary words it holds (:meth:`load_glove`, called by
            the method before training); ``None``: ``U(-0.1, 0.1)`` only.
        module_name: a label only, ``"VSE"``: the synthetic grid names every backbone with
            ``--model.backbone.init_args.module_name`` (``ncl.reproduce``).
    """

    def __init__(self, vocab_size: int, img_dim: int = 2048, word_dim: int = 300,
                 embed_size: int = 1024, add_mask_token: bool = True, no_imgnorm: bool = False,
                 no_txtnorm: bool = False, dropout: float = 0.3, text_head: bool = True,
                 batch_center: bool = True, eval_batches: EvalBatching = "pairs",
                 glove_path: str | None = None, module_name: Literal["VSE"] = "VSE") -> None:
        super().__init__(vocab_size, img_dim, word_dim, embed_size, add_mask_token, no_imgnorm,
                         no_txtnorm)
        if not 0.0 <= dropout < 1.0:
            raise ConfigError(f"model.backbone.init_args.dropout must lie in [0, 1), got {dropout}")
        if eval_batches not in EVAL_BATCHINGS:
            raise ConfigError(f"model.backbone.init_args.eval_batches must be one of "
                              f"{', '.join(EVAL_BATCHINGS)}, got {eval_batches!r}")
        if glove_path is not None:
            check_glove_file(glove_path, word_dim)  # before a run folder exists
        self.batch_center, self.module_name = batch_center, module_name
        self.eval_batches: EvalBatching = eval_batches
        self.glove_path = glove_path
        self._centring = True  # off inside batch_free()
        self.img_enc = DropoutImageEncoder(img_dim, embed_size, dropout, no_imgnorm)
        self.txt_enc = ProjectedTextEncoder(self.vocab_size, word_dim, embed_size, dropout,
                                            text_head, no_txtnorm)

    @property
    def batch_dependent(self) -> bool:
        """Whether an embedding depends on its batch (the centring)."""
        return self.batch_center

    @contextmanager
    def batch_free(self) -> Iterator[None]:
        """Encode without the batch centring (evaluation's ``split`` batching)."""
        saved, self._centring = self._centring, False
        try:
            yield
        finally:
            self._centring = saved

    def split_statistics(self, emb: Tensor) -> Tensor:
        """``(N, E)`` embeddings encoded in :meth:`batch_free`, centred over all ``N``."""
        return center(emb) if self.batch_center else emb

    def _centred(self, emb: Tensor) -> Tensor:
        return center(emb) if self.batch_center and self._centring else emb

    def encode_images(self, images: Tensor, image_lengths: Tensor | None = None) -> Tensor:
        """``(B, R, img_dim)`` -> ``(B, E)``, centred over the batch when ``batch_center``."""
        return self._centred(super().encode_images(images, image_lengths))

    def encode_captions(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """``(B, L)`` ids -> ``(B, E)``, centred over the batch when ``batch_center``."""
        return self._centred(super().encode_captions(tokens, lengths))

    def load_glove(self, words: Sequence[str], rows: dict[int, Tensor] | None = None) -> int | None:
        """Write the ``glove_path`` vectors of ``words`` (the vocabulary in id order, with
        ``<mask>`` when the embedding has its row) into the word embeddings; returns how many
        were found, ``None`` without ``glove_path`` (:func:`~ncl.models.glove.load_glove_`).
        ``rows`` (:meth:`glove_rows`, read once for several networks) replaces the file."""
        if self.glove_path is None:
            return None
        if rows is not None:
            return write_rows_(self.txt_enc.embed.weight, rows)
        return load_glove_(self.txt_enc.embed.weight, words, self.glove_path)

    def glove_rows(self, words: Sequence[str]) -> dict[int, Tensor]:
        """Row -> vector of the ``glove_path`` file for ``words`` (:func:`~ncl.models.glove.glove_rows`)."""
        if self.glove_path is None:
            return {}
        if len(words) != self.vocab_size:
            raise ConfigError(f"model.backbone.init_args.glove_path: the word embeddings have "
                              f"{self.vocab_size} rows for {len(words)} vocabulary words")
        return glove_rows(words, self.glove_path, int(self.txt_enc.embed.weight.shape[1]))
