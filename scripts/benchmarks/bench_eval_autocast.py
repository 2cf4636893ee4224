"""``model.eval_autocast`` on a trained checkpoint: the test evaluation both ways, one process.

``bench_precision.py`` measures the evaluation similarity under autocast on random weights at
official dimensions, in fresh children. This script measures the option itself, through ncl's
real ``ncl test`` path (``RetrievalMethod.evaluate`` -> ``scored`` -> ``similarities``), on a
trained model, where near-ties are rarer than with random weights and R@K means something:

1. The config (default ``configs/quickstart.yaml``) is built as ``ncl test`` builds it, once
   under ``--precision`` (default ``bf16-mixed``) and once under ``32-true`` (the float32
   reference; ``--no-fp32`` leaves it out), and ``trainer.test`` runs with ``--ckpt``.
2. Under ``--precision`` the same model is tested with ``eval_autocast`` off (the similarity
   in float32, what a ``bf16-mixed`` run computes by default) and on (the similarity under
   autocast), alternating, ``--rounds`` times each; the best time of each way is kept.
3. Printed per way: the test's wall time (encoding, similarity, protocols), the similarity's
   own time, rSum, and the top-1 agreement with the float32 similarity: the share of images
   whose top-1 caption (i2t) and of captions whose top-1 image (t2i) is the same, and of all
   queries (both directions). Then the time ratios off/on.

On a CPU without bf16 matrix units (the header prints
``torch.ops.mkldnn._is_mkldnn_bf16_supported()``) torch emulates bf16 products: there the
option makes the evaluation slower, not faster (``docs/benchmarks/precision.md``).

Usage::

    ncl fit --config configs/quickstart.yaml          # a trained checkpoint first
    OMP_NUM_THREADS=1 python scripts/benchmarks/bench_eval_autocast.py \\
        --ckpt runs/quickstart/<run>/checkpoints/last.ckpt --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
from benchlib import ROOT, load_average, print_header, top1_agreement

#: The ways of the evaluation: (name, trainer.precision, eval_autocast).
WAYS: tuple[tuple[str, str | None, bool], ...] = (("fp32", "32-true", False),
                                                 ("off", None, False), ("on", None, True))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", required=True, help="a trained checkpoint of --config")
    parser.add_argument("--config", default=str(ROOT / "configs" / "quickstart.yaml"))
    parser.add_argument("--precision", default="bf16-mixed", choices=["bf16-mixed", "16-mixed"],
                        help="the trainer.precision whose autocast the option uses")
    parser.add_argument("--rounds", type=int, default=3, help="tests per way; best time kept")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: default)")
    parser.add_argument("--no-fp32", action="store_true",
                        help="leave out the 32-true reference (agreement is then with 'off')")
    parser.add_argument("--cli-args", nargs=argparse.REMAINDER, default=[],
                        help="further ncl options, e.g. --data.init_args.root DIR (last)")
    return parser.parse_args(argv)


def build(args: argparse.Namespace, precision: str, root: str) -> Any:
    """The config's model, data and trainer as ``ncl test`` builds them (no logger)."""
    import lightning as L

    from ncl.cli.app import NclCLI
    from ncl.cli.parser import NclArgumentParser
    from ncl.methods.base import RetrievalMethod

    cli_args = ["--config", args.config, "--trainer.logger", "false", "--trainer.precision",
                precision, "--trainer.default_root_dir", root, *args.cli_args]
    with contextlib.redirect_stdout(io.StringIO()):
        return NclCLI(RetrievalMethod, L.LightningDataModule, subclass_mode_model=True,
                      subclass_mode_data=True, args=cli_args, run=False,
                      auto_configure_optimizers=False, parser_class=NclArgumentParser,
                      save_config_callback=None)


def capture_scores(model: Any) -> dict[str, Any]:
    """Wrap ``model.scored`` (the evaluation's scorer) to keep its last matrices and time."""
    seen: dict[str, Any] = {}
    scored: Callable[..., dict[str, torch.Tensor]] = model.scored

    def timed(*a: Any, **kw: Any) -> dict[str, torch.Tensor]:
        start = time.perf_counter()
        sims = scored(*a, **kw)
        seen.update(seconds=time.perf_counter() - start, sims=sims)
        return sims

    model.scored = timed
    return seen


