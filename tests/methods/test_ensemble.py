"""Ensembling checkpoints with :class:`ncl.methods.pretrained.Pretrained`: formats detected per
file, hierarchical averaging, DECL's evidence rule, and one clear error per bad input."""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from helpers_official import DECL_OPT, ncl_checkpoint, official_checkpoint
from ncl.errors import ConfigError, NclWarning
from ncl.evaluation.combine import evidence, hierarchical_mean, resolve_combine
from ncl.methods.pretrained import Pretrained, default_names
from ncl.models import SGRAF

DIMS = {"img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16, "sim_dim": 8}
VOCAB = 30
N_IMG, PER = 4, 2  # 4 images, 2 captions each


def _net(module_name: str = "SGR", seed: int = 0) -> SGRAF:
    torch.manual_seed(seed)
    return SGRAF(VOCAB, module_name=module_name, **DIMS).eval()


def _split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(N_IMG, 6, 16)`` images, ``(N_IMG*PER, 7)`` tokens and their lengths."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([7, 5, 3, 6, 2, 4, 7, 3])
    tokens = torch.randint(4, VOCAB, (N_IMG * PER, 7), generator=g) * (torch.arange(7) < lengths[:, None])
    return torch.randn(N_IMG, 6, 16, generator=g), tokens, lengths


def _similarities(method: Pretrained) -> dict[str, torch.Tensor]:
    """Run the method's evaluation steps over :func:`_split` and return its matrices."""
    images, tokens, lengths = _split()
    method.eval()
    split = SimpleNamespace(im_div=PER)  # what evaluate reads from the test split
    method._trainer = SimpleNamespace(testing=True, datamodule=SimpleNamespace(test_data=split))
    method.on_test_epoch_start()
    with torch.no_grad():
        method.test_step({"index": torch.arange(N_IMG), "images": images}, 0, 0)
        method.test_step({"index": torch.arange(N_IMG * PER), "tokens": tokens, "lengths": lengths}, 0, 1)
        return method.evaluate(["1k"]).similarities


def _direct(net: SGRAF, logits: bool = False) -> torch.Tensor:
    """``(N_IMG, N_IMG*PER)`` scores of ``net`` on :func:`_split`, computed in one call."""
    images, tokens, lengths = _split()
    with torch.no_grad():
        img, cap = net.encode_images(images), net.encode_captions(tokens, lengths)
        return (net.similarity_logits if logits else net.similarity)(img, cap, lengths)


# ---------------------------------------------------------------------- pure functions
def test_hierarchical_mean_weights_models_equally() -> None:
    a, b, r = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, 1.0]])
    means, overall = hierarchical_mean([[a, b], [r]])
    torch.testing.assert_close(means[0], torch.tensor([[0.5, 0.0]], dtype=torch.float64))
    assert means[1] is r  # a one-network model is its own matrix, not a copy
    # (mean(A, B) + R) / 2 = [0.25, 0.5], not (A + B + R) / 3 = [1/3, 1/3]
    torch.testing.assert_close(overall, torch.tensor([[0.25, 0.5]], dtype=torch.float64))
    with pytest.raises(ValueError, match="non-empty"):
        hierarchical_mean([[a], []])


def test_evidence_matches_hand_computation_and_keeps_precision() -> None:
    z = torch.tensor([[-3.0, 0.0, 0.5, 2.0]])
    expected = [math.exp(math.tanh(v) / 0.1) for v in (-3.0, 0.0, 0.5, 2.0)]
    got = evidence(z, tau=0.1)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, torch.tensor([expected], dtype=torch.float64), rtol=1e-12, atol=0)
    # Large raw scores: from z itself in float64 the evidence still orders 8 < 12 < 17 < 18.
    big = torch.tensor([[8.0, 12.0, 17.0, 18.0]])
    ordered = evidence(big)
    assert bool((ordered[0, 1:] > ordered[0, :-1]).all())
    # Inverting a float32 sigmoid instead (what we avoid) ties 17 and 18 at +inf.
    inverted = torch.logit(torch.sigmoid(big).double())
    assert torch.isinf(inverted[0, 2:]).all()


def test_resolve_combine() -> None:
    assert resolve_combine("auto", [True, True]) == "evidence"
    assert resolve_combine("auto", [True, False]) == "score"
    assert resolve_combine("score", [True]) == "score"
    assert resolve_combine("evidence", [False]) == "evidence"
    with pytest.raises(ValueError, match="one flag per checkpoint"):
        resolve_combine("auto", [])


