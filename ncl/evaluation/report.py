"""Paper-style result tables and crash-safe JSON/CSV result files."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any, Literal

from ncl.evaluation.protocol import Results
from ncl.io import new_temporary
from ncl.metrics.retrieval import RETRIEVAL_KEYS

Media = Literal["image", "video"]
"""What the "image" side of the pairs is: the metric keys (``i2t_*``, ``t2i_*``) stay the same."""
_DIRECTIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "image": (("i2t", "Image -> Text"), ("t2i", "Text -> Image")),
    "video": (("i2t", "Video -> Text"), ("t2i", "Text -> Video")),
}
#: Headers of median and mean rank: image-text code (VSE++, SCAN) prints ``medr``/``meanr``,
#: video-text papers' tables (and LNC's appendix) ``MdR``/``MnR``.
_RANK_HEADERS: dict[str, tuple[str, str]] = {"image": ("medr", "meanr"), "video": ("MdR", "MnR")}
_GAP = "  "
DECIMALS = 4
"""Decimal places of the numbers in the JSON and CSV result files."""
#: Top-level key of ``test_results.json`` holding the tested model's training noise (the
#: other keys are systems); absent when the checkpoint does not say.
TRAINING_NOISE = "training_noise"


def media_of(datamodule: Any) -> Media:
    """``"video"`` for a :class:`~ncl.data.video.VideoDataModule`, ``"image"`` otherwise."""
    from ncl.data.video import VideoDataModule  # the data package is not needed to format a table

    return "video" if isinstance(datamodule, VideoDataModule) else "image"


def _direction_columns(show_ranks: bool, media: Media = "image") -> list[tuple[str, str]]:
    """(metric key suffix, header) of the columns under one direction."""
    cols = [("r1", "R@1"), ("r5", "R@5"), ("r10", "R@10")]
    if show_ranks:
        median, mean = _RANK_HEADERS[media]
        cols += [("medr", median), ("meanr", mean)]
    return cols


def _table_rows(results: Results, show_ranks: bool,
                media: Media) -> tuple[list[str], list[list[str]]]:
    """Header cells and body cells (one row per system and protocol), numbers to 1 decimal."""
    columns = _direction_columns(show_ranks, media)
    header = ["System", "Protocol"]
    for _ in _DIRECTIONS[media]:
        header += [h for _, h in columns]
    header.append("rSum")
    body = []
    for system, by_protocol in results.items():
        for protocol, metrics in by_protocol.items():
            row = [system, protocol]
            for prefix, _ in _DIRECTIONS[media]:
                row += [f"{metrics[f'{prefix}_{k}']:.1f}" for k, _ in columns]
            row.append(f"{metrics['rsum']:.1f}")
            body.append(row)
    return header, body


def format_table(results: Results, show_ranks: bool = False, media: Media = "image") -> str:
    """Render results like the papers' Table 1: one row per (system, protocol).

    Columns: System, Protocol, Image->Text R@1 R@5 R@10, Text->Image R@1 R@5 R@10, rSum, all
    with one decimal; ``show_ranks`` adds medr and meanr to each direction. Video tables
    (``media="video"``) are headed Video -> Text and Text -> Video and always show the median
    and mean rank, as ``MdR`` and ``MnR``: video-text papers report them next to the recalls.

    Args:
        results: ``results[system][protocol][metric]`` as from ``evaluate_systems``.
        show_ranks: Also print median and mean rank (always on for video).
        media: ``"image"`` or ``"video"`` (:func:`media_of` a DataModule).

    Returns:
        The table as text, lines joined by ``\\n``, without a trailing newline.

    Raises:
        ValueError: If ``results`` is empty, ``media`` unknown or a metric the table needs
            is missing.
    """
    if not results or not any(results.values()):
        raise ValueError("results must contain at least one system with one protocol")
    if media not in _DIRECTIONS:
        raise ValueError(f"media must be one of {sorted(_DIRECTIONS)}, got {media!r}")
    show_ranks = show_ranks or media == "video"
    try:
        header, body = _table_rows(results, show_ranks, media)
    except KeyError as err:
        raise ValueError(f"results lack the metric {err.args[0]!r} needed by the table") from err
    widths = [max(len(row[j]) for row in [header, *body]) for j in range(len(header))]
    n_dir = len(_direction_columns(show_ranks, media))

    def line(cells: list[str]) -> str:
        names = [cells[j].ljust(widths[j]) for j in range(2)]
        numbers = [cells[j].rjust(widths[j]) for j in range(2, len(cells))]
        return _GAP.join(names + numbers).rstrip()

    # Group labels centred over the columns of each direction.
    groups = [" " * (sum(widths[:2]) + len(_GAP))]
    for d, (_, label) in enumerate(_DIRECTIONS[media]):
        span = widths[2 + d * n_dir : 2 + (d + 1) * n_dir]
        groups.append(label.center(sum(span) + len(_GAP) * (len(span) - 1)))
    title = _GAP.join(groups).rstrip()
    return "\n".join([title, line(header), *(line(row) for row in body)])


def _metric_columns(results: Results) -> list[str]:
    """Metric keys in canonical order first, then any extra keys sorted by name."""
    seen = {k for by_protocol in results.values() for m in by_protocol.values() for k in m}
    return [k for k in RETRIEVAL_KEYS if k in seen] + sorted(seen - set(RETRIEVAL_KEYS))


def _rounded(value: float) -> float:
    """``value`` to :data:`DECIMALS` places: ``14.600000000000001`` is written ``14.6``.

    Recalls are multiples of 100 / N (0.1 for 1,000 queries, 0.004 for 25,000) and fold means
    multiples of a fifth of that, so four decimals keep every recall exact.
    """
    return round(float(value), DECIMALS)


def _rounded_results(results: Results) -> Results:
    """The same nesting with every metric rounded (for the JSON file)."""
    return {system: {protocol: {k: _rounded(v) for k, v in metrics.items()}
                     for protocol, metrics in by_protocol.items()}
            for system, by_protocol in results.items()}


def _csv_text(results: Results) -> str:
    """CSV with header ``system,protocol,<metrics>``; a metric a row lacks is left empty."""
    buffer = io.StringIO()
    columns = _metric_columns(results)
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["system", "protocol", *columns])
    for system, by_protocol in results.items():
        for protocol, metrics in by_protocol.items():
            values = [repr(_rounded(metrics[c])) if c in metrics else "" for c in columns]
            writer.writerow([system, protocol, *values])
    return buffer.getvalue()


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file next to ``path``, fsync it, then ``os.replace``.

    A crash leaves either the previous file or a stray ``.tmp`` file, never a truncated file
    under the final name.
    """
    fd, tmp = new_temporary(path)  # the mode of a plain open(), not mkstemp's 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_results(document: dict[str, Any]) -> tuple[Results, dict[str, Any]]:
    """A loaded ``test_results.json`` as ``(results[system][protocol][metric], training_noise)``;
    the noise record is empty when the file has none (older files, ensembles of checkpoints).
    Read the file through this rather than iterating its keys: the noise is not a system."""
    results = {k: v for k, v in document.items() if k != TRAINING_NOISE}
    return results, dict(document.get(TRAINING_NOISE) or {})


