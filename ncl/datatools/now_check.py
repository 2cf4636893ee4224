"""``ncl data check`` for NoW's layout (:mod:`ncl.data.now`), named by its declaration
(``ncl/data/dataset_facts/h5100k_precomp.json``).

The features are checked as the precomp layout's (:mod:`ncl.datatools.layout_check`: shape,
dtype, NaN/Inf, the declared 36 x 768 and the official counts 98,000 / 1,000 / 1,000); the
captions of all three tokenizers are read as :class:`~ncl.data.now.NowDataModule` reads them
(ids within their vocabulary, one caption per image), and ``{split}_ids.txt`` must have one
line per image (a warning otherwise: training does not read it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ncl.data.now import TOKENIZERS, caption_file, load_now_vocabulary, read_now_captions, vocab_file
from ncl.data.precomp import features_path
from ncl.datatools.layout_check import (
    DATASETS,
    LayoutReport,
    RowCallback,
    SplitRow,
    _check_counts,
    _check_feature_dims,
    _check_features,
    _check_noise,
)
from ncl.errors import DataError


def _vocabularies(data_root: Path, report: LayoutReport) -> dict[str, tuple[int, int, int]]:
    """``{tokenizer: (size, <start>, <end>)}`` of the vocabularies that load; a problem per other."""
    found = {}
    for tokenizer in TOKENIZERS:
        try:
            vocab, start, end = load_now_vocabulary(vocab_file(data_root, tokenizer))
        except DataError as err:
            report.problems.append(str(err))
            continue
        found[tokenizer] = (len(vocab), start, end)
    return found


def _check_captions(data_dir: Path, split: str, vocabs: dict[str, tuple[int, int, int]],
                    row: SplitRow, report: LayoutReport) -> Path | None:
    """Read every tokenizer's caption file of the split; all must agree on the count."""
    counts: dict[str, int] = {}
    first = None
    for tokenizer, (size, start, end) in vocabs.items():
        path = caption_file(data_dir, split, tokenizer)
        try:
            lines, _, _ = read_now_captions(path, size, start, end)
        except DataError as err:
            report.problems.append(str(err))
            continue
        counts[path.name] = len(lines)
        first = first or path
    if len(set(counts.values())) > 1:
        report.problems.append(f"{data_dir}: the {split} caption files disagree on the number of "
                               f"captions: {counts}")
    row.captions = next(iter(counts.values()), None)
    return first


def _check_ids(data_dir: Path, split: str, row: SplitRow, report: LayoutReport) -> None:
    """``{split}_ids.txt``: one index per image (only a warning: training never reads it)."""
    path = data_dir / f"{split}_ids.txt"
    if not path.is_file():
        report.warnings.append(f"{path}: missing (the pairs' indices in NoW's source set; "
                               f"training does not need it)")
        return
    n = sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    if row.images is not None and n != row.images:
        report.warnings.append(f"{path}: {n:,} lines for {row.images:,} images")


def check_now_layout(data_root: Path, dataset: str, full_scan: bool = False, sample: int = 1000,
                     on_rows: RowCallback | None = None,
                     configs: Sequence[Path] = ()) -> LayoutReport:
    """Check ``<data_root>/<dataset>/`` in NoW's layout and ``<data_root>/vocab/``'s three NoW
    vocabularies; arguments and result as :func:`ncl.datatools.layout_check.check_layout`."""
    data_root = Path(data_root)
    data_dir = data_root / dataset
    report = LayoutReport(dataset, data_dir)
    if not data_dir.is_dir():
        report.problems.append(f"{data_dir}: dataset folder missing")
        return report
    facts = DATASETS[dataset]
    vocabs = _vocabularies(data_root, report)
    for split in facts.splits:
        row = SplitRow(split)
        feat_path = features_path(data_dir, split)
        feats = _check_features(feat_path, row, report, facts.feature_shape, full_scan, sample, on_rows)
        cap_path = _check_captions(data_dir, split, vocabs, row, report)
        if feats is not None and cap_path is not None:
            _check_counts(dataset, row, feat_path, cap_path, report)
        _check_ids(data_dir, split, row, report)
        report.rows.append(row)
    _check_feature_dims(report, data_dir)
    _check_noise(report, data_dir, dataset, list(configs))
    return report
