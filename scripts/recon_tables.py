"""Tables of the ReCon comparison from CSVs written by scripts/robustness_grid.py.

Prints (docs/results.md, "ReCon against RCL, NCR and the summed triplet"):

* test rSum per method and noise as "min-max (seed 0 / seed 1)";
* for ReCon rows, the first division (right after the warm-up) and the one in effect at the
  last epoch: the truly noisy pairs and the size of D_c (with the noisy fraction), D_l, D_n;
* for ReCon rows, the noisy fraction of D_c against that of the rough clean set D_c + D_l, and
  the noisy pair-epochs in each summed over the divided epochs;
* with ``--epochs``, the per-epoch division of every ReCon row.

Example:

    python scripts/recon_tables.py /tmp/recon_bench/grid/grid.csv
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # grid_cells, also when imported
from grid_cells import method_noise_table  # noqa: E402


def load(paths: list[Path]) -> list[dict]:
    rows = []
    for path in paths:
        with open(path) as handle:
            rows.extend(csv.DictReader(handle))
    for r in rows:
        # the method without the SAF override every cell shares; other extras stay in the name
        r["base"] = (r["method"].replace("--model.backbone.init_args.module_name=SAF", "")
                     .replace(" []", "").replace("[ ", "[").strip())
        r["noise"], r["seed"], r["test_rsum"] = float(r["noise"]), int(r["seed"]), float(r["test_rsum"])
    return rows


def rsum_table(rows: list[dict]) -> str:
    """Test rSum per method and noise as "min-max (seed a / seed b)" (one seed: "x (seed s only)")."""
    def cell_text(group: list[dict]) -> str:
        by_seed = {r["seed"]: r["test_rsum"] for r in group}
        vals = list(by_seed.values())
        seeds = " / ".join(f"{by_seed[s]:.1f}" for s in sorted(by_seed))
        return (f"{min(vals):.1f}-{max(vals):.1f} ({seeds})" if len(vals) > 1 else
                f"{vals[0]:.1f} (seed {next(iter(by_seed))} only)")

    return method_noise_table(rows, lambda r: r["base"], cell_text)


def division_table(rows: list[dict]) -> str:
    """The first division (right after the warm-up) and the last epoch's, per ReCon row:
    truly noisy / size of D_c (with the fraction), of D_l and of D_n."""
    lines = ["| method | noise | seed | epoch | D_c: noisy / size | noisy fraction of D_c | "
             "D_l: noisy / size | D_n: noisy / size |", "|---|---|---|---|---|---|---|---|"]
    for r in sorted((r for r in rows if r.get("divisions") not in (None, "", "[]")),
                    key=lambda r: (r["noise"], r["base"], r["seed"])):
        divisions = json.loads(r["divisions"])
        for e, c, cn, l, ln, n, nn in (divisions[0], divisions[-1]):
            fraction = f"{100 * cn / c:.1f} %" if c else "empty"
            lines.append(f"| {r['base']} | {round(100 * r['noise'])} % | {r['seed']} | {e} | {cn} / {c} | "
                         f"{fraction} | {ln} / {l} | {nn} / {n} |")
    return "\n".join(lines)


def purity_table(rows: list[dict]) -> str:
    """Per ReCon row: the noisy fraction of D_c against that of the rough clean set D_c + D_l
    (what the intra-modal check had to work with) at the first division and at the last epoch,
    and the truly noisy pair-epochs summed over all divided epochs in D_c and in D_c + D_l."""
    lines = ["| method | noise | seed | test rSum | first division: noisy in D_c (rough clean D_c+D_l) | "
             "last epoch: noisy in D_c (D_c+D_l) | noisy pair-epochs in D_c (D_c+D_l) |",
             "|---|---|---|---|---|---|---|"]

    def frac(noisy: int, size: int) -> str:
        return f"{100 * noisy / size:.1f} % of {size}" if size else "empty"

    for r in sorted((r for r in rows if r.get("divisions") not in (None, "", "[]")),
                    key=lambda r: (r["noise"], r["base"], r["seed"])):
        divisions = json.loads(r["divisions"])
        cells = []
        for _, c, cn, l, ln, _, _ in (divisions[0], divisions[-1]):
            cells.append(f"{frac(cn, c)} ({frac(cn + ln, c + l)})")
        in_clean = sum(d[2] for d in divisions)
        in_rough = sum(d[2] + d[4] for d in divisions)
        lines.append(f"| {r['base']} | {round(100 * r['noise'])} % | {r['seed']} | {r['test_rsum']:.1f} | "
                     + " | ".join(cells) + f" | {in_clean} ({in_rough}) |")
    return "\n".join(lines)


def per_epoch(rows: list[dict]) -> str:
    out = []
    for r in rows:
        if r.get("divisions") in (None, "", "[]"):
            continue
        out.append(f"{r['method']} noise {r['noise']} seed {r['seed']}: test {r['test_rsum']:.1f}, "
                   f"val {r['val_rsums']}")
        for e, c, cn, l, ln, n, nn in json.loads(r["divisions"]):
            out.append(f"  epoch {e}: D_c {c} ({cn} noisy, {100 * cn / max(c, 1):.1f} %), "
                       f"D_l {l} ({ln} noisy), D_n {n} ({nn} noisy)")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", nargs="+", type=Path)
    parser.add_argument("--epochs", action="store_true", help="also the per-epoch divisions")
    args = parser.parse_args()
    rows = load(args.csv)
    print(rsum_table(rows), "", division_table(rows), "", purity_table(rows), sep="\n")
    if args.epochs:
        print("", per_epoch(rows), sep="\n")


if __name__ == "__main__":
    main()
