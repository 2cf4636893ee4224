"""Tests for ncl.division.momentum (LNC Eq. 4-6)."""

import pytest
import torch

from ncl.division import initial_momentum_targets, momentum_regularizer, momentum_update


def test_initial_targets_are_ones():
    assert torch.equal(initial_momentum_targets(4), torch.ones(4))
    with pytest.raises(ValueError, match="num_samples"):
        initial_momentum_targets(0)


def test_momentum_update_hand_computed():
    out = momentum_update(torch.tensor([1.0, 1.0, 0.5]), torch.tensor([0.2, 1.0, 0.0]), 0.9)
    torch.testing.assert_close(out, torch.tensor([0.92, 1.0, 0.45]))


def test_momentum_update_two_steps_and_extremes():
    gamma = initial_momentum_targets(2)
    gamma = momentum_update(gamma, torch.tensor([0.0, 1.0]), 0.5)
    gamma = momentum_update(gamma, torch.tensor([0.0, 0.0]), 0.5)
    torch.testing.assert_close(gamma, torch.tensor([0.25, 0.5]))
    preds = torch.tensor([0.3, 0.7])
    assert torch.equal(momentum_update(gamma, preds, 1.0), gamma)
    assert torch.equal(momentum_update(gamma, preds, 0.0), preds)


def test_momentum_update_is_detached():
    preds = torch.tensor([0.3, 0.7], requires_grad=True)
    assert not momentum_update(torch.ones(2), preds, 0.5).requires_grad


def test_regularizer_values_and_gradient():
    preds = torch.tensor([0.2, 0.5], requires_grad=True)
    targets = torch.tensor([1.0, 0.5], requires_grad=True)
    out = momentum_regularizer(preds, targets)
    torch.testing.assert_close(out, torch.tensor([0.64, 0.0]))
    out.mean().backward()
    torch.testing.assert_close(preds.grad, torch.tensor([-0.8, 0.0]))  # 2 (P - g) / B
    assert targets.grad is None


def test_momentum_rejects_bad_input():
    with pytest.raises(ValueError, match="momentum"):
        momentum_update(torch.ones(2), torch.ones(2), 1.5)
    with pytest.raises(ValueError, match="same shape"):
        momentum_regularizer(torch.ones(2), torch.ones(3))
