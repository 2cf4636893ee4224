"""Sharded similarity equals the full matrix computed at once; ensembles average."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from ncl.evaluation import ensemble, sharded_similarity

N_IMG, N_CAP, R, L, E = 7, 10, 3, 6, 4


def dot_sim(img: Tensor, cap: Tensor, lens: Tensor) -> Tensor:
    """Mean region vector dot mean valid-word vector, (a, R, E) x (b, L, E) -> (a, b)."""
    valid = torch.arange(cap.shape[1])[None, :] < lens[:, None]  # (b, L)
    words = torch.where(valid[..., None], cap, torch.zeros(()))  # padding may hold anything
    cap_vec = words.sum(1) / lens[:, None].to(cap.dtype)  # (b, E)
    return img.mean(1) @ cap_vec.T  # (a, b)


def make_data(seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    img = torch.randn(N_IMG, R, E, generator=gen)
    cap = torch.randn(N_CAP, L, E, generator=gen)
    lens = torch.randint(1, L + 1, (N_CAP,), generator=gen)
    lens[-1] = L  # at least one full-length caption, in the last shard
    lens[:3] = torch.tensor([1, 2, 1])  # a short first shard, so trimming is visible
    for k, n in enumerate(lens.tolist()):
        cap[k, n:] = float("nan")  # padding must never be used
    return img, cap, lens


@pytest.mark.parametrize("shard_size", [1, 3, 4, 7, 100])
def test_equals_full_matrix(shard_size: int) -> None:
    img, cap, lens = make_data()
    full = dot_sim(img, cap, lens)
    got = sharded_similarity(dot_sim, img, cap, lens, shard_size=shard_size)
    assert got.shape == (N_IMG, N_CAP) and got.dtype == torch.float32 and got.device.type == "cpu"
    torch.testing.assert_close(got, full)
    assert torch.isfinite(got).all()


@pytest.mark.parametrize("shard_size", [3, 4])
def test_blocks_are_bounded_and_trimmed(shard_size: int) -> None:
    img, cap, lens = make_data()
    calls: list[tuple[int, int, int]] = []

    def recording_sim(i: Tensor, c: Tensor, n: Tensor) -> Tensor:
        assert c.shape[1] == int(n.max()), "caption block must be trimmed to its longest caption"
        calls.append((i.shape[0], c.shape[0], c.shape[1]))
        return dot_sim(i, c, n)

    sharded_similarity(recording_sim, img, cap, lens, shard_size=shard_size)
    n_blocks = -(-N_IMG // shard_size) * -(-N_CAP // shard_size)
    assert len(calls) == n_blocks
    assert all(a <= shard_size and b <= shard_size for a, b, _ in calls)
    assert calls[0][2] == int(lens[:shard_size].max()) < L


def test_pooled_captions_are_accepted() -> None:
    gen = torch.Generator().manual_seed(1)
    img, cap = torch.randn(5, E, generator=gen), torch.randn(8, E, generator=gen)
    lens = torch.ones(8, dtype=torch.long)
    got = sharded_similarity(lambda i, c, n: i @ c.T, img, cap, lens, shard_size=3)
    torch.testing.assert_close(got, img @ cap.T)


def test_explicit_device_is_used() -> None:
    img, cap, lens = make_data()
    seen: set[str] = set()

    def sim(i: Tensor, c: Tensor, n: Tensor) -> Tensor:
        seen.update({i.device.type, c.device.type, n.device.type})
        return dot_sim(i, c, n)

    sharded_similarity(sim, img, cap, lens, shard_size=4, device="cpu")
    assert seen == {"cpu"}


def test_bad_inputs_raise() -> None:
    img, cap, lens = make_data()
    with pytest.raises(ValueError, match="shard_size"):
        sharded_similarity(dot_sim, img, cap, lens, shard_size=0)
    with pytest.raises(ValueError, match="cap_lens must have shape"):
        sharded_similarity(dot_sim, img, cap, lens[:-1])
    with pytest.raises(ValueError, match="cap_lens must lie in"):
        sharded_similarity(dot_sim, img, cap, lens * 0)
    with pytest.raises(ValueError, match="integer lengths"):
        sharded_similarity(dot_sim, img, cap, lens.float())
    with pytest.raises(ValueError, match="sim_fn must return shape"):
        sharded_similarity(lambda i, c, n: dot_sim(i, c, n).T, img, cap, lens, shard_size=3)


def test_ensemble_mean() -> None:
    gen = torch.Generator().manual_seed(2)
    sims = [torch.randn(4, 20, generator=gen) for _ in range(3)]
    before = [s.clone() for s in sims]
    torch.testing.assert_close(ensemble(sims), (sims[0] + sims[1] + sims[2]) / 3)
    for s, b in zip(sims, before, strict=True):
        assert torch.equal(s, b), "inputs must not be modified"
    torch.testing.assert_close(ensemble(sims[:1]), sims[0])


def test_ensemble_of_integer_scores_is_float() -> None:
    got = ensemble([torch.tensor([[1, 2]]), torch.tensor([[2, 2]])])
    assert got.dtype.is_floating_point
    torch.testing.assert_close(got, torch.tensor([[1.5, 2.0]]))


def test_ensemble_bad_inputs_raise() -> None:
    with pytest.raises(ValueError, match="at least one"):
        ensemble([])
    with pytest.raises(ValueError, match="same shape"):
        ensemble([torch.zeros(2, 3), torch.zeros(3, 2)])
    with pytest.raises(ValueError, match="mode"):
        ensemble([torch.zeros(2, 2)], mode="max")  # type: ignore[arg-type]
