"""``model.eval_autocast``: the evaluation's similarity matrices under the trainer's autocast.

Under ``trainer.precision bf16-mixed`` (or ``16-mixed``) Lightning's autocast covers
``validation_step``/``test_step``, where ncl encodes, but not the epoch-end hooks, where it
scores every image against every caption: that matrix is float32 (``docs/precision.md``).
With ``eval_autocast`` on, the method computes it under ``torch.autocast`` in the trainer's
low dtype too. The score itself stays float32 (``ncl.models.layers.float32_linear``): only the
similarity head's matrix products run in the low dtype. On a CPU with bf16 matrix units the
evaluation is about twice as fast; on one without them, much slower (emulated bf16).

Pure functions of the precision string and the device type; no Lightning here.
"""

from __future__ import annotations

import contextlib

import torch

from ncl.errors import ConfigError

#: ``trainer.precision`` (as Lightning normalises it) -> the dtype its autocast uses.
LOW_DTYPES: dict[str, torch.dtype] = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}


def check_eval_autocast(value: object) -> bool:
    """``value`` if it is a bool; otherwise one ConfigError naming the option and the value.

    Raises:
        ConfigError: ``value`` is not ``True`` or ``False``.
    """
    if not isinstance(value, bool):
        raise ConfigError(f"model.eval_autocast must be true or false, got {value!r}")
    return value


def eval_autocast_refusal(enabled: bool, precision: str | None) -> str | None:
    """Why ``eval_autocast`` cannot run under ``trainer.precision`` ``precision``, or ``None``.

    A run without a low dtype (``32-true``, ``64-true``) has nothing to autocast to; a
    ``*-true`` half-precision run already computes everything in its dtype. Refused rather
    than silently ignored (or silently bf16): the option means "in the trainer's low dtype".
    """
    if not enabled or str(precision) in LOW_DTYPES:
        return None
    return (f"model.eval_autocast true computes the evaluation similarity under autocast in the "
            f"trainer's low dtype, but trainer.precision {precision} has none: use "
            f"--trainer.precision bf16-mixed (16-mixed on CUDA) or model.eval_autocast false")


def similarity_context(enabled: bool, precision: str | None,
                       device_type: str) -> contextlib.AbstractContextManager:
    """The context the evaluation's similarity runs in: ``torch.autocast(device_type, dtype)``
    with the low dtype of ``precision`` when ``enabled``, else no context (float32, as before).

    Raises:
        ConfigError: ``enabled`` under a precision without a low dtype
            (:func:`eval_autocast_refusal`).
    """
    if not enabled:
        return contextlib.nullcontext()
    if refusal := eval_autocast_refusal(enabled, precision):
        raise ConfigError(refusal)
    return torch.autocast(device_type=device_type, dtype=LOW_DTYPES[str(precision)])
