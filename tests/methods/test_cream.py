"""CREAM's co-training iteration (targets, filters, three optimiser steps) and its warm-up
selection, on a tiny SGRAF without a trainer: every value recomputed independently from the
formulas of the official ``train_one_epoch`` (docs/methods/cream.md)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from callbacks.ncr_fakes import SgrafPairs

from ncl.data.datasets import collate
from ncl.division.cream import CLEAN, HARD, NOISY, SubsetDivision
from ncl.errors import ConfigError
from ncl.losses.cream import infonce_prediction, soft_label_infonce
from ncl.methods.cream import CREAM
from ncl.methods.cream_support import beats_every_maximum
from ncl.models.sgraf import SGRAF

N = 20


def backbone(vocab: int) -> SGRAF:
    return SGRAF(vocab, img_dim=16, num_regions=6, word_dim=8, embed_size=16, sim_dim=8,
                 dropout=0.0, similarity_strategy="chunked")


class Recorded(CREAM):
    """CREAM whose optimiser steps are plain SGD, recorded with their batch, targets and filter."""

    def __init__(self, epoch: int, **kwargs: Any) -> None:
        super().__init__(30, backbone, hard_start_epoch=1, noisy_start_epoch=2, **kwargs)
        self.epoch = epoch
        self.calls: list[dict[str, Any]] = []
        self.sgd = [torch.optim.SGD(net.parameters(), lr=0.5) for net in self.nets]

    def cotrain_epoch(self) -> int:
        return self.epoch

    def soft_step(self, k: int, batch: Any, targets: torch.Tensor, filter_value: float) -> torch.Tensor:
        before = [p.detach().clone() for p in self.nets[k].parameters()]
        loss = super().soft_step(k, batch, targets, filter_value)
        self.calls.append({"k": k, "index": batch["index"].tolist(), "targets": targets.clone(),
                           "filter": filter_value, "loss": loss, "before": before})
        return loss

    def optimize(self, k: int, loss: torch.Tensor) -> None:
        self.sgd[k].zero_grad()
        loss.backward()
        self.sgd[k].step()

    def log_net(self, k: int, values: dict, batch_size: int) -> None:
        self.logged = values


def with_division(model: CREAM) -> torch.Tensor:
    prob = torch.rand(2, N, generator=torch.Generator().manual_seed(7))
    subset = torch.tensor([CLEAN] * 10 + [HARD] * 5 + [NOISY] * 5, dtype=torch.int8)
    model.division = SubsetDivision(epoch=0, losses=torch.zeros(2, N), prob=prob,
                                    clean=torch.ones(2, N, dtype=torch.bool), subset=subset)
    return prob


def batch(indices: list[int]) -> dict[str, torch.Tensor]:
    pairs = SgrafPairs(N)
    return collate([pairs[i] for i in indices])


def predict(net: torch.nn.Module, b: dict) -> torch.Tensor:
    net.eval()
    with torch.no_grad():
        p = infonce_prediction(net(b["images"], b["tokens"], b["lengths"]), 0.07)
    net.train()
    return p


@pytest.mark.parametrize("epoch,steps", [(0, 1), (1, 2), (2, 3)])
def test_one_iteration_targets_filters_and_steps(epoch: int, steps: int) -> None:
    torch.manual_seed(0)
    model = Recorded(epoch)
    prob = with_division(model)
    clean, hard, noisy = batch([0, 3, 5, 7, 9]), batch([10, 12, 14]), batch([15, 16, 18, 19])
    k, net, peer = 1, model.nets[1], model.nets[0]
    # expected targets from the networks before any step (eval mode, no gradient)
    p_c, p_h = predict(net, clean), predict(net, hard)
    t_c = prob[0][[0, 3, 5, 7, 9]] + (1 - prob[0][[0, 3, 5, 7, 9]]) * p_c  # the peer's (A's) w
    m = (prob[0][[10, 12, 14]] + prob[1][[10, 12, 14]]) / 2
    t_h = m + (1 - m) * p_h
    t_u = (predict(net, noisy) + predict(peer, noisy)) / 2
    f = float((t_c.mean() * 10 + t_h.mean() * 5 + t_u.mean() * 5) / 20)
    peer_before = [p.detach().clone() for p in peer.parameters()]
    model.cotrain_step(k, clean, hard, True, noisy)

    assert [c["index"] for c in model.calls] == [[0, 3, 5, 7, 9], [10, 12, 14], [15, 16, 18, 19]][:steps]
    expected = [(t_c, max(1.0 - epoch, f)), (t_h, f), (t_u, f)]  # clean fraction 0.5 <= 0.85
    for call, (targets, filt) in zip(model.calls, expected):
        assert call["k"] == k
        assert torch.allclose(call["targets"], targets, atol=1e-6)
        assert call["filter"] == pytest.approx(filt, rel=1e-6)
    # every step is its own forward on the weights the previous step left
    for call, b in zip(model.calls, (clean, hard, noisy)):
        saved = [p.detach().clone() for p in net.parameters()]
        with torch.no_grad():
            for p, old in zip(net.parameters(), call["before"]):
                p.copy_(old)
            again = soft_label_infonce(net(b["images"], b["tokens"], b["lengths"]), call["targets"],
                                       0.07, call["filter"])
            for p, new in zip(net.parameters(), saved):
                p.copy_(new)
        assert torch.allclose(call["loss"], again, rtol=1e-5)
    if steps > 1:
        assert not all(torch.equal(a, b) for a, b in zip(model.calls[0]["before"], model.calls[1]["before"]))
    assert all(torch.equal(a, b.detach()) for a, b in zip(peer_before, peer.parameters()))  # peer fixed


def test_stale_hard_batch_and_batches_of_one_do_not_train() -> None:
    torch.manual_seed(0)
    model = Recorded(5)
    with_division(model)
    model.cotrain_step(0, batch([0, 1, 2]), batch([10, 11]), False, batch([15]))
    assert [c["index"] for c in model.calls] == [[0, 1, 2]]  # stale hard, noisy of one pair
    model.calls.clear()
    model.cotrain_step(0, batch([0, 1, 2]), batch([10]), True, batch([15, 16]))
    assert [c["index"] for c in model.calls] == [[0, 1, 2], [15, 16]]


def test_many_clean_pairs_lift_the_filters() -> None:
    torch.manual_seed(0)
    model = Recorded(0)
    with_division(model)
    model.division.subset = torch.tensor([CLEAN] * 18 + [HARD, NOISY], dtype=torch.int8)  # 0.9
    model.cotrain_step(0, batch([0, 1, 2]), batch([18]), True, batch([19]))
    assert model.calls[0]["filter"] == 0.0


def test_warmup_selection_rule_and_reload() -> None:
    assert beats_every_maximum({"a": 1.0, "b": 0.1}, None)
    assert not beats_every_maximum({"a": 2.0, "b": 0.5}, {"a": 1.0, "b": 0.5})  # a tie fails
    torch.manual_seed(0)
    model = Recorded(0)
    keys = ("rsum", "i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10")
    weights = {}
    for epoch, values in enumerate(([10, 1, 2, 3, 1, 1, 2], [20, 2, 3, 4, 1, 2, 3], [30, 3, 4, 5, 2, 3, 4],
                                    [40, 9, 9, 9, 9, 9, 1])):
        with torch.no_grad():
            next(model.nets[0].parameters()).fill_(float(epoch))
        weights[epoch] = [p.detach().clone() for p in model.nets[0].parameters()]
        model.note_warmup_validation(epoch, dict(zip(keys, map(float, values))))
    # epoch 1 ties t2i_r1 = 1 (not above), epoch 3's t2i_r10 = 1 is below: epoch 2 is selected
    assert model.warmup_best["epoch"] == 2
    assert model.warmup_maxima["rsum"] == 40.0 and model.warmup_maxima["t2i_r10"] == 4.0
    model.finish_warmup()
    assert all(torch.equal(p, q) for p, q in zip(model.nets[0].parameters(), weights[2]))
    assert model.warmup_done and model.warmup_best is None


def test_bad_option_is_named() -> None:
    with pytest.raises(ConfigError, match="model.warmup_selection"):
        CREAM(30, backbone, warmup_selection="best")
    with pytest.raises(ConfigError, match="model.temperature"):
        CREAM(30, backbone, temperature=0.0)
