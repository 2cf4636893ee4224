"""ReCon method pieces without a Trainer (ncl.methods.recon; paper Eq. 6-15)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from callbacks.ncr_fakes import SgrafPairs
from recon_fakes import fake_division_pass as _fake_pass

from ncl.data.datasets import collate
from ncl.division import gmm_clean_probability
from ncl.division.stats import three_way_stats
from ncl.errors import ConfigError
from ncl.losses import SUBSET_CLEAN, SUBSET_LOCAL, SUBSET_NOISY, triplet_loss
from ncl.losses.recon import cross_modal_relation_loss, intra_modal_relation_loss
from ncl.losses.recon_forward import RelationOptions, division_values, relation_forward
from ncl.methods.recon import ReCon
from ncl.models.sgraf import SGRAF
from ncl.training.passes import deal_batches, pass_order


def _backbone(vocab: int) -> SGRAF:
    return SGRAF(vocab, img_dim=16, num_regions=6, word_dim=8, embed_size=16, sim_dim=8,
                 dropout=0.0, similarity_strategy="chunked")


def _model(n: int = 20, **kwargs) -> ReCon:
    torch.manual_seed(0)
    model = ReCon(30, _backbone, **kwargs)
    model.pseudo_labels.reset(n)
    return model


def _batch(indices: list[int]) -> dict[str, torch.Tensor]:
    pairs = SgrafPairs(20)
    return collate([pairs[i] for i in indices])


def _at_epoch(monkeypatch: pytest.MonkeyPatch, epoch: int) -> None:
    monkeypatch.setattr(ReCon, "current_epoch", property(lambda self: epoch))


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"tau": 0.0}, "tau"), ({"xi": -1.0}, "xi"), ({"omega1": 1.5}, "omega1"),
    ({"omega2": -0.1}, "omega2"), ({"alpha": 0.0}, "alpha"), ({"beta": 2.0}, "beta"),
    ({"margin": 0.0}, "margin"), ({"warmup_epochs": -1}, "warmup_epochs"),
    ({"division_interval": 0}, "division_interval"),
    ({"division_batch_size": 1}, "division_batch_size"),
    ({"relation_temperature": 0.0}, "relation_temperature"), ({"lr_update": 0}, "lr_update"),
])
def test_bad_options_raise_config_error_naming_the_option(kwargs: dict, name: str) -> None:
    with pytest.raises(ConfigError, match=f"model.{name}"):
        ReCon(30, _backbone, **kwargs)


def test_defaults_are_the_papers() -> None:
    hp = _model().hparams
    assert (hp.warmup_epochs, hp.margin, hp.tau, hp.xi) == (5, 0.2, 0.1, 5.0)
    assert (hp.omega1, hp.omega2, hp.alpha, hp.beta) == (0.5, 0.5, 0.1, 0.6)
    assert (hp.score, hp.warmup_negatives, hp.xi_on_noisy, hp.pseudo_label_scope) == (
        "logits", "sum", False, "noisy")


class _PooledBackbone(torch.nn.Module):
    def similarity(self, img: torch.Tensor, cap: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        return img @ cap.T


def test_a_backbone_without_logits_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="model.score=logits"):
        ReCon(30, lambda v: _PooledBackbone())
    with pytest.raises(ConfigError, match="model.relation_features=inputs"):
        ReCon(30, lambda v: _PooledBackbone(), score="sigmoid", relation_features="inputs")


def test_warmup_epochs_are_the_first_eta() -> None:
    model = _model(warmup_epochs=2)
    assert [model.is_warmup_epoch(e) for e in range(4)] == [True, True, False, False]
    assert not model.hparams.select_warmup  # the base's default; the shipped config says true


def test_lr_schedule_counts_after_the_warmup_or_globally() -> None:
    after = _model(warmup_epochs=5, lr_update=30)
    assert [after.lr_factor(e) for e in (0, 4, 34, 35)] == pytest.approx([1, 1, 1, 0.1])
    whole = _model(warmup_epochs=5, lr_update=30, lr_schedule="global")
    assert [whole.lr_factor(e) for e in (29, 30)] == pytest.approx([1, 0.1])


def test_division_pass_is_one_shuffle_per_epoch_dealt_whole() -> None:
    model = _model(division_batch_size=8)
    spec, gmm = model.division_pass(2)
    assert (spec.nets, spec.batch_size, spec.stream, gmm.column, gmm.seed) == ((0,), 8, 31, 0, 0)
    one = deal_batches(pass_order(spec, 33, 2, 0), 8)
    assert [len(b) for b in one] == [8, 8, 8, 9]  # a last batch of one joins the previous
    assert sorted(np.concatenate(one).tolist()) == list(range(33))
    two = [deal_batches(pass_order(spec, 33, 2, 0), 8, rank, 2) for rank in (0, 1)]
    assert [b.tolist() for b in two[0] + two[1]] == [b.tolist() for b in one[0::2] + one[1::2]]
    assert pass_order(spec, 33, 3, 0).tolist() != pass_order(spec, 33, 2, 0).tolist()  # per epoch


def test_division_values_are_the_losses_of_the_batch() -> None:
    model = _model()
    batch = _batch([0, 3, 5, 7])
    options = RelationOptions()
    with torch.no_grad():
        values = division_values(options, 0.1)(model.net.eval(), batch)
        img = model.net.encode_images(batch["images"])
        cap = model.net.encode_captions(batch["tokens"], batch["lengths"])
        logits = model.net.similarity_logits(img, cap, batch["lengths"])
        cm = cross_modal_relation_loss(logits, None, 0.1)
        im = intra_modal_relation_loss(img, cap, batch["lengths"])
    assert values.shape == (4, 3)
    assert torch.allclose(values[:, 0], cm.loss) and torch.allclose(values[:, 1], im.loss)
    assert torch.allclose(values[:, 2], cm.probability)


def test_relation_features_inputs_read_regions_and_word_vectors() -> None:
    model = _model()
    batch = _batch([1, 2, 3])
    with torch.no_grad():
        _, base = relation_forward(model.net.eval(), batch, RelationOptions())
        _, inputs = relation_forward(model.net, batch, RelationOptions(features="inputs"))
        img = model.net.encode_images(batch["images"])
        cap = model.net.encode_captions(batch["tokens"], batch["lengths"])
        want = intra_modal_relation_loss(
            img, cap, batch["lengths"], region_features=batch["images"],
            word_features=model.net.txt_enc.embed(batch["tokens"]))
    assert torch.allclose(inputs.loss, want.loss) and not torch.allclose(inputs.loss, base.loss)


def _values(n: int, p: float) -> torch.Tensor:
    """Half clean (small l^CM), half noisy; L_IM 0 for the first two, large for the third."""
    cm = torch.tensor([0.1, 0.12, 0.11, 0.09] * (n // 8) + [3.0, 3.1, 2.9, 3.2] * (n // 8))
    im = torch.zeros(n)
    im[2] = 10.0
    return torch.stack([cm, im, torch.full((n,), p)], dim=1)


def test_a_division_every_interval_with_momentum(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(n=16, warmup_epochs=2, division_interval=2, beta=0.6)
    calls, divide = _fake_pass(model, monkeypatch, {2: _values(16, 0.2), 4: _values(16, 0.7)})
    assert not divide(1)  # warm-up
    assert divide(2)
    division = model.division
    assert division.epoch == 2
    assert division.clean_prob.tolist() == pytest.approx(
        gmm_clean_probability(_values(16, 0.2)[:, 0], seed=0).tolist())
    expected = [SUBSET_CLEAN] * 8 + [SUBSET_NOISY] * 8
    expected[2] = SUBSET_LOCAL  # L_IM 10: y^IM = log 11 / (1 + log 11) >= 0.5
    assert division.subset.tolist() == expected
    y_im = math.log(11) / (1 + math.log(11))
    assert division.penalty[2].item() == pytest.approx(math.exp(y_im / 0.1), rel=1e-5)
    assert division.labels[8:].tolist() == pytest.approx([0.2] * 8)  # first: y~ = p
    assert not divide(2) and not divide(3)  # made; not due
    assert divide(4)
    assert model.division.labels[8:].tolist() == pytest.approx([0.6 * 0.2 + 0.4 * 0.7] * 8)
    assert model.pseudo_labels.values[0, :8].tolist() == pytest.approx([0.2] * 8)  # D_c kept
    assert calls == [2, 4]

    state = model.training_state()
    fresh = _model(n=16, warmup_epochs=2, division_interval=2)
    fresh.load_training_state(state)
    assert fresh.division.epoch == 4 and torch.equal(fresh.division.subset, model.division.subset)
    assert torch.equal(fresh.pseudo_labels.values, model.pseudo_labels.values)
    assert not fresh.division_due(5) and fresh.division_due(6)


def test_a_missing_division_is_made_whatever_the_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(n=16, warmup_epochs=0, division_interval=3)
    _, divide = _fake_pass(model, monkeypatch, {1: _values(16, 0.5)})
    assert model.division_due(1) and divide(1)
    assert not model.division_due(2) and model.division_due(3)


def test_warmup_step_is_the_summed_triplet_on_logits(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(warmup_epochs=1)
    model.net.eval()
    _at_epoch(monkeypatch, 0)
    batch = _batch([0, 1, 2, 3])
    loss = model.training_step(batch, 0)
    with torch.no_grad():
        img = model.net.encode_images(batch["images"])
        cap = model.net.encode_captions(batch["tokens"], batch["lengths"])
        sims = model.net.similarity_logits(img, cap, batch["lengths"])
    assert loss.item() == pytest.approx(triplet_loss(sims, 0.2, "sum").mean().item(), rel=1e-5)


@pytest.mark.parametrize("penalty_source", ["division", "step"])
def test_relation_step_uses_the_division_of_each_pair(monkeypatch: pytest.MonkeyPatch,
                                                      penalty_source: str) -> None:
    model = _model(n=16, warmup_epochs=0, penalty_source=penalty_source)
    model.net.eval()
    _, divide = _fake_pass(model, monkeypatch, {0: _values(16, 0.3)})
    divide(0)  # GMMDivision's fallback at the start of epoch 0
    _at_epoch(monkeypatch, 0)
    index = [2, 0, 9, 1]  # local, clean, noisy, clean
    batch = _batch(index)
    loss = model.training_step(batch, 0)
    with torch.no_grad():
        sims, im = relation_forward(model.net, batch, model.relation)
        cm = cross_modal_relation_loss(sims, None, 0.1).loss
    if penalty_source == "division":
        penalty = model.division.penalty[2]
    else:
        log1p = math.log1p(im.loss[0].item())
        penalty = math.exp(log1p / (1 + log1p) / 0.1)
    per = [5 * cm[0] + im.loss[0] / penalty, 5 * cm[1] + im.loss[1], 0.3 * cm[2],
           5 * cm[3] + im.loss[3]]
    assert loss.item() == pytest.approx(float(sum(per)) / 4, rel=1e-4)


def test_three_way_stats_with_the_ground_truth(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(n=16, warmup_epochs=0)
    _, divide = _fake_pass(model, monkeypatch, {0: _values(16, 0.25)})
    divide(0)
    truth = torch.ones(16, dtype=torch.bool)
    truth[[2, 3, 12]] = False  # one local, one clean and one noisy pair are truly noisy
    stats = three_way_stats(model.division, truth)
    assert {k: stats[k] for k in ("division/clean", "division/local", "division/noisy")} == {
        "division/clean": 7.0, "division/local": 1.0, "division/noisy": 8.0}
    assert (stats["division/clean_true_noisy"], stats["division/local_true_noisy"],
            stats["division/noisy_true_noisy"]) == (1.0, 1.0, 1.0)
    assert stats["division/pseudo_label_mean"] == pytest.approx(0.25)
    assert stats["division/made_for_epoch"] == 0.0
    assert "division/clean_true_noisy" not in three_way_stats(model.division)


def test_epoch_diagnostics_of_the_division_in_effect(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(n=16, warmup_epochs=1, division_interval=2)
    assert model.epoch_diagnostics(0, None) == type(model.epoch_diagnostics(0, None))()
    _, divide = _fake_pass(model, monkeypatch, {1: _values(16, 0.25)})
    divide(1)
    truth = torch.ones(16, dtype=torch.bool)
    made = model.epoch_diagnostics(1, truth)
    assert made.scalars == three_way_stats(model.division, truth)
    assert torch.equal(made.detection["D_n"], model.division.subset != SUBSET_NOISY)
    assert torch.equal(made.losses.losses["net"], model.division.cm_loss)
    assert [v.title for v in made.labels] == ["ReCon final labels y_hat (Eq. 11)"]
    later = model.epoch_diagnostics(2, truth)  # still in effect, made for epoch 1
    assert later.losses is None and "D_n" in later.detection and later.labels
    assert model.display_name == "ReCon"
