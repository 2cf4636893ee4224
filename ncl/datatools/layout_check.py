"""Check a dataset folder in the official precomputed layout before a long run (``ncl data check``).

:func:`check_layout` looks at every split of ``<data_root>/<dataset>/`` the way ncl will read
it (:mod:`ncl.data.precomp`) and collects what it finds instead of stopping at the first
error, so that one run names every problem of a download:

* **problems** make the layout unusable: a missing or unreadable file, features that are not
  ``(images, regions, dim)`` floating point, a caption count that is not a whole multiple of
  the image count, NaN/Inf in the features, a missing or malformed vocabulary.
* **warnings** are worth a look but do not stop ``ncl fit``: row counts other than the
  official ones (users build their own splits), a dtype other than float32, a high share of
  ``<unk>`` tokens (usually the wrong vocabulary for the captions), empty captions.

The function is pure: it prints nothing and needs no Lightning; the CLI renders
:meth:`LayoutReport.table` and the two lists.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ncl.data.facts import DATASETS, SPLIT_COUNTS  # official counts: a different one is a warning
from ncl.data.precomp import (
    SCAN_CHUNK_BYTES,
    SPLITS,
    dtype_note,
    encode_all,
    features_path,
    nonfinite_rows,
    read_captions,
)
from ncl.data.vocab import END, START, UNK, Vocabulary, load_vocabulary
from ncl.datatools.noise_check import check_noise_files
from ncl.errors import DataError

# BUTD bottom-up features of the official datasets: 36 regions of 2048 dimensions (a dataset
# declares its own shape: ncl.data.facts.DatasetFacts.feature_shape).
OFFICIAL_FEATURE_SHAPE = (36, 2048)
# Splits of a dataset ncl does not know (the synthetic ones): what synthetic.generate writes.
DEFAULT_SPLITS = ("train", "dev", "test")
# Above this share of <unk> among a split's word tokens the vocabulary probably does not belong
# to the captions (the official vocabularies leave about 1 % of test words unknown).
UNK_WARN_SHARE = 0.05
SHOW_BAD = 5  # bad images named in a NaN/Inf problem

RowCallback = Callable[[int], None]


@dataclass
class SplitRow:
    """What was found for one split (``None`` where a file could not be read)."""

    split: str
    images: int | None = None
    captions: int | None = None
    feature_shape: tuple[int, ...] | None = None
    dtype: str | None = None
    unk_share: float | None = None
    scanned: int = 0  # images checked for NaN/Inf
    full_scan: bool = False

    @property
    def captions_per_image(self) -> float | None:
        """Captions per image; ``None`` when either count is unknown or there are no images."""
        if not self.images or self.captions is None:
            return None
        return self.captions / self.images

    def cells(self) -> list[str]:
        """The row as table cells, ``-`` for what could not be read."""
        cpi = self.captions_per_image
        scan = "-"
        if self.images:
            scan = f"{self.scanned:,} (all)" if self.full_scan else f"{self.scanned:,} of {self.images:,}"
        return [self.split, _num(self.images), _num(self.captions),
                "-" if cpi is None else f"{cpi:g}",
                "-" if self.feature_shape is None else " x ".join(str(d) for d in self.feature_shape),
                self.dtype or "-",
                "-" if self.unk_share is None else f"{100 * self.unk_share:.2f}%",
                scan]


TABLE_HEADER = ["split", "images", "captions", "caps/img", "features", "dtype", "<unk>",
                "NaN/Inf scanned"]


def _num(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


@dataclass
class LayoutReport:
    """The outcome of :func:`check_layout`: usable when ``problems`` is empty."""

    dataset: str
    data_dir: Path
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    rows: list[SplitRow] = field(default_factory=list)
    noise_files: list[str] = field(default_factory=list)  # one line per valid noise file

    @property
    def ok(self) -> bool:
        return not self.problems

    def table(self) -> str:
        """The rows as a plain text table, columns aligned (numbers right, text left)."""
        grid = [TABLE_HEADER] + [row.cells() for row in self.rows]
        widths = [max(len(r[i]) for r in grid) for i in range(len(TABLE_HEADER))]
        right = {1, 2, 3, 6}  # numeric columns
        lines = []
        for r in grid:
            cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
            lines.append("  ".join(cells).rstrip())
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)


def expected_splits(dataset: str, data_dir: Path) -> list[str]:
    """The splits the dataset must have, then any other known split present on disk (an
    F30K ``testall`` made by a user is checked too, but its absence is no problem)."""
    required = list(SPLIT_COUNTS.get(dataset, {s: None for s in DEFAULT_SPLITS}))
    extra = [s for s in SPLITS if s not in required and features_path(data_dir, s).is_file()]
    return required + extra


def sample_rows(n_images: int, sample: int) -> np.ndarray:
    """``sample`` image indices spread evenly over ``n_images``, first and last included (the
    same rule as ``ncl fit``'s start-up check, so a report and a fit look at the same rows)."""
    count = min(max(sample, 0), n_images)
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.linspace(0, n_images - 1, count).astype(np.int64))


