"""ReCon under the official model file's switches (qxzha/ReCon ``model/ReCon.py`` at 2a40dcf):
the batch relations, the warm-up and the training step compared with by-hand computations of
that file's formulas (``tests/recon_by_hand.py``), on a fixed batch of a tiny SGRAF."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from callbacks.ncr_fakes import SgrafPairs
from recon_by_hand import info_nce_by_hand, relations_by_hand, train_batch_losses
from recon_fakes import fake_division_pass

from ncl.data.datasets import collate
from ncl.errors import ConfigError
from ncl.losses import SUBSET_NOISY
from ncl.methods.recon import ReCon
from ncl.models.sgraf import SGRAF
from ncl.models.sgraf_relations import batch_relations

OFFICIAL = {"rank_loss": "official", "relation_loss": "batch", "store_predictions": "step"}


def _model(module_name: str = "SGR", **kwargs) -> ReCon:
    torch.manual_seed(0)
    model = ReCon(30, lambda v: SGRAF(v, module_name, img_dim=16, num_regions=6, word_dim=8,
                                      embed_size=16, sim_dim=8, dropout=0.0,
                                      similarity_strategy="chunked"), **kwargs)
    model.pseudo_labels.reset(16)
    model.step_predictions.reset(16)
    return model.eval()


def _batch(indices: list[int]) -> dict[str, torch.Tensor]:
    pairs = SgrafPairs(20)
    return collate([pairs[i] for i in indices])


def _encode(model: ReCon, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    img = model.net.encode_images(batch["images"])
    cap = model.net.encode_captions(batch["tokens"], batch["lengths"])
    return img, cap, model.net.similarity_logits(img, cap, batch["lengths"])


def _divider(model: ReCon, monkeypatch: pytest.MonkeyPatch,
             passes: dict[int, torch.Tensor]) -> Callable[[int], bool]:
    """GMMDivision's work with the division pass replaced by ``passes[epoch]`` (``(N, 3)``)."""
    return fake_division_pass(model, monkeypatch, passes)[1]


def _values(p: float) -> torch.Tensor:
    """16 pairs: the first 8 clean (small l^CM, L_IM 0), the last 8 noisy; ``p`` everywhere."""
    cm = torch.tensor([0.1, 0.12, 0.11, 0.09] * 2 + [3.0, 3.1, 2.9, 3.2] * 2)
    return torch.stack([cm, torch.zeros(16), torch.full((16,), p)], dim=1)


def _at_epoch(monkeypatch: pytest.MonkeyPatch, epoch: int) -> None:
    monkeypatch.setattr(ReCon, "current_epoch", property(lambda self: epoch))


@pytest.mark.parametrize("module_name", ["SGR", "SAF"])
def test_batch_relations_are_the_published_forward_relation(module_name: str) -> None:
    model = _model(module_name)
    batch = _batch([0, 3, 5, 7, 11])
    with torch.no_grad():
        img, cap, _ = _encode(model, batch)
        r_v, r_t = batch_relations(model.net.sim_enc, img, cap, batch["lengths"])
        want_v, want_t = relations_by_hand(model.net.sim_enc, img, cap, batch["lengths"].tolist())
    assert r_v.shape == r_t.shape == (5, 5)
    assert torch.allclose(r_v, want_v, atol=1e-5) and torch.allclose(r_t, want_t, atol=1e-5)
    # squared differences make R^v symmetric; in R^t caption i's words query caption j's
    assert torch.allclose(r_v, r_v.t(), atol=1e-6) and not torch.allclose(r_t, r_t.t(), atol=1e-4)


