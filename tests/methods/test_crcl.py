"""CRCL method pieces without a Trainer (ncl.methods.crcl; spec 4.4, CRCL Eq. 6-12)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from callbacks.ncr_fakes import SgrafPairs

from ncl.data.datasets import collate
from ncl.division import filter_confident_noise
from ncl.errors import ConfigError
from ncl.losses import active_complementary_loss, average_matching_probability
from ncl.methods.crcl import CRCL, ESTIMATE_STREAM, crcl_optimizer
from ncl.models.sgraf import SGRAF
from ncl.training.passes import deal_batches, pass_order


def _backbone(vocab: int) -> SGRAF:
    return SGRAF(vocab, img_dim=16, num_regions=6, word_dim=8, embed_size=16, sim_dim=8,
                 dropout=0.0, similarity_strategy="chunked")


def _model(n: int = 20, **kwargs) -> CRCL:  # noqa: ANN003 - test helper forwarding switches
    torch.manual_seed(0)
    model = CRCL(30, _backbone, **kwargs)
    model._training_seed = 7
    model.labels.reset(n)
    return model


def _batch(indices: list[int]) -> dict[str, torch.Tensor]:
    pairs = SgrafPairs(20)
    return collate([pairs[i] for i in indices])


def _at_epoch(monkeypatch: pytest.MonkeyPatch, epoch: int) -> None:
    monkeypatch.setattr(CRCL, "current_epoch", property(lambda self: epoch))


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"pieces": []}, "pieces"), ({"pieces": [2, 0]}, "pieces"), ({"pieces": [1.5]}, "pieces"),
    ({"freeze_epochs": -1}, "freeze_epochs"), ({"rule": "paper", "freeze_epochs": 0}, "freeze_epochs"),
    ({"tau": 0.0}, "tau"), ({"weight": -1.0}, "weight"), ({"q": 1.5}, "q"),
    ({"momentum": 1.2}, "momentum"), ({"threshold": -0.1}, "threshold"),
    ({"estimate_batch_size": 1}, "estimate_batch_size"), ({"lr_update": 0}, "lr_update"),
])
def test_bad_options_raise_config_error_naming_the_option(kwargs: dict, name: str) -> None:
    with pytest.raises(ConfigError, match=f"model.{name}"):
        CRCL(30, _backbone, **kwargs)


def test_defaults_are_the_official_ones() -> None:
    model = _model()
    hp = model.hparams
    assert (hp.tau, hp.weight, hp.q, hp.form, hp.rule) == (0.05, 5.0, None, "official", "official")
    assert (hp.momentum, hp.threshold, hp.freeze_epochs, hp.lr_update) == (0.8, 0.1, 2, 15)
    assert model.schedule.lengths == (7, 7, 7, 32) and model.schedule.total_epochs == 53
    assert len(model.nets) == 1 and hp.selection == "all"
    opt = crcl_optimizer(model.net.parameters())
    assert isinstance(opt, torch.optim.AdamW)
    assert opt.defaults["lr"] == 5e-4 and opt.defaults["weight_decay"] == 0.01
    names = [type(cb).__name__ for cb in model.configure_callbacks()]
    # the method's own callbacks, then the base's Diagnostics (it acts at an epoch's first batch
    # only, so its place does not matter)
    assert names == ["SelfRefining", "MomentumRefinement", "Diagnostics"]
    assert [type(cb).__name__ for cb in _model(diagnostics=False).configure_callbacks()] == [
        "SelfRefining", "MomentumRefinement"]
    assert model.configure_callbacks()[0].schedule.lengths == (7, 7, 7, 32)
    assert model.refinement_when() == "step" and _model(rule="paper").refinement_when() == "epoch"
    # base options arrive through **kwargs and are saved with the others
    assert (hp.grad_clip, hp.eval_shard_size) == (2.0, 1000)
    assert CRCL(30, _backbone, grad_clip=0.5).hparams.grad_clip == 0.5


def test_training_step_is_acl_with_the_corrected_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(pieces=[4, 4], freeze_epochs=1)
    monkeypatch.setattr(model, "log_train", lambda *a, **k: None)
    model.labels.values[0, :4] = torch.tensor([1.0, 0.05, 0.5, 0.0])
    batch = _batch([0, 1, 2, 3])
    _at_epoch(monkeypatch, 2)  # piece 0, past the freeze: momentum with the step's estimate
    out = model.training_step(batch, 0)
    sims = model.net(batch["images"], batch["tokens"], batch["lengths"])
    p = average_matching_probability(sims, 0.05)
    y = 0.8 * torch.tensor([1.0, 0.05, 0.5, 0.0]) + 0.2 * p
    y_hat = torch.where(y < 0.1, torch.zeros_like(y), y)
    expected = active_complementary_loss(sims, y_hat, 0.05, 5.0).mean()
    assert torch.allclose(out["loss"], expected, atol=1e-6)
    row, index, stored = out["refine"]
    assert row == 0 and index.tolist() == [0, 1, 2, 3] and torch.allclose(stored, y_hat)
    assert model.labels.values[0, 1] == pytest.approx(0.05)  # written by the callback, not here
    model.refinement_table().scatter(row, index, stored, model.refinement_rule())
    assert torch.allclose(model.labels.values[0, :4], y_hat)


def test_official_rule_freezes_then_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(pieces=[3, 3], freeze_epochs=2)
    index = torch.tensor([0, 1])
    model.labels.values[0, :2] = torch.tensor([0.6, 0.05])
    p = torch.tensor([0.2, 0.9])
    _at_epoch(monkeypatch, 0)  # piece 0, frozen: the table's labels (filtered), written back
    y_hat, stored = model.loss_labels(index, p)
    assert y_hat.tolist() == pytest.approx([0.6, 0.0]) and stored.tolist() == pytest.approx([0.6, 0.0])
    _at_epoch(monkeypatch, 1)  # the last frozen epoch of piece 0 stores the raw estimate
    y_hat, stored = model.loss_labels(index, p)
    assert y_hat.tolist() == pytest.approx([0.6, 0.0]) and stored.tolist() == pytest.approx([0.2, 0.9])
    _at_epoch(monkeypatch, 2)
    y_hat, _ = model.loss_labels(index, p)
    assert y_hat.tolist() == pytest.approx([0.52, 0.22])
    for epoch in (3, 4):  # piece 1: frozen again, no special write
        _at_epoch(monkeypatch, epoch)
        y_hat, stored = model.loss_labels(index, p)
        assert y_hat.tolist() == pytest.approx([0.6, 0.0]) and torch.equal(stored, y_hat)


def test_prediction_rule_uses_the_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(rule="prediction")
    _at_epoch(monkeypatch, 0)
    p = torch.tensor([0.05, 0.7])
    y_hat, stored = model.loss_labels(torch.tensor([3, 4]), p)
    assert torch.equal(y_hat, p) and torch.equal(stored, p)


@pytest.mark.parametrize("threshold", [0.1, 0.0])
def test_confident_noise_threshold(monkeypatch: pytest.MonkeyPatch, threshold: float) -> None:
    model = _model(rule="paper", freeze_epochs=1, threshold=threshold)
    model.labels.values[0, :3] = torch.tensor([0.09, 0.1, 0.8])
    _at_epoch(monkeypatch, 0)
    y_hat, stored = model.loss_labels(torch.tensor([0, 1, 2]), None)
    assert stored is None
    first = 0.0 if threshold > 0 else 0.09
    assert y_hat.tolist() == pytest.approx([first, 0.1, 0.8])
    assert model.corrected_labels()[:3].tolist() == pytest.approx([first, 0.1, 0.8])


def test_paper_rule_updates_once_per_epoch_from_the_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(n=3, rule="paper", pieces=[3, 3], freeze_epochs=1)
    estimates = {1: torch.tensor([0.9, 0.05, 0.5]), 2: torch.tensor([0.5, 0.5, 0.0]),
                 4: torch.tensor([1.0, 0.0, 0.5])}

    def refine(epoch: int) -> bool:  # what MomentumRefinement does with the pass's values
        if not model.refinement_due(epoch):
            return False
        model.accept_refinement(epoch, estimates[epoch])
        return True

    assert not refine(0)  # frozen epoch: nothing to compute
    assert refine(1)  # piece 0, t = e_f + 1: reset to the estimate (Eq. 11)
    assert model.labels.values[0].tolist() == pytest.approx([0.9, 0.05, 0.5])
    assert not refine(1)  # already there (label_epoch)
    assert refine(2)  # momentum; the table keeps the unthresholded value
    assert model.labels.values[0].tolist() == pytest.approx([0.82, 0.14, 0.4])
    assert not refine(3)  # piece 1, frozen: the labels carry over
    assert refine(4)
    assert model.labels.values[0].tolist() == pytest.approx([0.856, 0.112, 0.42])
    assert model.label_epoch == 4
    assert not refine(6)  # past the schedule
    _at_epoch(monkeypatch, 4)
    y_hat, _ = model.loss_labels(torch.tensor([0, 1, 2]), None)
    assert y_hat.tolist() == pytest.approx([0.856, 0.112, 0.42])


def test_estimate_pass_is_one_shuffle_per_epoch_in_training_size_batches(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(rule="paper", freeze_epochs=1, estimate_batch_size=8)
    spec = model.refinement_pass(2)
    assert (spec.nets, spec.batch_size, spec.shuffle, spec.per_net_shuffle) == ((0,), 8, True, False)
    assert (spec.stream, spec.seed) == (ESTIMATE_STREAM, 7)
    order = pass_order(spec, 37, 2, 0)  # the batches of the estimate pass before issue 23
    assert np.array_equal(order, np.random.default_rng([7, 2, ESTIMATE_STREAM]).permutation(37))
    assert [len(b) for b in deal_batches(order[:33], 8)] == [8, 8, 8, 9]  # no batch of one
    batch = _batch([0, 1, 2, 3])
    sims = model.net(batch["images"], batch["tokens"], batch["lengths"])
    assert torch.equal(spec.fn(model.net, batch), average_matching_probability(sims, 0.05, "official"))
    default = _model(rule="paper", freeze_epochs=1)
    default._trainer = SimpleNamespace(datamodule=SimpleNamespace(batch_size=16))
    monkeypatch.setattr("ncl.methods.crcl.retrieval_data", lambda trainer, who: trainer.datamodule)
    assert default.refinement_pass(2).batch_size == 16


def test_epoch_diagnostics_report_the_corrected_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(n=4, pieces=[2, 2])
    model.labels.values[0] = torch.tensor([1.0, 0.05, 0.4, 0.9])
    monkeypatch.setattr("ncl.methods.base.RetrievalMethod.on_train_epoch_start", lambda self: None)
    _at_epoch(monkeypatch, 2)
    model.start_labels = {0: torch.ones(4), 1: torch.tensor([1.0, 1.0, 1.0, 0.0])}
    model.on_train_epoch_start()  # keeps what epoch 2 starts with, and epoch 1's
    assert sorted(model.start_labels) == [1, 2]
    truth = torch.tensor([True, False, False, True])
    diag = model.epoch_diagnostics(2, truth)
    assert diag.scalars["crcl/piece"] == 1 and diag.scalars["crcl/epoch_in_piece"] == 0
    assert diag.scalars["labels/flips"] == 3 and diag.scalars["labels/all/zero"] == 1
    assert diag.scalars["labels/noisy_recall"] == 1.0
    assert diag.detection["y_hat < 0.5"].tolist() == [True, False, False, True]
    assert torch.equal(diag.labels[0].values, torch.tensor([1.0, 0.0, 0.4, 0.9]))
    assert model.epoch_diagnostics(2, truth).scalars == diag.scalars  # no side effect
    assert not _model(n=4, diagnostics=False).epoch_diagnostics(0, None).scalars


def test_selection_and_training_state_round_trip() -> None:
    model = _model(pieces=[2, 2], selection="last_piece", freeze_epochs=1)
    model._trainer = SimpleNamespace(max_epochs=4)
    assert [model.selectable(e) for e in range(4)] == [False, False, True, True]
    model._trainer = SimpleNamespace(max_epochs=2)  # a run cut short: its last piece counts,
    assert [model.selectable(e) for e in range(2)] == [False, True]  # its warm-up does not
    model._trainer = None

    model.labels.values[0, 3] = 0.25
    model.label_epoch, model.start_labels = 5, {3: torch.zeros(20)}
    state = model.training_state()
    fresh = _model(pieces=[2, 2])
    fresh.load_training_state(state)
    assert torch.equal(fresh.labels.values, model.labels.values)
    assert fresh.label_epoch == 5 and torch.equal(fresh.start_labels[3], torch.zeros(20))
    old = {"labels": state["labels"], "label_epoch": 5, "initialised_piece": 1, "label_snapshot": None}
    fresh.load_training_state(old)  # a checkpoint of ncl before issue 23
    assert fresh.label_epoch == 5 and fresh.start_labels == {}
    assert filter_confident_noise(fresh.labels.values[0]).shape == (20,)


def test_warmup_is_the_frozen_epochs_of_the_first_piece_only() -> None:
    # pieces [3, 3] with e_f = 2: epochs 0-1 (piece 0, labels still all 1) are warm-up; the
    # frozen epochs 3-4 of piece 1 are not (the official code selects among them).
    model = _model(pieces=[3, 3], freeze_epochs=2)
    assert [model.is_warmup_epoch(e) for e in range(7)] == [True, True] + [False] * 5
    assert not model.hparams.select_warmup  # default: warm-up never becomes the best checkpoint
    assert not any(_model(pieces=[3, 3], freeze_epochs=0).is_warmup_epoch(e) for e in range(6))
