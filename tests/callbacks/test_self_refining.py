"""SelfRefining's pieces without a Trainer: the seeded fresh weights, the restarted schedule
(a plain function, nothing of it in LambdaLR's state), the piece of an epoch, the state that
makes the re-initialisation idempotent across a resume, and bad options."""

from __future__ import annotations

import pickle

import pytest
import torch
from torch import nn

from ncl.callbacks.self_refining import REINIT_STREAM, SelfRefining, fresh_weights, restart_at
from ncl.data.samplers import epoch_seed
from ncl.errors import ConfigError
from ncl.methods.rcl import RCL
from ncl.models.sgraf import SGRAF


def _backbone(vocab: int) -> SGRAF:
    return SGRAF(vocab, img_dim=16, num_regions=6, word_dim=8, embed_size=16, sim_dim=8,
                 similarity_strategy="chunked")


def _method(seed: int = 7) -> RCL:
    torch.manual_seed(0)
    model = RCL(30, _backbone)
    model._training_seed = seed
    return model


def _same(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_fresh_weights_are_a_seeded_factory_draw_into_the_same_parameters() -> None:
    model = _method()
    params = list(model.parameters())
    torch.manual_seed(123)
    rng_before = torch.get_rng_state()
    fresh_weights(model, 1)
    assert torch.equal(torch.get_rng_state(), rng_before)  # the global stream is untouched
    assert all(a is b for a, b in zip(model.parameters(), params))  # optimiser/DDP references
    torch.manual_seed(epoch_seed(7, 1, REINIT_STREAM))
    assert _same(model.net, _backbone(30))  # the factory under the piece's stream

    other = _method()  # same seed, another global stream: the same fresh weights
    torch.manual_seed(999)
    fresh_weights(other, 1)
    assert _same(other.net, model.net)
    fresh_weights(other, 2)  # another piece: other weights
    assert not _same(other.net, model.net)
    reseeded = _method(seed=8)
    fresh_weights(reseeded, 1)
    assert not _same(reseeded.net, model.net)


def test_schedule_restarts_at_every_piece_and_is_not_saved() -> None:
    callback = SelfRefining([3, 4])
    factor = restart_at(lambda e: 0.1 ** (e // 2), callback.schedule.starts)
    # 7 = what LambdaLR asks after the last epoch: past the schedule, the last piece goes on
    assert [factor(e) for e in range(8)] == pytest.approx([1, 1, 0.1, 1, 1, 0.1, 0.1, 0.01])
    assert [callback.piece_of(e) for e in range(9)] == [0, 0, 0, 1, 1, 1, 1, 1, 1]
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, _method().lr_factor)
    scheduler.lr_lambdas = [restart_at(f, (0, 3)) for f in scheduler.lr_lambdas]
    state = scheduler.state_dict()
    assert state["lr_lambdas"] == [None]  # a function: nothing of the method is pickled
    pickle.dumps(state)


def test_last_initialised_piece_survives_a_checkpoint() -> None:
    callback = SelfRefining([2, 2, 2])
    callback.initialised_piece = 1
    state = callback.state_dict()
    resumed = SelfRefining([2, 2, 2])
    # Lightning: on_load_checkpoint first (a checkpoint without this state: the piece of its
    # epoch had started), then load_state_dict when the checkpoint holds the state
    resumed.on_load_checkpoint(None, None, {"epoch": 4})  # type: ignore[arg-type]
    assert resumed.initialised_piece == 2
    resumed.load_state_dict(state)
    assert resumed.initialised_piece == 1


@pytest.mark.parametrize("pieces", [[], [2, 0], [1.5], None])
def test_bad_pieces_are_one_clear_error(pieces: object) -> None:
    with pytest.raises(ConfigError, match="pieces"):
        SelfRefining(pieces)  # type: ignore[arg-type]
