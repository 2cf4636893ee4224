"""The grid: cells, presets, and the CLI overrides of one cell.

A cell is one method on one backbone at one noise kind, ratio and seed. A :class:`Preset`
says which cells a grid has and how each is configured: either the quickstart config with the
method rows of :data:`ncl.reproduce.cells.METHODS` (the synthetic presets) or the method
configs in ``configs/`` (``paper``, ``video-synthetic``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from ncl.compose import expand
from ncl.methods.declaration import rows as declared_rows
from ncl.reproduce.cells import BENCH, METHODS

NOISE_KINDS = ("caption", "image")
CLEAN = "clean"  # the noise kind of ratio-0 cells, shared by both tables

#: The method rows every method class declares (:class:`ncl.methods.declaration.Row`).
ROWS = declared_rows()
#: Row labels as in the papers: ``{}`` is the backbone (SGR* = summed warm-up, then hardest).
LABELS: dict[str, str] = {name: row.label for name, row in ROWS.items()}
#: The backbones of the synthetic presets (the quickstart's SGRAF, by ``module_name``); a row
#: may declare another for itself (IN2R's ``VSE``: its overrides name a backbone class that
#: takes ``module_name`` as a label), see :func:`backbone_allowed`.
BACKBONES = ("SGR", "SAF")

# --- synthetic-small: measured choices (docs/results.md, "The reproduction tool") -----------------
#: Batch 16: 313 steps an epoch at about the cost of batch 64's 79 (SGR scores B x B pairs).
SMALL_BATCH = 16
#: Summed (SGR*) / mean-hinge (NCR, LNC) / triplet (ReCon) warm-up epochs: 939 steps. Measured
#: (SGR, seed 0): the summed triplet reached validation rSum 431 / 526 after 2 / 3 epochs at 0 %;
#: SGR* switched at 440 (caption 20 %) and 372 (image 20 %) and survived, at 263 (caption 50 %)
#: and collapsed, as the issue-15 measurement predicts for switches below about 400-455.
SMALL_WARMUP = 3
SMALL_EPOCHS = 8
# The methods' own synthetic-small overrides (CRCL's pieces, LNC's rules, DECL's k, L2RM's
# queue) are their rows' ``small`` (ncl/methods/*.py say why).
#: Tiny: the ``tiny`` synthetic preset (6 regions x 16 dims) and a backbone to match.
TINY_DATA = ["--data.preset=tiny", "--data.n_train=60", "--data.batch_size=16",
             "--model.backbone.init_args.img_dim=16", "--model.backbone.init_args.num_regions=6",
             "--model.backbone.init_args.word_dim=8", "--model.backbone.init_args.embed_size=16",
             "--model.backbone.init_args.sim_dim=8"]

def backbone_allowed(method: str, backbone: str) -> bool:
    """Whether the synthetic presets can run ``method`` on ``backbone``: SGR or SAF, or a
    backbone the method's row declares (:attr:`~ncl.methods.declaration.Row.small_backbones`)."""
    row = ROWS.get(method)
    return backbone in BACKBONES or (row is not None and backbone in row.small_backbones)


#: Config presets: method -> config stem (``{bb}`` backbone, ``{ds}`` dataset) in configs/.
PAPER_CONFIGS: dict[str, str] = {name: row.paper_config for name, row in ROWS.items() if row.paper_config}


def config_rows(configs: Path, dataset: str,
                backbones: Sequence[str] | None = None) -> tuple[tuple[str, str], ...]:
    """``(method, backbone)`` of every declared row with a paper config (:data:`ROWS`, in row
    order), on each backbone whose config for ``dataset`` is in ``configs``.

    The backbones tried are the row's :attr:`~ncl.methods.declaration.Row.paper_backbones`, or
    ``backbones`` (the video preset's ``("video",)``); a config name without ``{bb}`` (IN2R's
    ``in2r_vse_{ds}``) is for its row's own backbone only.
    """
    found = []
    for name, row in ROWS.items():
        if row.paper_config is None:
            continue
        for bb in row.paper_backbones if backbones is None else backbones:
            stem = row.paper_config.format(bb=bb, ds=dataset)
            own = "{bb}" in row.paper_config or bb in row.paper_backbones
            if own and (configs / f"{stem}.yaml").is_file():
                found.append((name, bb))
    return tuple(found)


@dataclass(frozen=True)
class Cell:
    """One grid cell: a method on a backbone at one noise kind, ratio and seed."""

    method: str
    backbone: str
    noise_type: str  # "caption", "image", or CLEAN at ratio 0
    noise: float
    seed: int

    @property
    def id(self) -> str:
        """File-name-safe identity, e.g. ``ncr-SGR-caption-0.2-s0``."""
        return f"{self.method}-{self.backbone}-{self.noise_type}-{self.noise:g}-s{self.seed}"

    @property
    def label(self) -> str:
        """The table row, e.g. ``NCR-SGR``."""
        return LABELS.get(self.method, self.method + "-{}").format(self.backbone)


