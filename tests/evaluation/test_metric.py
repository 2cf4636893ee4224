"""Evaluation as a torchmetrics Metric (:class:`ncl.evaluation.metric.RetrievalEvaluation`):
ragged caption widths folded and unfolded exactly, padded repeats counted once, the
``limit_val_batches`` rule, and two gloo processes bit-identical to one."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from torch import Tensor

from ncl.evaluation.metric import (Embeddings, RetrievalEvaluation, by_index, fold, score_networks,
                                   logged_test_metrics, unfold, logged_val_metrics)
from ncl.evaluation.nonfinite import EvalSite
from ncl.evaluation.protocol import evaluate_systems
from ncl.evaluation.similarity import ensemble, sharded_similarity

N_IMG, PER, R, E, L = 7, 3, 2, 4, 6
N_CAP = N_IMG * PER


def lengths() -> Tensor:
    return torch.randint(1, L + 1, (N_CAP,), generator=torch.Generator().manual_seed(3))


def image_emb(index: Tensor) -> list[Tensor]:
    """Per network: ``(B, R, E)`` regions and a pooled ``(B, E)``, a function of the index."""
    base = index.double()[:, None, None] + torch.arange(R * E).reshape(1, R, E) / 10
    return [torch.sin(base).float(), torch.cos(base[:, 0]).float()]


def caption_emb(index: Tensor, lens: Tensor) -> list[Tensor]:
    """Per network: ``(B, L_b, E)`` with ``L_b`` the batch's longest caption (nonzero padding
    inside the batch width, as an encoder may leave it) and a pooled ``(B, E)``."""
    width = int(lens[index].max())
    base = index.double()[:, None, None] * 7 + torch.arange(width * E).reshape(1, width, E) / 3
    return [torch.sin(base).float(), torch.cos(base[:, 0]).float()]


def dot_sim(img: Tensor, cap: Tensor, lens: Tensor) -> Tensor:
    """Mean region (or the pooled vector) dot mean valid word (or the pooled vector)."""
    img = img.mean(1) if img.dim() == 3 else img
    if cap.dim() == 3:
        valid = torch.arange(cap.shape[1])[None, :] < lens[:, None]
        cap = torch.where(valid[..., None], cap, torch.zeros(())).sum(1) / lens[:, None]
    return img @ cap.T


def feed(metric: RetrievalEvaluation, img_batches: list[Tensor], cap_batches: list[Tensor]) -> None:
    lens = lengths()
    for index in img_batches:
        metric.update(index, image_emb(index))
    for index in cap_batches:
        metric.update(index, caption_emb(index, lens), lengths=lens[index])


def expected(img_batches: list[Tensor], cap_batches: list[Tensor], n_img: int) -> Embeddings:
    """What the unsharded code built: every caption padded with zeros to the longest, each row
    from its (last) batch, in dataset order."""
    lens = lengths()
    images = [torch.zeros(N_IMG, R, E), torch.zeros(N_IMG, E)]
    captions = [torch.zeros(N_CAP, L, E), torch.zeros(N_CAP, E)]
    for index in img_batches:
        for k, emb in enumerate(image_emb(index)):
            images[k][index] = emb
    for index in cap_batches:
        for k, emb in enumerate(caption_emb(index, lens)):
            if emb.dim() == 3:  # the whole row: zeros beyond this batch's width
                captions[k][index] = 0
                captions[k][index, : emb.shape[1]] = emb
            else:
                captions[k][index] = emb
    captions[0] = captions[0][:, : int(lens.max())]
    return Embeddings(lambda k: images[k][:n_img], lambda k: captions[k][: n_img * PER], lens[: n_img * PER])


def scorer(emb: Embeddings) -> dict[str, Tensor]:
    return score_networks([("A", dot_sim), ("B", dot_sim)], emb, 4, torch.device("cpu"), EvalSite())


def materialised(emb: Embeddings) -> list[Tensor]:
    return [emb.image(0), emb.image(1), emb.caption(0), emb.caption(1), emb.lengths]


def assert_same_embeddings(got: Embeddings | list[Tensor], want: Embeddings) -> None:
    got = got if isinstance(got, list) else materialised(got)
    for g, w in zip(got, materialised(want)):
        assert g.shape == w.shape and torch.equal(g, w)


def batches(indices: list[int], size: int) -> list[Tensor]:
    return [torch.tensor(indices[i:i + size]) for i in range(0, len(indices), size)]


# ------------------------------------------------------------------ one process
def test_fold_unfold_is_zero_padding() -> None:
    a, b = torch.randn(2, 3, 4), torch.randn(1, 5, 4)
    rows, widths = zip(fold(a), fold(b))
    got = unfold(torch.cat(rows), torch.cat(widths))
    want = torch.cat([torch.nn.functional.pad(a, (0, 0, 0, 2)), b])
    assert torch.equal(got, want)
    pooled = torch.randn(3, 4)
    assert torch.equal(unfold(*fold(pooled)), pooled)
    assert torch.equal(by_index(torch.tensor([2, 0, 2]), torch.tensor([1.0, 2.0, 3.0])),
                       torch.tensor([2.0, 0.0, 3.0]))


def test_one_process_rebuilds_the_padded_embeddings_and_scores_them() -> None:
    metric = RetrievalEvaluation(2)
    img_batches, cap_batches = batches(list(range(N_IMG)), 3), batches(list(range(N_CAP)), 4)
    feed(metric, img_batches, cap_batches)
    want = expected(img_batches, cap_batches, N_IMG)
    assert_same_embeddings(metric.embeddings(PER), want)
    got = metric.compute(scorer, PER, ["1k"])
    sims = {name: sharded_similarity(dot_sim, want.image(k), want.caption(k), want.lengths, 4)
            for k, name in enumerate("AB")}
    sims["A+B"] = ensemble([sims["A"], sims["B"]])
    assert list(got.similarities) == ["A", "B", "A+B"]
    assert all(torch.equal(got.similarities[k], v) for k, v in sims.items())
    assert got.results == evaluate_systems(sims, PER, ["1k"])
    assert set(logged_val_metrics(got.results, "A+B")) >= {"val/rsum", "val_A/rsum", "val_B/t2i_r10"}
    assert "test/A+B/1k/rsum" in logged_test_metrics(got.results)
    metric.reset()
    assert metric.cap_index == [] and metric.img0 == []


def test_limited_captions_keep_only_fully_captioned_images() -> None:
    """``limit_val_batches``: 10 of 21 captions encoded -> the first 3 images (9 captions)."""
    metric = RetrievalEvaluation(2)
    img_batches, cap_batches = batches(list(range(N_IMG)), 4), batches(list(range(10)), 5)
    feed(metric, img_batches, cap_batches)
    emb = metric.embeddings(PER)
    assert emb.image(0).shape[0] == 3 and emb.caption(0).shape[0] == 9
    assert_same_embeddings(emb, expected(img_batches, cap_batches, 3))


def test_wrong_number_of_networks_is_refused() -> None:
    with pytest.raises(ValueError, match="expected 2 embeddings"):
        RetrievalEvaluation(2).update(torch.arange(2), [torch.zeros(2, 3)])


# ------------------------------------------------------------------ two gloo processes
def shares(n: int, rank: int, world: int = 2) -> list[int]:
    """A DistributedSampler's share (no shuffle): every world-th index, padded with repeats
    from the start so that every rank has as many."""
    total = -(-n // world) * world
    return [(i % n) for i in range(total)][rank::world]


def spawnable(fn):
    """``fn`` as a spawned process imports it (``evaluation.test_metric``; see
    tests/evaluation/test_rank_sharded_eval.py)."""
    import importlib

    return getattr(importlib.import_module(f"evaluation.{Path(__file__).stem}"), fn.__name__)


def metric_worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        metric = RetrievalEvaluation(2)
        # different batch sizes per rank: different caption widths on the two ranks
        feed(metric, batches(shares(N_IMG, rank), 2), batches(shares(N_CAP, rank), 3 + rank))
        seen: list[Embeddings] = []
        got = metric.compute(lambda emb: seen.append(materialised(emb)) or scorer(emb), PER, ["1k"])
        local = len(metric.cap_index)  # states are this rank's again after compute
        torch.save({"emb": seen[0], "sims": got.similarities, "results": got.results,
                    "local_batches": local}, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_two_gloo_processes_match_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    mp.start_processes(spawnable(metric_worker), args=(2, str(tmp_path / "pg"), str(tmp_path)),
                       nprocs=2, join=True, start_method="fork")  # fork: tiny_runs.DDP_TRAINER
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    img_batches = batches(shares(N_IMG, 0), 2) + batches(shares(N_IMG, 1), 2)  # rank order
    cap_batches = batches(shares(N_CAP, 0), 3) + batches(shares(N_CAP, 1), 4)
    assert shares(N_CAP, 1)[-1] == 0  # rank 1 repeats caption 0 (and image 0)
    want = expected(img_batches, cap_batches, N_IMG)
    alone = RetrievalEvaluation(2)
    feed(alone, img_batches, cap_batches)
    one = alone.compute(scorer, PER, ["1k"])
    for got in ranks:
        assert_same_embeddings(got["emb"], want)
        assert all(torch.equal(got["sims"][k], v) for k, v in one.similarities.items())
        assert got["results"] == one.results
    assert [got["local_batches"] for got in ranks] == [len(batches(shares(N_CAP, r), 3 + r)) for r in (0, 1)]
