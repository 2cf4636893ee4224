"""Issue 29, item 7, through the real CLI on tiny synthetic data: with ReCon's default relation
reading (IAIS's m-KL, summed over rows) the true-positives identification acts (``D_l`` is
logged non-empty), ``model.true_positive false`` is the paper's ablation without it (``D_l``
empty), the old reading (``relation_rows mean``) stays selectable, and ``ncl test`` of two
ReCon checkpoints averages sigmoid scores by default and raw logits with ``model.combine
logits``, each checked against the networks' own scores."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
import torch
import yaml
from tiny_runs import per_epoch, run_folder, save_config, tiny_trainer

from ncl.cli import main
from ncl.data.datamodule import SyntheticDataModule
from ncl.metrics.retrieval import retrieval_metrics
from ncl.models import SGRAF

REPO = Path(__file__).resolve().parents[2]
TINY = {"img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16, "sim_dim": 8}
EPOCHS, STEPS = 3, 6  # one warm-up epoch, then two epochs on divisions


def _fit(root: Path, cache: Path, **model: object) -> Path:
    """``ncl fit`` of ReCon-SAF with its class defaults (the shipped method config's
    augmentation), one warm-up epoch; returns the run folder."""
    cfg = {
        "seed_everything": 0,
        "trainer": tiny_trainer(root, EPOCHS, STEPS),
        "model": {"class_path": "ncl.methods.recon.ReCon",
                  "init_args": {"backbone": {"class_path": "ncl.models.sgraf.SGRAF",
                                             "init_args": {"module_name": "SAF",
                                                           "add_mask_token": True, **TINY}},
                                "optimizer": {"class_path": "torch.optim.Adam",
                                              "init_args": {"lr": 2e-3}},
                                "warmup_epochs": 1, **model}},
        "data": {"class_path": "ncl.data.datamodule.SyntheticDataModule",
                 "init_args": {"preset": "tiny", "cache_dir": str(cache), "batch_size": 16,
                               "eval_batch_size": 64, "noise_type": "caption",
                               "noise_ratio": 0.4,
                               "augment": {"class_path": "ncl.data.augment.CaptionRegionAugment"}}},
    }
    main(["fit", "--config", str(save_config(root, cfg))])
    return run_folder(root)


def _sizes(folder: Path) -> dict[str, dict[int, float]]:
    return {name: per_epoch(folder, f"division/{name}") for name in ("clean", "local", "noisy")}


def test_default_reading_puts_pairs_into_d_l(tmp_path: Path, synthetic_cache: Path) -> None:
    sizes = _sizes(_fit(tmp_path, synthetic_cache))
    assert sorted(sizes["local"]) == [1, 2]  # a division for each epoch after the warm-up
    for epoch in (1, 2):
        assert sum(s[epoch] for s in sizes.values()) == 300  # every pair in one subset
    # the check acts: some rough-clean pairs are "locally associated" (L_IM >= e - 1)
    assert max(sizes["local"].values()) > 0


def test_without_true_positives_d_l_stays_empty(tmp_path: Path, synthetic_cache: Path) -> None:
    sizes = _sizes(_fit(tmp_path, synthetic_cache, true_positive=False))
    assert sizes["local"] == {1: 0.0, 2: 0.0}
    assert min(sizes["clean"].values()) > 0  # the rough-clean set is D_c


def test_old_mean_reading_is_selectable_and_never_fires(tmp_path: Path,
                                                        synthetic_cache: Path) -> None:
    sizes = _sizes(_fit(tmp_path, synthetic_cache, relation_rows="mean"))
    assert sizes["local"] == {1: 0.0, 2: 0.0}  # the reading that issue 29 replaced


# ---------------------------------------------------------------------- SGRAF combination
def _tiny_data(cache: Path) -> dict:
    return {"class_path": "ncl.data.datamodule.SyntheticDataModule",
            "init_args": {"preset": "tiny", "n_train": None, "cache_dir": str(cache),
                          "batch_size": 16, "eval_batch_size": 32}}


def _write(path: Path, content: dict) -> Path:
    path.write_text(yaml.safe_dump(content))
    return path


def _fit_config(root: Path, cache: Path, module: str) -> Path:
    """configs/recon_<module>_f30k.yaml for 2 steps on tiny data; its best checkpoint."""
    data = _tiny_data(cache)
    data["init_args"]["augment"] = {"class_path": "ncl.data.augment.CaptionRegionAugment"}
    override = _write(root / f"fit_{module}.yaml", {
        "data": data, "model": {"init_args": {"backbone": {"init_args": TINY}}},
        "trainer": {"max_epochs": 1, "limit_train_batches": 2, "accelerator": "cpu",
                    "enable_progress_bar": False}})
    main(["fit", "--config", str(REPO / "configs" / f"recon_{module.lower()}_f30k.yaml"),
          "--config", str(override)])
    found = sorted(root.rglob(f"recon_{module.lower()}_f30k/**/best-*.ckpt"))
    assert len(found) == 1, found
    return found[0]


@pytest.fixture(scope="module")
def recon_pair(tmp_path_factory: pytest.TempPathFactory, synthetic_cache: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("recon_pair")
    with contextlib.chdir(root):  # the configs write runs/<project>/<name>/... under the cwd
        return {m: _fit_config(root, synthetic_cache, m) for m in ("SGR", "SAF")}


def _ensemble(root: Path, cache: Path, pair: dict[str, Path], *extra: str) -> dict:
    override = _write(root / "test_override.yaml", {
        "data": _tiny_data(cache),
        "model": {"init_args": {
            "backbones": [{"class_path": "ncl.models.SGRAF",
                           "init_args": {"module_name": m, "add_mask_token": True, **TINY}}
                          for m in pair],
            "checkpoints": [str(p) for p in pair.values()]}},
        "trainer": {"accelerator": "cpu", "default_root_dir": str(root / "eval"),
                    "enable_progress_bar": False}})
    main(["test", "--config", str(REPO / "configs" / "eval_sgraf_f30k.yaml"),
          "--config", str(override), *extra])
    return json.loads((root / "eval" / "test_results.json").read_text())["SGRAF"]["1k"]


def _logits(pair: dict[str, Path], cache: Path) -> tuple[list[torch.Tensor], int]:
    """Each checkpoint's raw (N_img, N_cap) logits on the tiny test split, computed here."""
    dm = SyntheticDataModule(preset="tiny", cache_dir=str(cache))
    dm.setup("test")
    split = dm.test_data
    caps = [torch.as_tensor(split.tokens(c), dtype=torch.long) for c in range(split.n_captions)]
    lengths = torch.tensor([len(c) for c in caps])
    tokens = torch.nn.utils.rnn.pad_sequence(caps, batch_first=True)
    images = torch.as_tensor(split.features[:], dtype=torch.float32)
    out = []
    for module, path in pair.items():
        state = torch.load(path, map_location="cpu", weights_only=True)["state_dict"]
        net = SGRAF(dm.vocab_size, module_name=module, add_mask_token=True, **TINY)
        net.load_state_dict({k.removeprefix("nets.0."): v for k, v in state.items()})
        net.eval()
        with torch.no_grad():
            out.append(net.similarity_logits(net.encode_images(images),
                                              net.encode_captions(tokens, lengths), lengths))
    return out, split.im_div


@pytest.mark.parametrize("combine", [None, "logits"])
def test_recon_sgraf_combination_is_selectable(recon_pair: dict[str, Path], tmp_path: Path,
                                               synthetic_cache: Path, combine: str | None) -> None:
    extra = () if combine is None else ("--model.combine", combine)
    got = _ensemble(tmp_path, synthetic_cache, recon_pair, *extra)
    (sgr, saf), im_div = _logits(recon_pair, synthetic_cache)
    if combine is None:  # default: the mean of the sigmoid scores (as RCL and CRCL)
        want = (torch.sigmoid(sgr).double() + torch.sigmoid(saf).double()) / 2
    else:
        want = (sgr.double() + saf.double()) / 2
    expected = retrieval_metrics(want, im_div)
    for key in ("i2t_r1", "i2t_r5", "t2i_r1", "t2i_r5", "rsum"):
        assert got[key] == pytest.approx(expected[key], abs=1e-3), key