@dataclass(frozen=True)
class Preset:
    """A grid and how its cells are configured.

    Attributes:
        rows: ``(method, backbone)`` pairs, the tables' rows in order (config presets with
            :attr:`declared_rows`: filled by :meth:`resolved`).
        epochs: ``--trainer.max_epochs`` (``None``: the config's own).
        base: synthetic presets: overrides right after the quickstart config (the benchmark's
            batch 64 unless a preset says otherwise).
        overrides: synthetic presets: overrides after the method's and the backbone's.
        method_overrides: extra overrides per method (after :data:`METHODS`).
        from_configs: cells are the method configs in ``configs/`` (:data:`PAPER_CONFIGS`).
        dataset: config presets: the dataset of the config names (``None``: ``--dataset``).
        noise_seed: ``--data.noise_seed`` of every cell (``None``: the cell's seed).
        declared_rows: config presets: the rows are every declared row with a config for the
            dataset in ``configs/`` (:func:`config_rows`), on ``row_backbones`` if given.
    """

    name: str
    rows: tuple[tuple[str, str], ...]
    noise_types: tuple[str, ...]
    noises: tuple[float, ...]
    seeds: tuple[int, ...]
    epochs: int | None
    base: tuple[str, ...] = tuple(BENCH)
    overrides: tuple[str, ...] = ()
    method_overrides: dict[str, tuple[str, ...]] = field(default_factory=dict)
    from_configs: bool = False
    dataset: str | None = None
    noise_seed: int | None = None
    declared_rows: bool = False
    row_backbones: tuple[str, ...] | None = None

    def resolved(self, configs: Path, dataset: str) -> Preset:
        """The preset with its rows: :attr:`declared_rows` found in ``configs`` for its own
        dataset or else ``dataset`` (``--dataset``); any other preset as it is."""
        if not self.declared_rows:
            return self
        return replace(self, rows=config_rows(configs, self.dataset or dataset, self.row_backbones))


def _warmup(epochs: int) -> dict[str, tuple[str, ...]]:
    """Per-method overrides that set the warm-up of the methods that have one."""
    w = (f"--model.warmup_epochs={epochs}",)
    return {name: w for name, row in ROWS.items() if row.warmup}


def _small() -> dict[str, tuple[str, ...]]:
    """synthetic-small's per-method overrides: its warm-up, then each row's own ``small``."""
    warmup = _warmup(SMALL_WARMUP)
    return {name: (*warmup.get(name, ()), *row.small) for name, row in ROWS.items()
            if name in warmup or row.small}


#: Every row the methods put in the synthetic-small grid (:attr:`Row.small_backbones`), in
#: :attr:`Row.order`.
_ALL_SYNTHETIC = tuple((name, bb) for name, row in ROWS.items() for bb in row.small_backbones)

PRESETS: dict[str, Preset] = {
    "tiny": Preset("tiny", rows=(("ncr", "SAF"), ("rcl", "SAF")), noise_types=NOISE_KINDS,
                   noises=(0.0, 0.5), seeds=(0,), epochs=2, overrides=tuple(TINY_DATA),
                   method_overrides=_warmup(1)),
    "synthetic-small": Preset(
        "synthetic-small", rows=_ALL_SYNTHETIC, noise_types=NOISE_KINDS, noises=(0.0, 0.2, 0.5, 0.8),
        seeds=(0, 1, 2), epochs=SMALL_EPOCHS, overrides=(f"--data.batch_size={SMALL_BATCH}",),
        method_overrides=_small()),
    # The single-seed tables of docs/results.md and the method pages: every METHODS row as
    # written (batch 64, 14 epochs, 5 warm-up epochs; CRCL pieces 5/5/4). Their SAF rows are
    # ``--backbones SAF``; ``--extra`` adds the tables' other overrides.
    "benchmark": Preset(
        "benchmark", rows=tuple((m, "SGR") for m in METHODS), noise_types=NOISE_KINDS,
        noises=(0.0, 0.2, 0.5, 0.8), seeds=(0,), epochs=14),
    # configs/quickstart.yaml as shipped (batch 16, 6 epochs, 40 % image noise drawn with seed
    # 0): how reliably a first run learns (docs/quickstart.md, "Measurement").
    "quickstart": Preset(
        "quickstart", rows=(("rcl", "SGR"),), noise_types=("image",), noises=(0.4,),
        seeds=(0, 1, 2, 3, 4), epochs=None, base=(), noise_seed=0),
    # every declared row with a paper config, on each of its paper backbones with a config for
    # the dataset (--dataset), in row order
    "paper": Preset(
        "paper", rows=(), noise_types=NOISE_KINDS, noises=(0.0, 0.2, 0.5, 0.8), seeds=(0, 1, 2),
        epochs=None, from_configs=True, declared_rows=True),
    # configs/*_video_synthetic.yaml as shipped (every declared row with one): the table of
    # docs/video.md.
    "video-synthetic": Preset(
        "video-synthetic", rows=(), noise_types=("caption",), noises=(0.0, 0.2, 0.5), seeds=(0,),
        epochs=None, from_configs=True, dataset="synthetic", declared_rows=True,
        row_backbones=("video",)),
}