def test_once(cli: Any, ckpt: str, seen: dict[str, Any], autocast: bool) -> dict[str, Any]:
    """One ``trainer.test`` with ``eval_autocast`` set: wall time, similarity time, the first
    system's matrix and rSum (1K protocol)."""
    cli.model.eval_autocast = autocast
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        logged = cli.trainer.test(cli.model, datamodule=cli.datamodule, ckpt_path=ckpt,
                                  verbose=False)[0]
    total = time.perf_counter() - start
    system = next(iter(seen["sims"]))
    return {"total_s": total, "similarity_s": seen["seconds"], "system": system,
            "sims": seen["sims"][system], "rsum": logged[f"test/{system}/1k/rsum"],
            "load": load_average()}


def measure(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """Every way ``--rounds`` times, ways alternating within a round."""
    ways = [w for w in WAYS if not (args.no_fp32 and w[0] == "fp32")]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in ways}
    with tempfile.TemporaryDirectory(prefix="ncl_bench_eval_autocast_") as root:
        precisions = dict.fromkeys(precision or args.precision for _, precision, _ in ways)
        clis = {precision: build(args, precision, root) for precision in precisions}
        seen = {key: capture_scores(cli.model) for key, cli in clis.items()}
        for _ in range(args.rounds):
            for name, precision, autocast in ways:
                key = precision or args.precision
                runs[name].append(test_once(clis[key], args.ckpt, seen[key], autocast))
    return runs


def report(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]) -> None:
    """The table (every round of every way) and the off/on ratios of the best rounds."""
    ref_name = "off" if args.no_fp32 else "fp32"
    ref = runs[ref_name][0]["sims"]
    n_img, n_cap = ref.shape
    print(f"\n## ncl test of {args.ckpt}: {n_img} images x {n_cap} captions, system "
          f"{runs['off'][0]['system']}; {args.rounds} round(s) per way, ways alternating")
    print(f"fp32: trainer.precision 32-true; off/on: trainer.precision {args.precision} with "
          f"model.eval_autocast false/true (encoders under autocast both ways); agreement: "
          f"top-1 match the same as in '{ref_name}' (i2t: images, t2i: captions, all: both)")
    print(f"{'':<4} {'way':<5} {'round':>5} {'test s':>8} {'similarity s':>13} {'rSum':>7} "
          f"{'max |diff|':>10} {'i2t same':>9} {'t2i same':>9} {'all same':>9}   load")
    for name, rounds in runs.items():
        for index, run in enumerate(rounds):
            diff, i2t, t2i = top1_agreement(ref, run["sims"])
            both = (i2t * n_img + t2i * n_cap) / (n_img + n_cap)
            print(f"eval {name:<5} {index + 1:>5} {run['total_s']:>8.2f} "
                  f"{run['similarity_s']:>13.3f} {run['rsum']:>7.1f} {diff:>10.2e} {i2t:>9.1%} "
                  f"{t2i:>9.1%} {both:>9.1%}   {run['load'].replace('load average ', '')}")
    off, on = (min(r["total_s"] for r in runs[way]) for way in ("off", "on"))
    sim_off, sim_on = (min(r["similarity_s"] for r in runs[way]) for way in ("off", "on"))
    print(f"time ratio off/on (best of {args.rounds}): test {off / on:.3f}, similarity "
          f"{sim_off / sim_on:.3f} (above 1: eval_autocast faster)")
    diff, i2t, t2i = top1_agreement(runs["off"][0]["sims"], runs["on"][0]["sims"])
    both = (i2t * n_img + t2i * n_cap) / (n_img + n_cap)
    print(f"on against off: max |diff| {diff:.2e}, top-1 same i2t {i2t:.1%}, t2i {t2i:.1%}, "
          f"all {both:.1%}; rSum {runs['on'][0]['rsum'] - runs['off'][0]['rsum']:+.1f}")


def main(argv: list[str] | None = None) -> None:
    """Build, measure, print."""
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))  # this checkout's ncl, as bench_precision's children
    if args.rounds < 1:
        print(f"bench_eval_autocast: error: --rounds must be at least 1, got {args.rounds}",
              file=sys.stderr)
        raise SystemExit(2)
    if args.threads:
        torch.set_num_threads(args.threads)
    facts = (f"threads {torch.get_num_threads()}, torch.backends.cpu.get_cpu_capability() "
             f"{torch.backends.cpu.get_cpu_capability()}, "
             f"torch.ops.mkldnn._is_mkldnn_bf16_supported() "
             f"{bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())}")
    print_header("bench_eval_autocast", sys.argv[1:] if argv is None else argv, facts)
    started = time.perf_counter()
    report(args, measure(args))
    print(f"\nbenchmark wall time {time.perf_counter() - started:.0f} s; {load_average()}")


if __name__ == "__main__":
    main()
