"""Divisions by a mixture (ncl.division.co_divide; spec 4.2.3-4.2.5, LNC Eq. 1-3, 7) and the
GMMDivision's work (ncl.callbacks.division.divide_if_due) on a fake method."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from callbacks.ncr_fakes import BilinearNet, FakePairs, bimodal_losses, naive_mean_hinge, ncr_pass
from torch import Tensor, nn

from ncl.callbacks.division import GMMDivision, divide_if_due
from ncl.callbacks.protocols import GMMSpec, PassSpec
from ncl.division import gmm_clean_probability, split_by_probability
from ncl.errors import ConfigError
from ncl.division.co_divide import (Division, abandon_mask, co_divide_record, divide,
                                   division_made_for, gmm_probabilities, mean_hinge, split_clean)
from ncl.training.passes import deal_batches, eval_mode, pass_order, run_pass


def test_mean_hinge_matches_loop_reference() -> None:
    pairs, net = FakePairs(11), BilinearNet()
    for b in (np.array([4, 0, 7, 2]), np.array([9, 1, 3])):
        batch = {"images": pairs.images[b], "tokens": pairs.tokens[b],
                 "lengths": torch.full((len(b),), 3)}
        sims = net(batch["images"], batch["tokens"], batch["lengths"]).detach()
        torch.testing.assert_close(mean_hinge(0.2)(net, batch).detach(), naive_mean_hinge(sims))


def test_ncr_pass_scatters_each_network_by_index() -> None:
    pairs = FakePairs(21)
    nets = [BilinearNet(0), BilinearNet(1)]
    spec = ncr_pass(seed=3, batch_size=5)
    out = run_pass(spec, nets, pairs, 2, torch.device("cpu"))
    assert out.shape == (2, 21)
    for k, net in enumerate(nets):
        batches = deal_batches(pass_order(spec, 21, 2, k), 5)
        assert [len(b) for b in batches] == [5, 5, 5, 6]  # a last batch of one joins the previous
        for b in batches:
            sims = net(pairs.images[b], pairs.tokens[b], torch.full((len(b),), 3)).detach()
            torch.testing.assert_close(out[k, torch.as_tensor(b)], naive_mean_hinge(sims))


def test_eval_mode_restores_each_submodule() -> None:
    net = torch.nn.Sequential(torch.nn.Dropout(0.5), torch.nn.Linear(2, 2))
    net[1].eval()  # mixed modes must come back exactly
    with eval_mode(net):
        assert not any(m.training for m in net.modules())
    assert net.training and net[0].training and not net[1].training


def test_divide_matches_gmm_and_split_per_network() -> None:
    a, _ = bimodal_losses(seed=0)
    b, _ = bimodal_losses(seed=1)
    prob, clean = divide(torch.stack([a, b]), threshold=0.5, gmm_seed=0)
    for k, row in enumerate((a, b)):
        ref = gmm_clean_probability(row, 10, 1e-2, 5e-4, 0)
        torch.testing.assert_close(prob[k], ref)
        assert torch.equal(clean[k], split_by_probability(ref, 0.5, "greater"))
    assert torch.equal(split_clean(prob, 0.5, "greater"), clean)


def test_division_detects_injected_noise() -> None:
    losses, truth = bimodal_losses(n=600, noisy_frac=0.3)
    _, clean = divide(losses[None])
    assert (clean[0] == truth).float().mean() > 0.95


def test_abandon_mask_drops_half_of_doubly_noisy() -> None:
    prob = torch.tensor([[0.1, 0.2, 0.9, 0.3, 0.4, 0.05, 0.7],
                         [0.2, 0.1, 0.1, 0.9, 0.3, 0.45, 0.2]])
    both = [0, 1, 4, 5]  # < 0.5 for both networks (Eq. 7)
    keep = abandon_mask(prob, 1, seed=7)
    assert int((~keep).sum()) == 2 and set(np.flatnonzero(~keep.numpy())) <= set(both)
    assert torch.equal(keep, abandon_mask(prob, 1, seed=7))  # same epoch, same draw
    draws = {tuple(abandon_mask(prob, e, seed=7).tolist()) for e in range(1, 12)}
    assert len(draws) > 1
    with pytest.raises(ValueError, match="drop_fraction"):
        abandon_mask(prob, 1, seed=7, fraction=-0.1)


class _Method(nn.Module):
    """A fake GMMDivisible method: divides two networks' mean hinge (or its 2-column variant)
    from epoch 1, records what it accepts."""

    def __init__(self, columns: bool = False) -> None:
        super().__init__()
        self.nets = nn.ModuleList([BilinearNet(0), BilinearNet(1)])
        self.device, self.training_seed, self.columns = torch.device("cpu"), 0, columns
        self.accepted: dict[int, tuple[Tensor, Tensor]] = {}

    def division_due(self, epoch: int) -> bool:
        return epoch >= 1 and epoch not in self.accepted

    def division_pass(self, epoch: int) -> tuple[PassSpec, GMMSpec]:
        spec = ncr_pass(seed=3, batch_size=8)
        if self.columns:  # (B, 2): a constant column first, the loss second
            hinge = spec.fn
            spec = PassSpec(lambda net, batch: torch.stack([torch.zeros(len(batch["index"])),
                                                            hinge(net, batch)], 1),
                            spec.nets, 8, True, spec.stream, 3, per_net_shuffle=True)
        return spec, GMMSpec(column=1 if self.columns else 0, seed=0)

    def accept_division(self, epoch: int, values: Tensor, clean_prob: Tensor) -> None:
        self.accepted[epoch] = (values, clean_prob)


def _trainer(pairs: FakePairs) -> SimpleNamespace:
    data = SimpleNamespace(train_pairs=lambda: pairs, batch_size=8, num_workers=0)
    return SimpleNamespace(datamodule=data, global_rank=0, world_size=1, current_epoch=0,
                           max_epochs=3)


@pytest.mark.parametrize("columns", [False, True])
def test_divide_if_due_fits_the_chosen_column(columns: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ncl.callbacks.epoch_pass.retrieval_data", lambda trainer, name: trainer.datamodule)
    method, pairs = _Method(columns), FakePairs(30)
    assert not divide_if_due(_trainer(pairs), method, 0)  # not due: nothing runs
    assert divide_if_due(_trainer(pairs), method, 2)
    assert not divide_if_due(_trainer(pairs), method, 2)  # held: not made twice
    values, prob = method.accepted[2]
    losses = run_pass(ncr_pass(seed=3, batch_size=8), method.nets, pairs, 2, torch.device("cpu"))
    assert values.device.type == "cpu" and values.shape == ((2, 30, 2) if columns else (2, 30))
    torch.testing.assert_close(values[..., 1] if columns else values, losses)
    assert torch.equal(prob, gmm_probabilities(losses, seed=0))


def test_callback_divides_for_the_next_epoch_then_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ncl.callbacks.epoch_pass.retrieval_data", lambda trainer, name: trainer.datamodule)
    method, trainer, callback = _Method(), _trainer(FakePairs(20)), GMMDivision()
    callback.setup(trainer, method, "fit")
    callback.on_train_epoch_end(trainer, method)  # end of epoch 0: epoch 1's division
    assert sorted(method.accepted) == [1]
    trainer.current_epoch = 2
    callback.on_train_epoch_start(trainer, method)  # missing for epoch 2: made at its start
    callback.on_train_epoch_end(trainer, method)  # no epoch 3 (max_epochs 3): nothing
    assert sorted(method.accepted) == [1, 2]
    with pytest.raises(ConfigError, match="GMMDivisible"):
        callback.setup(trainer, nn.Linear(1, 1), "fit")


def test_division_state_round_trip() -> None:
    prob = torch.rand(2, 6)
    division = Division(3, torch.rand(2, 6), prob, prob > 0.5, torch.ones(6, dtype=torch.bool))
    other = Division(**division.state())
    for key in ("losses", "prob", "clean", "keep"):
        assert torch.equal(getattr(other, key), getattr(division, key))


def test_co_divide_record_and_which_epoch_it_serves() -> None:
    values, prob = torch.rand(2, 20), torch.rand(2, 20)
    record = co_divide_record(4, values, prob, 0.5, "greater_equal")
    assert record.keep is None and torch.equal(record.clean, split_clean(prob, 0.5, "greater_equal"))
    drawn = co_divide_record(1, values, prob, abandon=True, seed=7, fraction=0.5)
    assert torch.equal(drawn.keep, abandon_mask(prob, 1, 7, 0.5))
    assert division_made_for(record, 4) and not division_made_for(record, 3)
    assert not division_made_for(None, 4) and not division_made_for(record, 4, needs_keep=True)
    assert division_made_for(drawn, 1, needs_keep=True)


def test_prob_on_copies_once_per_record_and_device() -> None:
    division = Division(0, torch.rand(2, 5), torch.rand(2, 5), torch.ones(2, 5, dtype=torch.bool))
    copy = division.prob_on(torch.device("cpu"))
    assert torch.equal(copy, division.prob) and division.prob_on(torch.device("cpu")) is copy
    assert set(division.state()) == {"epoch", "losses", "prob", "clean", "keep"}  # not state

