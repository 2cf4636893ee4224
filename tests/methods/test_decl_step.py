"""DECL.training_step's values on a fixed batch (issue 40, item 5): the raw scores are hand-set
(the backbone's ``forward_logits`` is replaced), the prediction table is hand-set, and the
logged ``L_edl`` and ``L_rdh`` are compared with losses written out here from the formulas of
spec 4.6.2-4.6.3 (``ncl.losses.decl``'s docstrings), element by element in Python floats.

Checked: the rows of predicted-noisy pairs are zeroed in the EDL target, RDH runs over the
predicted-clean pairs only, and the table is read at ``batch["index"]`` (not at the batch
positions); the warm-up ignores the table."""

from __future__ import annotations

import math
from functools import partial
from types import SimpleNamespace

import pytest
import torch
from tiny_runs import TINY_SGRAF

import ncl.methods.decl as decl_module
from ncl.methods.decl import DECL
from ncl.models.sgraf import SGRAF

TAU, LAMBDA1, LAMBDA2, MARGIN = 0.5, 0.8, 0.1, 0.2
#: k = max(int(4 - 0.025 * step), mu) at the first step: int(3.975) = 3 (spec 4.6.3), below B - 1
HARDNESS_START, ETA, MU = 4, 0.025, 1
K = max(int(HARDNESS_START - ETA * 1), MU)
#: Hand-set raw scores Z of a batch of six pairs (rows images, columns captions): diagonals
#: mostly high, some negatives above their positive so that the hinges and the top-k matter.
Z = [[2.0, -0.5, 0.3, -1.2, 0.8, -0.1],
     [0.4, 0.6, -0.9, 1.1, -0.3, 0.2],
     [-0.7, 0.1, 1.5, 0.0, 1.7, -1.0],
     [0.9, -0.2, 0.5, 1.3, -0.6, 0.4],
     [-0.4, 1.2, -0.1, 0.7, 0.3, -0.8],
     [0.2, -1.1, 0.6, -0.3, 0.1, 1.8]]
B = len(Z)


# ------------------------------------------------------------------ the formulas, by hand
def digamma(x: float) -> float:
    return float(torch.special.digamma(torch.tensor(x, dtype=torch.float64)))


def edl_row(alpha: list[float], y: list[float]) -> float:
    """Spec 4.6.2 for one Dirichlet row: squared error + variance + lambda2 KL(Dir(alpha~)||Dir(1))."""
    s = sum(alpha)
    p = [a / s for a in alpha]
    squared = sum((yj - pj) ** 2 for yj, pj in zip(y, p))
    variance = sum(a * (s - a) / (s * s * (s + 1.0)) for a in alpha)
    tilde = [(a - 1.0) * (1.0 - yj) + 1.0 for a, yj in zip(alpha, y)]
    st = sum(tilde)
    kl = (math.lgamma(st) - sum(math.lgamma(a) for a in tilde) - math.lgamma(len(alpha))
          + sum((a - 1.0) * (digamma(a) - digamma(st)) for a in tilde))
    return squared + variance + LAMBDA2 * kl


def hand_edl(clean: list[bool]) -> float:
    """``L_edl``: the mean over pairs of both directions' row losses; pair ``i``'s target row is
    ``e_i`` when it is trained as matched, all zeros when it is predicted noisy."""
    e = [[math.exp(math.tanh(z) / TAU) for z in row] for row in Z]
    total = 0.0
    for i in range(B):
        y = [1.0 if (j == i and clean[i]) else 0.0 for j in range(B)]
        i2t = [e[i][j] + 1.0 for j in range(B)]  # image i over the captions
        t2i = [e[j][i] + 1.0 for j in range(B)]  # caption i over the images
        total += edl_row(i2t, y) + edl_row(t2i, y)
    return total / B


def hand_rdh(keep: list[bool]) -> float:
    """``lambda1 * sum_{i kept} r_i``, ``r_i`` the top-K hinge violations of row i (image
    anchor) and column i (caption anchor) of ``tanh(Z)``, diagonals at 0, divided by K."""
    t = [[math.tanh(z) for z in row] for row in Z]
    total = 0.0
    for i in range(B):
        if not keep[i]:
            continue
        row = [0.0 if j == i else max(0.0, MARGIN + t[i][j] - t[i][i]) for j in range(B)]
        col = [0.0 if r == i else max(0.0, MARGIN + t[r][i] - t[i][i]) for r in range(B)]
        total += (sum(sorted(row, reverse=True)[:K]) + sum(sorted(col, reverse=True)[:K])) / K
    return LAMBDA1 * total


