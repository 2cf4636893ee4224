"""``ncl test`` ensembles checkpoints through the real CLI: two tiny models trained with
``ncl fit`` (RCL-SGR and RCL-SAF), evaluated with configs/eval_sgraf_f30k.yaml, and the same
weights as official ``.pth.tar`` files with configs/eval_official_f30k.yaml. The numbers are
checked against an independent computation from the weights and the test split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from helpers_official import official_checkpoint
from ncl.cli import main
from ncl.data.datamodule import SyntheticDataModule
from ncl.metrics.retrieval import retrieval_metrics
from ncl.models import SGRAF

REPO = Path(__file__).resolve().parents[2]
TINY = {"img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16, "sim_dim": 8}
MODULES = ("SGR", "SAF")
METRICS = ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10", "rsum")


def _tiny_data(cache: Path) -> dict:
    return {"class_path": "ncl.data.datamodule.SyntheticDataModule",
            "init_args": {"preset": "tiny", "n_train": None, "cache_dir": str(cache),
                          "batch_size": 16, "eval_batch_size": 32}}


def _write(path: Path, content: dict) -> Path:
    path.write_text(yaml.safe_dump(content))
    return path


@pytest.fixture(scope="module")
def trained(rcl_f30k_checkpoint) -> dict[str, Path]:
    """``{"SGR": best.ckpt, "SAF": best.ckpt}`` of two tiny ncl runs of configs/rcl_<m>_f30k.yaml
    (the session's shared runs, conftest.train_rcl_f30k; only read here)."""
    return {m: rcl_f30k_checkpoint(m) for m in MODULES}


def _test(config: str, root: Path, cache: Path, checkpoints: list[Path]) -> dict:
    """``ncl test --config configs/<config>`` with tiny backbones; the results JSON."""
    override = _write(root / "test_override.yaml", {
        "data": _tiny_data(cache),
        "model": {"init_args": {
            "backbones": [{"class_path": "ncl.models.SGRAF",
                           "init_args": {"module_name": m, "add_mask_token": True, **TINY}}
                          for m in MODULES],
            "checkpoints": [str(p) for p in checkpoints]}},
        "trainer": {"accelerator": "cpu", "default_root_dir": str(root / "eval"),
                    "enable_progress_bar": False}})
    main(["test", "--config", str(REPO / "configs" / config), "--config", str(override)])
    return json.loads((root / "eval" / "test_results.json").read_text())


def _loaded(path: Path, module: str, vocab: int) -> SGRAF:
    """The network of an ncl checkpoint, loaded with plain ``load_state_dict``."""
    state = torch.load(path, map_location="cpu", weights_only=True)["state_dict"]
    net = SGRAF(vocab, module_name=module, add_mask_token=True, **TINY)
    net.load_state_dict({k.removeprefix("nets.0."): v for k, v in state.items()})
    return net.eval()


def _reference(trained: dict[str, Path], cache: Path) -> tuple[dict[str, torch.Tensor], int]:
    """Each model's (N_img, N_cap) sigmoid scores on the tiny test split, all at once."""
    dm = SyntheticDataModule(preset="tiny", cache_dir=str(cache))
    dm.setup("test")
    split = dm.test_data
    caps = [torch.as_tensor(split.tokens(c), dtype=torch.long) for c in range(split.n_captions)]
    lengths = torch.tensor([len(c) for c in caps])
    tokens = torch.nn.utils.rnn.pad_sequence(caps, batch_first=True)
    images = torch.as_tensor(split.features[:], dtype=torch.float32)
    sims = {}
    for module, path in trained.items():
        net = _loaded(path, module, dm.vocab_size)
        with torch.no_grad():
            sims[module] = net.similarity(net.encode_images(images),
                                          net.encode_captions(tokens, lengths), lengths)
    return sims, split.im_div


def _assert_metrics(got: dict, sims: torch.Tensor, im_div: int) -> None:
    want = retrieval_metrics(sims, im_div)
    for key in METRICS:
        assert got[key] == pytest.approx(want[key], abs=1e-3), key


def test_ncl_checkpoints_ensemble_through_the_cli(trained: dict[str, Path], tmp_path: Path,
                                                  synthetic_cache: Path) -> None:
    results = _test("eval_sgraf_f30k.yaml", tmp_path, synthetic_cache, [trained[m] for m in MODULES])
    assert list(results) == ["SGR", "SAF", "SGRAF"]  # each model, then the ensemble
    sims, im_div = _reference(trained, synthetic_cache)
    _assert_metrics(results["SGR"]["1k"], sims["SGR"], im_div)
    _assert_metrics(results["SAF"]["1k"], sims["SAF"], im_div)
    _assert_metrics(results["SGRAF"]["1k"], (sims["SGR"].double() + sims["SAF"].double()) / 2, im_div)


def test_official_pair_of_the_same_weights_gives_the_same_numbers(
        trained: dict[str, Path], tmp_path: Path, synthetic_cache: Path) -> None:
    vocab = SyntheticDataModule(preset="tiny", cache_dir=str(synthetic_cache)).vocab_size
    official = [official_checkpoint(tmp_path / f"f30k_{m}_model_best.pth.tar",
                                    [_loaded(trained[m], m, vocab)], module_name=m)
                for m in MODULES]
    results = _test("eval_official_f30k.yaml", tmp_path, synthetic_cache, official)
    names = ["f30k_SGR_model_best", "f30k_SAF_model_best"]
    assert list(results) == [*names, "+".join(names)]
    sims, im_div = _reference(trained, synthetic_cache)
    _assert_metrics(results[names[0]]["1k"], sims["SGR"], im_div)
    _assert_metrics(results["+".join(names)]["1k"],
                    (sims["SGR"].double() + sims["SAF"].double()) / 2, im_div)
