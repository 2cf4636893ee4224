"""The shared base: options declared once and forwarded with ``**kwargs``, the default
selection rule, and one clear error for a checkpoint without ``ncl_training_state``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from ncl.errors import ConfigError
from ncl.methods.base import RetrievalMethod
from ncl.methods.baselines import InfoNCE, Triplet
from ncl.methods.rcl import RCL
from ncl.models import SGRAF

DIMS = {"img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16, "sim_dim": 8}


def sgraf(vocab_size: int) -> nn.Module:
    return SGRAF(vocab_size, **DIMS)


@pytest.mark.parametrize("cls", [RCL, Triplet, InfoNCE])
def test_base_options_are_forwarded_and_saved(cls: type[RetrievalMethod]) -> None:
    method = cls(10, sgraf, lr_update=7, grad_clip=0.5, eval_shard_size=64)
    hp = method.hparams
    assert (hp.lr_update, hp.grad_clip, hp.eval_shard_size, hp.select_warmup) == (7, 0.5, 64, False)
    assert hp.n_networks == 1 and len(method.nets) == 1
    assert method.lr_factor(6) == 1.0 and method.lr_factor(7) == pytest.approx(0.1)
    defaults = cls(10, sgraf).hparams
    assert (defaults.lr_update, defaults.grad_clip, defaults.eval_shard_size) == (30, 2.0, 1000)


def test_evaluation_metric_adds_nothing_to_the_checkpoint() -> None:
    method = RCL(10, sgraf)
    assert all(key.startswith("nets.") for key in method.state_dict())


class _Warm(RetrievalMethod):
    """Epoch 0 is a warm-up epoch; keeps per-sample state."""

    def is_warmup_epoch(self, epoch: int) -> bool:
        return epoch == 0

    def training_state(self) -> dict[str, Any]:
        return {"table": torch.ones(3)}


@pytest.mark.parametrize("select_warmup, expected", [(False, [False, True]), (True, [True, True])])
def test_selectable_leaves_out_warmup_unless_select_warmup(select_warmup: bool, expected: list[bool]) -> None:
    method = _Warm(10, sgraf, select_warmup=select_warmup)
    assert [method.selectable(e) for e in range(2)] == expected


def _attach(method: RetrievalMethod, fn: str) -> RetrievalMethod:
    method._trainer = SimpleNamespace(state=SimpleNamespace(fn=fn), ckpt_path="/runs/x/last.ckpt")
    return method


def test_checkpoint_without_training_state_cannot_resume_a_stateful_method() -> None:
    old = {"ncl_training_seed": 3, "callbacks": {"CoDivide": {"division": {"epoch": 4}}}}
    with pytest.raises(ConfigError, match=r"cannot resume from /runs/x/last\.ckpt: it holds no "
                                          r"ncl_training_state \(_Warm's per-sample state\)"):
        _attach(_Warm(10, sgraf), "fit").on_load_checkpoint(dict(old))
    method = _attach(_Warm(10, sgraf), "test")
    method.on_load_checkpoint(dict(old))  # evaluating its weights needs no training state
    assert method.training_seed == 3
    _attach(RCL(10, sgraf), "fit").on_load_checkpoint(dict(old))  # stateless: nothing to miss
