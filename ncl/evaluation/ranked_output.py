"""What ``ncl predict`` writes and prints: its options, the ranked table (CSV or Parquet),
the metrics JSON beside it and the lines that say what was written.

:class:`ncl.callbacks.prediction_writer.RankedPairsWriter` calls these once the pure parts
(:mod:`ncl.evaluation.ranking`) have ranked the split; what differs between rankings comes
from the :class:`~ncl.evaluation.ranking.Ranking` in use. The application checks the options
before anything is loaded (:func:`ncl.cli.parser.check_prediction_options`); ``--ranking`` is
checked against the model's own rankings once the model is built
(:func:`ncl.evaluation.ranking.choose_ranking`).
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from ncl.data.predict_split import SPLITS
from ncl.errors import ConfigError
from ncl.evaluation.ranking import Ranking, Values
from ncl.io import atomic_write, atomic_write_text


# ------------------------------------------------------------------ options
def check_out(out: Path) -> None:
    """Raise ConfigError when ``--out`` names no table ncl can write (the folder's
    writability is checked by the application, :func:`ncl.cli.parser.check_prediction_options`)."""
    if out.suffix not in (".csv", ".parquet"):
        raise ConfigError(f"--out {out}: the name must end with .csv or .parquet")
    if out.suffix == ".parquet":
        try:
            import pyarrow.parquet  # noqa: F401
        except ImportError:
            raise ConfigError(f"--out {out}: Parquet needs pyarrow, which is not installed; "
                              "use a .csv name") from None
    if out.is_dir():
        raise ConfigError(f"--out {out} is a folder; give a file name")


def check_options(out: str | Path | None, split: str, batch_size: int | None,
                  out_later: bool = False) -> Path | None:
    """The options of ``ncl predict``, checked before anything is loaded.

    Args:
        out_later: a missing ``out`` is allowed (``--ckpt_path``: the table goes into the
            checkpoint's run folder, known once the path is resolved).

    Returns:
        ``out`` as a Path (``None`` when missing and ``out_later``).

    Raises:
        ConfigError: no ``--out`` (unless ``out_later``), an unknown split, a batch of fewer
            than 2 pairs (the mean hinge needs an in-batch negative), or an output name
            :func:`check_out` refuses. (``--ranking`` depends on the model: checked when it is
            built, :func:`ncl.evaluation.ranking.choose_ranking`.)
    """
    if out is None and not out_later:
        raise ConfigError("ncl predict needs --out FILE (.csv or .parquet)")
    if split not in SPLITS:
        raise ConfigError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    if batch_size is not None and batch_size < 2:
        raise ConfigError(f"--batch_size must be at least 2, got {batch_size}")
    if out is None:
        return None
    check_out(Path(out))
    return Path(out)



def write_table(table: dict[str, list], out: Path) -> None:
    """CSV, or Parquet for a ``.parquet`` name, the columns in the order of ``table``'s keys;
    written to a temporary name and renamed."""
    if out.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        atomic_write(out, lambda h: pq.write_table(pa.table(table), h))
        return
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(list(table))
    writer.writerows(zip(*table.values()))
    atomic_write_text(out, text.getvalue())


def metrics_path(out: Path) -> Path:
    """``suspicious.csv`` -> ``suspicious.metrics.json`` (beside the table)."""
    return out.with_name(f"{out.stem}.metrics.json")


def write_outputs(table: dict[str, list], summary: dict[str, object] | None, out: Path) -> None:
    """The table, then its metrics JSON (when there is a ground truth). A metrics file left
    beside ``out`` by an earlier run is removed: it would describe another ranking."""
    metrics_path(out).unlink(missing_ok=True)  # first: a failed write must not leave it
    write_table(table, out)
    if summary is not None:
        atomic_write_text(metrics_path(out), json.dumps(summary, indent=2) + "\n")


def report(ranking: Ranking, values: Values, summary: dict[str, object] | None, split: str,
           batch_sizes: Sequence[int], out: Path) -> None:
    """What was written (``ranking``'s :meth:`~ncl.evaluation.ranking.Ranking.headline`), and
    the detection metrics when there is a ground truth; ``batch_sizes`` are the sizes of the
    scoring batches seen."""
    print(f"ncl predict: {ranking.headline(values, split, batch_sizes)}: {out}")
    if summary is None:
        print("ncl predict: no ground-truth clean mask (real noise or an evaluation split); "
              "no detection metrics")
    else:
        tops = ", ".join(f"{k} {v:.4f}" for k, v in summary["top_k_precision"].items())
        print(f"ncl predict: noisy = {ranking.noisy_rule}: precision {summary['precision']:.4f}, "
              f"recall {summary['recall']:.4f}, F1 {summary['f1']:.4f} ({summary['n_noisy']} truly "
              f"noisy); top-k precision{ranking.order_label}: {tops}; {metrics_path(out)}")
    sys.stdout.flush()
