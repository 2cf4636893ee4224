"""The second-order meta step (ncl.training.meta_step) against a double backward written out
by hand on a tiny network, a closed form, and torch.optim.Adam's own step."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ncl.training.meta_step import adam_update, meta_gradient, sgd_update


class Tiny(nn.Module):
    """Linear 3 -> 2 with a BatchNorm (its buffers must not move in a meta step)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.bn = nn.BatchNorm1d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.lin(x))


def setup() -> tuple[Tiny, nn.Linear, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    net, meta = Tiny().double(), nn.Linear(2, 1).double()
    x, y = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    x2, y2 = torch.randn(4, 3, dtype=torch.float64), torch.rand(4, dtype=torch.float64)
    return net, meta, x, y, x2, y2


def train_loss(x, y):
    return lambda net, meta: ((meta(net(x)).squeeze(-1) - y) ** 2).sum()


def outer_loss(x2, y2):
    return lambda net, meta: F.binary_cross_entropy(torch.sigmoid(meta(net(x2)).squeeze(-1)), y2)


def by_hand(net: Tiny, meta: nn.Linear, x, y, x2, y2, lr: float, create_graph: bool = True):
    """The same step with plain tensors: W, b leaves; batch-norm in train mode by hand."""
    w = net.lin.weight.detach().clone().requires_grad_()
    b = net.lin.bias.detach().clone().requires_grad_()
    gamma = net.bn.weight.detach().clone().requires_grad_()
    beta = net.bn.bias.detach().clone().requires_grad_()

    def f(inp, w, b, gamma, beta):
        h = inp @ w.t() + b
        h = (h - h.mean(0)) / torch.sqrt(h.var(0, unbiased=False) + net.bn.eps)
        return meta(h * gamma + beta).squeeze(-1)

    loss = ((f(x, w, b, gamma, beta) - y) ** 2).sum()
    grads = torch.autograd.grad(loss, (w, b, gamma, beta), create_graph=create_graph)
    new = [p - lr * g for p, g in zip((w, b, gamma, beta), grads)]
    outer = F.binary_cross_entropy(torch.sigmoid(f(x2, *new)), y2)
    return outer.detach(), torch.autograd.grad(outer, list(meta.parameters()))


def test_meta_gradient_matches_the_double_backward_by_hand() -> None:
    net, meta, x, y, x2, y2 = setup()
    before = copy.deepcopy(net.state_dict())
    loss, grads = meta_gradient(net, meta, train_loss(x, y), outer_loss(x2, y2), sgd_update(0.3))
    want_loss, want = by_hand(net, meta, x, y, x2, y2, 0.3)
    assert float(loss) == pytest.approx(float(want_loss), rel=1e-12)
    for g, w in zip(grads, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
    # the second-order part matters: a first-order step (no create_graph) gives another gradient
    _, first_order = by_hand(net, meta, x, y, x2, y2, 0.3, create_graph=False)
    assert not torch.allclose(grads[0], first_order[0], rtol=1e-3)
    # nothing of the real network moved: parameters, BatchNorm statistics, gradients
    for key, value in net.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert all(p.grad is None for p in [*net.parameters(), *meta.parameters()])


def test_closed_form_of_a_scalar_step() -> None:
    """theta, phi scalars: L = (phi theta - 1)^2, theta' = theta - lr 2 phi (phi theta - 1),
    L_meta = (theta' - c)^2, so dL_meta/dphi = 2 (theta' - c) (-lr 2 (2 phi theta - 1))."""
    class Scalar(nn.Module):
        def __init__(self, value: float) -> None:
            super().__init__()
            self.theta = nn.Parameter(torch.tensor(value, dtype=torch.float64))

    class Phi(nn.Module):
        def __init__(self, value: float) -> None:
            super().__init__()
            self.phi = nn.Parameter(torch.tensor(value, dtype=torch.float64))

    theta, phi, lr, c = 0.7, 1.3, 0.1, 2.0
    net, meta = Scalar(theta), Phi(phi)
    _, (grad,) = meta_gradient(net, meta, lambda n, m: (m.phi * n.theta - 1) ** 2,
                               lambda n, m: (n.theta - c) ** 2, sgd_update(lr))
    new = theta - lr * 2 * phi * (phi * theta - 1)
    assert float(grad) == pytest.approx(2 * (new - c) * (-lr * 2 * (2 * phi * theta - 1)), rel=1e-12)


def test_adam_update_is_torch_adams_step_and_leaves_the_state() -> None:
    net, meta, x, y, _, _ = setup()
    opt = torch.optim.Adam(net.parameters(), lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)
    for _ in range(2):  # some state
        opt.zero_grad()
        train_loss(x, y)(net, meta).backward()
        opt.step()
    saved = copy.deepcopy(opt.state_dict())
    opt.zero_grad()
    train_loss(x, y)(net, meta).backward()
    named = dict(net.named_parameters())
    params = {n: p.detach().clone() for n, p in named.items()}
    grads = {n: p.grad.detach().clone() for n, p in named.items()}
    got = adam_update(opt, named)(params, grads)
    assert opt.state_dict()["state"][0]["step"] == saved["state"][0]["step"]
    opt.step()  # the real step from the same state and gradients
    for n, p in named.items():
        torch.testing.assert_close(got[n], p.detach(), rtol=1e-10, atol=1e-12)


def test_adam_first_step_closed_form_and_finite_at_zero_gradient() -> None:
    """No state: theta' = theta - lr g / (|g| + eps) (t = 1); d theta'/d g = lr eps / (|g| + eps)^2;
    at a zero gradient the derivative is lr / eps (d|g|/dg g = 0 there), finite, not NaN."""
    p = nn.Parameter(torch.tensor([0.5, 0.2], dtype=torch.float64))
    opt = torch.optim.Adam([p], lr=0.1, eps=1e-3)
    g = torch.tensor([0.3, 0.0], dtype=torch.float64, requires_grad=True)
    new = adam_update(opt, {"p": p})({"p": p.detach()}, {"p": g})["p"]
    assert new.tolist() == pytest.approx([0.5 - 0.1 * 0.3 / (0.3 + 1e-3), 0.2])
    (d,) = torch.autograd.grad(new.sum(), g)
    assert torch.isfinite(d).all()
    assert float(d[0]) == pytest.approx(-0.1 * 1e-3 / (0.3 + 1e-3) ** 2, rel=1e-9)
    assert float(d[1]) == pytest.approx(-0.1 / 1e-3, rel=1e-9)
