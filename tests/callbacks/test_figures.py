"""Run figures (ncl.evaluation.plots, pure) and the Figures callback (ncl.callbacks.figures), down to a
tiny NCR run through the real CLI whose figures folder is checked."""

from __future__ import annotations

import csv
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from matplotlib.patches import Rectangle
from scipy.stats import norm

from ncl.callbacks.figures import Figures, _prune, detection_scores, loss_panels, rsum_series
from ncl.callbacks.protocols import EpochDiagnostics, LossView
from ncl.cli import main
from ncl.evaluation.plots import (
    GmmParams,
    LabelPanel,
    LossPanel,
    detection_figure,
    fit_loss_gmm,
    gmm_component_densities,
    label_histogram_figure,
    loss_gmm_figure,
    rsum_figure,
    save_figure,
)
from tiny_runs import last_checkpoint, per_epoch, run_folder, save_config, tiny_trainer

PNG = b"\x89PNG\r\n\x1a\n"
PARAMS = GmmParams(means=np.array([0.2, 0.7]), variances=np.array([0.01, 0.04]),
                   weights=np.array([0.6, 0.4]))


def _bars(ax) -> list[Rectangle]:  # noqa: ANN001 - Axes
    return [p for p in ax.patches if isinstance(p, Rectangle)]


def _legend_texts(fig) -> list[str]:  # noqa: ANN001 - Figure
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    return [t.get_text() for legend in legends for t in legend.get_texts()]


def _check_labelled(fig) -> None:  # noqa: ANN001 - Figure
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    assert _legend_texts(fig)


# ----------------------------------------------------------------------------- GMM
def test_component_densities_are_weighted_normals() -> None:
    grid = np.linspace(-0.5, 1.5, 2001)
    dens = gmm_component_densities(PARAMS, grid)
    for k in range(2):
        want = PARAMS.weights[k] * norm.pdf(grid, PARAMS.means[k], np.sqrt(PARAMS.variances[k]))
        np.testing.assert_allclose(dens[k], want, rtol=1e-10)
    assert np.trapezoid(dens.sum(0), grid) == pytest.approx(1.0, abs=1e-3)


def test_fit_recovers_two_separated_modes_clean_first() -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0.8, 0.05, 300), rng.normal(0.2, 0.05, 700)])  # noisy first
    gmm = fit_loss_gmm(x, seed=0)
    np.testing.assert_allclose(gmm.means, [0.2, 0.8], atol=0.02)
    np.testing.assert_allclose(gmm.weights, [0.7, 0.3], atol=0.02)
    np.testing.assert_allclose(np.sqrt(gmm.variances), [0.05, 0.05], atol=0.01)


def test_params_are_checked() -> None:
    with pytest.raises(ValueError, match="means"):
        GmmParams(np.zeros(3), np.ones(2), np.ones(2) / 2)
    with pytest.raises(ValueError, match="variances"):
        GmmParams(np.zeros(2), np.array([1.0, 0.0]), np.ones(2) / 2)


# ----------------------------------------------------------------------------- figures
def test_loss_figure_bars_curves_and_legend() -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, 200)
    truth = rng.uniform(0, 1, 200) > 0.3
    fig = loss_gmm_figure([LossPanel("network A", x, PARAMS, truth),
                           LossPanel("network B", x[::-1].copy(), PARAMS, truth)], "t", bins=10)
    assert len(fig.axes) == 2
    _check_labelled(fig)
    texts = _legend_texts(fig)
    assert f"true clean (n={truth.sum()})" in texts and f"true noisy (n={(~truth).sum()})" in texts
    ax = fig.axes[0]
    bars = _bars(ax)
    assert len(bars) == 20  # 10 bins x (clean, noisy), stacked
    # a stacked density: all bars together cover area 1
    assert sum(b.get_height() * b.get_width() for b in bars) == pytest.approx(1.0)
    lines = ax.get_lines()
    assert len(lines) == 3  # two components and the mixture
    gx, gy = lines[0].get_data()
    np.testing.assert_allclose(gy, 0.6 * norm.pdf(gx, 0.2, 0.1), rtol=1e-8)
    np.testing.assert_allclose(lines[2].get_ydata(),
                               gmm_component_densities(PARAMS, gx).sum(0), rtol=1e-8)
    assert "0.20" in ax.get_title() and "0.70" in ax.get_title()


