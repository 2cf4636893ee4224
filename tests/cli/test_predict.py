"""``ncl predict``: a tiny RCL-SAF trained with ``ncl fit`` on synthetic data with injected
caption noise, then ranked through the real CLI (configs/eval_sgraf_f30k.yaml with tiny
overrides); and the pure ranking/metrics functions on hand-built numbers."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from ncl.cli import main
from ncl.data.datamodule import SyntheticDataModule
from ncl.evaluation.ranking import (
    COLUMNS,
    GMM,
    ranking_summary,
    suspicion_order,
    top_k_precision,
)

REPO = Path(__file__).resolve().parents[2]
TINY = {"img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16, "sim_dim": 8}
NOISE = {"noise_type": "caption", "noise_ratio": 0.4, "noise_seed": 0, "noise_file": None}


def _data(cache: Path) -> dict:
    return {"class_path": "ncl.data.datamodule.SyntheticDataModule",
            "init_args": {"preset": "tiny", "n_train": None, "cache_dir": str(cache),
                          "batch_size": 16, "eval_batch_size": 32, **NOISE}}


def _write(path: Path, content: dict) -> Path:
    path.write_text(yaml.safe_dump(content))
    return path


@pytest.fixture(scope="module")
def checkpoint(rcl_f30k_checkpoint) -> Path:
    """best.ckpt of configs/rcl_saf_f30k.yaml trained 4 steps on tiny data with 40% caption
    noise (the session's shared run, conftest.train_rcl_f30k; only read here)."""
    return rcl_f30k_checkpoint("SAF")


def _predict_args(root: Path, cache: Path, ckpt: Path | str, out: Path) -> list[str]:
    override = _write(root / "predict.yaml", {
        "data": _data(cache),
        "model": {"init_args": {
            "backbones": [{"class_path": "ncl.models.SGRAF",
                           "init_args": {"module_name": "SAF", "add_mask_token": True, **TINY}}],
            "checkpoints": [str(ckpt)], "names": ["SAF"], "ensemble_name": None}},
        "trainer": {"accelerator": "cpu", "default_root_dir": str(root / "eval")}})
    return ["predict", "--config", str(REPO / "configs" / "eval_sgraf_f30k.yaml"),
            "--config", str(override), "--out", str(out)]


def test_predict_ranks_every_training_pair(tmp_path: Path, synthetic_cache: Path,
                                           checkpoint: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "suspicious.csv"
    main(_predict_args(tmp_path, synthetic_cache, checkpoint, out))
    rows = list(csv.DictReader(out.open(newline="", encoding="utf-8")))

    dm = SyntheticDataModule(preset="tiny", cache_dir=str(synthetic_cache), **NOISE)
    dm.setup("fit")
    pairs = dm.train_pairs()
    assert tuple(rows[0]) == COLUMNS
    assert len(rows) == pairs.split.n_captions
    assert sorted(int(r["caption_index"]) for r in rows) == list(range(len(rows)))
    prob = [float(r["clean_probability"]) for r in rows]
    assert prob == sorted(prob) and all(0.0 <= p <= 1.0 for p in prob)
    assert len(set(prob)) > 2  # a ranking, not a constant
    for r in rows:  # the caption text and the noisy image of that caption index
        c = int(r["caption_index"])
        assert r["caption"] == pairs.split.captions[c]
        assert int(r["image_index"]) == int(pairs.cap2img[c])
    # some pairs really are re-paired, so the ground truth is not trivial
    assert 0 < int((~dm.clean_mask).sum()) < len(rows)

    metrics = json.loads((tmp_path / "suspicious.metrics.json").read_text())
    assert metrics["n_pairs"] == len(rows) and metrics["n_noisy"] == int((~dm.clean_mask).sum())
    values = [metrics[k] for k in ("precision", "recall", "f1")] + list(metrics["top_k_precision"].values())
    assert all(0.0 <= v <= 1.0 for v in values)
    assert set(metrics["top_k_precision"]) == {f"k={metrics['n_noisy']}", "k=100"}
    # the JSON agrees with the table it sits beside
    true_clean = dm.clean_mask
    order = np.array([int(r["caption_index"]) for r in rows])
    k = metrics["n_noisy"]
    assert metrics["top_k_precision"][f"k={k}"] == pytest.approx(float((~true_clean[order[:k]]).mean()))
    assert "F1" in capsys.readouterr().out


def test_bad_checkpoint_path_is_one_error_and_no_output(tmp_path: Path, synthetic_cache: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "suspicious.csv"
    with pytest.raises(SystemExit) as exit_info:
        main(_predict_args(tmp_path, synthetic_cache, tmp_path / "missing.ckpt", out))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ncl: error: model.checkpoints")
    assert "missing.ckpt" in lines[0]
    assert not out.exists() and not (tmp_path / "suspicious.metrics.json").exists()
    assert not list(tmp_path.glob(".suspicious*"))  # no temporary left behind


def test_missing_out_is_refused(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["predict", "--config", str(REPO / "configs" / "eval_sgraf_f30k.yaml")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == "ncl: error: ncl predict needs --out FILE (.csv or .parquet)"


# ------------------------------------------------------------------ pure functions
def test_order_is_probability_ascending_then_loss_descending() -> None:
    prob = np.array([0.9, 0.0, 0.3, 0.0, 1.0])
    loss = np.array([0.1, 0.5, 0.2, 0.8, 0.0])
    assert suspicion_order(prob, loss).tolist() == [3, 1, 2, 0, 4]


def test_detection_summary_on_hand_built_numbers() -> None:
    # predicted noisy (< 0.5): pairs 0, 1, 2; truly noisy: 0, 1, 3.
    prob = np.array([0.1, 0.2, 0.4, 0.6, 0.9, 0.95])
    loss = np.zeros(6)
    true_clean = np.array([False, False, True, False, True, True])
    s = ranking_summary(GMM, {"clean_probability": prob, "loss": loss}, true_clean, top_k=4)
    assert list(s)[:2] == ["threshold", "n_pairs"] and s["threshold"] == 0.5  # the JSON's keys
    assert s["n_noisy"] == 3 and s["predicted_noisy"] == 3
    assert s["precision"] == pytest.approx(2 / 3) and s["recall"] == pytest.approx(2 / 3)
    assert s["f1"] == pytest.approx(2 / 3)
    # order 0, 1, 2, 3, ...: top-3 holds 0, 1 (noisy) and 2 (clean); top-4 adds 3 (noisy)
    assert s["top_k_precision"] == {"k=3": pytest.approx(2 / 3), "k=4": pytest.approx(3 / 4)}


def test_top_k_precision_caps_k_and_handles_zero() -> None:
    order = np.array([1, 0])  # pair 1 (noisy) ranked first, then pair 0 (clean)
    true_clean = np.array([True, False])
    assert top_k_precision(order, true_clean, 1) == 1.0
    assert top_k_precision(order, true_clean, 10) == 0.5
    assert top_k_precision(order, true_clean, 0) == 0.0


def test_test_split_has_no_metrics_and_drops_a_stale_metrics_file(
        tmp_path: Path, synthetic_cache: Path, checkpoint: Path) -> None:
    out = tmp_path / "suspicious.csv"
    stale = tmp_path / "suspicious.metrics.json"
    stale.write_text("{}")
    main([*_predict_args(tmp_path, synthetic_cache, checkpoint, out), "--split", "test"])
    rows = list(csv.DictReader(out.open(newline="", encoding="utf-8")))
    dm = SyntheticDataModule(preset="tiny", cache_dir=str(synthetic_cache))
    dm.use_predict_split("test")
    test_split = dm.predict_pairs().split
    assert len(rows) == test_split.n_captions
    assert all(int(r["image_index"]) == int(r["caption_index"]) // test_split.im_div for r in rows)
    assert not stale.exists()


def test_real_noise_ranks_the_training_pairs_without_metrics(
        tmp_path: Path, synthetic_cache: Path, checkpoint: Path, capsys: pytest.CaptureFixture) -> None:
    """As for CC152K: the noise is in the data and nobody knows which pairs it hit."""
    out = tmp_path / "suspicious.csv"
    main([*_predict_args(tmp_path, synthetic_cache, checkpoint, out), "--data.real_noise", "true"])
    rows = list(csv.DictReader(out.open(newline="", encoding="utf-8")))
    dm = SyntheticDataModule(preset="tiny", cache_dir=str(synthetic_cache), **NOISE)
    dm.setup("fit")
    assert len(rows) == dm.train_pairs().split.n_captions
    assert not (tmp_path / "suspicious.metrics.json").exists()
    assert "no detection metrics" in capsys.readouterr().out


def test_parquet_without_pyarrow_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import builtins

    from ncl.errors import ConfigError
    from ncl.evaluation.ranked_output import check_out

    real_import = builtins.__import__

    def no_pyarrow(name: str, *args, **kwargs):  # noqa: ANN002, ANN003
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(ConfigError, match=r"--out .*x\.parquet: Parquet needs pyarrow"):
        check_out(tmp_path / "x.parquet")
    with pytest.raises(ConfigError, match=r"must end with \.csv or \.parquet"):
        check_out(tmp_path / "x.txt")


def test_parquet_table_when_pyarrow_is_installed(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    from ncl.evaluation.ranked_output import write_table

    table = {"caption_index": [1, 0], "image_index": [0, 0], "caption": ["b", "a"],
             "clean_probability": [0.1, 0.9], "similarity": [0.2, 0.8], "loss": [0.5, 0.1]}
    write_table(table, tmp_path / "x.parquet")
    assert pq.read_table(tmp_path / "x.parquet").to_pydict() == table


# ------------------------------------------------------------------ the Lightning parts
def _co_divide_batches(n: int, batch_size: int) -> list[list[int]]:
    """The batches ``ncl predict`` scored in before it was LightningCLI's ``predict``: NCR's
    co-divide shuffle (seed 0, epoch 0, network A), the last batch of one merged."""
    from ncl.training.passes import deal_batches
    from ncl.training.plans import DIVISION_STREAM, rng_for

    order = rng_for(0, 0, DIVISION_STREAM, 0).permutation(n)
    return [batch.tolist() for batch in deal_batches(order, batch_size)]


@pytest.mark.parametrize(("n", "batch_size"), [(300, 16), (300, 13), (5, 16), (1, 4)])
def test_scoring_batch_sampler_gives_the_co_divide_batches(n: int, batch_size: int) -> None:
    from ncl.data.predict_split import ScoringBatchSampler

    sampler = ScoringBatchSampler(range(n), batch_size)
    batches = list(sampler)
    assert batches == _co_divide_batches(n, batch_size) and len(sampler) == len(batches)
    assert sorted(i for batch in batches for i in batch) == list(range(n))  # each pair once
    with pytest.raises(ValueError, match="drop_last"):
        ScoringBatchSampler(range(n), batch_size, drop_last=True)


def test_datamodule_serves_the_chosen_split(synthetic_cache: Path) -> None:
    from ncl.errors import ConfigError

    dm = SyntheticDataModule(preset="tiny", cache_dir=str(synthetic_cache), dev_max_images=2, **NOISE)
    dm.use_predict_split("dev")
    dev = dm.predict_pairs()
    assert dev.split.n_images > 2 and len(dev) == dev.split.n_captions  # every dev image
    assert dm.predict_clean_mask() is None
    dm.use_predict_split("train", 13)
    train = dm.predict_pairs()
    assert dm.predict_clean_mask().tolist() == dm.clean_mask.tolist()
    loader = dm.predict_dataloader()
    assert [b["index"].tolist() for b in loader] == _co_divide_batches(len(train), 13)
    with pytest.raises(ConfigError, match="--split must be one of train, dev, test, got 'val'"):
        dm.use_predict_split("val")


def test_values_are_the_mean_hinge_over_the_co_divide_batches(
        tmp_path: Path, synthetic_cache: Path, checkpoint: Path) -> None:
    """Per pair: the diagonal and NCR's mean hinge of the checkpoint's batch matrix, in the
    co-divide's batches, bit for bit (13 leaves a last batch of one for 300 pairs: merged)."""
    import torch

    from ncl.data.datasets import collate
    from ncl.losses import triplet_loss
    from ncl.methods.pretrained import Pretrained
    from ncl.models import SGRAF

    out = tmp_path / "suspicious.csv"
    main([*_predict_args(tmp_path, synthetic_cache, checkpoint, out), "--batch_size", "13",
          "--margin", "0.3"])
    rows = list(csv.DictReader(out.open(newline="", encoding="utf-8")))

    dm = SyntheticDataModule(preset="tiny", cache_dir=str(synthetic_cache), **NOISE)
    dm.setup("fit")
    pairs = dm.train_pairs()
    model = Pretrained(dm.vocab_size, [lambda v: SGRAF(v, module_name="SAF", add_mask_token=True, **TINY)],
                       [str(checkpoint)], names=["SAF"]).eval()
    similarity, loss = np.zeros(len(pairs)), np.zeros(len(pairs))
    with torch.no_grad():
        for index in _co_divide_batches(len(pairs), 13):
            scores = model.batch_scores(collate([pairs[i] for i in index]))
            similarity[index] = scores.diagonal().numpy()
            loss[index] = triplet_loss(scores, margin=0.3, negatives="mean").numpy()
    caption = np.array([int(r["caption_index"]) for r in rows])
    assert [float(r["loss"]) for r in rows] == loss[caption].tolist()
    assert [float(r["similarity"]) for r in rows] == similarity[caption].tolist()


def _one_error_line(capsys: pytest.CaptureFixture, exit_info: pytest.ExceptionInfo) -> str:
    assert exit_info.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1
    return lines[0]


@pytest.mark.parametrize(("extra", "message"), [
    (["--split", "val"], "ncl: error: --split must be one of train, dev, test, got 'val'"),
    (["--batch_size", "1"], "ncl: error: --batch_size must be at least 2, got 1"),
])
def test_bad_predict_options_are_one_error(tmp_path: Path, synthetic_cache: Path, checkpoint: Path,
                                           capsys: pytest.CaptureFixture, extra: list[str],
                                           message: str) -> None:
    out = tmp_path / "suspicious.csv"
    with pytest.raises(SystemExit) as exit_info:
        main([*_predict_args(tmp_path, synthetic_cache, checkpoint, out), *extra])
    assert _one_error_line(capsys, exit_info) == message
    assert not out.exists()


def test_unwritable_out_is_one_error(tmp_path: Path, synthetic_cache: Path, checkpoint: Path,
                                     capsys: pytest.CaptureFixture) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as exit_info:
        main(_predict_args(tmp_path, synthetic_cache, checkpoint, blocker / "suspicious.csv"))
    line = _one_error_line(capsys, exit_info)
    assert line.startswith(f"ncl: error: --out {blocker / 'suspicious.csv'} cannot be written")


def test_a_training_method_without_checkpoint_is_refused(tmp_path: Path, synthetic_cache: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    """A fit config ranks with trained weights only (``--ckpt_path``;
    tests/cli/test_predict_fit_config.py): without one it would rank with untrained ones."""
    override = _write(tmp_path / "rcl.yaml", {
        "data": _data(synthetic_cache), "model": {"init_args": {"backbone": {"init_args": TINY}}},
        "trainer": {"accelerator": "cpu", "logger": False, "default_root_dir": str(tmp_path / "eval")}})
    out = tmp_path / "suspicious.csv"
    with pytest.raises(SystemExit) as exit_info:
        main(["predict", "--config", str(REPO / "configs" / "rcl_saf_f30k.yaml"),
              "--config", str(override), "--out", str(out)])
    line = _one_error_line(capsys, exit_info)
    assert line.startswith("ncl: error: ncl predict: no --ckpt_path, so this would score the "
                           "model's untrained initial weights")
    assert not out.exists()


def test_help_lists_the_predict_options(capsys: pytest.CaptureFixture) -> None:
    import re

    with pytest.raises(SystemExit) as exit_info:
        main(["predict", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--out", "--split", "--batch_size", "--margin"):
        assert re.search(rf"^\s+{flag} ", text, re.MULTILINE), flag