def test_warmup_infonce_is_the_image_to_text_rows_only(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(warmup_epochs=1, warmup_loss="infonce", tau=0.05)
    _at_epoch(monkeypatch, 0)
    batch = _batch([0, 1, 2, 3])
    loss = model.training_step(batch, 0)
    with torch.no_grad():
        sims = _encode(model, batch)[2]
    assert loss.item() == pytest.approx(info_nce_by_hand(sims, 0.05)[0].mean().item(), rel=1e-5)


@pytest.mark.parametrize("module_name", ["SGR", "SAF"])
def test_training_step_is_train_batch(monkeypatch: pytest.MonkeyPatch, module_name: str) -> None:
    """``xi * loss_rank.mean() + relation_loss`` with the division's final labels as the
    targets; the relation loss (divided by B^2) is checked alone with ``xi = 0``."""
    index = [2, 0, 9, 1]  # clean, clean, noisy (pseudo-label 0.3), clean
    batch = _batch(index)
    losses = {}
    for xi in (5.0, 0.0):
        model = _model(module_name, warmup_epochs=0, xi=xi, **OFFICIAL)
        _divider(model, monkeypatch, {0: _values(0.3)})(0)
        _at_epoch(monkeypatch, 0)
        losses[xi] = model.training_step(batch, 0).item()
    targets = model.division.labels[index]
    assert targets.tolist() == pytest.approx([1.0, 1.0, 0.3, 1.0])
    with torch.no_grad():
        img, cap, sims = _encode(model, batch)
        r_v, r_t = relations_by_hand(model.net.sim_enc, img, cap, batch["lengths"].tolist())
        loss_rank, relation_loss, preds = train_batch_losses(sims, r_v, r_t, targets, 0.1)
    assert losses[0.0] == pytest.approx(relation_loss.item(), rel=1e-4)
    assert losses[5.0] == pytest.approx((5.0 * loss_rank.mean() + relation_loss).item(), rel=1e-5)
    # the predictions are stored for the batch's pairs, every step
    stored = model.step_predictions.values[0]
    assert stored[index].tolist() == pytest.approx(preds.tolist(), rel=1e-5)
    assert (stored[[3, 4, 10]] == -1).all()  # none stored


def test_the_next_division_reads_the_stored_predictions(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(warmup_epochs=0, **OFFICIAL)
    divide = _divider(model, monkeypatch, {0: _values(0.3), 1: _values(0.5)})
    divide(0)
    assert model.division.subset[9] == SUBSET_NOISY
    _at_epoch(monkeypatch, 0)
    model.training_step(_batch([2, 0, 9, 1]), 0)
    stored = model.step_predictions.values[0, 9].item()
    divide(1)
    pseudo = model.pseudo_labels.values[0]
    assert pseudo[9].item() == pytest.approx(0.6 * 0.3 + 0.4 * stored)  # the step's p
    assert pseudo[10].item() == pytest.approx(0.6 * 0.3 + 0.4 * 0.5)  # not stored: the pass's
    fresh = _model(warmup_epochs=0, **OFFICIAL)
    fresh.load_training_state(model.training_state())
    assert torch.equal(fresh.step_predictions.values, model.step_predictions.values)


def test_paper_reading_stores_nothing_and_reads_the_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(warmup_epochs=0)
    divide = _divider(model, monkeypatch, {0: _values(0.3), 1: _values(0.5)})
    divide(0)
    _at_epoch(monkeypatch, 0)
    model.training_step(_batch([2, 0, 9, 1]), 0)
    assert (model.step_predictions.values == -1).all()
    divide(1)
    assert model.pseudo_labels.values[0, 9].item() == pytest.approx(0.6 * 0.3 + 0.4 * 0.5)


@pytest.mark.parametrize("name", ["warmup_loss", "rank_loss", "relation_loss",
                                  "relation_text_proxy", "store_predictions"])
def test_a_bad_switch_is_one_error_naming_it(name: str) -> None:
    with pytest.raises(ConfigError, match=f"model.{name} must be one of"):
        ReCon(30, lambda v: SGRAF(v, img_dim=16, num_regions=6), **{name: "nonsense"})


def test_batch_relations_need_the_sgraf_head() -> None:
    class Pooled(torch.nn.Module):
        def similarity_logits(self, img: torch.Tensor, cap: torch.Tensor,
                              n: torch.Tensor) -> torch.Tensor:
            return img @ cap.T

    with pytest.raises(ConfigError, match="model.relation_loss=batch"):
        ReCon(30, lambda v: Pooled(), relation_loss="batch")
