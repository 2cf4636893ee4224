"""DECL's method-level rules without a trainer: the hardness counter (official and
after-warm-up), the batches the official loop would break on, the KL ramp, the option checks."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from torch import nn

from ncl.errors import ConfigError
from ncl.methods.decl import DECL, PRED_CLEAN, prediction_values
from ncl.models.sgraf import SGRAF
from tiny_runs import TINY_SGRAF

BACKBONE = partial(SGRAF, **TINY_SGRAF)


def decl(**options) -> DECL:
    return DECL(50, BACKBONE, **options)


def test_hardness_counter_official_and_after_warmup() -> None:
    official = decl(warmup_epochs=1)
    official.steps, official.main_steps = 4720, 0
    assert official.hardness_k(128, warmup=True) == 10  # warm-up steps count (spec 4.6.3)
    official.steps, official.main_steps = 5000, 280
    assert official.hardness_k(128, warmup=False) == 5
    after = decl(warmup_epochs=1, hardness_counts_warmup=False)
    after.steps, after.main_steps = 4720, 0
    assert after.hardness_k(128, warmup=True) == 128  # every negative (the zero diagonal too)
    after.steps, after.main_steps = 5000, 280
    assert after.hardness_k(128, warmup=False) == int(128 - 0.025 * 280)
    assert after.hardness_k(16, warmup=False) == 15  # k = 121 > B: B - 1
    actual = decl(hardness_batch_size=None)
    actual.steps = 100
    assert actual.hardness_k(16, warmup=True) == 13  # int(16 - 2.5)


def test_batches_the_official_loop_breaks_on() -> None:
    method = decl(mu=5)
    assert method.skips(1, warmup=True) and not method.skips(2, warmup=True)
    assert method.skips(5, warmup=False) and not method.skips(6, warmup=False)


def test_kl_weight_ramp() -> None:
    assert decl().kl_weight() == 1.0  # official: constant
    method = decl(kl_anneal_epochs=10)
    method.trainer = None  # current_epoch reads the trainer: give it one epoch number
    for epoch, want in ((0, 0.0), (5, 0.5), (10, 1.0), (30, 1.0)):
        type(method).current_epoch = property(lambda self, e=epoch: e)
        assert method.kl_weight() == want
    del type(method).current_epoch  # restore the LightningModule's property


@pytest.mark.parametrize(("option", "value"), [("mu", 0), ("tau", 0.0), ("lambda2", -0.1),
                                               ("hardness_batch_size", 1), ("warmup_epochs", -1),
                                               ("kl_anneal_epochs", 1.5),
                                               ("prediction_precision", "float16")])
def test_bad_options_name_themselves(option: str, value: float) -> None:
    with pytest.raises(ConfigError, match=f"model.{option}"):
        decl(**{option: value})


def test_backbone_without_raw_scores_is_refused() -> None:
    class Pooled(nn.Module):
        def __init__(self, vocab_size: int) -> None:
            super().__init__()
            self.layer = nn.Linear(2, 2)

    with pytest.raises(ConfigError, match="similarity_logits"):
        DECL(50, Pooled)


def test_prediction_table_is_training_state() -> None:
    method = decl()
    method.predictions.reset(7)
    method.accept_refinement(3, torch.arange(28, dtype=torch.float64).reshape(7, 4))
    method.steps, method.main_steps = 11, 4
    state = method.training_state()
    other = decl()
    other.load_training_state(state)
    assert other.prediction_epoch == 3 and (other.steps, other.main_steps) == (11, 4)
    assert torch.equal(other.predictions.values, method.predictions.values)
    assert other.predictions.values[:, 2].tolist() == [8.0, 9.0, 10.0, 11.0]


class FixedScores(nn.Module):
    """A stand-in backbone whose raw scores are a fixed (B, B) float32 matrix."""

    def __init__(self, scores: torch.Tensor) -> None:
        super().__init__()
        self.scores = scores

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        return images

    def encode_captions(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return tokens

    def similarity_logits(self, img: torch.Tensor, cap: torch.Tensor,
                          lengths: torch.Tensor) -> torch.Tensor:
        return self.scores


def test_prediction_pass_precision_switch() -> None:
    """The pass computes from float32 scores in model.prediction_precision: float32 (default,
    official) ties the saturated scores 10, 12 and 15 (tanh = 1) and takes the first column;
    float64 tells them apart (by hand: tests/losses/test_losses_decl.py, SATURATED)."""
    scores = torch.tensor([[10.0, 12.0, -20.0], [12.0, 15.0, -20.0], [-20.0, -20.0, 5.0]])
    net = FixedScores(scores)
    batch = {"images": torch.zeros(3, 2, 4), "tokens": torch.zeros(3, 2),
             "lengths": torch.tensor([2, 2, 2])}
    assert decl().hparams.prediction_precision == "float32"
    assert prediction_values(0.1)(net, batch)[:, PRED_CLEAN].tolist() == [1.0, 0.0, 1.0]
    assert prediction_values(0.1, "float64")(net, batch)[:, PRED_CLEAN].tolist() == [0.0, 1.0, 1.0]
    wide = decl(prediction_precision="float64", prediction_batch_size=3).refinement_pass(1)
    assert wide.fn(net, batch)[:, PRED_CLEAN].tolist() == [0.0, 1.0, 1.0]
