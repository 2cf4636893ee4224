"""Random-stream ids, each declared once where it is used (issue 37).

ncl seeds its private random generators from ``(seed, epoch, stream, ...)``
(:func:`ncl.data.samplers.epoch_seed`, :func:`ncl.training.plans.rng_for`), so two draws
with the same stream id would draw the same numbers. Every id is declared where its
constant lives::

    KEY_STREAM = declare_stream(53, "l2rm.key_points")

and a second declaration of a taken id fails at import. To pick a free id for a new method,
run ``pytest tests/test_streams.py -rP``: it imports every ``ncl`` module and prints
the taken ids with their owners (:func:`taken`). Ids are grouped by tens per owner
(1-4 co-training plans, 11-14 data, 21-22 CRCL, 31 ReCon, 41 DECL, 51-53 L2RM); a new method
takes the next free ten. The values must never change: seeds, and with them every published
number, depend on them.

No torch, no Lightning: any module may import this one.
"""

from __future__ import annotations

_OWNERS: dict[int, str] = {}


class StreamTaken(ValueError):
    """A stream id declared twice (by different owners)."""


def declare_stream(stream: int, owner: str) -> int:
    """Record that ``owner`` (``"module.purpose"``) draws from stream ``stream``; return it.

    Declaring the same id for the same owner again is allowed (a module imported twice, e.g.
    reloaded by a test).

    Raises:
        StreamTaken: another owner declared ``stream``.
        ValueError: ``stream`` is not a positive int.
    """
    if not isinstance(stream, int) or isinstance(stream, bool) or stream < 1:
        raise ValueError(f"a random-stream id is a positive int, got {stream!r} ({owner})")
    holder = _OWNERS.setdefault(stream, owner)
    if holder != owner:
        raise StreamTaken(f"random stream {stream} of {owner!r} is taken by {holder!r}; "
                          f"taken: {sorted(_OWNERS)} (ncl.streams)")
    return stream


def taken() -> dict[int, str]:
    """Every stream id declared so far (by the modules imported so far) -> its owner."""
    return dict(sorted(_OWNERS.items()))
