"""The official step schedule of the learning rate (spec 4.1), shared by every method's
``lr_factor``: a pure function of the epoch, so a resumed run needs no scheduler state."""

from __future__ import annotations


def step_decay(epoch: int, lr_update: int, start: int = 0) -> float:
    """Learning-rate multiplier ``0.1 ** (max(epoch - start, 0) // lr_update)``.

    Args:
        epoch: the (Lightning) epoch.
        lr_update: epochs between two decays by 0.1 (>= 1).
        start: the first counted epoch (NCR/LNC and ReCon: the warm-up epochs run at ``lr0``
            and are not counted; CRCL: the first epoch of the current piece).

    Returns:
        ``1.0`` for the first ``lr_update`` counted epochs, then ``0.1``, ``0.01``, ...
    """
    return 0.1 ** (max(epoch - start, 0) // lr_update)


def has_epoch(max_epochs: int | None, epoch: int) -> bool:
    """Whether a run with ``trainer.max_epochs = max_epochs`` trains epoch ``epoch`` (``None``
    or ``-1``: no end). The callbacks that prepare epoch ``e`` at the end of ``e - 1`` ask it."""
    return max_epochs is None or max_epochs < 0 or epoch < max_epochs
