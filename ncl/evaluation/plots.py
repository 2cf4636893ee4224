"""Figures of a training run as pure functions: data in, a matplotlib ``Figure`` out.

Every figure is built with matplotlib's object API on an Agg canvas (no ``pyplot``, no
global backend change, safe in headless jobs and worker threads). What is drawn:

* :func:`loss_gmm_figure` - the per-sample loss histogram of a division with the fitted
  two-component GMM (LNC Eq. 3, Fig. 5b), split by true clean/noisy pairs when known;
* :func:`label_histogram_figure` - the distribution of per-sample labels (CRCL's corrected
  labels, NCR/LNC's clean probabilities and momentum targets, ReCon's final labels);
* :func:`detection_figure` - noise-detection precision/recall/F1 per epoch, a line per network;
* :func:`rsum_figure` - validation rSum per epoch, warm-up epochs shaded.

:func:`save_figure` writes one atomically. :class:`ncl.callbacks.figures.Figures` gathers the
data during training and calls these.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, NullFormatter, ScalarFormatter

from ncl.io import atomic_write

#: Colours of the true clean / noisy parts of a histogram and of the GMM components.
CLEAN_COLOUR, NOISY_COLOUR, ALL_COLOUR = "tab:blue", "tab:red", "tab:gray"
GMM_CLEAN_COLOUR, GMM_NOISY_COLOUR = "tab:green", "tab:orange"
#: The detection scores drawn by :func:`detection_figure`, one panel each.
DETECTION_METRICS = ("precision", "recall", "f1")


# ----------------------------------------------------------------------------- GMM
@dataclass(frozen=True)
class GmmParams:
    """A one-dimensional two-component Gaussian mixture, the clean (low-mean) component first.

    Attributes:
        means: ``(2,)`` component means.
        variances: ``(2,)`` component variances (> 0).
        weights: ``(2,)`` mixing weights (sum 1).
    """

    means: np.ndarray
    variances: np.ndarray
    weights: np.ndarray

    def __post_init__(self) -> None:
        for name in ("means", "variances", "weights"):
            value = np.asarray(getattr(self, name), dtype=np.float64).reshape(-1)
            if value.shape != (2,):
                raise ValueError(f"GmmParams.{name} must have 2 entries, got {value.shape}")
            object.__setattr__(self, name, value)
        if not bool((self.variances > 0).all()):
            raise ValueError(f"GmmParams.variances must be > 0, got {self.variances}")


def fit_loss_gmm(x: np.ndarray, seed: int | None = 0, max_iter: int = 10, tol: float = 1e-2,
                 reg_covar: float = 5e-4) -> GmmParams:
    """Fit the co-divide's GMM (official settings, spec 4.2.4) on normalised losses ``x``.

    The same settings and seed as :func:`ncl.division.gmm_clean_probability`, so the curve
    drawn is the mixture the division was made from.

    Args:
        x: ``(N,)`` min-max normalised per-sample losses.
        seed: ``random_state`` of the fit.

    Returns:
        The fitted parameters, clean component first.
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.mixture import GaussianMixture

    gmm = GaussianMixture(n_components=2, max_iter=max_iter, tol=tol, reg_covar=reg_covar,
                          random_state=seed)
    with warnings.catch_warnings():
        # The official 10 EM iterations stop early on purpose; the warning means nothing.
        warnings.simplefilter("ignore", ConvergenceWarning)
        gmm.fit(np.asarray(x, dtype=np.float64).reshape(-1, 1))
    order = np.argsort(gmm.means_.ravel())
    return GmmParams(gmm.means_.ravel()[order], gmm.covariances_.ravel()[order],
                     gmm.weights_[order])


def gmm_component_densities(params: GmmParams, grid: np.ndarray) -> np.ndarray:
    """Weighted component densities ``pi_k N(x; mu_k, sigma_k^2)`` on ``grid``.

    Args:
        params: the mixture.
        grid: ``(G,)`` points.

    Returns:
        ``(2, G)``; their sum over the first axis is the mixture density.
    """
    x = np.asarray(grid, dtype=np.float64)[None]  # (1, G)
    mu, var = params.means[:, None], params.variances[:, None]  # (2, 1)
    normal = np.exp(-((x - mu) ** 2) / (2 * var)) / np.sqrt(2 * np.pi * var)
    return params.weights[:, None] * normal


