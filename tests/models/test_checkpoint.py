"""Official checkpoint format (spec 3.4): written here with torch.save, read back, loaded."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

from ncl.models import (
    load_official_into,
    official_options,
    official_state_dicts,
    read_official_checkpoint,
)


def _three(model) -> list[dict]:
    return [model.img_enc.state_dict(), model.txt_enc.state_dict(), model.sim_enc.state_dict()]


def _opt(module_name: str) -> argparse.Namespace:
    return argparse.Namespace(module_name=module_name, data_name="f30k_precomp", lr=2e-4,
                              bi_gru=True, no_imgnorm=False, num_epochs=40, noise_ratio=0.2,
                              noise_file="", gpu="0", schedules=[5, 5])


def _inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    lengths = torch.tensor([4, 2, 5])
    tokens = torch.randint(1, 40, (3, 5), generator=gen) * (torch.arange(5) < lengths[:, None])
    return torch.randn(3, 5, 10, generator=gen), tokens, lengths


def _scores(model) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(*_inputs())


@pytest.mark.parametrize("module_name", ["SGR", "SAF"])
def test_rcl_style_roundtrip_gives_equal_outputs(tmp_path: Path, make_model, module_name):
    source = make_model(module_name, seed=1)
    path = tmp_path / "model_best.pth.tar"
    torch.save({"epoch": 7, "model": _three(source), "best_rsum": 480.5, "opt": _opt(module_name),
                "Eiters": 123}, path)
    ckpt = read_official_checkpoint(path)
    assert ckpt["epoch"] == 7 and ckpt["best_rsum"] == 480.5
    options = official_options(ckpt)
    assert options["module_name"] == module_name and options["schedules"] == [5, 5]
    networks = official_state_dicts(ckpt)
    assert len(networks) == 1 and len(networks[0]) == 3
    target = make_model(module_name, seed=2)
    assert not torch.allclose(_scores(target), _scores(source))
    load_official_into(target, networks[0])
    torch.testing.assert_close(_scores(target), _scores(source), rtol=0, atol=0)
    for name, value in source.state_dict().items():  # buffers too (BatchNorm statistics)
        assert torch.equal(target.state_dict()[name], value), name


def test_ncr_checkpoint_has_two_networks(tmp_path: Path, make_model):
    net_a, net_b = make_model(seed=3), make_model(seed=4)
    path = tmp_path / "checkpoint.pth.tar"
    torch.save({"epoch": 2, "model_A": _three(net_a), "model_B": _three(net_b),
                "best_rsum": 400.0, "opt": _opt("SGR")}, path)
    networks = official_state_dicts(read_official_checkpoint(path))
    assert len(networks) == 2
    for source, state in zip((net_a, net_b), networks):
        target = make_model(seed=5)
        load_official_into(target, state)
        torch.testing.assert_close(_scores(target), _scores(source), rtol=0, atol=0)


def test_checkpoint_without_mask_row_into_model_with_it(make_model):
    source = make_model(seed=1)
    target = make_model(seed=2, add_mask_token=True)
    mask_row = target.txt_enc.embed.weight[-1].clone()
    with pytest.warns(UserWarning, match="copied the first 40 rows"):
        load_official_into(target, _three(source))
    weight = target.txt_enc.embed.weight
    assert torch.equal(weight[:40], source.txt_enc.embed.weight)
    assert torch.equal(weight[40], mask_row)


def test_checkpoint_with_mask_row_into_smaller_model_raises(make_model):
    source = make_model(add_mask_token=True)
    with pytest.raises(ValueError, match=r"txt_enc\.embed\.weight.*\(41, 6\).*\(40, 6\).*"
                                         r"add_mask_token=True"):
        load_official_into(make_model(), _three(source))


def test_shape_mismatch_names_tensor_and_shapes(make_model):
    source = make_model(sim_dim=6)
    target = make_model()
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(ValueError, match=r"sim_enc\.sim_tranloc_w\.weight: checkpoint shape "
                                         r"\(6, 12\) does not match model shape \(8, 12\)"):
        load_official_into(target, _three(source))
    for name, value in target.state_dict().items():  # nothing was half-loaded
        assert torch.equal(value, before[name]), name


def test_missing_and_unexpected_keys_are_named(make_model):
    state = _three(make_model("SGR"))
    with pytest.raises(ValueError, match=r"sim_enc.*missing keys \['SAF_module.*unexpected keys "
                                         r"\['SGR_module"):
        load_official_into(make_model("SAF"), state)
    with pytest.raises(ValueError, match="_reverse"):
        load_official_into(make_model(bi_gru=False), state)
    with pytest.raises(ValueError, match="3 state dicts"):
        load_official_into(make_model(), state[:2])


def test_missing_batch_counters_and_dataparallel_prefix_are_tolerated(make_model):
    source = make_model(seed=1)
    img, txt, sim = _three(source)
    sim = {f"module.{k}": v for k, v in sim.items() if not k.endswith("num_batches_tracked")}
    target = make_model(seed=2)
    load_official_into(target, [img, txt, sim])
    torch.testing.assert_close(_scores(target), _scores(source), rtol=0, atol=0)


def test_restricted_unpickler_refuses_other_objects(tmp_path: Path):
    path = tmp_path / "evil.pth.tar"
    torch.save({"model": [], "opt": Path("/tmp")}, path)  # any non-allow-listed class
    with pytest.raises(ValueError, match="restricted unpickler"):
        read_official_checkpoint(path)
    with pytest.raises(FileNotFoundError):
        read_official_checkpoint(tmp_path / "absent.pth.tar")


def test_malformed_checkpoint_dicts_raise():
    with pytest.raises(ValueError, match="'model' entry"):
        official_state_dicts({"epoch": 1})
    with pytest.raises(ValueError, match="lacks 'model_B'"):
        official_state_dicts({"model_A": [{}, {}, {}]})
    with pytest.raises(ValueError, match="list of 3 state dicts"):
        official_state_dicts({"model": [{}, {}]})
    with pytest.raises(ValueError, match="argparse.Namespace"):
        official_options({"opt": 3})
