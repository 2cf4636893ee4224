"""The training step of the co-teaching methods that train from a plan of steps.

NCR/LNC, BiCro, PC², IN2R and MSCN train two networks in turn: each step of their training plan
(:func:`ncl.training.plans.co_teaching_plan`, :class:`~ncl.training.plans.PlanLoader`) is a dict
naming the network (``"net"``) and holding its batch, plus an optional second batch (the
unlabelled part, MSCN's meta batch). :class:`PlannedCoTeaching` dispatches such a step to the
method's ``warmup_step(k, batch)`` in a warm-up epoch and to ``cotrain_step(k, batch, extra)``
otherwise; a method names its two keys when they are not ``labelled`` / ``unlabelled``.
"""

from __future__ import annotations

from typing import Any, ClassVar


class PlannedCoTeaching:
    """``training_step`` of a two-network method fed by a training plan (a mixin placed before
    :class:`~ncl.methods.base.RetrievalMethod`).

    The class provides ``is_warmup_epoch(epoch)``, ``warmup_step(k, batch)`` (whose return value
    is the step's: NCR/LNC's refinement request, or None) and ``cotrain_step(k, batch, extra)``.
    """

    #: The plan step's key of network ``k``'s batch.
    batch_key: ClassVar[str] = "labelled"
    #: The key of the optional second batch of a co-training step (absent: None).
    extra_key: ClassVar[str] = "unlabelled"

    def training_step(self, batch: dict, batch_idx: int) -> dict[str, Any] | None:
        k = int(batch["net"])
        if self.is_warmup_epoch(self.current_epoch):  # type: ignore[attr-defined]
            return self.warmup_step(k, batch[self.batch_key])  # type: ignore[attr-defined]
        self.cotrain_step(k, batch[self.batch_key], batch.get(self.extra_key))  # type: ignore[attr-defined]
        return None
