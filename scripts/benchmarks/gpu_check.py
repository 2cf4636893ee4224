"""A GPU check of ncl that one maintainer with one GPU runs in a few minutes; writes markdown.

It measures, on the first CUDA device:

1. **Training step** of SGR and SAF at batch 128, official dimensions (forward of the whole
   model and backward of the summed scores, train mode, no optimizer step), in four
   variants: ``fp32`` (ncl's chunked ``auto`` similarity), ``bf16`` (under
   ``torch.autocast(dtype=torch.bfloat16)``, as Lightning's ``bf16-mixed``), ``fp16`` (float16
   autocast with the loss scaled by ``torch.amp.GradScaler``, as ``16-mixed``) and ``loop``
   (float32 with ``similarity_strategy="loop"``, the official per-caption loop): best step
   time over ``--repeats`` steps after a full-size warm-up, its speed-up over ``fp32``, and
   the peak of ``torch.cuda.max_memory_allocated`` during the timed steps (model, batch and
   activations).
2. **Evaluation** of 1,000 images x 5,000 captions (SGR, random weights; ncl's
   ``sharded_similarity`` with shards of 1,000): encode and similarity time in float32,
   bf16 and bf16-encode (encoders under autocast, similarity in float32: what bf16-mixed
   validation computes), the largest score difference from float32 and the share of
   images/captions whose top-1 match is float32's.
3. **The quickstart** on one GPU: ``ncl fit --config configs/quickstart.yaml
   --trainer.accelerator gpu --trainer.devices 1 --trainer.precision bf16-mixed`` (its run
   folder in a temporary directory, progress bar off), wall time and the last validation
   rSum it printed (or logged in ``metrics.csv``). Its time includes generating the synthetic
   dataset when ``~/.cache/ncl`` does not hold it yet.

The measurements run in child processes of ``bench_precision.py`` (its ``--worker`` tasks):
one child per module for the four step variants, in the order above (each variant builds its
own model and warms up at full size, and the memory peak is reset for each), and one child for
the evaluation; so the check stays within a few minutes. ``bench_precision.py --device cuda``
measures each variant in a fresh process instead.

Without CUDA it refuses in one line (exit 2). ``--allow-cpu --toy`` runs everything on the
CPU with small dimensions and sizes: a smoke test of the script, whose numbers mean nothing.

Usage::

    python scripts/benchmarks/gpu_check.py --out gpu_check.md
    python scripts/benchmarks/gpu_check.py --allow-cpu --toy --out /tmp/gpu_check.md
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_precision as bp
import torch
from benchlib import ROOT, load_average, machine

VARIANTS = ("fp32", "bf16", "fp16", "loop")
VARIANT_LABELS = {"fp32": "float32", "bf16": "bf16-mixed (autocast)",
                  "fp16": "16-mixed (autocast + GradScaler)",
                  "loop": "float32, per-caption loop", "bf16-encode": "bf16 encoders, float32 similarity"}
QUICKSTART = "configs/quickstart.yaml"
TINY_BACKBONE = ["--model.backbone.init_args.img_dim=16", "--model.backbone.init_args.num_regions=6",
                 "--model.backbone.init_args.word_dim=8", "--model.backbone.init_args.embed_size=16",
                 "--model.backbone.init_args.sim_dim=8"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="-", help="markdown summary file (default: stdout)")
    parser.add_argument("--modules", nargs="+", default=["SGR", "SAF"], choices=["SGR", "SAF"])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3, help="timed steps, minimum kept")
    parser.add_argument("--eval-images", type=int, default=1000,
                        help="evaluation images, 5 captions each (0 skips the evaluation)")
    parser.add_argument("--skip-quickstart", action="store_true")
    parser.add_argument("--quickstart-timeout", type=int, default=300, help="seconds")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="run on the CPU without CUDA (only with --toy: a smoke test)")
    parser.add_argument("--toy", action="store_true",
                        help="small dimensions and sizes (smoke test; meaningless numbers)")
    args = parser.parse_args(argv)
    if args.toy:
        args.batch, args.repeats = min(args.batch, 4), 1
        args.eval_images = min(args.eval_images, 4)
    return args


def refusal(args: argparse.Namespace) -> str | None:
    """The one-line reason not to run here, or ``None``."""
    if torch.cuda.is_available():
        return None
    if not args.allow_cpu:
        return ("gpu_check: no CUDA device (torch.cuda.is_available() is False); this check "
                "needs one GPU (--allow-cpu --toy runs its smoke test on the CPU)")
    if not args.toy:
        return ("gpu_check: --allow-cpu needs --toy: official sizes on a CPU take hours "
                "(use scripts/benchmarks/bench_precision.py there)")
    return None


def progress(message: str) -> None:
    """One progress line on stderr (stdout may be the markdown)."""
    print(f"gpu_check: {message}", file=sys.stderr, flush=True)


def child_argv(args: argparse.Namespace, device: str) -> list[str]:
    """The ``bench_precision.py`` options of this check's children."""
    argv = ["--device", device, "--threads", "1" if device == "cpu" else "0",
            "--repeats", str(args.repeats), "--pass-batches", "0",
            "--eval-images", str(args.eval_images), "--eval-shard", str(min(1000, max(args.eval_images, 1)))]
    return argv + (["--toy"] if args.toy else [])


