"""SPS's co-training iteration (strictly clean step with its consistency terms, clean step,
proxy-caption step) and its warm-up rule, on a tiny SGRAF without a trainer; every value
recomputed from the official formulas (docs/methods/sps.md)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from callbacks.ncr_fakes import SgrafPairs

from ncl.data.datasets import collate
from ncl.division.cream import CLEAN, NOISY, STRICT, SubsetDivision
from ncl.losses.cream import infonce_prediction, per_sample_infonce
from ncl.losses.sps import cosine_matrix, mean_word_embeddings
from ncl.methods.sps import SPS
from ncl.models.sgraf import SGRAF

N = 20


def backbone(vocab: int) -> SGRAF:
    return SGRAF(vocab, img_dim=16, num_regions=6, word_dim=8, embed_size=16, sim_dim=8,
                 dropout=0.0, similarity_strategy="chunked")


class Recorded(SPS):
    """SPS whose optimiser steps are plain SGD, recorded with the weights before them."""

    def __init__(self, epoch: int, **kwargs: Any) -> None:
        super().__init__(30, backbone, clean_start_epoch=1, noisy_start_epoch=2, **kwargs)
        self.epoch, self.steps, self.labelled = epoch, [], []
        self.sgd = [torch.optim.SGD(net.parameters(), lr=0.5) for net in self.nets]

    def cotrain_epoch(self) -> int:
        return self.epoch

    def labelled_step(self, k: int, batch: Any, labels: torch.Tensor) -> torch.Tensor:
        self.labelled.append({"tokens": batch["tokens"].clone(), "lengths": batch["lengths"].clone(),
                              "index": batch["index"].tolist(), "labels": labels.clone()})
        return super().labelled_step(k, batch, labels)

    def optimize(self, k: int, loss: torch.Tensor) -> None:
        self.steps.append({"k": k, "loss": loss.detach().clone(),
                           "before": [p.detach().clone() for p in self.nets[k].parameters()]})
        self.sgd[k].zero_grad()
        loss.backward()
        self.sgd[k].step()

    def log_net(self, k: int, values: dict, batch_size: int) -> None:
        self.logged = values


def with_division(model: SPS) -> torch.Tensor:
    prob = torch.rand(2, N, generator=torch.Generator().manual_seed(3))
    row = torch.tensor([STRICT] * 8 + [CLEAN] * 6 + [NOISY] * 6, dtype=torch.int8)
    model.division = SubsetDivision(epoch=0, losses=torch.zeros(2, N), prob=prob,
                                    clean=torch.ones(2, N, dtype=torch.bool), subset=torch.stack([row, row]))
    return prob


def batch(indices: list[int]) -> dict[str, torch.Tensor]:
    pairs = SgrafPairs(N)
    return collate([pairs[i] for i in indices])


def eval_pass(net: torch.nn.Module, fn):  # noqa: ANN001, ANN202 - test helper
    net.eval()
    with torch.no_grad():
        out = fn()
    net.train()
    return out


def test_one_iteration_three_steps_by_value() -> None:
    torch.manual_seed(0)
    model = Recorded(2)
    prob = with_division(model)
    strict, clean, noisy = batch([0, 2, 4, 6]), batch([8, 9, 11]), batch([14, 16, 19])
    noisy["images"] = strict["images"][[2, 0, 3]]  # each noisy image's nearest is itself
    k, net = 0, model.nets[0]
    p_c = eval_pass(net, lambda: infonce_prediction(net(clean["images"], clean["tokens"], clean["lengths"]), 0.07))
    t_c = prob[1][[8, 9, 11]] + (1 - prob[1][[8, 9, 11]]) * p_c  # B's probabilities: A's peer
    cos = eval_pass(net, lambda: cosine_matrix(net.encode_images(noisy["images"]).mean(1),
                                               net.encode_images(strict["images"]).mean(1)))
    pick = cos.argmax(1)
    assert pick.tolist() == [2, 0, 3]
    tokens = strict["tokens"][pick]
    p_n = eval_pass(net, lambda: infonce_prediction(net(noisy["images"], tokens, strict["lengths"][pick]), 0.07))
    y_n = p_n * cos.max(1).values
    y_n = torch.where(y_n < 0.5, torch.zeros_like(y_n), y_n)
    model.cotrain_step(k, strict, clean, True, noisy)

    assert [s["k"] for s in model.steps] == [0, 0, 0]
    assert [c["index"] for c in model.labelled] == [[8, 9, 11], [14, 16, 19]]
    assert torch.allclose(model.labelled[0]["labels"], t_c, atol=1e-6)
    assert torch.equal(model.labelled[1]["tokens"], tokens)
    assert torch.equal(model.labelled[1]["lengths"], strict["lengths"][pick])
    assert torch.allclose(model.labelled[1]["labels"], y_n, atol=1e-6)
    # the strictly clean step: InfoNCE + 25 mean((S - S^T)^2) + 25 mean((M_img - M_txt)^2)
    with torch.no_grad():
        for p, old in zip(net.parameters(), model.steps[0]["before"]):
            p.copy_(old)
        img = net.encode_images(strict["images"])
        cap = net.encode_captions(strict["tokens"], strict["lengths"])
        s = net.similarity(img, cap, strict["lengths"])
        m_i = cosine_matrix(img.mean(1), img.mean(1))
        t = mean_word_embeddings(cap, strict["lengths"])
        m_t = cosine_matrix(t, t)
        expected = (per_sample_infonce(s, 0.07).mean() + 25 * ((s - s.t()) ** 2).mean()
                    + 25 * ((m_i - m_t) ** 2).mean())
    assert torch.allclose(model.steps[0]["loss"], expected, rtol=1e-5)
    # the clean step: mean(y_i l_i) on the weights the strict step left
    with torch.no_grad():
        for p, old in zip(net.parameters(), model.steps[1]["before"]):
            p.copy_(old)
        s = net(clean["images"], clean["tokens"], clean["lengths"])
    assert torch.allclose(model.steps[1]["loss"], (per_sample_infonce(s, 0.07) * t_c).mean(), rtol=1e-5)
    assert not all(torch.equal(a, b) for a, b in zip(model.steps[0]["before"], model.steps[1]["before"]))


@pytest.mark.parametrize("epoch,steps", [(0, 1), (1, 2)])
def test_stages(epoch: int, steps: int) -> None:
    torch.manual_seed(0)
    model = Recorded(epoch)
    with_division(model)
    model.cotrain_step(1, batch([0, 1, 2]), batch([8, 9]), True, batch([14, 15]))
    assert len(model.steps) == steps


def test_stale_clean_and_zero_proxy_labels() -> None:
    torch.manual_seed(0)
    model = Recorded(5)
    with_division(model)
    model.cotrain_step(1, batch([0, 1, 2]), batch([8, 9]), False, batch([14, 15]))
    assert [c["index"] for c in model.labelled] == [[14, 15]]  # the stale clean batch does not train
    # an untrained network predicts about 1/B: every proxy label is 0, and the step still runs
    assert torch.equal(model.labelled[0]["labels"], torch.zeros(2))
    assert len(model.steps) == 2 and float(model.steps[1]["loss"]) == 0.0


def test_split_is_per_network_and_the_warmup_rule_allows_ties() -> None:
    model = SPS(30, backbone)
    prob = torch.tensor([[0.9, 0.55, 0.1], [0.2, 0.7, 0.58]])
    assert model.split(prob).tolist() == [[STRICT, CLEAN, NOISY], [NOISY, STRICT, CLEAN]]
    keys = ("rsum", "i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10")
    model.note_warmup_validation(0, dict(zip(keys, [10.0, 1, 2, 3, 1, 1, 2])))
    model.note_warmup_validation(1, dict(zip(keys, [12.0, 1, 2, 3, 1, 1, 2])))  # ties: kept
    assert model.warmup_best["epoch"] == 1
    model.note_warmup_validation(2, dict(zip(keys, [30.0, 5, 5, 5, 5, 5, 1])))  # t2i_r10 lower
    assert model.warmup_best["epoch"] == 1
    assert model.warmup_maxima["rsum"] == 12.0  # SPS moves the maxima only with a kept epoch
