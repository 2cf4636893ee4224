"""Co-divide computations (ncl.training.division; spec 4.2.3-4.2.5, LNC Eq. 1-3, 7)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from callbacks.ncr_fakes import BilinearNet, FakePairs, bimodal_losses, naive_mean_hinge

from ncl.training.division import (
    Division,
    DivisionConfig,
    abandon_mask,
    compute_division,
    divide,
    division_losses,
    local_losses,
)
from ncl.training.passes import eval_mode
from ncl.training.plans import division_batches
from ncl.division import gmm_clean_probability, split_by_probability


def test_local_losses_match_loop_reference() -> None:
    pairs, net = FakePairs(11), BilinearNet()
    batches = [np.array([4, 0, 7, 2]), np.array([9, 1, 3]), np.array([10])]
    index, loss = local_losses(net, pairs, batches, torch.device("cpu"))
    assert index.tolist() == [4, 0, 7, 2, 9, 1, 3, 10]
    for b in batches:
        imgs = pairs.images[b]
        caps = pairs.tokens[b]
        sims = net(imgs, caps, torch.full((len(b),), 3))
        ref = naive_mean_hinge(sims.detach())
        got = torch.stack([loss[index.tolist().index(i)] for i in b.tolist()])
        torch.testing.assert_close(got, ref)
    assert float(loss[-1]) == 0.0  # a batch of one has no negatives


def test_division_losses_scatter_each_network_by_index() -> None:
    pairs = FakePairs(23)
    nets = [BilinearNet(0), BilinearNet(1)]
    out = division_losses(nets, pairs, batch_size=5, seed=3, epoch=2, device=torch.device("cpu"))
    assert out.shape == (2, 23)
    for k, net in enumerate(nets):
        for b in division_batches(23, 5, 3, 2, k, shuffle=True):
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


def test_division_detects_injected_noise() -> None:
    losses, truth = bimodal_losses(n=600, noisy_frac=0.3)
    _, clean = divide(losses[None])
    assert (clean[0] == truth).float().mean() > 0.95


def test_abandon_mask_drops_half_of_doubly_noisy() -> None:
    prob = torch.tensor([[0.1, 0.2, 0.9, 0.3, 0.4, 0.05, 0.7],
                         [0.2, 0.1, 0.1, 0.9, 0.3, 0.45, 0.2]])
    both = [0, 1, 4, 5]  # < 0.5 for both networks (Eq. 7)
    config = DivisionConfig(seed=7)
    keep = abandon_mask(prob, 1, config)
    assert int((~keep).sum()) == 2 and set(np.flatnonzero(~keep.numpy())) <= set(both)
    assert torch.equal(keep, abandon_mask(prob, 1, config))  # same epoch, same draw
    draws = {tuple(abandon_mask(prob, e, config).tolist()) for e in range(1, 12)}
    assert len(draws) > 1


def test_compute_division_and_state_round_trip() -> None:
    config = DivisionConfig()
    division = compute_division(config, [BilinearNet(0), BilinearNet(1)], FakePairs(30), 8, epoch=2,
                                device=torch.device("cpu"), abandon=True)
    assert division.epoch == 2 and division.prob.shape == (2, 30) and division.keep.shape == (30,)
    other = Division(**division.state())
    for key in ("losses", "prob", "clean", "keep"):
        assert torch.equal(getattr(other, key), getattr(division, key))
    again = compute_division(config, [BilinearNet(0), BilinearNet(1)], FakePairs(30), 8, epoch=2,
                             device=torch.device("cpu"), abandon=True)
    assert torch.equal(again.prob, division.prob) and torch.equal(again.keep, division.keep)


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="p_threshold"):
        DivisionConfig(p_threshold=1.5)
    with pytest.raises(ValueError, match="abandon_fraction"):
        DivisionConfig(abandon_fraction=-0.1)