def test_default_names_tell_equal_file_names_apart(tmp_path: Path) -> None:
    paths = [str(tmp_path / "ncl" / run / "20260101-1" / "checkpoints" / "best-epoch=0.ckpt")
             for run in ("rcl_sgr", "rcl_saf")]
    assert default_names(paths) == ("rcl_sgr_best-epoch=0", "rcl_saf_best-epoch=0")
    same_run = [str(tmp_path / "rcl_sgr" / t / "checkpoints" / "best.ckpt") for t in ("t1", "t2")]
    assert default_names([*same_run, "x/other.ckpt"]) == ("t1_best", "t2_best", "other")
    assert default_names(["a/f30k_SGR_model_best.pth.tar"]) == ("f30k_SGR_model_best",)


# ---------------------------------------------------------------------- hierarchical ensembles
def test_two_network_checkpoint_is_averaged_before_the_ensemble(tmp_path: Path) -> None:
    a, b, r = _net(seed=1), _net(seed=2), _net("SAF", seed=3)
    ncr = official_checkpoint(tmp_path / "ncr.pth.tar", [a, b], module_name="SGR")
    rcl = ncl_checkpoint(tmp_path / "rcl.ckpt", [r])
    method = Pretrained(VOCAB, [partial(SGRAF, module_name="SGR", **DIMS),
                                partial(SGRAF, module_name="SAF", **DIMS)], [str(ncr), str(rcl)])
    sims = _similarities(method)
    assert list(sims) == ["ncr_A", "ncr_B", "ncr", "rcl", "ncr+rcl"]
    sa, sb, sr = _direct(a).double(), _direct(b).double(), _direct(r).double()
    tol = {"rtol": 0, "atol": 1e-6}
    torch.testing.assert_close(sims["ncr_A"].double(), sa, **tol)
    torch.testing.assert_close(sims["rcl"].double(), sr, **tol)
    torch.testing.assert_close(sims["ncr"], (sa + sb) / 2, **tol)
    torch.testing.assert_close(sims["ncr+rcl"], ((sa + sb) / 2 + sr) / 2, **tol)
    flat = (sa + sb + sr) / 3
    assert (sims["ncr+rcl"] - flat).abs().max() > 1e-4  # the flat mean would be a different system


def test_ncl_two_network_checkpoint_and_names(tmp_path: Path) -> None:
    a, b, r = _net(seed=4), _net(seed=5), _net(seed=6)
    ncr = ncl_checkpoint(tmp_path / "ncr.ckpt", [a, b], class_path="ncl.methods.ncr.NCR")
    other = official_checkpoint(tmp_path / "rcl.pth.tar", [r])
    method = Pretrained(VOCAB, [partial(SGRAF, **DIMS)] * 2, [str(ncr), str(other)],
                        names=["NCR", "RCL"], ensemble_name="both")
    sims = _similarities(method)
    assert list(sims) == ["NCR_A", "NCR_B", "NCR", "RCL", "both"]
    sa, sb, sr = (_direct(n).double() for n in (a, b, r))
    torch.testing.assert_close(sims["both"], ((sa + sb) / 2 + sr) / 2, rtol=0, atol=1e-6)


# ---------------------------------------------------------------------- DECL evidence
def test_decl_checkpoints_average_evidence(tmp_path: Path) -> None:
    sgr, saf = _net("SGR", seed=7), _net("SAF", seed=8)
    paths = [str(official_checkpoint(tmp_path / f"decl_{n.module_name}.pth.tar", [n],
                                     module_name=n.module_name, **DECL_OPT)) for n in (sgr, saf)]
    factories = [partial(SGRAF, module_name="SGR", **DIMS), partial(SGRAF, module_name="SAF", **DIMS)]
    method = Pretrained(VOCAB, factories, paths, names=["SGR", "SAF"], ensemble_name="SGRAF")
    assert method.rule == "evidence"
    sims = _similarities(method)
    zs = [_direct(n, logits=True).double() for n in (sgr, saf)]
    hand = [torch.exp(torch.tanh(z) / 0.1) for z in zs]  # DECL's evidence, tau from opt ("0.1")
    torch.testing.assert_close(sims["SGR"], hand[0], rtol=1e-5, atol=0)
    torch.testing.assert_close(sims["SGRAF"], (hand[0] + hand[1]) / 2, rtol=1e-5, atol=0)
    # the same files under combine: score average sigmoids, a different matrix
    scored = _similarities(Pretrained(VOCAB, factories, paths, combine="score"))
    sig = [torch.sigmoid(z) for z in zs]
    torch.testing.assert_close(scored["decl_SGR+decl_SAF"], (sig[0] + sig[1]) / 2, rtol=0, atol=1e-6)


