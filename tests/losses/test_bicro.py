"""BiCro's losses (ncl.losses.bicro) against the official ``ContrastiveLoss`` written out in loops."""

from __future__ import annotations

import pytest
import torch

from ncl.losses.bicro import bicro_soft_triplet, selected_warmup_loss

SIMS = torch.tensor([[0.70, 0.60, 0.20, 0.40],
                     [0.30, 0.50, 0.55, 0.10],
                     [0.65, 0.20, 0.60, 0.35],
                     [0.25, 0.45, 0.30, 0.40]], dtype=torch.float64)
LABELS = torch.tensor([1.0, 0.2, 0.7, 0.0], dtype=torch.float64)


def _f(y: float) -> float:
    return 0.2 * (10 ** y - 1) / 9


def _reference(sims: torch.Tensor, labels: torch.Tensor, anchor: bool) -> list[float]:
    """``max_j C_s[i, j] + max_r C_im[r, i]``; C_s's margin f(y_j) (official) or f(y_i)."""
    s, y, n = sims.tolist(), labels.tolist(), len(labels)
    out = []
    for i in range(n):
        m_s = _f(y[i]) if anchor else None
        c_s = max(max(0.0, (m_s if anchor else _f(y[j])) + s[i][j] - s[i][i]) for j in range(n) if j != i)
        c_im = max(max(0.0, _f(y[i]) + s[r][i] - s[i][i]) for r in range(n) if r != i)
        out.append(c_s + c_im)
    return out


@pytest.mark.parametrize("mode", ["official", "anchor"])
def test_soft_margins_by_loops(mode: str) -> None:
    got = bicro_soft_triplet(SIMS, LABELS, mode)
    torch.testing.assert_close(got, torch.tensor(_reference(SIMS, LABELS, mode == "anchor"),
                                                 dtype=torch.float64))


def test_caption_margin_switch_changes_the_loss() -> None:
    """Quirk (2): the official C_s uses the negative caption's margin."""
    assert not torch.allclose(bicro_soft_triplet(SIMS, LABELS, "official"),
                              bicro_soft_triplet(SIMS, LABELS, "anchor"))
    ones = torch.ones(4, dtype=torch.float64)  # equal labels: both readings agree
    torch.testing.assert_close(bicro_soft_triplet(SIMS, ones, "official"),
                               bicro_soft_triplet(SIMS, ones, "anchor"))


def test_selected_warmup_keeps_the_smallest_mean_hinges() -> None:
    n = 4
    s = SIMS.tolist()
    means = [(sum(max(0.0, 0.2 + s[i][j] - s[i][i]) for j in range(n) if j != i)
              + sum(max(0.0, 0.2 + s[r][i] - s[i][i]) for r in range(n) if r != i)) / n
             for i in range(n)]
    smallest = sorted(range(n), key=means.__getitem__)[:2]  # int(4 * 0.5)
    want = [means[i] if i in smallest else 0.0 for i in range(n)]
    torch.testing.assert_close(selected_warmup_loss(SIMS, 0.2, 0.5), torch.tensor(want, dtype=torch.float64))
    assert int((selected_warmup_loss(SIMS, 0.2, 0.3) > 0).sum()) <= 1  # int(4 * 0.3) = 1
    assert float(selected_warmup_loss(SIMS, 0.2, 0.2).sum()) == 0.0  # int(0.8) = 0


def test_selected_warmup_gradient_only_through_kept_pairs() -> None:
    sims = SIMS.clone().requires_grad_(True)
    selected_warmup_loss(sims, 0.2, 0.25).sum().backward()
    kept = int(torch.argmin(selected_warmup_loss(SIMS, 0.2, 1.0)))
    assert sims.grad[kept].abs().sum() + sims.grad[:, kept].abs().sum() > 0
    rows = [i for i in range(4) if i != kept]
    assert sims.grad[rows][:, rows].abs().sum() == 0