# ----------------------------------------------------------------------------- panels
@dataclass(frozen=True)
class LossPanel:
    """One network's per-sample losses of one division.

    Attributes:
        title: the panel title (e.g. ``"network A"``).
        losses: ``(N,)`` min-max normalised losses in [0, 1].
        gmm: the mixture fitted on ``losses`` (drawn over the histogram), or ``None``.
        true_clean: ``(N,)`` bool ground truth to split the histogram by, or ``None``.
    """

    title: str
    losses: np.ndarray
    gmm: GmmParams | None = None
    true_clean: np.ndarray | None = None


@dataclass(frozen=True)
class LabelPanel:
    """One set of per-sample labels in [0, 1].

    Attributes:
        title: the panel title (what the labels are).
        values: ``(N,)`` labels.
        true_clean: ``(N,)`` bool ground truth to split the histogram by, or ``None``.
        xlabel: the x-axis label (what 0 and 1 mean).
    """

    title: str
    values: np.ndarray
    true_clean: np.ndarray | None = None
    xlabel: str = "label (0 = noisy, 1 = clean)"


def _new_figure(panels: int, width: float = 4.8, height: float = 3.8) -> Figure:
    """An Agg-backed figure wide enough for ``panels`` side-by-side axes (and, with one
    panel, for the title and the legend)."""
    fig = Figure(figsize=(max(width * panels, 6.4), height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _truth_split(values: np.ndarray, true_clean: np.ndarray | None
                 ) -> tuple[list[np.ndarray], list[str], list[str]]:
    """The histogram groups of ``values``: all pairs, or true clean and true noisy."""
    if true_clean is None:
        return [values], [ALL_COLOUR], [f"all pairs (n={values.size})"]
    truth = np.asarray(true_clean, dtype=bool)
    if truth.shape != values.shape:
        raise ValueError(f"true_clean has shape {truth.shape}, the values {values.shape}")
    clean, noisy = values[truth], values[~truth]
    return ([clean, noisy], [CLEAN_COLOUR, NOISY_COLOUR],
            [f"true clean (n={clean.size})", f"true noisy (n={noisy.size})"])


def loss_gmm_figure(panels: Sequence[LossPanel], title: str, bins: int = 50) -> Figure:
    """Per-sample loss histograms with the fitted two-component GMM, one panel per network.

    The histogram is a density (the area of all bars is 1); with the ground truth the clean
    and noisy bars are stacked, so their total height is comparable with the mixture density.

    Args:
        panels: one :class:`LossPanel` per network.
        title: the figure title (method and epoch).
        bins: equal-width bins over [0, 1].

    Returns:
        The figure (one axes per panel).
    """
    if not panels:
        raise ValueError("loss_gmm_figure needs at least one panel")
    fig = _new_figure(len(panels))
    edges = np.linspace(0.0, 1.0, bins + 1)
    grid = np.linspace(0.0, 1.0, 400)
    for i, panel in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        x = np.asarray(panel.losses, dtype=np.float64).reshape(-1)
        groups, colours, labels = _truth_split(x, panel.true_clean)
        ax.hist(groups, bins=edges, density=True, stacked=True, color=colours, alpha=0.55,
                label=labels, edgecolor="white", linewidth=0.3)
        subtitle = panel.title
        if panel.gmm is not None:
            curves = gmm_component_densities(panel.gmm, grid)
            ax.plot(grid, curves[0], color=GMM_CLEAN_COLOUR, lw=1.8, label="GMM clean component")
            ax.plot(grid, curves[1], color=GMM_NOISY_COLOUR, lw=1.8, label="GMM noisy component")
            ax.plot(grid, curves.sum(0), color="black", lw=1.0, ls="--", label="GMM mixture")
            means = panel.gmm.means
            subtitle += f"\nGMM means: clean {means[0]:.2f}, noisy {means[1]:.2f}"
        ax.set_xlim(0.0, 1.0)
        ax.set_title(subtitle, fontsize=10)
        ax.set_xlabel("per-sample loss, min-max normalised (0 = lowest, 1 = highest)")
        ax.set_ylabel("density (fraction of pairs per unit loss)")
    _shared_legend(fig, fig.axes)
    fig.suptitle(title)
    return fig


def _shared_legend(fig: Figure, axes: Sequence[Axes]) -> None:
    """One legend under the panels when they share their entries (so it never hides a bar or
    a curve); otherwise a legend in every panel."""
    entries = [ax.get_legend_handles_labels() for ax in axes]
    if all(labels == entries[0][1] for _, labels in entries):
        handles, labels = entries[0]
        columns = min(len(labels), 5 if len(axes) > 1 else 3)
        fig.legend(handles, labels, loc="outside lower center", ncol=columns,
                   fontsize=8, frameon=False)
    else:
        for ax in axes:
            ax.legend(fontsize=7)


def label_histogram_figure(panels: Sequence[LabelPanel], title: str, bins: int = 20) -> Figure:
    """Histograms of per-sample labels in [0, 1], one panel per label set.

    Counts are drawn on a log scale: most labels pile up at 0 or 1 and the interesting,
    corrected ones in between would be invisible on a linear axis.

    Args:
        panels: one :class:`LabelPanel` per label set.
        title: the figure title (method and epoch).
        bins: equal-width bins over [0, 1] (the last one includes 1).

    Returns:
        The figure (one axes per panel).
    """
    if not panels:
        raise ValueError("label_histogram_figure needs at least one panel")
    fig = _new_figure(len(panels))
    edges = np.linspace(0.0, 1.0, bins + 1)
    for i, panel in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        y = np.asarray(panel.values, dtype=np.float64).reshape(-1)
        groups, colours, labels = _truth_split(y, panel.true_clean)
        ax.hist(groups, bins=edges, stacked=True, color=colours, alpha=0.7, label=labels,
                edgecolor="white", linewidth=0.3)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())  # 1, 10, 100 rather than 10^k
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlim(0.0, 1.0)
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel("pairs per bin (count, log scale)")
    _shared_legend(fig, fig.axes)
    fig.suptitle(title)
    return fig


def detection_figure(history: Mapping[str, Mapping[int, Mapping[str, float]]],
                     title: str = "noise detection (positives: noisy pairs)") -> Figure:
    """Noise-detection precision, recall and F1 per epoch: a panel per score, a line per network.

    Args:
        history: ``{series: {epoch: {"precision": p, "recall": r, "f1": f}}}``; a series is a
            network (``"A"``) or another detector (``"labels"``). Missing scores are skipped.
        title: the figure title.

    Returns:
        The figure (three axes).
    """
    if not any(history.values()):
        raise ValueError("detection_figure needs at least one epoch of scores")
    fig = _new_figure(len(DETECTION_METRICS), width=4.2, height=3.6)
    for i, metric in enumerate(DETECTION_METRICS):
        ax = fig.add_subplot(1, len(DETECTION_METRICS), i + 1)
        for series, by_epoch in history.items():
            points = sorted((e, s[metric]) for e, s in by_epoch.items() if metric in s)
            if points:
                epochs, values = zip(*points)
                ax.plot(epochs, values, marker="o", ms=4, label=series)
        ax.set_ylim(-0.02, 1.02)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(metric if metric != "f1" else "F1")
        ax.set_xlabel("epoch")
        ax.set_ylabel(f"{metric if metric != 'f1' else 'F1'} (fraction)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, title="detector", title_fontsize=8)
    fig.suptitle(title)
    return fig


def rsum_figure(series: Mapping[str, Mapping[int, float]], warmup_epochs: Collection[int] = (),
                title: str = "validation rSum (1K)") -> Figure:
    """Validation rSum per epoch, a line per logged key; warm-up epochs shaded.

    Args:
        series: ``{name: {epoch: rsum}}`` (e.g. ``"val/rsum"``, ``"val_A/rsum"``).
        warmup_epochs: the method's warm-up epochs (shaded, hollow points; validated like any
            epoch, selected only with ``select_warmup``).
        title: the figure title.

    Returns:
        The figure (one axes).
    """
    if not any(series.values()):
        raise ValueError("rsum_figure needs at least one epoch of rSum")
    fig = _new_figure(1, width=6.4, height=4.0)
    ax = fig.add_subplot(1, 1, 1)
    warm = sorted(set(warmup_epochs))
    for j, epoch in enumerate(warm):
        ax.axvspan(epoch - 0.5, epoch + 0.5, color="gold", alpha=0.25,
                   label="warm-up epochs (hollow points)" if j == 0 else None)
    for name, by_epoch in series.items():
        points = sorted(by_epoch.items())
        if not points:
            continue
        epochs, values = zip(*points)
        (line,) = ax.plot(epochs, values, marker="o", ms=4, label=name)
        hollow = [(e, v) for e, v in points if e in set(warm)]
        if hollow:  # warm-up points hollow: they are not candidates for the best checkpoint
            he, hv = zip(*hollow)
            ax.plot(he, hv, ls="none", marker="o", ms=6, mfc="white", mec=line.get_color())
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("rSum (%, R@1+5+10 of both directions; max 600)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def save_figure(fig: Figure, path: str | Path, dpi: int = 100) -> Path:
    """Write ``fig`` as a PNG atomically (a temporary file beside ``path``, then a rename).

    Returns:
        ``path``.
    """
    return atomic_write(path, lambda handle: fig.savefig(handle, format="png", dpi=dpi))
