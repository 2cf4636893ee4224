"""No NaN/Inf in values or gradients for extreme similarities, temperatures and p -> 1."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from ncl.losses import (
    complementary_contrastive_loss,
    RCL_EPS,
    info_nce,
    matching_probabilities,
    rcl_ablation_loss,
    soft_margin_triplet_loss,
    triplet_loss,
)

B = 5


def _extreme_sims() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    signs = torch.randint(0, 2, (B, B), generator=g).float() * 2 - 1
    one_hot_negative = torch.full((B, B), -50.0)
    one_hot_negative[0, 1] = 50.0  # P_i2t[0, 1] -> 1 and P_t2i[1, 0] -> 1 (negatives)
    return {
        "zeros": torch.zeros(B, B),
        "ones": torch.ones(B, B),
        "identity": torch.eye(B),
        "anti_identity": 1 - torch.eye(B),  # every negative beats its positive
        "logits_pm50": 50.0 * signs,
        "logits_-50": torch.full((B, B), -50.0),
        "negative_dominates": one_hot_negative,
    }


LOSSES: dict[str, Callable[[torch.Tensor, float], torch.Tensor]] = {
    **{
        f"ccl_{k}": (lambda s, t, k=k: complementary_contrastive_loss(s, t, k))
        for k in ("log", "exp", "gce", "tan", "mae")
    },
    "ccl_log_ratio": lambda s, t: complementary_contrastive_loss(
        s, t, "log", negative_ratio=0.5, generator=torch.Generator().manual_seed(0)
    ),
    "infonce": lambda s, t: info_nce(s, t, eps=RCL_EPS).loss,
    "infonce_plain": lambda s, t: info_nce(s, t).loss,
    "infonce_rows_mean": lambda s, t: info_nce(s, t, directions="i2t", combine="mean").loss,
    **{
        f"ablation_{v}": (
            lambda s, t, v=v: rcl_ablation_loss(
                s, v, tau=t, generator=torch.Generator().manual_seed(0)
            )
        )
        for v in ("tr", "tr_hn", "cl", "nl", "mae_single", "ccl")
    },
    "triplet_mean": lambda s, t: triplet_loss(s, 0.2, "mean"),
    "soft_per_sample": lambda s, t: soft_margin_triplet_loss(s, torch.full((B,), 0.1)),
    "soft_official": lambda s, t: soft_margin_triplet_loss(
        s, torch.full((B, B), 0.1), "official_2023"
    ),
}


@pytest.mark.parametrize("tau", [0.05, 1e-3])
@pytest.mark.parametrize("case", list(_extreme_sims()))
def test_all_losses_finite_in_value_and_gradient(case: str, tau: float) -> None:
    base = _extreme_sims()[case]
    for name, fn in LOSSES.items():
        sims = base.clone().requires_grad_(True)
        out = fn(sims, tau)
        assert out.shape == (B,), name
        assert bool(torch.isfinite(out).all()), (name, out)
        out.mean().backward()
        assert bool(torch.isfinite(sims.grad).all()), (name, sims.grad)


@pytest.mark.parametrize("case", list(_extreme_sims()))
def test_probabilities_finite_and_normalised(case: str) -> None:
    sims = _extreme_sims()[case]
    for p in matching_probabilities(sims, 1e-3):
        assert bool(torch.isfinite(p).all())
        assert bool((p >= 0).all()) and bool((p.sum(1) <= 1 + 1e-5).all())


def test_log_bound_at_p_equal_one_is_minus_log_eps() -> None:
    sims = _extreme_sims()["negative_dominates"]
    out = complementary_contrastive_loss(sims, 0.05, "log")
    # row 0: P_i2t[0,1] = 1 -> -log(eps); row 1: P_t2i[1,0] = 1 -> -log(eps); all else ~ 0
    assert out[0].item() == pytest.approx(-math.log(1e-10), rel=1e-4)
    assert out[1].item() == pytest.approx(-math.log(1e-10), rel=1e-4)
    tan = complementary_contrastive_loss(sims, 0.05, "tan")
    assert tan[0].item() == pytest.approx(math.tan(1.0), rel=1e-5)


def test_half_precision_input_is_computed_in_float32() -> None:
    # official exp(S/tau) with S = 1, tau = 0.05 is e^20, which overflows float16
    sims = torch.eye(B, dtype=torch.float16).requires_grad_(True)
    out = complementary_contrastive_loss(sims, 0.05, "log")
    assert out.dtype == torch.float32 and bool(torch.isfinite(out).all())
    out.mean().backward()
    assert bool(torch.isfinite(sims.grad).all())