def header(args: argparse.Namespace, device: str, argv: list[str]) -> list[str]:
    """The markdown title and the facts the numbers are read against."""
    if device == "cuda":
        name = torch.cuda.get_device_name(0)
        facts = [(f"- device: **{name}** (`torch.cuda.get_device_name`), CUDA {torch.version.cuda}, "
                 f"TF32 matmul {torch.backends.cuda.matmul.allow_tf32}")]
    else:
        facts = [("- device: **CPU, no CUDA** (`--allow-cpu --toy`: a smoke test of this script; "
                 "the numbers mean nothing)")]
    dims = "toy" if args.toy else "official (36 x 2048 regions, embed 1024, sim 256, vocab 8481)"
    facts += [f"- host: {machine()}, {platform.node()}, {load_average()}",
              f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
              f"- dimensions: {dims}; step batch {args.batch}, best of {args.repeats} step(s)",
              "- command: `python scripts/benchmarks/gpu_check.py "
              + " ".join(argv) + "`"]
    return ["# ncl GPU check", "", *facts, ""]


def step_section(args: argparse.Namespace, argv: list[str]) -> list[str]:
    """The training-step table: one child per module, the four variants in it."""
    lines = [f"## Training step, batch {args.batch} (forward + backward of the summed scores)", "",
             "| module | variant | similarity plan | step s | speed-up vs fp32 | peak MiB |",
             "|---|---|---|---|---|---|"]
    for module in args.modules:
        progress(f"training step {module}, batch {args.batch}: {', '.join(VARIANTS)}")
        result = bp.spawn(argv, f"step:{module}:{args.batch}:{','.join(VARIANTS)}:0")["variants"]
        base = result["fp32"]["step_s"]
        for variant in VARIANTS:
            run = result[variant]
            plan = f"{run['plan'][0]} {run['plan'][1]}" if run["plan"][0] == "chunked" else "loop"
            lines.append(f"| {module} | {variant} | {plan} | {run['step_s']:.4f} | "
                         f"{base / run['step_s']:.2f}x | {bp.mib(run['peak_mib'])} |")
    lines += ["", "Variants: " + "; ".join(f"`{v}` {VARIANT_LABELS[v]}" for v in VARIANTS) + ".",
              ""]
    return lines


def eval_section(args: argparse.Namespace, argv: list[str]) -> list[str]:
    """The evaluation table (first module): float32, bf16 and bf16-encode in one child."""
    module, n_img = args.modules[0], args.eval_images
    progress(f"evaluation {module}, {n_img} images x {5 * n_img} captions")
    with tempfile.TemporaryDirectory(prefix="ncl_gpu_check_") as scratch:
        runs = bp.spawn([*argv, "--scratch", scratch],
                        f"infer:{module}:fp32,bf16,bf16-encode")["eval"]
        compared = {v: bp.compare_matrices(runs["fp32"]["matrix"], run["matrix"])
                    for v, run in runs.items()}
    lines = [f"## Evaluation, {n_img} images x {5 * n_img} captions ({module}, random weights)", "",
             ("| variant | encode s | similarity s | total s | speed-up vs fp32 | peak MiB | "
             "max abs diff vs fp32 | i2t top-1 same | t2i top-1 same |"),
             "|---|---|---|---|---|---|---|---|---|"]
    base = runs["fp32"]["encode_s"] + runs["fp32"]["similarity_s"]
    for variant, run in runs.items():
        total = run["encode_s"] + run["similarity_s"]
        diff, i2t, t2i = compared[variant]
        lines.append(f"| {variant} | {run['encode_s']:.2f} | {run['similarity_s']:.2f} | "
                     f"{total:.2f} | {base / total:.2f}x | {bp.mib(run['peak_mib'])} | "
                     f"{diff:.2e} | {i2t:.1%} | {t2i:.1%} |")
    lines += ["", ("`bf16`: encoders and similarity under autocast; `bf16-encode`: "
              f"{VARIANT_LABELS['bf16-encode']} (what bf16-mixed validation computes; its encode "
              "time is bf16's, the same encodings). Scores are sigmoid similarities in (0, 1)."), ""]
    return lines


