"""Per-sample training state: one table, read by sample index, written after an all-gather,
identical on every rank and saved with the checkpoint.

Stateful methods keep a value per training pair: LNC's momentum targets (Eq. 5), CRCL's
corrected soft labels (Eq. 11), ReCon's pseudo-labels. They all need the same four things,
which :class:`PerSampleState` gives once:

* ``get(row, index)``: the ``(B,)`` values of a batch, on the batch's device;
* ``scatter(row, index, values, update)``: every rank's ``(index, values)`` are all-gathered
  and applied on every rank in rank order, so all ranks hold the same table at every moment
  (the distributed sampler pads with repeated samples: a repeat is applied once per copy,
  in order, identically everywhere);
* ``state_dict`` / ``load_state_dict``: the table is part of the checkpoint;
* the table lives on the CPU as a plain tensor, never as a module buffer, which DDP would
  broadcast every step.

The update rules themselves stay pure functions (``ncl.division``); this class only stores.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ncl.training.distributed import all_gather_rows

# new = update(old, values) for the gathered rows; the default overwrites.
UpdateRule = Callable[[Tensor, Tensor], Tensor]


def overwrite(old: Tensor, new: Tensor) -> Tensor:
    """The rule that stores the new values as they are (in the table's dtype)."""
    return new.to(old.dtype)


class PerSampleState:
    """A ``(K, N)`` table: ``K`` rows (networks, or kinds of value) of ``N`` samples.

    Args:
        num_rows: K, e.g. one row per co-trained network.
        fill: initial value of every entry (``reset``).
        dtype: the table's dtype.
    """

    def __init__(self, num_rows: int = 1, fill: float = 1.0, dtype: torch.dtype = torch.float32) -> None:
        if num_rows < 1:
            raise ValueError(f"num_rows must be >= 1, got {num_rows}")
        self.num_rows, self.fill, self.dtype = num_rows, fill, dtype
        self.values: Tensor | None = None  # (K, N) on the CPU

    @property
    def ready(self) -> bool:
        return self.values is not None

    @property
    def num_samples(self) -> int:
        return 0 if self.values is None else int(self.values.shape[1])

    def reset(self, num_samples: int) -> None:
        """Every entry back to ``fill`` for a training set of ``num_samples`` pairs."""
        self.values = torch.full((self.num_rows, num_samples), self.fill, dtype=self.dtype)

    def _table(self) -> Tensor:
        if self.values is None:
            raise RuntimeError("per-sample state used before reset() (training set size unknown)")
        return self.values

    def get(self, row: int, index: Tensor) -> Tensor:
        """``(B,)`` values of ``row`` at dataset indices ``index``, on ``index``'s device."""
        return self._table()[row, index.cpu()].to(index.device)

    def scatter(self, row: int, index: Tensor, values: Tensor,
                update: UpdateRule = overwrite) -> None:
        """Apply ``update(old, values)`` to ``row`` at ``index``, with every rank's rows.

        Args:
            row: the row to write.
            index: ``(B,)`` dataset indices of this rank's batch.
            values: ``(B,)`` new values (detached here).
            update: ``(old (n,), values (n,)) -> new (n,)``; overwrite by default.
        """
        table = self._table()
        index, values = all_gather_rows(index.long(), values.detach().to(self.dtype))
        index, values = index.cpu(), values.cpu()
        for rows in unique_runs(index):
            at = index[rows]
            table[row, at] = update(table[row, at], values[rows]).to(self.dtype)

    def state_dict(self) -> dict[str, Any]:
        return {"values": self.values}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        values = state.get("values")
        if values is not None and values.shape[0] != self.num_rows:
            raise ValueError(f"saved per-sample state has {values.shape[0]} rows, expected {self.num_rows}")
        self.values = None if values is None else values.to(self.dtype).cpu()


def unique_runs(index: Tensor) -> list[Tensor]:
    """Split positions into consecutive groups without a repeated index, preserving order.

    ``table[idx] = f(table[idx])`` with a repeated index applies the update once (last write
    wins); splitting at repeats applies it once per occurrence, in order.
    """
    groups: list[list[int]] = [[]]
    seen: set[int] = set()
    for pos, i in enumerate(index.tolist()):
        if i in seen:
            groups.append([])
            seen = set()
        groups[-1].append(pos)
        seen.add(i)
    return [torch.tensor(g, dtype=torch.long) for g in groups if g]