def test_decl_tau_from_opt_and_override(tmp_path: Path) -> None:
    net = _net(seed=9)
    path = str(official_checkpoint(tmp_path / "decl.pth.tar", [net], **{**DECL_OPT, "tau": "0.5"}))
    z = _direct(net, logits=True).double()
    own = _similarities(Pretrained(VOCAB, [partial(SGRAF, **DIMS)], [path]))
    torch.testing.assert_close(own["decl"], torch.exp(torch.tanh(z) / 0.5), rtol=1e-5, atol=0)
    forced = _similarities(Pretrained(VOCAB, [partial(SGRAF, **DIMS)], [path], evidence_tau=0.2))
    torch.testing.assert_close(forced["decl"], torch.exp(torch.tanh(z) / 0.2), rtol=1e-5, atol=0)


def test_decl_mixed_with_others_averages_scores_and_warns(tmp_path: Path) -> None:
    decl = official_checkpoint(tmp_path / "decl.pth.tar", [_net(seed=1)], **DECL_OPT)
    rcl = official_checkpoint(tmp_path / "rcl.pth.tar", [_net(seed=2)], tau=0.05)  # RCL: no lambda1
    with pytest.warns(NclWarning, match="decl.pth.tar are DECL checkpoints"):
        method = Pretrained(VOCAB, [partial(SGRAF, **DIMS)] * 2, [str(decl), str(rcl)])
    assert method.rule == "score"


# ---------------------------------------------------------------------- errors
def test_mismatching_ncl_checkpoint_names_file_tensor_and_shapes(tmp_path: Path) -> None:
    path = ncl_checkpoint(tmp_path / "best.ckpt", [_net()])
    wider = {**DIMS, "embed_size": 32}
    with pytest.raises(ConfigError, match=r"best\.ckpt: nets\.0\.img_enc\.fc\.weight: checkpoint "
                                          r"shape \(16, 16\) does not match model shape \(32, 16\)"):
        Pretrained(VOCAB, [partial(SGRAF, **wider)], [str(path)])
    with pytest.raises(ConfigError, match=r"best\.ckpt: .*missing keys \[.*SAF_module"):
        Pretrained(VOCAB, [partial(SGRAF, module_name="SAF", **DIMS)], [str(path)])


def test_missing_and_unknown_files(tmp_path: Path) -> None:
    good = ncl_checkpoint(tmp_path / "good.ckpt", [_net()])
    with pytest.raises(ConfigError, match=r"no checkpoint file at .*absent\.ckpt"):
        Pretrained(VOCAB, [partial(SGRAF, **DIMS)] * 2, [str(good), str(tmp_path / "absent.ckpt")])
    odd = tmp_path / "odd.pt"
    torch.save({"weights": torch.zeros(2)}, odd)
    with pytest.raises(ConfigError, match=r"odd\.pt: neither an ncl Lightning checkpoint"):
        Pretrained(VOCAB, [partial(SGRAF, **DIMS)], [str(odd)])
    with pytest.raises(ConfigError, match="model.names"):
        Pretrained(VOCAB, [partial(SGRAF, **DIMS)], [str(good)], names=["a", "b"])


def test_repeated_row_names_are_refused(tmp_path: Path) -> None:
    path = str(ncl_checkpoint(tmp_path / "x.ckpt", [_net()]))
    with pytest.raises(ConfigError, match=r"several rows named \['same'\]"):
        Pretrained(VOCAB, [partial(SGRAF, **DIMS)] * 2, [path, path], names=["same", "same"])


def test_unsafe_ncl_checkpoint_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pickled.ckpt"
    torch.save({"state_dict": _net().state_dict(), "extra": Path("/tmp")}, path)
    with pytest.raises(ConfigError, match=r"pickled\.ckpt.*restricted unpickler"):
        Pretrained(VOCAB, [partial(SGRAF, **DIMS)], [str(path)])


# ---------------------------------------------------------------------- other backbones
class _OwnLayout(nn.Module):
    """A backbone whose official files are not SGRAF's three state dicts (VSE-infinity)."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.received: list[dict] | None = None

    def load_official_state(self, state_dicts: list[dict]) -> None:
        self.received = state_dicts


def test_backbone_with_its_own_official_loader_gets_the_raw_list(tmp_path: Path) -> None:
    path = tmp_path / "vse.pth.tar"
    parts = [{"w": torch.ones(1)}, {"v": torch.zeros(2)}]
    torch.save({"model": parts, "opt": {"module_name": "VSEinfty"}}, path)
    method = Pretrained(VOCAB, [_OwnLayout], [str(path)])
    received = method.nets[0].received
    assert received is not None and len(received) == 2
    assert torch.equal(received[1]["v"], torch.zeros(2))
    with pytest.raises(ConfigError, match="has no similarity_logits"):
        Pretrained(VOCAB, [_OwnLayout], [str(path)], combine="evidence")
