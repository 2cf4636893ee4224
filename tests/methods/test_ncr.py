"""NCR/LNC method pieces without a Trainer (ncl.methods.ncr; spec 4.2.6-4.2.7, LNC Eq. 4-11)."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from callbacks.ncr_fakes import SgrafPairs

from ncl.callbacks.refinement import MomentumRefinement
from ncl.data.datasets import collate
from ncl.division import memorization_prediction, mr_prediction
from ncl.errors import ConfigError
from ncl.losses import ncr_soft_margins, psi4_boundary, soft_margin_triplet_loss, triplet_loss
from ncl.methods.ncr import NCR
from ncl.models.sgraf import SGRAF
from ncl.division.co_divide import Division, abandon_mask


def _backbone(vocab: int) -> SGRAF:
    return SGRAF(vocab, img_dim=16, num_regions=6, word_dim=8, embed_size=16, sim_dim=8,
                 dropout=0.0, similarity_strategy="chunked")


def _model(**kwargs) -> NCR:  # noqa: ANN003 - test helper forwarding switches
    torch.manual_seed(0)
    return NCR(30, _backbone, **kwargs)


def _batch(indices: list[int]) -> dict[str, torch.Tensor]:
    pairs = SgrafPairs(20)
    return collate([pairs[i] for i in indices])


def _with_division(model: NCR, prob_a: float, prob_b: float, n: int = 20) -> None:
    prob = torch.tensor([[prob_a] * n, [prob_b] * n])
    model.division = Division(0, torch.zeros(2, n), prob, prob > 0.5)


def _margins(model: NCR, target: torch.Tensor, div: float | None) -> torch.Tensor:
    """The soft margins the model's ``soft_loss`` uses for ``target``."""
    hp = model.hparams
    return ncr_soft_margins(target, hp.ncr_margin_mode, hp.margin, hp.soft_margin,
                            hp.soft_margin_base, div)


def _eval_prediction(net: torch.nn.Module, batch: dict) -> torch.Tensor:
    net.eval()
    with torch.no_grad():
        p = memorization_prediction(net(batch["images"], batch["tokens"], batch["lengths"]))
    net.train()
    return p


def test_lr_factor_skips_warmup_epochs() -> None:
    model = _model(warmup_epochs=5, lr_update=30)
    assert [model.lr_factor(e) for e in (0, 4, 5, 34)] == [1.0, 1.0, 1.0, 1.0]
    assert model.lr_factor(35) == pytest.approx(0.1)
    assert model.lr_factor(65) == pytest.approx(0.01)
    assert _model(warmup_epochs=10, lr_update=10).lr_factor(20) == pytest.approx(0.1)


