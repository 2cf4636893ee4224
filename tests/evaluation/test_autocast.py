"""``model.eval_autocast``'s pure pieces (:mod:`ncl.evaluation.autocast`): the value check,
the refusal without a low dtype, and the context the similarity runs in."""

from __future__ import annotations

import pytest
import torch

from ncl.errors import ConfigError
from ncl.evaluation.autocast import (
    check_eval_autocast,
    eval_autocast_refusal,
    similarity_context,
)


@pytest.mark.parametrize("value", ["maybe", 1, None])
def test_a_value_that_is_not_a_bool_is_one_config_error(value: object) -> None:
    with pytest.raises(ConfigError, match=r"model.eval_autocast must be true or false, got"):
        check_eval_autocast(value)
    assert check_eval_autocast(True) is True and check_eval_autocast(False) is False


@pytest.mark.parametrize("precision", ["32-true", "64-true", "bf16-true", None])
def test_refused_where_the_trainer_has_no_low_dtype(precision: str | None) -> None:
    refusal = eval_autocast_refusal(True, precision)
    assert refusal is not None and f"trainer.precision {precision} has none" in refusal
    assert "\n" not in refusal
    assert eval_autocast_refusal(False, precision) is None  # off: nothing to refuse
    with pytest.raises(ConfigError):
        similarity_context(True, precision, "cpu")


@pytest.mark.parametrize("precision, dtype", [("bf16-mixed", torch.bfloat16), ("16-mixed", torch.float16)])
def test_on_autocasts_to_the_trainers_low_dtype(precision: str, dtype: torch.dtype) -> None:
    assert eval_autocast_refusal(True, precision) is None
    with similarity_context(True, precision, "cpu"):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == dtype
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == dtype


def test_off_is_no_context_whatever_the_precision() -> None:
    for precision in ("bf16-mixed", "32-true"):
        with similarity_context(False, precision, "cpu"):
            assert not torch.is_autocast_enabled("cpu")
            assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
