"""What a method does with an epoch's evaluation (spec 5.4, 5.5): the validation summary line,
the logged metrics and the model-selection key; the test table and ``results.json``.

Called from :class:`~ncl.methods.base.RetrievalMethod`'s epoch-end hooks with the module
(for ``log`` and its trainer) and its ``evaluate(protocols)``; every rank calls them (the
gather inside ``evaluate`` is collective), rank 0 alone prints and writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ncl.evaluation.metric import (
    Evaluation,
    logged_test_metrics,
    logged_val_metrics,
    summary_line,
)
from ncl.evaluation.protocol import Protocol
from ncl.evaluation.report import format_table, media_of, write_results
from ncl.evaluation.selection import SELECTED_KEY, selected_rsum

Evaluate = Callable[[Sequence[Protocol]], Evaluation]


def finish_validation(module: Any, evaluate: Evaluate) -> None:
    """1K protocol on the validation split: print one line, log ``val/*`` for every system
    and, while fitting, ``val/rsum_selected`` (-1 for an epoch that may not be selected)."""
    trainer = module.trainer
    results = evaluate(["1k"]).results
    selected = list(results)[-1]  # the ensemble when there are several networks
    if trainer.is_global_zero:
        print(summary_line(module.current_epoch, selected, results[selected]["1k"]), flush=True)
    for key, value in logged_val_metrics(results, selected).items():
        module.log(key, value, prog_bar=key == "val/rsum", sync_dist=False, rank_zero_only=False)
    if trainer.state.fn == "fit":  # model selection happens while fitting only
        value = selected_rsum(results[selected]["1k"]["rsum"], module.selectable(module.current_epoch))
        module.log(SELECTED_KEY, value, sync_dist=False, rank_zero_only=False)


def finish_test(module: Any, evaluate: Evaluate) -> None:
    """The DataModule's test protocols (1K folds and/or 5K): log ``test/*``, print the table,
    write ``test_results.json`` into the run's log directory, with the noise the checkpoint
    was trained on (restored into the DataModule from the checkpoint) when it is known."""
    trainer = module.trainer
    dm = getattr(trainer, "datamodule", None)
    results = evaluate(list(getattr(dm, "test_protocols", ["1k"]))).results
    for key, value in logged_test_metrics(results).items():
        module.log(key, value)
    out = Path(trainer.log_dir or trainer.default_root_dir)  # every rank asks (DDP)
    if trainer.is_global_zero:
        print("\n" + format_table(results, media=media_of(dm)))
        write_results(results, out, training_noise=_training_noise(dm))


def _training_noise(dm: Any) -> dict[str, Any] | None:
    """The DataModule's record of the tested model's training noise, if it keeps one."""
    record = getattr(dm, "training_noise", None)
    return record() if callable(record) else None