def test_loss_figure_without_truth_or_gmm() -> None:
    x = np.linspace(0, 1, 50)
    fig = loss_gmm_figure([LossPanel("net", x)], "t", bins=5)
    ax = fig.axes[0]
    assert len(_bars(ax)) == 5 and not ax.get_lines()
    assert _legend_texts(fig) == ["all pairs (n=50)"]
    with pytest.raises(ValueError, match="at least one panel"):
        loss_gmm_figure([], "t")
    with pytest.raises(ValueError, match="true_clean"):
        loss_gmm_figure([LossPanel("net", x, None, np.ones(3, bool))], "t")


def test_label_histogram_counts_per_truth() -> None:
    rng = np.random.default_rng(2)
    y = rng.uniform(0, 1, 300)
    truth = y > 0.4  # clean labels high
    fig = label_histogram_figure([LabelPanel("y_hat", y, truth)], "t", bins=20)
    ax = fig.axes[0]
    _check_labelled(fig)
    assert ax.get_yscale() == "log"
    bars = _bars(ax)
    assert len(bars) == 40
    edges = np.linspace(0, 1, 21)
    np.testing.assert_array_equal([b.get_height() for b in bars[:20]],
                                  np.histogram(y[truth], edges)[0])
    np.testing.assert_array_equal([b.get_height() for b in bars[20:]],
                                  np.histogram(y[~truth], edges)[0])


def test_detection_figure_a_line_per_detector() -> None:
    history = {"A": {1: {"precision": 0.5, "recall": 0.25, "f1": 0.4}, 3: {"precision": 0.7}},
               "B": {2: {"precision": 0.1, "recall": 0.2, "f1": 0.3}}}
    fig = detection_figure(history)
    assert [ax.get_title() for ax in fig.axes] == ["precision", "recall", "F1"]
    _check_labelled(fig)
    precision, recall = fig.axes[0], fig.axes[1]
    assert len(precision.get_lines()) == 2 and len(recall.get_lines()) == 2
    x, y = precision.get_lines()[0].get_data()
    assert list(x) == [1, 3] and list(y) == [0.5, 0.7]
    assert list(recall.get_lines()[0].get_xdata()) == [1]  # epoch 3 has no recall
    with pytest.raises(ValueError, match="at least one epoch"):
        detection_figure({"A": {}})


def test_rsum_figure_marks_warmup() -> None:
    series = {"val/rsum": {2: 150.0, 0: 100.0, 1: 120.0}, "val_A/rsum": {0: 90.0, 1: 110.0}}
    fig = rsum_figure(series, warmup_epochs=[0])
    ax = fig.axes[0]
    _check_labelled(fig)
    assert "%" in ax.get_ylabel() and ax.get_xlabel() == "epoch"
    labelled = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
    assert [ln.get_label() for ln in labelled] == ["val/rsum", "val_A/rsum"]
    assert list(labelled[0].get_xdata()) == [0, 1, 2] and list(labelled[0].get_ydata()) == [100, 120, 150]
    hollow = [ln for ln in ax.get_lines() if ln.get_label().startswith("_")]
    assert len(hollow) == 2 and all(list(ln.get_xdata()) == [0] for ln in hollow)
    assert any("warm-up" in t for t in _legend_texts(fig))


def test_save_is_atomic(tmp_path: Path) -> None:
    fig = rsum_figure({"val/rsum": {0: 1.0}})
    out = save_figure(fig, tmp_path / "sub" / "r.png")
    assert out.read_bytes()[:8] == PNG

    def broken(*args, **kwargs) -> None:
        raise RuntimeError("disk full")

    fig.savefig = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        save_figure(fig, tmp_path / "sub" / "r.png")
    assert out.read_bytes()[:8] == PNG  # the old file is untouched
    assert sorted(p.name for p in out.parent.iterdir()) == ["r.png"]  # no temporary left


# ----------------------------------------------------------------------------- callback glue
def test_rsum_series_reads_every_network_and_not_the_selection_key() -> None:
    metrics = {"val/rsum": torch.tensor(10.0), "val_A/rsum": 5.0, "val_B/rsum": 2.0,
               "val/rsum_selected": -1.0, "val/i2t_r1": 4.0}
    assert rsum_series(metrics) == {"val/rsum": 10.0, "val_A/rsum": 5.0, "val_B/rsum": 2.0}


def test_prune_keeps_newest_by_epoch_number(tmp_path: Path) -> None:
    for e in (8, 9, 10, 1000):
        (tmp_path / f"labels_epoch{e:03d}.png").write_bytes(b"x")
    (tmp_path / "loss_gmm_epoch001.png").write_bytes(b"x")
    _prune(tmp_path, "labels", keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "labels_epoch010.png", "labels_epoch1000.png", "loss_gmm_epoch001.png"]


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="every_n_epochs"):
        Figures(every_n_epochs=0)
    with pytest.raises(ValueError, match="keep_last"):
        Figures(keep_last=0)


