"""BiCro's method pieces without a Trainer (ncl.methods.bicro): one co-training step (labels from
the peer in eval mode, the unlabelled step before the labelled one), the division from fixed
pass values, the options."""

from __future__ import annotations

import pytest
import torch
from callbacks.ncr_fakes import SgrafPairs

from ncl.data.datasets import collate
from ncl.division.bicro import bicro_clean_probability, bicro_split
from ncl.division.bicro_labels import global_embeddings, labelled_soft_labels, unlabelled_soft_labels
from ncl.division.co_divide import Division
from ncl.errors import ConfigError, TrainingError
from ncl.losses.bicro import bicro_soft_triplet
from ncl.methods.bicro import BiCro, check_division_usable
from ncl.models.sgraf import SGRAF


def _backbone(vocab: int) -> SGRAF:
    return SGRAF(vocab, img_dim=16, num_regions=6, word_dim=8, embed_size=16, sim_dim=8,
                 dropout=0.0, similarity_strategy="chunked")


def _model(**kwargs) -> BiCro:  # noqa: ANN003 - switches
    torch.manual_seed(0)
    return BiCro(30, _backbone, **kwargs)


def _batch(indices: list[int]) -> dict[str, torch.Tensor]:
    pairs = SgrafPairs(40)
    return collate([pairs[i] for i in indices])


class _Recorder:
    """Replaces ``optimize``/``log_net``/``unlabelled_loss_on`` (no Trainer)."""

    def __init__(self, model: BiCro, unlabelled_on: bool) -> None:
        self.losses: list[tuple[int, torch.Tensor]] = []
        model.optimize = lambda k, loss: self.losses.append((k, loss.detach()))
        model.log_net = lambda *args, **kwargs: None
        model.unlabelled_loss_on = lambda: unlabelled_on


def _peer_labels(net: torch.nn.Module, lab: dict, unl: dict, floor: float | None, scatter: str
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The official ``predict`` of ``net`` (eval mode, no gradient), from the pure functions."""
    net.eval()
    with torch.no_grad():
        img, cap = net.encode_images(lab["images"]), net.encode_captions(lab["tokens"], lab["lengths"])
        sims = net.similarity(img, cap, lab["lengths"])
        img_g, cap_g = global_embeddings(img, cap, lab["lengths"])
        y_l, anchors = labelled_soft_labels(sims, img_g, cap_g, 0.2, floor, scatter)
        img_u, cap_u = net.encode_images(unl["images"]), net.encode_captions(unl["tokens"], unl["lengths"])
        img_gu, cap_gu = global_embeddings(img_u, cap_u, unl["lengths"])
        y_u = unlabelled_soft_labels(img_gu, cap_gu, img_g[anchors], cap_g[anchors], floor)
    net.train()
    return y_l, y_u


def _loss(net: torch.nn.Module, batch: dict, labels: torch.Tensor, mode: str = "official") -> torch.Tensor:
    sims = net(batch["images"], batch["tokens"], batch["lengths"])
    return bicro_soft_triplet(sims, labels, mode).sum().detach()


@pytest.mark.parametrize("unlabelled_on", [True, False])
def test_one_cotrain_step_labels_from_the_peer(unlabelled_on: bool) -> None:
    model = _model()
    model.train()
    rec = _Recorder(model, unlabelled_on)
    lab, unl = _batch(list(range(12))), _batch(list(range(20, 28)))
    y_l, y_u = _peer_labels(model.nets[0], lab, unl, 0.5, "official")  # net 1 trains, net 0 labels
    peer_before = [p.clone() for p in model.nets[0].parameters()]
    model.cotrain_step(1, lab, unl)
    expected = ([(1, _loss(model.nets[1], unl, y_u))] if unlabelled_on else []) \
        + [(1, _loss(model.nets[1], lab, y_l))]
    assert [k for k, _ in rec.losses] == [k for k, _ in expected]
    for (_, got), (_, want) in zip(rec.losses, expected):
        torch.testing.assert_close(got, want)
    assert all(torch.equal(a, b) for a, b in zip(peer_before, model.nets[0].parameters()))
    assert model.nets[0].training  # the peer's mode restored


def test_own_labels_would_differ() -> None:
    """The check above can fail: the network's own labels give another loss."""
    model = _model()
    model.train()
    rec = _Recorder(model, False)
    lab, unl = _batch(list(range(12))), _batch(list(range(20, 28)))
    own, _ = _peer_labels(model.nets[1], lab, unl, 0.5, "official")
    model.cotrain_step(1, lab, None)
    assert not torch.allclose(rec.losses[0][1], _loss(model.nets[1], lab, own))


def test_switches_reach_the_step() -> None:
    """``label_scatter``, ``caption_margin``, ``soft_label_floor`` and ``split_probability``
    (rectify: ``w + (1 - w) y`` with the peer's ``w``)."""
    lab, unl = _batch(list(range(12))), _batch(list(range(20, 28)))
    model = _model(label_scatter="aligned", caption_margin="anchor", soft_label_floor=None,
                   split_probability="rectify")
    model.train()
    w = torch.linspace(0.1, 0.9, 40, dtype=torch.float64)
    model.division = Division(3, torch.zeros(2, 40), torch.stack([w, 1 - w]),
                              torch.ones(2, 40, dtype=torch.bool))
    rec = _Recorder(model, False)
    y_l, _ = _peer_labels(model.nets[0], lab, unl, None, "aligned")
    model.cotrain_step(1, lab, None)
    target = (w[:12] + (1 - w[:12]) * y_l).clamp(0, 1)  # network 1 trains: its peer is 0
    torch.testing.assert_close(rec.losses[0][1], _loss(model.nets[1], lab, target.float(), "anchor"))


def test_division_from_fixed_pass_values() -> None:
    model = _model(fallback="sorted", clean_component="lower_mean")
    values = torch.rand(2, 50, generator=torch.Generator().manual_seed(2))
    model.accept_values(11, values)
    division = model.division
    assert division.epoch == 11 and torch.equal(division.losses, values)
    for k in range(2):
        prob = bicro_clean_probability(values[k], "lower_mean", "official")
        torch.testing.assert_close(division.prob[k], prob, equal_nan=True)
        assert torch.equal(division.clean[k], bicro_split(prob, 0.5, "sorted"))
    state = model.training_state()
    other = _model()
    other.load_training_state(state)
    assert torch.equal(other.division.clean, division.clean)


def test_division_due_only_after_warmup() -> None:
    model = _model(warmup_epochs=2)
    assert not model.division_due(1) and model.division_due(2)
    model.accept_values(2, torch.rand(2, 10, generator=torch.Generator().manual_seed(0)))
    assert not model.division_due(2) and model.division_due(3)


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"warmup_rate": 1.5}, "warmup_rate"), ({"soft_label_floor": -0.1}, "soft_label_floor"),
    ({"soft_margin": "sigmoid"}, "soft_margin"), ({"margin": 0.0}, "margin"),
    ({"p_threshold": 2.0}, "p_threshold")])
def test_bad_options_name_the_option(kwargs: dict, name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        _model(**kwargs)


def test_a_division_with_no_clean_batch_is_one_clear_error() -> None:
    clean = torch.zeros(2, 30, dtype=torch.bool)
    clean[0, 3] = True  # one pair is not a batch
    with pytest.raises(TrainingError, match="BiCro epoch 4: the division called 1, 0 of 30"):
        check_division_usable(clean, 4)
    clean[1, :2] = True
    check_division_usable(clean, 4)  # network A can train on B's two pairs