def grid(rows: Sequence[tuple[str, str]], noise_types: Sequence[str], noises: Sequence[float],
         seeds: Sequence[int]) -> list[Cell]:
    """The cells in run order (seed-major, so a partial grid has whole seeds); ratio 0 once."""
    cells: list[Cell] = []
    for seed in seeds:
        for noise in noises:
            kinds = [CLEAN] if noise == 0 else list(noise_types)
            for kind in kinds:
                cells.extend(Cell(m, b, kind, float(noise), seed) for m, b in rows)
    return list(dict.fromkeys(cells))


def data_options(config: Path) -> dict[str, Any]:
    """``data.init_args`` of ``config`` with the fragments it composes merged in, in the order
    the CLI applies them (later values win; :func:`ncl.compose.expand`)."""
    merged: dict[str, Any] = {}
    for value in expand(config):  # a file's path, or the composing file's own YAML text
        content = yaml.safe_load(value if "\n" in value else Path(value).read_text()) or {}
        merged.update((content.get("data") or {}).get("init_args") or {})
    return merged


def paper_config(method: str, backbone: str, dataset: str, noise_type: str,
                 configs: Path) -> tuple[Path, list[str]]:
    """The method's config in ``configs`` for a config cell, and the noise overrides it needs.

    The ``_imagenoise`` variant is used for image-level noise where one exists. A config whose
    noise file is for the other noise kind gets ``--data.noise_file=null`` (noise drawn from
    ``noise_seed``), so that a file of one kind is never read as the other.

    Raises:
        FileNotFoundError: no config for this method, backbone and dataset.
    """
    if method not in PAPER_CONFIGS:
        raise FileNotFoundError(f"--methods {method}: no paper config pattern (known: {sorted(PAPER_CONFIGS)})")
    stem = PAPER_CONFIGS[method].format(bb=backbone.lower(), ds=dataset)
    path = configs / f"{stem}.yaml"
    if noise_type == "image" and (configs / f"{stem}_imagenoise.yaml").exists():
        path = configs / f"{stem}_imagenoise.yaml"
    if not path.exists():
        raise FileNotFoundError(f"no config configs/{path.name} for {method} with {backbone} on {dataset}")
    data = data_options(path)
    extra = []
    if data.get("noise_file") and data.get("noise_type") != noise_type and noise_type != CLEAN:
        extra.append("--data.noise_file=null")
    return path, extra


@dataclass(frozen=True)
class Setting:
    """Where and how a grid's cells run (the same for every cell of one invocation).

    Attributes:
        configs: the repository's ``configs/`` folder.
        dataset: config presets without a dataset of their own: ``f30k`` or ``coco``.
        data_root: config presets: ``--data.data_root`` (``None``: the config's).
        gpu: one GPU per cell.
        extra: ``--extra`` overrides of every cell (fit and test).
    """

    configs: Path
    dataset: str = "f30k"
    data_root: str | None = None
    gpu: bool = False
    extra: tuple[str, ...] = ()


def cell_args(cell: Cell, preset: Preset, run_root: Path, setting: Setting) -> tuple[list[str], list[str]]:
    """``(common, fit_only)`` CLI overrides of one cell (both sub-commands / the fit)."""
    kind = "none" if cell.noise_type == CLEAN else cell.noise_type
    noise_seed = cell.seed if preset.noise_seed is None else preset.noise_seed
    noise = [f"--data.noise_type={kind}", f"--data.noise_ratio={cell.noise:g}", f"--data.noise_seed={noise_seed}"]
    if preset.from_configs:
        config, extra = paper_config(cell.method, cell.backbone, preset.dataset or setting.dataset,
                                     cell.noise_type, setting.configs)
        common = ["--config", str(config), *extra, *setting.extra]
        if setting.data_root is not None:
            common.append(f"--data.data_root={setting.data_root}")
    else:
        common = ["--config", str(setting.configs / "quickstart.yaml"), *preset.base, *METHODS[cell.method],
                  f"--model.backbone.init_args.module_name={cell.backbone}", *preset.overrides,
                  *preset.method_overrides.get(cell.method, ()), *setting.extra,
                  "--trainer.enable_model_summary=false"]
    # The CSV logger in the cell's folder, whatever the config's or ncl's default logger: the
    # run (checkpoints, metrics.csv with the detection diagnostics) is read back from there.
    common += ["--trainer.logger=ncl.runs.loggers.NclCSVLogger", f"--trainer.logger.init_args.save_dir={run_root}",
               *noise, f"--seed_everything={cell.seed}", f"--trainer.default_root_dir={run_root}",
               "--trainer.enable_progress_bar=false"]
    if setting.gpu:
        common += ["--trainer.accelerator=gpu", "--trainer.devices=1"]
    fit_only = [f"--trainer.max_epochs={preset.epochs}"] if preset.epochs is not None else []
    return common, fit_only