def last_rsum(stdout: str, root: Path) -> str:
    """The last validation rSum printed, else the last ``val/rsum`` of a ``metrics.csv``."""
    printed = re.findall(r"validation \[[^\]]*\]:.*\brSum (-?[\d.]+)", stdout)
    if printed:
        return printed[-1]
    for path in sorted(root.rglob("metrics.csv")):
        with path.open(newline="") as handle:
            values = [row["val/rsum"] for row in csv.DictReader(handle) if row.get("val/rsum")]
        if values:
            return values[-1]
    return "not found"


def quickstart_section(args: argparse.Namespace, device: str) -> tuple[list[str], bool]:
    """Run the quickstart with bf16-mixed on one device; its time and last rSum."""
    accelerator = "gpu" if device == "cuda" else "cpu"
    shown = ["ncl", "fit", "--config", QUICKSTART, "--trainer.accelerator", accelerator,
             "--trainer.devices", "1", "--trainer.precision", "bf16-mixed"]
    # TMP: a temporary directory for the run folder (and, with --toy, the data cache)
    extra = ["--trainer.default_root_dir=TMP/runs", "--trainer.enable_progress_bar=false"]
    if args.toy:
        extra += [*TINY_BACKBONE, "--data.preset=tiny", "--data.n_train=null",
                  "--data.cache_dir=TMP/cache", "--trainer.max_epochs=1"]
    with tempfile.TemporaryDirectory(prefix="ncl_gpu_check_qs_") as tmp:
        command = [sys.executable, "-m", "ncl.cli", *shown[1:3], str(ROOT / QUICKSTART), *shown[4:],
                   *(option.replace("=TMP/", f"={tmp}/") for option in extra)]
        env = dict(os.environ, WANDB_MODE="disabled")
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        progress("quickstart: " + " ".join(shown + extra))
        start = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp,
                                  timeout=args.quickstart_timeout, check=False)
            code, out, err = str(done.returncode), done.stdout, done.stderr
        except subprocess.TimeoutExpired as expired:
            code = f"timed out after {args.quickstart_timeout} s"
            out = expired.stdout.decode() if isinstance(expired.stdout, bytes) else expired.stdout or ""
            err = ""
        seconds = time.perf_counter() - start
        rsum = last_rsum(out, Path(tmp))
    lines = ["## Quickstart, bf16-mixed, one device", "",
             (f"- command: `{' '.join(shown + extra)}` (run folder and, with `--toy`, data cache in "
             "a temporary directory)"),
             (f"- wall time: {seconds:.1f} s (includes generating the synthetic dataset when it is "
             "not cached)"),
             f"- exit status: {code}",
             f"- last validation rSum: {rsum}"]
    if code != "0":
        lines += ["", "End of its stderr:", "", "```", *err.strip().splitlines()[-15:], "```"]
    return lines + [""], code == "0"


def main(argv: list[str] | None = None) -> int:
    """Check, measure, write the markdown; exit 2 without CUDA, 1 if a part failed."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if reason := refusal(args):
        print(reason, file=sys.stderr)
        return 2
    device = "cuda" if torch.cuda.is_available() else "cpu"
    started = time.perf_counter()
    argv_children = child_argv(args, device)
    lines, ok = header(args, device, argv), True
    sections = {"training step": lambda: step_section(args, argv_children)}
    if args.eval_images > 0:
        sections["evaluation"] = lambda: eval_section(args, argv_children)
    for name, section in sections.items():
        try:
            lines += section()
        except RuntimeError as error:  # a failed child: report it, go on with the rest
            ok = False
            lines += [f"## {name}: FAILED", "", "```", *str(error).splitlines()[-20:], "```", ""]
    if not args.skip_quickstart:
        quick, quick_ok = quickstart_section(args, device)
        lines, ok = lines + quick, ok and quick_ok
    lines.append(f"Total wall time of the check: {time.perf_counter() - started:.0f} s; "
                 f"{load_average()} at the end.")
    text = "\n".join(lines) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text, encoding="utf-8")
        progress(f"wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