def write_results(
    results: Results, out_dir: str | Path, stem: str = "test_results",
    training_noise: dict[str, Any] | None = None,
) -> tuple[Path, Path]:
    """Write results as ``<stem>.json`` (nested, as given) and ``<stem>.csv`` (flat), atomically.

    The CSV has one row per (system, protocol) and one column per metric; numbers in both
    files are rounded to :data:`DECIMALS` places (recalls stay exact).

    Args:
        results: ``results[system][protocol][metric]`` as from ``evaluate_systems``.
        out_dir: Directory; created if missing.
        stem: File name without extension.
        training_noise: the noise the tested model was trained on (SHA-256, pairing digest,
            registry name: :data:`ncl.data.noise_record.TRAINING_NOISE_KEYS`); written into the
            JSON under the top-level key :data:`TRAINING_NOISE` beside the systems, so that
            two results on the same pairing can be recognised. Omitted when unknown.

    Returns:
        ``(json_path, csv_path)``.

    Raises:
        ValueError: If ``results`` is empty or ``stem`` is not a plain file name.
    """
    if not results:
        raise ValueError("results must contain at least one system")
    if not stem or Path(stem).name != stem or stem in (".", ".."):
        raise ValueError(f"stem must be a plain file name without directories, got {stem!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = out / f"{stem}.json", out / f"{stem}.csv"
    document: dict[str, Any] = dict(_rounded_results(results))
    if training_noise:
        if TRAINING_NOISE in document:
            raise ValueError(f"a system may not be called {TRAINING_NOISE!r}")
        document[TRAINING_NOISE] = dict(training_noise)
    _write_atomic(json_path, json.dumps(document, indent=2) + "\n")
    _write_atomic(csv_path, _csv_text(results))
    return json_path, csv_path
