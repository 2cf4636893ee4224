"""GPO, the generalised pooling operator of VSE-infinity (spec 3.6).

GPO turns a variable-size set of ``n`` feature vectors into one vector. It learns one weight
per *rank* (not per position): every feature dimension is sorted in descending order over
the ``n`` valid positions, and the ``k``-th largest value of each dimension gets weight
``theta_k``. The weights come from a small bi-GRU reading sinusoidal encodings of the ranks
``0..n-1``, so they depend only on ``n``:

    theta = softmax( W_s . (GRU_fwd(pe) + GRU_bwd(pe)) / 2  /  0.1 )  over k < n
    out_d = sum_k theta_k * sort_desc(x_{., d})_k

Parameter names (``gru``, ``linear``) are the official ones (the ``gpool`` submodule of both
VSE-infinity encoders), so official state dicts load without renaming.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ncl.errors import ConfigError

#: Score of padded positions and fill value of padded features before the sort (spec 3.6).
PAD_SCORE = -10000.0
#: Softmax temperature of the pooling weights (spec 3.6).
TEMPERATURE = 0.1
#: Base of the sinusoidal encodings (the standard Transformer value).
PE_BASE = 10000.0


def positional_encoding(length: int, d_pe: int) -> Tensor:
    """Sinusoidal encodings of positions ``0..length-1`` on the CPU in float32.

    ``pe[p, 2i] = sin(p / 10000^(2i/d_pe))`` and ``pe[p, 2i+1] = cos(p / 10000^(2i/d_pe))``.
    Computed on the CPU in float32 as the official code does, so cached copies on any device
    hold the same values.

    Args:
        length: Number of positions (>= 0).
        d_pe: Encoding size; must be even.

    Returns:
        ``(length, d_pe)`` float32.
    """
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)  # (n, 1)
    freq = torch.exp(torch.arange(0, d_pe, 2, dtype=torch.float32)
                     * (-math.log(PE_BASE) / d_pe))  # (d_pe / 2,)
    pe = torch.zeros(length, d_pe)
    pe[:, 0::2] = torch.sin(position * freq)
    pe[:, 1::2] = torch.cos(position * freq)
    return pe


def valid_mask(lengths: Tensor, max_len: int) -> Tensor:
    """``(B, max_len)`` bool, True at positions ``< lengths[b]``."""
    steps = torch.arange(max_len, device=lengths.device)
    return steps.unsqueeze(0) < lengths.unsqueeze(1)


class GPO(nn.Module):
    """Generalised pooling operator (spec 3.6): rank-wise learned weighted sum.

    The positional encodings are cached per device, grown to the longest length seen; a
    prefix of that table is exactly the encoding of any shorter length. The official code
    keeps them on the CPU and copies them to the device on every call (spec 6, item 9);
    here each device receives them once. The cache is a plain attribute, not a buffer, so
    it never enters the state dict.

    Args:
        d_pe: Size of the positional encodings (official 32; even).
        d_hidden: Hidden size of the bi-GRU (official 32).

    Attributes:
        gru: ``GRU(d_pe -> d_hidden)``, bidirectional, directions averaged.
        linear: ``Linear(d_hidden -> 1, bias=False)``, one score per position.
    """

    def __init__(self, d_pe: int = 32, d_hidden: int = 32) -> None:
        super().__init__()
        for name, value in (("d_pe", d_pe), ("d_hidden", d_hidden)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"GPO {name} must be a positive int, got {value!r}")
        if d_pe % 2:
            raise ConfigError(f"GPO d_pe must be even (sin/cos pairs), got {d_pe}")
        self.d_pe = d_pe
        self.d_hidden = d_hidden
        self.gru = nn.GRU(d_pe, d_hidden, num_layers=1, batch_first=True, bidirectional=True)
        self.linear = nn.Linear(d_hidden, 1, bias=False)
        self._pe_cache: dict[torch.device, Tensor] = {}

    def encodings(self, length: int, device: torch.device) -> Tensor:
        """``(length, d_pe)`` float32 positional encodings on ``device`` (cached)."""
        table = self._pe_cache.get(device)
        if table is None or table.shape[0] < length:
            table = positional_encoding(length, self.d_pe).to(device)
            self._pe_cache[device] = table
        return table[:length]

    def pool_weights(self, lengths: Tensor, max_len: int) -> Tensor:
        """Weights ``theta`` of every rank (spec 3.6).

        Args:
            lengths: ``(B,)`` int64 valid counts, ``1 <= lengths[b] <= max_len``.
            max_len: Number of positions ``K``.

        Returns:
            ``(B, K, 1)``; row ``b`` sums to 1 over its first ``lengths[b]`` positions and is 0
            (``exp(-10^5)``) beyond them.
        """
        mask = valid_mask(lengths, max_len).unsqueeze(-1)  # (B, K, 1)
        pes = self.encodings(max_len, lengths.device)
        pes = pes.to(self.linear.weight.dtype).expand(lengths.shape[0], -1, -1)  # (B, K, d_pe)
        pes = pes.masked_fill(~mask, 0.0)  # as the spec says; the packed GRU never reads them
        # enforce_sorted=False: callers pass lengths in any order; PyTorch sorts internally.
        packed = pack_padded_sequence(pes, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.gru(packed)
        hidden, _ = pad_packed_sequence(out, batch_first=True, total_length=max_len)
        hidden = (hidden[..., : self.d_hidden] + hidden[..., self.d_hidden:]) / 2  # (B, K, h)
        scores = self.linear(hidden).masked_fill(~mask, PAD_SCORE)  # (B, K, 1)
        return torch.softmax(scores / TEMPERATURE, dim=1)

    def forward(self, features: Tensor, lengths: Tensor) -> Tensor:
        """Pool ``features`` over their first ``lengths[b]`` positions.

        Positions beyond ``max(lengths)`` are cut off, and those beyond ``lengths[b]`` are
        excluded (sorted below every valid value and given weight 0), so zero padding never
        changes the result.

        Args:
            features: ``(B, K, D)``, ``K >= max(lengths)``.
            lengths: ``(B,)`` integer valid counts in ``[1, K]``, any order.

        Returns:
            ``(B, D)``: ``sum_k theta_k * sort_desc(features[b, :lengths[b], d])_k``.
        """
        lengths = torch.as_tensor(lengths, device=features.device).long()
        if features.dim() != 3 or lengths.shape != (features.shape[0],):
            raise ValueError(f"GPO needs features (B, K, D) and lengths (B,), got "
                             f"{tuple(features.shape)} and {tuple(lengths.shape)}")
        if lengths.numel() and (int(lengths.min()) < 1 or int(lengths.max()) > features.shape[1]):
            raise ValueError(f"GPO lengths must lie in [1, {features.shape[1]}] (K), got "
                             f"[{int(lengths.min())}, {int(lengths.max())}]")
        max_len = int(lengths.max())
        weights = self.pool_weights(lengths, max_len)  # (B, K', 1)
        features = features[:, :max_len]  # (B, K', D)
        mask = valid_mask(lengths, max_len).unsqueeze(-1)  # (B, K', 1)
        # -10000 puts padding after every valid value in the descending sort (spec 3.6);
        # padding is then zeroed, and its weight is 0 anyway.
        ranked = features.masked_fill(~mask, PAD_SCORE).sort(dim=1, descending=True).values
        ranked = ranked.masked_fill(~mask, 0.0)  # (B, K', D)
        return (ranked * weights.to(ranked.dtype)).sum(dim=1)  # (B, D)
