"""What a grid writes from its finished records: ``results.md``, ``cells.csv``, ``rsum_vs_noise.png``."""

from __future__ import annotations

import csv
import io
import os
import platform
import statistics
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ncl.io import atomic_write, atomic_write_text
from ncl.numbers.measured import CELL_COLUMNS, flat_row
from ncl.numbers.stats import mean_std
from ncl.reproduce.grid import CLEAN, Cell
from ncl.reproduce.records import DETECTION, RECALLS, backfill_detection


def _in_kind(record: dict[str, Any], kind: str) -> bool:
    """Ratio-0 cells stand in every kind's table."""
    return record["noise_type"] in (kind, CLEAN)


def recall_table(records: list[dict[str, Any]], kind: str, labels: list[str], noises: list[float]) -> str:
    """Rows = method, column groups = noise ratio with image-to-text and text-to-image R@1/5/10
    and rSum, each ``mean ± std`` over seeds (n = the number of seeds)."""
    head = ["method"]
    for n in noises:
        head += [f"{round(100 * n)} %: i2t R@1", "R@5", "R@10", "t2i R@1", "R@5", "R@10", "rSum", "n"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label in labels:
        cells = [label]
        for n in noises:
            group = [r for r in records if r["label"] == label and r["noise"] == n and _in_kind(r, kind)]
            cells += [mean_std([r["test"][k] for r in group]) for k in RECALLS] + [str(len(group))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rsum_summary(records: list[dict[str, Any]], kinds: list[str], labels: list[str],
                 noises: list[float]) -> str:
    """Rows = method, columns = (kind, ratio): test rSum ``mean ± std [min, max]`` over seeds.

    The compact view of the recall tables (ratio 0 once, shared by the kinds)."""
    columns = [(CLEAN, 0.0)] if 0.0 in noises else []
    columns += [(kind, n) for kind in kinds for n in noises if n > 0]
    head = ["method"] + ["clean" if k == CLEAN else f"{k} {round(100 * n)} %" for k, n in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label in labels:
        row = [label]
        for kind, n in columns:
            values = [r["test"]["rsum"] for r in records
                      if r["label"] == label and r["noise"] == n and r["noise_type"] == kind]
            text = mean_std(values)
            if len(values) > 1:
                text += f" [{min(values):.1f}, {max(values):.1f}]"
            row.append(text)
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def detection_table(records: list[dict[str, Any]], kind: str, labels: list[str], noises: list[float]) -> str:
    """LNC Table 7 layout: rows = (method, stage), column groups = noise ratio with precision,
    recall and F1 of the detected noisy pairs, ``mean ± std`` over seeds."""
    noises = [n for n in noises if n > 0]
    head = ["method", "stage"] + [f"{round(100 * n)} %: {m}" if i == 0 else m
                                  for n in noises for i, m in enumerate(("P", "R", "F1"))]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label in labels:
        group = [r for r in records if r["label"] == label and r.get("detection") is not None
                 and r["noise_type"] == kind]
        if not group:
            continue
        for stage, name in (("after_warmup", "after warm-up"), ("end", "end")):
            cells = [label, name]
            for n in noises:
                found = [r["detection"][stage] for r in group if r["noise"] == n and stage in r["detection"]]
                cells += [mean_std([100 * d[m] for d in found]) for m in DETECTION]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def purity_table(records: list[dict[str, Any]], kinds: list[str], labels: list[str],
                 noises: list[float]) -> str:
    """ReCon's intra-modal check: truly noisy pairs (%) in the rough-clean set ``D_c + D_l``
    (what the inter-modal GMM keeps) and in ``D_c`` (what survives the check), after warm-up
    and at the end, ``mean ± std`` over seeds; rows = (method, kind, ratio)."""
    head = ["method", "noise", "after warm-up: D_c + D_l", "D_c", "end: D_c + D_l", "D_c"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label in labels:
        for kind in kinds:
            for n in (n for n in noises if n > 0):
                group = [r["detection"] for r in records if r["label"] == label and r["noise"] == n
                         and r["noise_type"] == kind and "clean_noisy" in (r.get("detection") or {}).get("end", {})]
                if not group:
                    continue
                row = [label, f"{kind} {round(100 * n)} %"]
                for stage in ("after_warmup", "end"):
                    row += [mean_std([100 * d[stage][m] for d in group if stage in d])
                            for m in ("rough_clean_noisy", "clean_noisy")]
                lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


NOTES = """Notes:

- Test split, protocol `{protocol}`; the row of a two-network method (NCR, LNC) is the A+B
  ensemble. Each cell is the best checkpoint by validation rSum; `n` = seeds finished.
- Ratio 0 is one clean cell per method and seed, shown in both tables.
- Warm-ups differ: NCR and LNC warm up with the mean hinge over negatives, ncl's SGR* / SAF*
  baseline with summed negatives, ReCon with the summed triplet (its Eq. 12); all then switch to
  hardest negatives. Whether SGR survives that switch depends on how far the warm-up got
  (docs/results.md, "SGR and hardest negatives").
- Detection (positives = truly mismatched pairs): NCR / LNC, the pairs a network's GMM calls
  noisy, averaged over networks A and B; CRCL, the pairs whose label Eq. 12 zeroes (y < 0.1);
  ReCon, its noisy set D_n. "After warm-up": the first division at an epoch >= the warm-up
  (CRCL: >= its frozen epochs); "end": the last epoch's.
- A division that calls every pair noisy scores P = the noise ratio r, R = 100 and
  F1 = 2r / (1 + r): 33.3, 66.7 and 88.9 at 20, 50 and 80 %. Detection values near these
  (R about 100) mean the division collapsed, not that it detects well.
"""


def _tab20(i: int) -> tuple[float, float, float, float]:
    """The ``i``-th colour of matplotlib's 20-colour qualitative map (more than 10 methods)."""
    from matplotlib import colormaps

    return colormaps["tab20"](i % 20)


def plot(records: list[dict[str, Any]], kinds: list[str], labels: list[str], path: Path) -> None:
    """Test rSum against noise ratio per method, mean ± std error bars, one panel per kind."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0 * len(kinds), 4.6))
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, len(kinds), 1)]
    axes += [fig.add_subplot(1, len(kinds), i + 1, sharey=axes[0]) for i in range(1, len(kinds))]
    colours = [f"C{i % 10}" if len(labels) <= 10 else _tab20(i) for i in range(len(labels))]
    markers = "osv^DPX*h<>p"
    ratios = sorted({r["noise"] for r in records})
    for ax, kind in zip(axes, kinds):
        for i, label in enumerate(labels):
            by_noise: dict[float, list[float]] = {}
            for r in records:
                if r["label"] == label and _in_kind(r, kind):
                    by_noise.setdefault(r["noise"], []).append(r["test"]["rsum"])
            if not by_noise:
                continue
            xs = sorted(by_noise)
            means = [statistics.mean(by_noise[x]) for x in xs]
            stds = [statistics.stdev(by_noise[x]) if len(by_noise[x]) > 1 else 0.0 for x in xs]
            # a small horizontal offset per method so that error bars at one ratio do not overlap
            shift = (i - (len(labels) - 1) / 2) * 0.004
            ax.errorbar([100 * (x + shift) for x in xs], means, yerr=stds, marker=markers[i % len(markers)],
                        color=colours[i], capsize=3, label=label)
        name = "caption shuffling (NCR)" if kind == "caption" else "image-level permutation (RCL)"
        ax.set_title(f"noise: {name}")
        ax.set_xlabel("noise ratio (%)")
        ax.set_ylabel("test rSum (mean ± std over seeds)")
        ax.set_xticks([100 * x for x in ratios])
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    handles, names = axes[0].get_legend_handles_labels()
    for ax in axes[1:]:
        more = ax.get_legend_handles_labels()
        for h, n in zip(*more):
            if n not in names:
                handles.append(h)
                names.append(n)
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    atomic_write(path, lambda handle: handle.write(buffer.getvalue()))


def write_outputs(out: Path, records: list[dict[str, Any]], cells: list[Cell], kinds: list[str],
                  command: str) -> None:
    """``results.md``, ``cells.csv`` and ``rsum_vs_noise.png`` from the finished records."""
    backfill_detection(out, records)
    labels = list(dict.fromkeys(c.label for c in cells))
    noises = sorted({c.noise for c in cells})
    protocol = records[0]["protocol"] if records else "1k"
    parts = [(f"# Reproduction grid\n\nCommand: `{command}`  \nWritten: "
              f"{datetime.now(timezone.utc).isoformat(timespec='seconds')} on {platform.node()} "
              f"({os.cpu_count()} CPUs); {len(records)} of {len(cells)} cells finished.\n")]
    parts.append("## Test rSum, mean ± std [min, max] over seeds\n\n"
                 f"{rsum_summary(records, kinds, labels, noises)}\n")
    for kind in kinds:
        name = "caption shuffling (NCR)" if kind == "caption" else "image-level permutation (RCL)"
        parts.append(f"## Retrieval, {name}\n\n{recall_table(records, kind, labels, noises)}\n")
    for kind in kinds:
        table = detection_table(records, kind, labels, noises)
        if table.count("\n") > 1:
            parts.append(f"## Noise detection (%), {kind} noise\n\n{table}\n")
    purity = purity_table(records, kinds, labels, noises)
    if purity.count("\n") > 1:
        parts.append("## ReCon's intra-modal check: truly noisy pairs (%) in the clean set\n\n"
                     f"{purity}\n")
    parts.append(NOTES.format(protocol=protocol))
    seconds = [r["wall_seconds"] for r in records]
    cpu = [r.get("cpu_seconds", 0.0) for r in records]
    if seconds:
        parts.append(f"Per cell (fit + test): wall time median {statistics.median(seconds):.0f} s, "
                     f"CPU time median {statistics.median(cpu):.0f} s; in all {sum(seconds) / 3600:.2f} h "
                     f"wall, {sum(cpu) / 3600:.2f} h CPU (cells.csv has each cell's).\n")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "results.md", "\n".join(parts))
    flat = io.StringIO()  # the columns of a measured rows' file (ncl.numbers.measured)
    writer = csv.DictWriter(flat, fieldnames=CELL_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for r in records:
        writer.writerow(flat_row(r))
    atomic_write_text(out / "cells.csv", flat.getvalue())
    if records:
        plot(records, kinds, labels, out / "rsum_vs_noise.png")