def test_psi4_boundary_is_midpoint_of_subset_means() -> None:
    assert psi4_boundary(torch.tensor([0.9, 0.7]), torch.tensor([0.1, 0.3])) == pytest.approx(0.5)
    assert psi4_boundary(torch.tensor([[0.6, 1.0]]), None) == pytest.approx(0.8)


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"warmup_epochs": -1}, "warmup_epochs"), ({"margin": 0.0}, "margin"),
    ({"soft_margin_base": 1.0}, "soft_margin_base"), ({"unlabelled_start": -2}, "unlabelled_start"),
    ({"mr_momentum": 2.0}, "mr_momentum"), ({"mr_weight": -1.0}, "mr_weight"),
    ({"abandon_fraction": 1.5}, "abandon_fraction"), ({"p_threshold": 1.5}, "p_threshold"),
    ({"lr_update": 0}, "lr_update"),
])
def test_bad_switches_raise_config_error(kwargs: dict, name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        _model(**kwargs)


def test_callbacks_attached_by_the_method() -> None:
    names = [type(cb).__name__ for cb in _model().configure_callbacks()]
    assert names == ["GMMDivision", "Diagnostics"]
    names = [type(cb).__name__ for cb in _model(momentum_regularization=True, diagnostics=False)
             .configure_callbacks()]
    assert names == ["GMMDivision", "MomentumRefinement"]


def test_network_trains_on_its_peers_clean_probability() -> None:
    model = _model()
    _with_division(model, prob_a=0.0, prob_b=1.0)
    lab = _batch([0, 3, 5, 7, 9])
    target_a, _ = model.rectified_targets(0, lab, None)  # A uses w^B = 1: y = 1
    torch.testing.assert_close(target_a, torch.ones(5))
    target_b, _ = model.rectified_targets(1, lab, None)  # B uses w^A = 0: y = P^B
    torch.testing.assert_close(target_b, _eval_prediction(model.nets[1], lab))


def test_official_2023_targets_broadcast_and_unlabelled_average() -> None:
    model = _model(ncr_margin_mode="official_2023")
    _with_division(model, prob_a=0.25, prob_b=0.25)
    lab, unl = _batch([1, 2, 4, 6]), _batch([10, 11, 12])
    target_l, target_u = model.rectified_targets(0, lab, unl)
    p = _eval_prediction(model.nets[0], lab)
    torch.testing.assert_close(target_l, (0.25 + 0.75 * p).expand(4, 4))  # T_ij = w_i + (1-w_i) P_j
    ref_u = (_eval_prediction(model.nets[0], unl) + _eval_prediction(model.nets[1], unl)) / 2
    torch.testing.assert_close(target_u, ref_u)
    assert _margins(model, target_u, None).shape == (3, 1)  # the code's image-indexed column
    assert _margins(model, target_l, None).shape == (4, 4)


@pytest.mark.parametrize(("kind", "expected"), [
    ("linear", 0.2 * 0.5), ("exponential", 0.2 * (10 ** 0.5 - 1) / 9),
    ("sin", 0.2 * (math.sin(math.pi * 0.5 - math.pi / 2) / 2 + 0.5)),
    ("sigmoid", 0.2 / (1 + math.exp(-(10 + 100 * (0.3 - 0.5)) * (0.5 - 0.3)))),
])
def test_margins_use_the_configured_psi(kind: str, expected: float) -> None:
    model = _model(soft_margin=kind)
    out = _margins(model, torch.tensor([0.5, 0.5]), div=0.3 if kind == "sigmoid" else None)
    torch.testing.assert_close(out, torch.full((2,), expected))


class _Recorder:
    """Replaces ``optimize``/``log_net``/``unlabelled_loss_on`` of a model (no Trainer)."""

    def __init__(self, model: NCR, unlabelled_on: bool) -> None:
        self.losses: list[tuple[int, torch.Tensor]] = []
        model.optimize = lambda k, loss: self.losses.append((k, loss.detach()))
        model.log_net = lambda *args, **kwargs: None
        model.unlabelled_loss_on = lambda: unlabelled_on


def _expected_soft_loss(model: NCR, k: int, batch: dict, target: torch.Tensor) -> torch.Tensor:
    sims = model.nets[k](batch["images"], batch["tokens"], batch["lengths"])
    margins = 0.2 * (10 ** target - 1) / 9
    return soft_margin_triplet_loss(sims, margins, "per_sample", "hardest").sum().detach()


@pytest.mark.parametrize(("update", "unlabelled_on", "n_steps"), [
    ("separate_step", True, 2), ("summed", True, 1), ("separate_step", False, 1)])
def test_cotrain_step_optimizer_steps(update: str, unlabelled_on: bool, n_steps: int) -> None:
    model = _model(unlabelled_update=update)
    model.train()
    _with_division(model, prob_a=0.6, prob_b=0.8)
    rec = _Recorder(model, unlabelled_on)
    lab, unl = _batch([0, 1, 2, 3, 4, 5]), _batch([6, 7, 8, 9])
    # Before the step: its train-mode forwards move BatchNorm's running statistics.
    target_l, target_u = model.rectified_targets(1, lab, unl)
    model.cotrain_step(1, lab, unl)
    assert [k for k, _ in rec.losses] == [1] * n_steps
    loss_l = _expected_soft_loss(model, 1, lab, target_l)
    loss_u = _expected_soft_loss(model, 1, unl, target_u)
    if n_steps == 2:
        torch.testing.assert_close(rec.losses[0][1], loss_l)
        torch.testing.assert_close(rec.losses[1][1], loss_u)
    elif unlabelled_on:
        torch.testing.assert_close(rec.losses[0][1], loss_l + loss_u)
    else:
        torch.testing.assert_close(rec.losses[0][1], loss_l)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_warmup_step_with_momentum_regularisation(reduction: str) -> None:
    model = _model(momentum_regularization=True, mr_momentum=0.75, mr_weight=2.0,
                   mr_reduction=reduction)
    model.train()
    model.momentum_targets.reset(20)
    rec = _Recorder(model, False)
    batch = _batch([2, 5, 11, 13, 17])
    output = model.warmup_step(0, batch)
    MomentumRefinement().on_train_batch_end(None, model, output, batch, 0)  # after the step
    sims = model.nets[0](batch["images"], batch["tokens"], batch["lengths"])
    pred = memorization_prediction(sims).detach()
    mr = (pred - 1) ** 2  # gamma^0 = 1
    expected = triplet_loss(sims, 0.2, "mean").sum().detach() + 2.0 * (
        mr.sum() if reduction == "sum" else mr.mean())
    torch.testing.assert_close(rec.losses[0][1], expected)
    gamma = model.momentum_targets.values
    torch.testing.assert_close(gamma[0, [2, 5, 11, 13, 17]], 0.75 + 0.25 * pred)
    assert torch.equal(gamma[1], torch.ones(20))  # B's targets untouched


@pytest.mark.parametrize("form", ["hinge", "linear"])
def test_mr_prediction_values_and_detached_normaliser(form: str) -> None:
    g = torch.Generator().manual_seed(3)
    sims = (torch.rand(12, 12, generator=g) * 0.2 + torch.eye(12) * 0.1).requires_grad_()
    ref = memorization_prediction(sims, 0.2, form)
    got = mr_prediction(sims, 0.2, form, detach_normalizer=True)
    torch.testing.assert_close(got, ref)  # the same values, only the gradient differs
    inside = ((ref > 0) & (ref < 1)).nonzero().flatten()
    assert inside.numel() > 0
    i = int(inside[0])  # a pair whose P is clipped neither at 0 nor at 1
    grad = torch.autograd.grad(got[i], sims)[0]
    own = torch.zeros(12, 12, dtype=torch.bool)
    own[i, :], own[:, i] = True, True
    assert float(grad[~own].abs().max()) == 0.0  # tau is constant: only pair i's row/column
    through = torch.autograd.grad(mr_prediction(sims, 0.2, form, False)[i], sims)[0]
    assert float(through[~own].abs().max()) > 0.0  # through tau the top pairs move too


# A fixed batch for the margin modes (rows = images, columns = captions; diagonal 0.9, 0.7,
# 0.6), the peer's clean probabilities w and the predictions P (both networks), with the
# linear Psi (margin = 0.2 * target) so that every loss below is a hand sum of hinges.
_S = torch.tensor([[0.9, 0.5, 0.2], [0.6, 0.7, 0.4], [0.3, 0.8, 0.6]])
_W = torch.tensor([0.0, 0.0, 0.5])
_P = torch.tensor([0.5, 0.0, 0.5])
# Labelled loss, summed hardest negatives, sum_i max_j C_s[i, j] + sum_j max_i C_im[i, j]:
# * per_sample: y = w + (1-w) P = (0.5, 0, 0.75), a = (0.1, 0, 0.15) per anchor:
#   C_s row 2: 0.15 + 0.8 - 0.6 = 0.35 (rows 0, 1: 0); C_im column 1: 0 + 0.8 - 0.7 = 0.1 -> 0.45
# * official_2022_p0: T = w + (1-w) P_0 = (0.5, 0.5, 0.75), a (3, 1) column by image row:
#   C_s row 2: 0.35; C_im[2, 1] = 0.15 + 0.8 - 0.7 = 0.25 (the negative image's margin) -> 0.6
# * official_2023: T_ij = w_i + (1-w_i) P_j, M = 0.2 T = [[.1, 0, .1], [.1, 0, .1], [.15, .1, .15]]:
#   C_s[2, 1] = 0.1 + 0.8 - 0.6 = 0.3; C_im[2, 1] = 0.1 + 0.8 - 0.7 = 0.2 -> 0.5
# * official_2021_fixed: margin 0.2 everywhere: C_s row 1: 0.2 + 0.6 - 0.7 = 0.1, row 2: 0.4;
#   C_im column 1: 0.2 + 0.8 - 0.7 = 0.3 -> 0.8
# Unlabelled loss, y = (P^A + P^B) / 2 = P, a = 0.2 P = (0.1, 0, 0.1):
# * per_sample: C_s[2, 1] = 0.1 + 0.8 - 0.6 = 0.3; C_im column 1: 0 + 0.8 - 0.7 = 0.1 -> 0.4
# * the code's (3, 1) column (2022, 2023): C_s 0.3; C_im[2, 1] = 0.1 + 0.8 - 0.7 = 0.2 -> 0.5
# * official_2021_fixed: 0.8 as above.
_HAND = {"per_sample": (0.45, 0.4), "official_2022_p0": (0.6, 0.5),
         "official_2023": (0.5, 0.5), "official_2021_fixed": (0.8, 0.8)}


@pytest.mark.parametrize("mode", sorted(_HAND))
def test_margin_modes_match_hand_computed_losses(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(ncr_margin_mode=mode, soft_margin="linear")
    model.division = Division(0, torch.zeros(2, 20), torch.stack([_W.repeat(7)[:20]] * 2),
                              torch.ones(2, 20, dtype=torch.bool))
    monkeypatch.setattr("ncl.methods.ncr.forward_batch", lambda net, batch: _S.clone())
    monkeypatch.setattr("ncl.division.co_divide.forward_batch", lambda net, batch: _S.clone())
    monkeypatch.setattr("ncl.division.co_divide.memorization_prediction",  # co_rectify's P
                        lambda *args, **kwargs: _P.clone())
    rec = _Recorder(model, unlabelled_on=True)
    model.cotrain_step(0, _batch([0, 1, 2]), _batch([3, 4, 5]))  # w of pairs 0, 1, 2 = _W
    (_, loss_l), (_, loss_u) = rec.losses  # separate steps: labelled, then unlabelled
    expected_l, expected_u = _HAND[mode]
    torch.testing.assert_close(loss_l, torch.tensor(expected_l))
    torch.testing.assert_close(loss_u, torch.tensor(expected_u))


def test_p0_targets_use_the_first_prediction_for_every_pair() -> None:
    model = _model(ncr_margin_mode="official_2022_p0")
    _with_division(model, prob_a=0.25, prob_b=0.25)
    lab = _batch([1, 2, 4, 6])
    target_l, _ = model.rectified_targets(0, lab, None)
    p = _eval_prediction(model.nets[0], lab)
    torch.testing.assert_close(target_l, (0.25 + 0.75 * p[0]).expand(4))  # T_i = w_i + (1-w_i) P_0
    assert _margins(model, target_l, None).shape == (4, 1)  # the code's image-indexed column


def test_fixed_mode_ignores_targets_and_soft_margin_function() -> None:
    model = _model(ncr_margin_mode="official_2021_fixed", soft_margin="sigmoid", margin=0.3)
    margins = _margins(model, torch.tensor([0.0, 0.4, 1.0]), div=None)  # sigmoid needs no div here
    torch.testing.assert_close(margins, torch.full((3, 1), 0.3))


def test_warmup_epochs_are_kept_out_of_selection_only_on_request() -> None:
    model = _model(warmup_epochs=2)
    assert [model.is_warmup_epoch(e) for e in range(4)] == [True, True, False, False]
    assert not model.hparams.select_warmup  # the base's default, which the configs keep
    from ncl.compose import merged

    for config in ("ncr_sgr_f30k", "ncr_sgr_coco", "ncr_sgr_cc152k", "lnc_sgr_f30k",
                   "lnc_sgr_coco", "lnc_sgr_cc152k", "lnc_rna_sgr_f30k"):
        stated = merged(Path(__file__).resolve().parents[2] / "configs" / f"{config}.yaml")
        assert not stated["model"]["init_args"].get("select_warmup", False), config


def test_collapsed_division_is_one_clear_error() -> None:
    from ncl.errors import TrainingError
    from ncl.training.plans import check_cotraining_possible

    clean = torch.zeros(2, 305, dtype=torch.bool)
    clean[0, 7] = True  # network A: one clean pair, B: none -> no batch for either
    with pytest.raises(TrainingError, match=r"epoch 3: the co-divide called 1, 0 of 305 pairs"):
        check_cotraining_possible(clean, 3)
    clean[1, :2] = True  # B has a batch of two: co-training can go on
    check_cotraining_possible(clean, 3)


def _values(n: int = 20) -> torch.Tensor:
    """(2, N) losses: the first half of the pairs small for both networks."""
    return torch.cat([torch.full((2, n // 2), 0.1), torch.full((2, n // 2), 0.9)], 1) + \
        torch.linspace(0, 0.01, n)


def test_division_protocol_co_divide_and_abandon_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(warmup_epochs=3, noise_abandon=True, abandon_fraction=0.5)
    assert [model.division_kind(e) for e in range(5)] == [None, "abandon", "abandon", "divide", "divide"]
    assert not model.division_due(0) and model.division_due(1) and model.division_due(3)
    prob = torch.cat([torch.full((2, 10), 0.9), torch.full((2, 10), 0.1)], 1)
    model.accept_division(1, _values(), prob)  # warm-up: the abandon draw
    division = model.division
    assert division.epoch == 1 and torch.equal(division.losses, _values())
    assert torch.equal(division.keep, abandon_mask(prob, 1, model.plan_seed, 0.5))
    assert int((~division.keep).sum()) == 5 and bool(division.keep[:10].all())
    assert not model.division_due(1) and model.division_due(2)
    model.accept_division(3, _values(), prob)  # co-training: a co-divide, no keep mask
    assert model.division.keep is None
    assert model.division.clean[:, :10].all() and not model.division.clean[:, 10:].any()
    assert not model.division_due(3)
    monkeypatch.setattr(NCR, "trainer", property(lambda self: None))
    monkeypatch.setattr("ncl.methods.ncr.retrieval_data", lambda trainer, name: SimpleNamespace(batch_size=16))
    spec, gmm = model.division_pass(3)
    assert spec.nets == (0, 1) and spec.per_net_shuffle and spec.seed == model.plan_seed
    assert (spec.batch_size, spec.shuffle, gmm.column, gmm.seed) == (16, True, 0, 0)


def test_epoch_diagnostics_of_a_co_divide_and_of_lnc_warmup() -> None:
    model = _model(warmup_epochs=1, momentum_regularization=True)
    assert model.display_name == "LNC" and _model().display_name == "NCR"
    model.momentum_targets.reset(20)
    warm = model.epoch_diagnostics(0, None)
    assert warm.losses is None and not warm.scalars
    assert [v.title for v in warm.labels] == [f"momentum targets gamma of network {n} (LNC Eq. 5)"
                                             for n in ("A", "B")]
    prob = torch.cat([torch.full((2, 10), 0.9), torch.full((2, 10), 0.1)], 1)
    model.accept_division(1, _values(), prob)
    truth = torch.arange(20) < 12
    diag = model.epoch_diagnostics(1, truth)
    assert diag.scalars["division/A/clean"] == 10.0 and "division/B/f1" in diag.scalars
    assert sorted(diag.detection) == ["A", "B"] and torch.equal(diag.detection["A"], prob[0] > 0.5)
    assert diag.losses.title.startswith("co-divide: ") and torch.equal(diag.losses.losses["B"], _values()[1])
    assert len(diag.labels) == 2  # w of A and B; no momentum targets after the warm-up
    assert model.epoch_diagnostics(2, truth).losses is None  # no division made for epoch 2
