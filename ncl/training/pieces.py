"""A piece schedule: training split into consecutive pieces, each restarting from scratch.

CRCL's Self-Refining (SR, Algorithm 1) trains ``m`` pieces of ``e_1, ..., e_m`` epochs; after
each piece the network and optimiser are re-initialised and only the per-sample labels carry
over; the epoch index (and with it the step learning-rate schedule) restarts at 0 in every
piece (spec 4.1, 4.4.3).

The official ``--schedules K_0,K_1,...`` does not count the ``--warm_epoch`` freeze epochs:
piece ``i`` runs ``K_i + warm_epoch`` epochs, so the paper's ``e_j`` (which includes the
``e_f`` frozen epochs of Eq. 11) is ``K_{j-1} + warm_epoch`` (CRCL's default ``model.pieces``
is ``OFFICIAL_SCHEDULES_TRAIN_SH`` so converted). Everything here is 0-based.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

#: ``opts.py`` default ``--schedules`` (spec 4.4.4): 8 + 8 + 8 + 27 = 51 epochs with warm-up 2.
OFFICIAL_SCHEDULES: tuple[int, ...] = (6, 6, 6, 25)
#: ``train.sh`` (F30K, noise 0.8): 7 + 7 + 7 + 32 = 53 epochs with warm-up 2.
OFFICIAL_SCHEDULES_TRAIN_SH: tuple[int, ...] = (5, 5, 5, 30)
#: ``--warm_epoch``: the labels are frozen for this many epochs at the start of each piece.
OFFICIAL_WARM_EPOCH = 2


class PieceLocation(NamedTuple):
    """Where a global epoch falls: ``piece`` and ``epoch_in_piece``, both 0-based."""

    piece: int
    epoch_in_piece: int


@dataclass(frozen=True)
class PieceSchedule:
    """Consecutive pieces of ``lengths[i]`` epochs each (CRCL Algorithm 1's ``[e_1..e_m]``).

    Attributes:
        lengths: epochs per piece, each >= 1, at least one piece (a list is turned into a tuple).

    Example:
        >>> s = PieceSchedule((7, 7, 7, 32))
        >>> s.total_epochs, s.starts, s.locate(7)
        (53, (0, 7, 14, 21), PieceLocation(piece=1, epoch_in_piece=0))
    """

    lengths: tuple[int, ...]

    def __post_init__(self) -> None:
        lengths = tuple(self.lengths)
        if not lengths:
            raise ValueError("`lengths` must name at least one piece")
        if any(int(n) != n or n < 1 for n in lengths):
            raise ValueError(f"every piece length must be an integer >= 1, got {lengths}")
        object.__setattr__(self, "lengths", tuple(int(n) for n in lengths))

    @property
    def num_pieces(self) -> int:
        """m, the number of pieces."""
        return len(self.lengths)

    @property
    def total_epochs(self) -> int:
        """Sum of the piece lengths: the trainer's ``max_epochs``."""
        return sum(self.lengths)

    @property
    def starts(self) -> tuple[int, ...]:
        """Global index of the first epoch of every piece (``starts[0] == 0``)."""
        out, start = [], 0
        for n in self.lengths:
            out.append(start)
            start += n
        return tuple(out)

    def locate(self, epoch: int) -> PieceLocation:
        """Global 0-based ``epoch`` -> ``(piece, epoch_in_piece)``.

        Raises:
            ValueError: ``epoch`` outside ``[0, total_epochs)``.
        """
        self._check_epoch(epoch)
        for piece, (start, n) in enumerate(zip(self.starts, self.lengths)):
            if epoch < start + n:
                return PieceLocation(piece, epoch - start)
        raise AssertionError("unreachable: epoch was range-checked")

    def _check_epoch(self, epoch: int) -> None:
        if int(epoch) != epoch or not 0 <= epoch < self.total_epochs:
            raise ValueError(
                f"`epoch` must be an integer in [0, {self.total_epochs}) for pieces "
                f"{self.lengths}, got {epoch}"
            )
