"""L2RM.rematch_step's wiring on small fixed batches (issue 40, item 5), without a trainer: the
cost step learns against the queue as it was before the noisy batch is pushed (phase A before
B), the own-image mask of the transport forbids exactly the slots the noisy batch was just
pushed into, and ``mask_own_image: auto`` masks only when the data's noise ratio is not 0
(CC152K's data config has none). The network's inputs are recorded by a forward hook, the
key points are fixed, and the transport's mask is recorded on its way into the solver."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from callbacks.ncr_fakes import SgrafPairs
from helpers import write_vocab
from tiny_runs import TINY_SGRAF

import ncl.methods.l2rm as l2rm_module
import ncl.transport.cost as cost_module
from ncl.data.datamodule import PrecompDataModule
from ncl.data.datasets import collate
from ncl.methods.l2rm import L2RM
from ncl.models.sgraf import SGRAF

REPO = Path(__file__).resolve().parents[2]
B, Q = 4, 6
PAIRS = SgrafPairs(30)
CLEAN, NOISY, QUEUED = [0, 1, 2, 3], [12, 5, 17, 9], [20, 21, 22, 23, 24, 25]
#: The key points the cost step is given: clean images 2 and 0 written into queue slots 1 and 4.
SLOTS, POSITIONS = [1, 4], [2, 0]


def batch(indices: list[int]) -> dict[str, torch.Tensor]:
    return collate([PAIRS[i] for i in indices])


def rematch(monkeypatch: pytest.MonkeyPatch, data: object, mask_own_image: str = "auto") -> dict:
    """One step after the warm-up (epoch 1) on the clean pairs :data:`CLEAN` and the noisy
    pairs :data:`NOISY`, the queue holding the pairs :data:`QUEUED`. Returns what was seen:
    the queue before and after, every forward of the network (its images, train mode and
    output), the masks handed to the transport, the plans it returned and the logged values."""
    torch.manual_seed(0)
    model = L2RM(30, partial(SGRAF, **{**TINY_SGRAF, "dropout": 0.0}), warmup_epochs=1,
                 queue_length=Q, mask_own_image=mask_own_image)
    model.cost_net.materialize(B)
    queued = batch(QUEUED)
    model.queue.fill(queued["images"], queued["index"])
    model._training_seed = 0
    model._trainer = SimpleNamespace(current_epoch=1, global_rank=0, datamodule=data)
    seen: dict = {"before": (model.queue.features.clone(), model.queue.indices.clone()),
                  "forwards": [], "masks": [], "plans": [], "steps": []}
    model.net.register_forward_hook(lambda net, args, out: seen["forwards"].append(
        (args[0].detach().clone(), net.training, out.detach().clone())))
    monkeypatch.setattr(l2rm_module, "retrieval_data", lambda trainer, name: data)
    monkeypatch.setattr(l2rm_module, "rematch_accuracy", lambda *args: {})
    monkeypatch.setattr(l2rm_module, "draw_key_points", lambda *args: (torch.tensor(SLOTS),
                                                                       torch.tensor(POSITIONS)))
    solver = cost_module.partial_ot

    def recording_solver(cost, rho, reg, mask, *args):
        seen["masks"].append(None if mask is None else mask.clone())
        plan = solver(cost, rho, reg, mask, *args)
        seen["plans"].append(plan.plan.clone())
        return plan

    monkeypatch.setattr(cost_module, "partial_ot", recording_solver)
    model.optimizers = lambda: ("net optimiser", "cost optimiser")
    model.step_module = lambda opt, module, loss: seen["steps"].append((opt, module, float(loss)))
    model.log_train = lambda logs, batch_size: seen.update(logs={k: float(v) for k, v in logs.items()})
    model.training_step({"labelled": batch(CLEAN), "unlabelled": batch(NOISY)}, 0)
    seen["after"] = (model.queue.features.clone(), model.queue.indices.clone())
    seen["model"] = model
    return seen


def noisy_data(ratio: float) -> SimpleNamespace:
    return SimpleNamespace(noise_ratio=ratio)


def test_the_cost_step_learns_against_the_queue_before_the_push(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = rematch(monkeypatch, noisy_data(0.4))
    queue_before, index_before = seen["before"]
    clean, noisy = batch(CLEAN), batch(NOISY)
    # the network ran three times: the key points (eval mode), the clean batch, the queue
    assert [training for _, training, _ in seen["forwards"]] == [False, True, True]
    keys, _, key_sims = seen["forwards"][0]
    expected = queue_before.clone()
    for slot, position in zip(SLOTS, POSITIONS):
        expected[slot] = clean["images"][position]
    assert torch.equal(keys, expected)
    for image in noisy["images"]:  # none of the noisy batch's images in that queue
        assert not any(torch.equal(image, row) for row in keys)
    # the cost network starts at C = relu(1 - S): the key-point loss is sum_t (1 - S[slot_t, pos_t])
    want = sum(1.0 - float(key_sims[s, p]) for s, p in zip(SLOTS, POSITIONS))
    assert seen["logs"]["cost"] == pytest.approx(want, rel=1e-6)
    model = seen["model"]
    assert [(opt, module) for opt, module, _ in seen["steps"]] == [
        ("cost optimiser", model.cost_net), ("net optimiser", model.net)]
    # then the push (official FIFO): the noisy batch in slots 0..B-1, the oldest B dropped
    queue_after, index_after = seen["after"]
    assert torch.equal(queue_after, torch.cat([noisy["images"], queue_before[:Q - B]]))
    assert index_after.tolist() == NOISY + index_before[:Q - B].tolist()
    assert torch.equal(seen["forwards"][2][0], queue_after)  # the plan's queue is the pushed one


def test_the_own_image_mask_lines_up_with_the_pushed_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = rematch(monkeypatch, noisy_data(0.4))
    _, index_after = seen["after"]
    # caption b may not go back to the slot holding the image it came with: found by pair index
    own = index_after.reshape(Q, 1) == torch.tensor(NOISY).reshape(1, B)  # (Q, B)
    assert own.sum() == B
    (mask,), (plan,) = seen["masks"], seen["plans"]
    assert mask.shape == (Q, B) and torch.equal(mask, ~own)
    queue_images = seen["forwards"][2][0]
    noisy = batch(NOISY)
    for slot, caption in own.nonzero().tolist():
        assert torch.equal(queue_images[slot], noisy["images"][caption])
    assert bool((plan[own] == 0).all()) and bool((plan[~own] > 0).all())


@pytest.mark.parametrize(("choice", "ratio", "masked"), [
    ("auto", 0.0, False), ("auto", 0.2, True), ("on", 0.0, True), ("off", 0.4, False)])
def test_mask_own_image_rule(monkeypatch: pytest.MonkeyPatch, choice: str, ratio: float,
                             masked: bool) -> None:
    seen = rematch(monkeypatch, noisy_data(ratio), choice)
    (mask,), (plan,) = seen["masks"], seen["plans"]
    assert (mask is not None) == masked
    diagonal = plan[torch.arange(B), torch.arange(B)]
    assert bool((diagonal == 0).all()) == masked  # unmasked, the own slots receive mass too


def test_auto_is_off_on_cc152k_and_on_with_synthetic_noise(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The CC152K data config (real noise, nothing injected) as a DataModule: noise ratio 0,
    so ``auto`` leaves the own images unmasked; the same DataModule with injected noise masks."""
    args = yaml.safe_load((REPO / "configs" / "data" / "cc152k.yaml").read_text())["data"]["init_args"]
    (tmp_path / args["data_name"]).mkdir()
    write_vocab(tmp_path / "vocab" / f"{args['data_name']}_vocab.json", ["a", "dog"])
    cc152k = PrecompDataModule(**{**args, "data_root": str(tmp_path)})
    assert cc152k.noise_ratio == 0
    assert rematch(monkeypatch, cc152k)["masks"] == [None]
    noisy = PrecompDataModule(**{**args, "data_root": str(tmp_path), "noise_type": "caption",
                                 "noise_ratio": 0.2})
    (mask,) = rematch(monkeypatch, noisy)["masks"]
    assert mask is not None and int((~mask).sum()) == B
