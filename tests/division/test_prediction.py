"""Tests for ncl.division.prediction (LNC Eq. 9; spec 4.2.1 "predict")."""

import pytest
import torch

from ncl.division import memorization_prediction, memorization_prediction_from_loss
from ncl.division.prediction import _linear_score, _mean_hinge_per_sample

SIMS = torch.tensor(
    [
        [0.9, 0.1, 0.2],
        [0.3, 0.5, 0.6],
        [0.2, 0.4, 0.3],
    ]
)


def _naive_hinge_prediction(sims: torch.Tensor, margin: float) -> torch.Tensor:
    """Loop-based reference of spec 4.2.1 'eval_loss' + 'predict'."""
    b = sims.shape[0]
    raw = []
    for i in range(b):
        row = sum(max(0.0, margin + float(sims[i, j]) - float(sims[i, i])) for j in range(b) if j != i)
        col = sum(max(0.0, margin + float(sims[r, i]) - float(sims[i, i])) for r in range(b) if r != i)
        loss = row / b + col / b
        raw.append(min(max(margin - loss / 2, 0.0), margin))
    top = sorted(raw, reverse=True)[: b // 10 + 1]
    tau = sum(top) / len(top)
    return torch.tensor([min(max(p / tau, 0.0), 1.0) for p in raw])


def test_hinge_form_hand_computed():
    # l = [0, 0.1 + 0.1/3, 0.4/3 + 0.2]; raw = [0.2, 0.4/3, 0.1/3]; k = 1, tau = 0.2.
    out = memorization_prediction(SIMS, margin=0.2)
    torch.testing.assert_close(out, torch.tensor([1.0, 2.0 / 3.0, 1.0 / 6.0]))


def test_linear_form_hand_computed():
    # s = [0.9 - 0.4/3, 0.5 - 0.7/3, 0.3 - 0.7/3] -> clip [0.2, 0.2, 0.2/3]; tau = 0.2.
    out = memorization_prediction(SIMS, margin=0.2, form="linear")
    torch.testing.assert_close(out, torch.tensor([1.0, 1.0, 1.0 / 3.0]))


def test_hinge_form_matches_naive_reference_random():
    gen = torch.Generator().manual_seed(0)
    for b in (1, 2, 9, 10, 11, 23):
        sims = torch.rand(b, b, generator=gen, dtype=torch.float64) * 0.6
        sims += torch.eye(b, dtype=torch.float64) * 0.2
        torch.testing.assert_close(
            memorization_prediction(sims, margin=0.2), _naive_hinge_prediction(sims, 0.2).double()
        )


def test_from_loss_top_k_normalisation():
    # B = 11 -> k = 2; raw = clip(0.2 - l/2, 0, 0.2); tau = (0.2 + 0.175) / 2 = 0.1875.
    losses = torch.tensor([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.05, 0.15, 0.25, 0.35, 0.45])
    expected = torch.tensor(
        [1.0, 0.8, 0.1 / 0.1875, 0.05 / 0.1875, 0.0, 0.0, 0.175 / 0.1875, 0.125 / 0.1875,
         0.4, 0.025 / 0.1875, 0.0]
    )
    torch.testing.assert_close(memorization_prediction_from_loss(losses, 0.2), expected)


def test_all_zero_predictions_are_zero_not_nan():
    out = memorization_prediction_from_loss(torch.full((8,), 0.5), 0.2)
    assert torch.equal(out, torch.zeros(8))
    # Similarities where every negative beats the positive by a lot.
    sims = torch.ones(4, 4) - torch.eye(4)
    assert torch.equal(memorization_prediction(sims), torch.zeros(4))
    assert torch.equal(memorization_prediction(sims, form="linear"), torch.zeros(4))


def test_hinge_and_linear_differ_by_known_offset_when_no_hinge_is_clamped():
    gen = torch.Generator().manual_seed(1)
    b, alpha = 16, 0.2
    sims = 0.5 + 0.02 * torch.randn(b, b, generator=gen, dtype=torch.float64)
    sims += 0.05 * torch.eye(b, dtype=torch.float64)
    hinge_raw = alpha - _mean_hinge_per_sample(sims, alpha) / 2
    linear_raw = _linear_score(sims)
    assert bool((alpha + sims - sims.diagonal().unsqueeze(1) > 0).all())  # premise
    torch.testing.assert_close(hinge_raw - linear_raw, (alpha - sims.diagonal()) / b)


def test_prediction_is_differentiable():
    sims = SIMS.clone().requires_grad_(True)
    memorization_prediction(sims).sum().backward()
    assert sims.grad is not None and torch.isfinite(sims.grad).all()


def test_prediction_rejects_bad_input():
    with pytest.raises(ValueError, match="square"):
        memorization_prediction(torch.rand(3, 4))
    with pytest.raises(ValueError, match="NaN/Inf"):
        memorization_prediction(torch.tensor([[1.0, float("nan")], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="margin"):
        memorization_prediction(SIMS, margin=0.0)
    with pytest.raises(ValueError, match="form"):
        memorization_prediction(SIMS, form="cosine")  # type: ignore[arg-type]