def _blocks(feats: np.ndarray, rows: np.ndarray | None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(indices, block)`` pairs covering ``rows`` (every row when ``None``), each block about
    :data:`SCAN_CHUNK_BYTES`: memory stays bounded however large the file (COCO train: 33 GB)."""
    n = int(feats.shape[0])
    row_bytes = max(1, int(np.prod(feats.shape[1:])) * feats.dtype.itemsize)
    step = max(1, SCAN_CHUNK_BYTES // row_bytes)
    if rows is None:
        for start in range(0, n, step):
            stop = min(start + step, n)
            # A contiguous slice of the memory map: one sequential read.
            yield np.arange(start, stop), np.asarray(feats[start:stop])
        return
    for start in range(0, len(rows), step):
        chunk = rows[start:start + step]
        yield chunk, np.asarray(feats[chunk])


def scan_nonfinite(feats: np.ndarray, rows: np.ndarray | None,
                   on_rows: RowCallback | None = None) -> tuple[list[int], int, int]:
    """Look for NaN/Inf in ``rows`` of ``feats`` (all rows when ``None``).

    Returns:
        ``(first bad images, number of bad images, images scanned)``; ``on_rows`` is called
        with the number of images of each block read (for a progress bar).
    """
    bad: list[int] = []
    n_bad = scanned = 0
    for indices, block in _blocks(feats, rows):
        hits = indices[nonfinite_rows(block)]
        n_bad += len(hits)
        bad.extend(int(i) for i in hits[: max(0, SHOW_BAD - len(bad))])
        scanned += len(indices)
        if on_rows is not None:
            on_rows(len(indices))
    return bad, n_bad, scanned


def _check_features(path: Path, row: SplitRow, report: LayoutReport,
                    official: tuple[int, int] | None, full_scan: bool, sample: int,
                    on_rows: RowCallback | None) -> np.ndarray | None:
    """Open, shape-check and NaN-scan one feature file; ``None`` when it is unusable.
    ``official``: the dataset's declared ``(regions, dim)`` (another is a warning), or ``None``."""
    if not path.is_file():
        report.problems.append(f"{path}: feature file missing")
        return None
    try:
        feats = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as err:
        report.problems.append(f"{path}: not a readable .npy array ({err})")
        return None
    row.feature_shape, row.dtype = tuple(int(d) for d in feats.shape), str(feats.dtype)
    if feats.ndim != 3:
        report.problems.append(f"{path}: features must have shape (images, regions, dim); "
                               f"found rank {feats.ndim}, shape {feats.shape}")
        return None
    if not np.issubdtype(feats.dtype, np.floating):
        report.problems.append(f"{path}: features must be floating point (float32 expected); "
                               f"found {feats.dtype}")
        return None
    row.images = int(feats.shape[0])
    if row.images == 0:
        report.problems.append(f"{path}: holds no images")
        return None
    note = dtype_note(path, feats)  # float16/float64: usable, but worth a line
    if note:
        report.warnings.append(note)
    if official is not None and tuple(feats.shape[1:]) != tuple(official):
        what = "BUTD features are" if tuple(official) == OFFICIAL_FEATURE_SHAPE else "features are"
        report.warnings.append(f"{path}: {feats.shape[1]} regions x {feats.shape[2]} dims, the "
                               f"official {what} {official[0]} x {official[1]}")
    rows = None if full_scan else sample_rows(row.images, sample)
    bad, n_bad, row.scanned = scan_nonfinite(feats, rows, on_rows)
    row.full_scan = full_scan
    if n_bad:
        how = "full scan" if full_scan else f"{row.scanned} sampled images"
        more = f" and {n_bad - len(bad)} more" if n_bad > len(bad) else ""
        report.problems.append(f"{path}: NaN or Inf in {n_bad} image(s): "
                               f"{', '.join(map(str, bad))}{more} ({how})")
    return feats


def _check_captions(data_dir: Path, split: str, row: SplitRow,
                    report: LayoutReport) -> tuple[list[str], Path] | None:
    """Read the captions as ncl does; its warnings (empty captions) become report warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            captions, path = read_captions(data_dir, split)
        except DataError as err:
            report.problems.append(str(err))
            return None
    report.warnings.extend(str(w.message) for w in caught)
    row.captions = len(captions)
    return captions, path


def _check_counts(dataset: str, row: SplitRow, feat_path: Path, cap_path: Path,
                  report: LayoutReport) -> None:
    """Captions a whole multiple of images (a problem otherwise); official counts (warnings)."""
    n_img, n_cap = row.images, row.captions
    if n_img is None or n_cap is None:
        return
    if n_cap == 0 or n_cap % n_img:
        report.problems.append(f"{cap_path}: {n_cap} captions is not a whole multiple of the "
                               f"{n_img} images in {feat_path}")
    known = SPLIT_COUNTS.get(dataset, {}).get(row.split)
    if known is None:
        return
    if n_img != known[0]:
        report.warnings.append(f"{feat_path}: {n_img:,} images, the official {dataset} "
                               f"{row.split} split has {known[0]:,}")
    if n_cap != known[1]:
        report.warnings.append(f"{cap_path}: {n_cap:,} captions, the official {dataset} "
                               f"{row.split} split has {known[1]:,} ({known[1] // known[0]} per image)")


def unk_share(captions: list[str], vocab: Vocabulary) -> float:
    """Share of word tokens (``<start>``/``<end>`` not counted) that map to ``<unk>``, with the
    tokenizer and token cache ``ncl fit`` uses (so this also warms the cache for the fit)."""
    flat, _ = encode_all(captions, vocab)
    words = int(np.count_nonzero((flat != START) & (flat != END)))
    return float(np.count_nonzero(flat == UNK)) / words if words else 0.0


def _load_vocab(data_root: Path, dataset: str, report: LayoutReport) -> Vocabulary | None:
    """The vocabulary where the DataModule looks by default; a problem when absent or malformed."""
    path = data_root / "vocab" / f"{dataset}_vocab.json"
    try:
        return load_vocabulary(path)
    except DataError as err:
        report.problems.append(str(err))
        return None


def check_split(data_dir: Path, dataset: str, split: str, vocab: Vocabulary | None,
                report: LayoutReport, full_scan: bool, sample: int,
                on_rows: RowCallback | None = None) -> SplitRow:
    """Check one split's features, captions, counts and vocabulary coverage into ``report``."""
    row = SplitRow(split)
    feat_path = features_path(data_dir, split)
    facts = DATASETS.get(dataset)
    official = facts.feature_shape if facts is not None else None
    feats = _check_features(feat_path, row, report, official, full_scan, sample, on_rows)
    read = _check_captions(data_dir, split, row, report)
    if read is None:
        return row
    captions, cap_path = read
    if feats is not None:
        _check_counts(dataset, row, feat_path, cap_path, report)
    if vocab is not None:
        row.unk_share = unk_share(captions, vocab)
        if row.unk_share > UNK_WARN_SHARE:
            report.warnings.append(f"{cap_path}: {100 * row.unk_share:.1f}% of the words are "
                                   f"<unk> under the {dataset} vocabulary (above "
                                   f"{100 * UNK_WARN_SHARE:.0f}%): is it the right vocabulary?")
    return row


def _check_feature_dims(report: LayoutReport, data_dir: Path) -> None:
    """All splits must share (regions, dim): one model encodes them all."""
    shapes = {r.split: r.feature_shape[1:] for r in report.rows
              if r.feature_shape is not None and len(r.feature_shape) == 3}
    if len(set(shapes.values())) > 1:
        first = next(iter(shapes))
        for split, shape in shapes.items():
            if shape != shapes[first]:
                report.problems.append(f"{features_path(data_dir, split)}: regions x dim {shape} "
                                       f"differ from {first}'s {shapes[first]}")


def check_layout(data_root: Path, dataset: str, full_scan: bool = False, sample: int = 1000,
                 on_rows: RowCallback | None = None,
                 configs: Sequence[Path] = ()) -> LayoutReport:
    """Check ``<data_root>/<dataset>/`` and ``<data_root>/vocab/<dataset>_vocab.json``.

    Args:
        data_root: the folder given as ``--data.data_root``.
        dataset: ``f30k_precomp``, ``coco_precomp``, ``cc152k_precomp`` (checked against the
            official counts) or any other name in the same layout (e.g. a synthetic dataset:
            ``train``, ``dev`` and ``test`` splits, no count checks).
        full_scan: look for NaN/Inf in every image instead of a sample (reads the whole file).
        sample: images per split checked for NaN/Inf otherwise, spread evenly over the file.
        on_rows: called with the number of images of each block read (a progress bar).
        configs: configs whose noise files must be present and valid
            (:func:`ncl.datatools.noise_check.check_noise_files`, which also checks every file of
            the dataset folder named as a published noise file).

    A dataset whose declaration names a ``checker`` (another layout than the BUTD precomp one)
    is checked by that function, called with the same arguments.

    Returns:
        The report; nothing is printed and nothing is raised for a bad layout.
    """
    facts = DATASETS.get(dataset)
    if facts is not None and facts.checker:
        return declared_checker(facts.checker)(Path(data_root), dataset, full_scan, sample,
                                               on_rows, configs)
    data_root = Path(data_root)
    data_dir = data_root / dataset
    report = LayoutReport(dataset, data_dir)
    if not data_dir.is_dir():
        report.problems.append(f"{data_dir}: dataset folder missing")
        return report
    vocab = _load_vocab(data_root, dataset, report)
    for split in expected_splits(dataset, data_dir):
        report.rows.append(check_split(data_dir, dataset, split, vocab, report, full_scan,
                                       sample, on_rows))
    _check_feature_dims(report, data_dir)
    _check_noise(report, data_dir, dataset, list(configs))
    return report


def declared_checker(spec: str) -> Callable[..., LayoutReport]:
    """The function a dataset declaration names as ``"module:function"``."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def _check_noise(report: LayoutReport, data_dir: Path, dataset: str, configs: list[Path]) -> None:
    """Add the noise files' lines, warnings and problems to the report."""
    train = next((r for r in report.rows if r.split == "train"), None)
    counts = None
    if train is not None and train.images and train.captions is not None:
        counts = (train.images, train.captions)
    lines, warnings_, problems = check_noise_files(data_dir, dataset, counts, configs)
    report.noise_files.extend(lines)
    report.warnings.extend(warnings_)
    report.problems.extend(problems)