def test_detection_and_loss_panels_from_epoch_diagnostics() -> None:
    truth = torch.tensor([True, True, False, False])
    diag = EpochDiagnostics(detection={"A": torch.tensor([True, False, False, True])},
                            losses=LossView("co-divide", {"A": torch.tensor([0.0, 1.0, 3.0, 4.0])}))
    # noisy pairs are the positives: predicted noisy {1, 2}, truly noisy {2, 3}
    assert detection_scores(diag, truth) == {"A": {"precision": 0.5, "recall": 0.5, "f1": 0.5}}
    assert detection_scores(diag, None) == {}  # no ground truth (real noise): nothing scored
    [panel] = loss_panels(diag.losses, truth)
    np.testing.assert_allclose(panel.losses, [0.0, 0.25, 0.75, 1.0])  # min-max, as the GMM saw
    assert panel.title == "network A" and panel.gmm is not None
    assert panel.true_clean.tolist() == [True, True, False, False]


def test_state_round_trip() -> None:
    cb = Figures()
    cb.detection = {"A": {1: {"f1": 0.5}}}
    cb.rsum, cb.warmup_epochs = {"val/rsum": {0: 1.0}}, {0}
    other = Figures()
    other.load_state_dict(cb.state_dict())
    assert (other.detection, other.rsum, other.warmup_epochs) == (cb.detection, cb.rsum, {0})


def test_figures_go_to_wandb_loggers_only(tmp_path: Path) -> None:
    wandb = WandbLogger(offline=True, save_dir=str(tmp_path))
    calls: list[dict] = []
    wandb.log_image = lambda **kwargs: calls.append(kwargs)  # type: ignore[method-assign]
    trainer = SimpleNamespace(log_dir=str(tmp_path), default_root_dir=str(tmp_path),
                              loggers=[CSVLogger(str(tmp_path)), wandb], global_step=7)
    path = Figures()._write(trainer, "rsum", None, lambda: rsum_figure({"val/rsum": {0: 1.0}}))
    assert path == tmp_path / "figures" / "rsum.png" and path.read_bytes()[:8] == PNG
    assert calls == [{"key": "figures/rsum", "images": [str(path)], "step": 7}]


# ----------------------------------------------------------------------------- tiny CLI run
BACKBONE = {"img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16, "sim_dim": 8,
            "dropout": 0.0, "similarity_strategy": "chunked"}


def test_ncr_run_writes_its_figures(tmp_path: Path, synthetic_cache: Path) -> None:
    trainer = tiny_trainer(tmp_path, 3, 6)
    trainer["callbacks"].append({"class_path": "ncl.callbacks.figures.Figures",
                                 "init_args": {"keep_last": 1}})
    cfg = {"seed_everything": 0, "trainer": trainer,
           "model": {"class_path": "ncl.methods.ncr.NCR",
                     "init_args": {"backbone": {"class_path": "ncl.models.sgraf.SGRAF",
                                                "init_args": BACKBONE},
                                   "warmup_epochs": 1, "unlabelled_start": 1}},
           "data": {"class_path": "ncl.data.datamodule.SyntheticDataModule",
                    "init_args": {"preset": "tiny", "cache_dir": str(synthetic_cache),
                                  "batch_size": 16, "eval_batch_size": 64,
                                  "noise_type": "caption", "noise_ratio": 0.4}}}
    main(["fit", "--config", str(save_config(tmp_path, cfg))])
    folder = run_folder(tmp_path)
    figures = folder / "figures"
    # divisions for epochs 1 and 2 (warm-up epoch 0 has none); keep_last=1 keeps the newest
    assert sorted(p.name for p in figures.iterdir()) == [
        "detection.png", "labels_epoch002.png", "loss_gmm_epoch002.png", "rsum.png"]
    assert all(p.read_bytes()[:8] == PNG for p in figures.iterdir())
    # the curves hold exactly what the run logged (metrics.csv), warm-up included
    state = last_checkpoint(folder)["callbacks"]["Figures"]
    assert state["warmup_epochs"] == [0]
    assert state["rsum"]["val/rsum"] == pytest.approx(
        per_epoch(folder, "val/rsum"))
    for net in "AB":
        logged = per_epoch(folder, f"division/{net}/f1")
        assert sorted(logged) == [1, 2]
        assert {e: s["f1"] for e, s in state["detection"][net].items()} == pytest.approx(logged)
    with open(folder / "metrics.csv") as handle:  # nothing else was added to the metrics
        assert not any(k.startswith("figures") for k in csv.DictReader(handle).fieldnames or [])
