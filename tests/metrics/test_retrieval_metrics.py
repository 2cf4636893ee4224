"""Retrieval metrics against a naive per-query reference with explicit pessimistic ties."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ncl.metrics import RETRIEVAL_KEYS, fold5_metrics, i2t_ranks, retrieval_metrics, t2i_ranks
from ncl.metrics import retrieval as retrieval_module


def naive_i2t_ranks(sims: np.ndarray, per: int) -> list[int]:
    """Sort each image's captions by score; among equal scores non-ground-truth come first."""
    n_img, n_cap = sims.shape
    ranks = []
    for i in range(n_img):
        order = sorted(range(n_cap), key=lambda c: (-sims[i, c], c // per == i))
        ranks.append(next(pos for pos, c in enumerate(order) if c // per == i))
    return ranks


def naive_t2i_ranks(sims: np.ndarray, per: int) -> list[int]:
    """Sort the images for each caption; among equal scores the wrong images come first."""
    n_img, n_cap = sims.shape
    ranks = []
    for c in range(n_cap):
        order = sorted(range(n_img), key=lambda i: (-sims[i, c], i == c // per))
        ranks.append(order.index(c // per))
    return ranks


def naive_metrics(sims: np.ndarray, per: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for prefix, ranks in (("i2t", naive_i2t_ranks(sims, per)), ("t2i", naive_t2i_ranks(sims, per))):
        r = np.array(ranks)
        for k in (1, 5, 10):
            out[f"{prefix}_r{k}"] = 100.0 * sum(1 for x in ranks if x < k) / len(ranks)
        out[f"{prefix}_medr"] = math.floor(np.median(r)) + 1
        out[f"{prefix}_meanr"] = float(r.mean()) + 1
    out["rsum"] = sum(out[f"{d}_r{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10))
    return out


def assert_metrics_close(got: dict[str, float], want: dict[str, float]) -> None:
    assert list(got) == list(RETRIEVAL_KEYS)
    for key in RETRIEVAL_KEYS:
        assert got[key] == pytest.approx(want[key], abs=1e-9), key


def random_sims(n_img: int, per: int, ties: bool, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if ties:
        return torch.randint(0, 3, (n_img, n_img * per), generator=gen).float()
    return torch.randn(n_img, n_img * per, generator=gen)


@pytest.mark.parametrize("per", [1, 5])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_ranks_match_naive(per: int, ties: bool, seed: int) -> None:
    sims = random_sims(13, per, ties, seed)
    ref = sims.double().numpy()
    assert i2t_ranks(sims, per).tolist() == naive_i2t_ranks(ref, per)
    assert t2i_ranks(sims, per).tolist() == naive_t2i_ranks(ref, per)


@pytest.mark.parametrize("per", [1, 5])
@pytest.mark.parametrize("ties", [False, True])
def test_metrics_match_naive(per: int, ties: bool) -> None:
    # Plant some correct matches so recalls are neither all 0 nor all 100.
    sims = random_sims(24, per, ties, seed=3)
    caps = torch.arange(0, sims.shape[1], 2)
    sims[caps // per, caps] += 2.0
    assert_metrics_close(retrieval_metrics(sims, per), naive_metrics(sims.double().numpy(), per))


def test_integer_dtype_scores() -> None:
    sims = torch.randint(0, 2, (9, 45), generator=torch.Generator().manual_seed(5))
    assert_metrics_close(retrieval_metrics(sims, 5), naive_metrics(sims.numpy().astype(float), 5))


@pytest.mark.parametrize("budget", [1, 7, 50])
def test_chunking_does_not_change_ranks(budget: int, monkeypatch: pytest.MonkeyPatch) -> None:
    sims = random_sims(11, 5, ties=True, seed=2)
    ref = sims.double().numpy()
    monkeypatch.setattr(retrieval_module, "_CHUNK_ELEMENTS", budget)
    assert i2t_ranks(sims, 5).tolist() == naive_i2t_ranks(ref, 5)
    assert t2i_ranks(sims, 5).tolist() == naive_t2i_ranks(ref, 5)


def test_hand_computed_ties_count_against_ground_truth() -> None:
    sims = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    assert i2t_ranks(sims, 1).tolist() == [1, 0]
    assert t2i_ranks(sims, 1).tolist() == [0, 1]


def test_best_of_several_ground_truth_captions() -> None:
    # Image 0: gt captions 0,1 score 0.1 and 0.8; caption 2 (image 1) scores 0.5 -> rank 0.
    sims = torch.tensor([[0.1, 0.8, 0.5, 0.2], [0.0, 0.0, 0.3, 0.9]])
    assert i2t_ranks(sims, 2).tolist() == [0, 0]
    assert t2i_ranks(sims, 2).tolist() == [0, 0, 1, 0]


def test_constant_matrix_gets_worst_ranks_not_perfect() -> None:
    n_img, per = 20, 5
    metrics = retrieval_metrics(torch.zeros(n_img, n_img * per), per)
    assert metrics["i2t_r1"] == 0.0 and metrics["t2i_r1"] == 0.0
    assert metrics["i2t_r10"] == 0.0 and metrics["t2i_r10"] == 0.0
    assert metrics["i2t_meanr"] == n_img * per - per + 1
    assert metrics["t2i_meanr"] == n_img


def test_perfect_matrix() -> None:
    sims = torch.eye(6).repeat_interleave(5, dim=1)  # (6, 30), gt entries 1
    metrics = retrieval_metrics(sims, 5)
    assert metrics["rsum"] == 600.0
    assert metrics["i2t_medr"] == metrics["t2i_medr"] == 1.0


def test_median_averages_the_two_middle_ranks() -> None:
    # i2t ranks are [0, 0, 3, 3]: numpy median 1.5 -> medr 2 (a lower median would give 1).
    sims = torch.diag(torch.tensor([1.0, 1.0, -1.0, -1.0]))
    assert i2t_ranks(sims, 1).tolist() == [0, 0, 3, 3]
    metrics = retrieval_metrics(sims, 1)
    assert metrics["i2t_medr"] == 2.0
    assert metrics["i2t_meanr"] == 2.5


@pytest.mark.parametrize(("n_folds", "per"), [(5, 5), (2, 5), (5, 1)])
def test_fold5_matches_naive_per_fold(n_folds: int, per: int) -> None:
    sims = random_sims(10, per, ties=True, seed=7)
    caps = torch.arange(0, sims.shape[1], 3)
    sims[caps // per, caps] += 1.0
    fold = 10 // n_folds
    blocks = [sims[f * fold : (f + 1) * fold, f * fold * per : (f + 1) * fold * per] for f in range(n_folds)]
    folds = [naive_metrics(block.double().numpy(), per) for block in blocks]
    want = {key: sum(m[key] for m in folds) / n_folds for key in RETRIEVAL_KEYS}
    got = fold5_metrics(sims, per, n_folds=n_folds)
    assert_metrics_close(got, want)
    recalls = sum(got[f"{d}_r{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10))
    assert got["rsum"] == pytest.approx(recalls)


def test_fold5_ignores_entries_outside_the_folds() -> None:
    sims = random_sims(10, 5, ties=False, seed=8)
    poisoned = sims.clone()
    mask = torch.ones_like(sims, dtype=torch.bool)
    for f in range(5):
        mask[2 * f : 2 * f + 2, 10 * f : 10 * f + 10] = False
    poisoned[mask] = 1e6
    assert fold5_metrics(poisoned, 5) == fold5_metrics(sims, 5)
    assert retrieval_metrics(poisoned, 5) != retrieval_metrics(sims, 5)


def test_shape_mismatch_raises() -> None:
    with pytest.raises(ValueError, match="N_cap == N_img \\* captions_per_image"):
        retrieval_metrics(torch.zeros(4, 19), 5)
    with pytest.raises(ValueError, match="2-D"):
        i2t_ranks(torch.zeros(4), 1)
    with pytest.raises(ValueError, match="captions_per_image"):
        t2i_ranks(torch.zeros(4, 4), 0)


def test_nan_raises() -> None:
    sims = torch.zeros(3, 3)
    sims[1, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        retrieval_metrics(sims, 1)


def test_fold_count_must_divide_images() -> None:
    with pytest.raises(ValueError, match="n_folds"):
        fold5_metrics(torch.zeros(12, 60), 5, n_folds=5)
