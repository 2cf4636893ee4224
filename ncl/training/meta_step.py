"""The second-order meta step of MW-Net-style methods (MSCN, Han et al. CVPR 2023), written
with :func:`torch.func.functional_call`; no Lightning.

One meta step (``main_MSCN.py`` ``train`` at hhc1997/MSCN 01febc2):

1. ``L(theta, phi)``: the training loss of the network's parameters ``theta`` (taken as fresh
   leaves: no gradient reaches the real network) scored through the meta network ``phi``;
2. ``g = dL/dtheta`` with ``create_graph=True`` (so ``g`` is a function of ``phi``);
3. ``theta' = U(theta, g)``: one optimiser update written out as tensors
   (:func:`sgd_update`: ``theta - lr g``, what the official ``MetaAdam.meta_step`` does, or
   :func:`adam_update`: one Adam step from the real optimiser's state, which is not changed);
4. ``L_meta(theta', phi)`` on a meta batch and its gradient ``dL_meta/dphi``, which has the
   direct part and the part through ``theta'(phi)`` (a double backward).

The network's buffers (BatchNorm statistics) are cloned for the step: the official pseudo
network is a copy, so its running-statistics updates never reach the real network.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor, nn
from torch.func import functional_call

Params = dict[str, Tensor]
#: ``(theta, g) -> theta'``: names -> tensors; a name whose gradient is None is left as is.
Update = Callable[[Params, Mapping[str, Tensor | None]], Params]
#: ``(network, meta network) -> scalar loss``
LossFn = Callable[[nn.Module, nn.Module], Tensor]


class _Apply(nn.Module):
    """Runs ``fn(net, meta)`` inside :func:`functional_call`, so that every method of the
    network (not only ``forward``) sees the substituted parameters."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, fn: LossFn, meta: nn.Module) -> Tensor:
        return fn(self.net, meta)


def sgd_update(lr: float) -> Update:
    """``theta' = theta - lr g`` (the official ``MetaAdam.meta_step``)."""
    def update(params: Params, grads: Mapping[str, Tensor | None]) -> Params:
        return {n: p if grads[n] is None else p - lr * grads[n] for n, p in params.items()}
    return update


def _safe_sqrt(x: Tensor) -> Tensor:
    """``sqrt(x)`` for ``x >= 0`` with a finite gradient at 0 (taken as 0 there: Adam's
    ``sqrt(v)`` of a parameter that never had a gradient would otherwise give 0 * inf = NaN)."""
    positive = x > 0
    return torch.where(positive, torch.where(positive, x, torch.ones_like(x)).sqrt(),
                       torch.zeros_like(x))


def adam_update(optimizer: torch.optim.Optimizer, named: Mapping[str, nn.Parameter]) -> Update:
    """One Adam step (``torch.optim.Adam``'s rule, no AMSGrad) from ``optimizer``'s state and
    first group's ``lr``, ``betas``, ``eps`` and ``weight_decay``; the state is read, not
    changed. ``named`` maps the names of the update to the optimiser's parameter objects.

    ``t = step + 1``, ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``,
    ``theta' = theta - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)``; no state: m = v = 0.
    """
    group = optimizer.param_groups[0]
    if group.get("amsgrad", False):
        raise ValueError("adam_update does not implement AMSGrad")
    lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]

    def update(params: Params, grads: Mapping[str, Tensor | None]) -> Params:
        out: Params = {}
        for n, p in params.items():
            g = grads[n]
            if g is None:
                out[n] = p
                continue
            if wd:
                g = g + wd * p
            state = optimizer.state.get(named[n], {})
            t = float(state["step"]) + 1 if "step" in state else 1.0
            m = b1 * state["exp_avg"] + (1 - b1) * g if "exp_avg" in state else (1 - b1) * g
            v = b2 * state["exp_avg_sq"] + (1 - b2) * g * g if "exp_avg_sq" in state else (1 - b2) * g * g
            denom = _safe_sqrt(v / (1 - b2 ** t)) + eps
            out[n] = p - lr * (m / (1 - b1 ** t)) / denom
        return out
    return update


def meta_gradient(net: nn.Module, meta: nn.Module, train_loss: LossFn, meta_loss: LossFn,
                  update: Update) -> tuple[Tensor, list[Tensor]]:
    """Steps 1-4 of the module docstring.

    Args:
        net: the network (its parameters are read, never changed, and get no gradient).
        meta: the meta network ``phi`` (its parameters get no ``.grad`` here either).
        train_loss: ``(net, meta) -> L`` on the training batch.
        meta_loss: ``(net, meta) -> L_meta`` on the meta batch.
        update: the pseudo update (:func:`sgd_update`, :func:`adam_update`).

    Returns:
        ``(L_meta, dL_meta/dphi)``: the detached meta loss and one gradient per
        ``meta.parameters()`` (zeros where a parameter does not reach the loss).
    """
    wrapper = _Apply(net)
    theta = {n: p.detach().requires_grad_() for n, p in net.named_parameters() if p.requires_grad}
    buffers = {f"net.{n}": b.clone() for n, b in net.named_buffers()}

    def run(params: Params, fn: LossFn) -> Tensor:
        return functional_call(wrapper, {**{f"net.{n}": p for n, p in params.items()}, **buffers},
                               (fn, meta))

    loss = run(theta, train_loss)
    grads = torch.autograd.grad(loss, list(theta.values()), create_graph=True, allow_unused=True)
    theta_new = update(theta, dict(zip(theta, grads)))
    outer = run(theta_new, meta_loss)
    phi = list(meta.parameters())
    meta_grads = torch.autograd.grad(outer, phi, allow_unused=True)
    return outer.detach(), [torch.zeros_like(p) if g is None else g for p, g in zip(phi, meta_grads)]