# ------------------------------------------------------------------ one step, no trainer
def run_step(monkeypatch: pytest.MonkeyPatch, index: list[int], table_clean: list[float],
             epoch: int = 1) -> dict[str, float]:
    """One ``training_step`` of DECL at ``epoch`` (warm-up: epoch 0) on the batch of dataset
    pairs ``index`` with the scores :data:`Z`; the table's predicted-clean row is
    ``table_clean``. Returns the logged values and the loss handed to backward."""
    model = DECL(30, partial(SGRAF, **TINY_SGRAF), warmup_epochs=1, tau=TAU, lambda1=LAMBDA1,
                 lambda2=LAMBDA2, margin=MARGIN, eta=ETA, mu=MU, hardness_batch_size=HARDNESS_START)
    n = len(table_clean)
    values = torch.rand(n, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    values[:, 0] = torch.tensor(table_clean, dtype=torch.float64)  # PRED_CLEAN
    model.predictions.reset(n)
    model.accept_refinement(1, values)
    model._trainer = SimpleNamespace(current_epoch=epoch, global_rank=0)
    batch = {"index": torch.tensor(index)}
    seen: list[dict] = []

    def logits(net, got):
        seen.append(got)
        return torch.tensor(Z, requires_grad=True)

    monkeypatch.setattr(decl_module, "forward_logits", logits)
    out: dict[str, float] = {}
    model.optimizers = lambda: SimpleNamespace(zero_grad=lambda: None, step=lambda: None)
    model.manual_backward = lambda loss: out.__setitem__("backward", float(loss))
    model.log_train = lambda logs, batch_size: out.update({k: float(v) for k, v in logs.items()})
    model.training_step(batch, 0)
    assert seen == [batch] and out["hardness"] == K
    return out


CLEAN = [True, False, True, True, False, True]


def test_predicted_noisy_rows_are_zeroed_in_the_edl_target(monkeypatch: pytest.MonkeyPatch) -> None:
    out = run_step(monkeypatch, list(range(B)), [float(c) for c in CLEAN])
    assert out["edl"] == pytest.approx(hand_edl(CLEAN), rel=1e-5)
    # the identity target (the noisy rows not zeroed) gives another loss: the check can fail
    assert abs(hand_edl([True] * B) - hand_edl(CLEAN)) > 1e-2
    assert out["predicted_clean"] == pytest.approx(4 / 6)
    assert out["backward"] == pytest.approx(out["edl"] + out["rdh"], rel=1e-6)


def test_rdh_runs_over_the_predicted_clean_pairs_only(monkeypatch: pytest.MonkeyPatch) -> None:
    out = run_step(monkeypatch, list(range(B)), [float(c) for c in CLEAN])
    assert out["rdh"] == pytest.approx(hand_rdh(CLEAN), rel=1e-5)
    assert abs(hand_rdh([True] * B) - hand_rdh(CLEAN)) > 1e-2  # every pair's r_i would differ
    assert out["loss"] == pytest.approx(out["edl"] + out["rdh"], rel=1e-6)


def test_the_table_is_read_at_the_batch_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pairs 7, 2, 9, 0, 4, 5 of a table of ten whose clean pairs are 0, 2, 5 and 8: by index
    the batch is noisy, clean, noisy, clean, noisy, clean; by position (pairs 0..5) it would be
    clean, noisy, clean, noisy, noisy, clean."""
    table = [1.0 if i in (0, 2, 5, 8) else 0.0 for i in range(10)]
    index = [7, 2, 9, 0, 4, 5]
    by_index = [table[i] > 0.5 for i in index]
    by_position = [table[i] > 0.5 for i in range(B)]
    assert by_index == [False, True, False, True, False, True] and by_index != by_position
    out = run_step(monkeypatch, index, table)
    assert out["edl"] == pytest.approx(hand_edl(by_index), rel=1e-5)
    assert out["rdh"] == pytest.approx(hand_rdh(by_index), rel=1e-5)
    assert abs(hand_edl(by_position) - hand_edl(by_index)) > 1e-2
    assert abs(hand_rdh(by_position) - hand_rdh(by_index)) > 1e-2
    assert out["predicted_clean"] == pytest.approx(0.5)


def test_the_warmup_trains_every_pair_as_matched(monkeypatch: pytest.MonkeyPatch) -> None:
    """Epoch 0 (warm-up): identity labels and RDH over every pair, whatever the table says."""
    out = run_step(monkeypatch, list(range(B)), [float(c) for c in CLEAN], epoch=0)
    assert out["edl"] == pytest.approx(hand_edl([True] * B), rel=1e-5)
    assert out["rdh"] == pytest.approx(hand_rdh([True] * B), rel=1e-5)
    assert out["predicted_clean"] == 1.0
