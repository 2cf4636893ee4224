"""Region and word encoders of SGRAF (spec 3.1 and 3.2).

Parameter names (``fc``, ``embed``, ``cap_rnn``) equal the official ones (spec 3.4) so the
official ``img_enc`` / ``txt_enc`` state dicts load without renaming.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ncl.models.layers import init_linear_uniform, l2norm


class EncoderImage(nn.Module):
    """Per-region projection ``fc: img_dim -> embed_size`` then l2norm (spec 3.1).

    Args:
        img_dim: Size of a precomputed region feature (2048 for BUTD features).
        embed_size: Joint embedding size (1024).
        no_imgnorm: Skip the per-region l2norm (official ``--no_imgnorm``; default off).
    """

    def __init__(self, img_dim: int, embed_size: int, no_imgnorm: bool = False) -> None:
        super().__init__()
        self.img_dim = img_dim
        self.no_imgnorm = no_imgnorm
        self.fc = nn.Linear(img_dim, embed_size)
        init_linear_uniform(self.fc)

    def forward(self, images: Tensor) -> Tensor:
        """Encode regions.

        Args:
            images: ``(B, R, img_dim)`` region features.

        Returns:
            ``(B, R, embed_size)`` region embeddings, unit norm unless ``no_imgnorm``.
        """
        emb = self.fc(images)  # (B, R, E)
        return emb if self.no_imgnorm else l2norm(emb, dim=-1)


class EncoderText(nn.Module):
    """Word embedding, dropout, (bi-)GRU, averaged directions, per-token l2norm (spec 3.2).

    Args:
        vocab_size: Number of embedding rows (official vocabulary, ``+1`` with ``<mask>``).
        word_dim: Word-embedding size (300).
        embed_size: GRU hidden size = joint embedding size (1024).
        bi_gru: Bidirectional GRU (official default); the two directions are averaged.
        dropout: Dropout on the word embeddings (0.4).
    """

    def __init__(
        self,
        vocab_size: int,
        word_dim: int,
        embed_size: int,
        bi_gru: bool = True,
        dropout: float = 0.4,
    ) -> None:
        super().__init__()
        self.embed_size = embed_size
        self.bi_gru = bi_gru
        self.embed = nn.Embedding(vocab_size, word_dim)
        self.dropout = nn.Dropout(dropout)
        # PyTorch's default GRU initialisation is what the official code uses (spec 3.2).
        self.cap_rnn = nn.GRU(word_dim, embed_size, num_layers=1, batch_first=True,
                              bidirectional=bi_gru)
        with torch.no_grad():
            self.embed.weight.uniform_(-0.1, 0.1)

    def forward(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """Encode zero-padded token ids.

        Args:
            tokens: ``(B, L)`` long ids, zero-padded; ``L`` may exceed ``max(lengths)``.
            lengths: ``(B,)`` true lengths (``<start>``/``<end>`` included), any order.

        Returns:
            ``(B, L, embed_size)``; positions ``>= lengths[b]`` are exactly zero.
        """
        total_length = tokens.shape[1]
        words = self.dropout(self.embed(tokens))  # (B, L, word_dim)
        sorted_lengths, order, inverse = packing_order(lengths, words.device)
        # Unsorted batches are allowed (NCR/CRCL style). Sorting here, as
        # pack_padded_sequence(enforce_sorted=False) would, keeps its indices off the
        # host: it copies them to the device and back with a sync each way.
        packed = pack_padded_sequence(words.index_select(0, order), sorted_lengths,
                                      batch_first=True, enforce_sorted=True)
        out, _ = self.cap_rnn(packed)
        hidden, _ = pad_packed_sequence(out, batch_first=True, total_length=total_length)
        hidden = hidden.index_select(0, inverse)  # back to the batch's order
        if self.bi_gru:
            half = self.embed_size
            hidden = (hidden[..., :half] + hidden[..., half:]) / 2  # (B, L, E)
        return l2norm(hidden, dim=-1)


def packing_order(lengths: Tensor, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """The order ``pack_padded_sequence(enforce_sorted=False)`` sorts a batch into.

    The same ``torch.sort`` of the same host lengths as PyTorch's, so the packed batch (and
    every value computed from it) is the one PyTorch builds; the two index vectors reach the
    device in one non-blocking copy, which does not wait for queued kernels.

    Args:
        lengths: ``(B,)`` lengths; on the host they need no copy (a device tensor syncs once).
        device: where the words are.

    Returns:
        ``(B,)`` host int64 lengths, longest first (what packing reads); ``(B,)`` device
        order, sorted position -> batch row; ``(B,)`` device inverse, batch row -> sorted
        position.
    """
    host = lengths.detach() if lengths.device.type == "cpu" else lengths.detach().cpu()
    sorted_lengths, order = torch.sort(host.long(), descending=True)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel())  # PyTorch's invert_permutation
    both = torch.stack([order, inverse]).to(device, non_blocking=True)  # (2, B)
    return sorted_lengths, both[0], both[1]
