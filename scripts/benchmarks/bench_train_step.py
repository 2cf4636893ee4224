"""How close one SGRAF training step on the CPU comes to the machine's fp32 matmul peak.

In one run it prints:

1. the machine's fp32 matmul peak at the thread count used: GFLOP/s of a large square
   ``torch.matmul`` (``2 n^3`` FLOP per product, best of a few);
2. for SGR and SAF at official dimensions (36 regions x 2048 features, embed 1024, sim 256,
   F30K vocabulary, captions 10-18 tokens, default batch 128 x 128): the wall and CPU time
   of one training forward+backward (train mode, encoders included, backward of the summed
   logits; no optimizer step), its FLOP count, the achieved GFLOP/s and the fraction of a
   matmul peak measured in the same process just before the step;
3. a ``torch.profiler`` table of one step (top operators by self CPU time).

FLOP are counted with ``torch.utils.flop_counter.FlopCounterMode`` over one whole step: it
counts the matrix products (``mm``, ``addmm``, ``bmm``, ``baddbmm``, convolutions, attention)
at ``2 m n k``, including those inside the custom backward of
:mod:`ncl.models.local_similarity` and the GRU's; element-wise work (norms, softmax, tanh,
the squares of the similarity vectors) is not counted. So "fraction of peak" is the share
of the step's time that would suffice for its matrix products at peak speed.

Every measurement runs in a fresh subprocess. ``--compare-git REF`` also times the ``ncl``
package as committed at ``REF`` (exported read-only with ``git archive`` into a temporary
folder), interleaved round by round with the working tree, so a change to ``ncl/models`` is
measured before/after under the same load. The machine may be shared: the load average is printed
with every timing.

Usage::

    python scripts/benchmarks/bench_train_step.py --threads 1
    python scripts/benchmarks/bench_train_step.py --threads 1 --compare-git HEAD --skip-profile
    python scripts/benchmarks/bench_train_step.py --threads 1 --chunk-sizes 0 1 4 --modules SGR
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from benchlib import (ROOT, load_average, parse_or_run_worker, print_header, run_worker_child,
                      threads_env)
F30K_VOCAB = 8481


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (fixed)")
    parser.add_argument("--batch", type=int, default=128, help="images = captions per batch")
    parser.add_argument("--modules", nargs="+", default=["SGR", "SAF"], choices=["SGR", "SAF"])
    parser.add_argument("--min-len", type=int, default=10)
    parser.add_argument("--max-len", type=int, default=18)
    parser.add_argument("--rounds", type=int, default=2,
                        help="timed steps per variant, each in a fresh process; minimum kept")
    parser.add_argument("--chunk-sizes", type=int, nargs="+", default=[0],
                        help="0: similarity_strategy auto; n > 0: chunked with n captions")
    parser.add_argument("--compare-git", default="", metavar="REF",
                        help="also time ncl as committed at REF (e.g. HEAD)")
    parser.add_argument("--peak-n", type=int, default=4096, help="size of the peak matmul")
    parser.add_argument("--skip-profile", action="store_true")
    parser.add_argument("--profile-rows", type=int, default=22)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# ----------------------------------------------------------------------------- worker side


def matmul_peak_gflops(n: int, repeats: int = 5) -> float:
    """Best GFLOP/s of an ``n x n`` fp32 ``torch.matmul`` (``2 n^3`` FLOP) after a warm-up."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
    out = torch.empty(n, n)
    torch.matmul(a, b, out=out)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.matmul(a, b, out=out)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def make_batch(args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random ``(B, 36, 2048)`` regions, ``(B, max_len)`` token ids and ``(B,)`` lengths."""
    gen = torch.Generator().manual_seed(args.seed)
    images = torch.randn(args.batch, 36, 2048, generator=gen)
    lengths = torch.randint(args.min_len, args.max_len + 1, (args.batch,), generator=gen)
    tokens = torch.randint(4, F30K_VOCAB, (args.batch, args.max_len), generator=gen)
    tokens = tokens * (torch.arange(args.max_len) < lengths.unsqueeze(1))
    return images, tokens, lengths


def build_model(args: argparse.Namespace, module: str, chunk: int) -> torch.nn.Module:
    """SGRAF at official dimensions from whichever ``ncl`` is first on ``sys.path``."""
    from ncl.models import SGRAF

    torch.manual_seed(args.seed)
    if chunk > 0:
        return SGRAF(F30K_VOCAB, module, similarity_strategy="chunked", chunk_size=chunk).train()
    return SGRAF(F30K_VOCAB, module).train()


def run_worker(args: argparse.Namespace) -> None:
    """One subprocess: ``peak`` or ``step:<module>:<chunk>:<flops 0/1>:<profile 0/1>``."""
    torch.set_num_threads(args.threads)
    if args.worker == "peak":
        print(json.dumps({"gflops": matmul_peak_gflops(args.peak_n), "uptime": load_average()}))
        return
    _, module, chunk, count, profile = args.worker.split(":")
    model = build_model(args, module, int(chunk))
    images, tokens, lengths = make_batch(args)

    def step(n: int) -> None:
        model(images[:n], tokens[:n], lengths[:n]).sum().backward()
        model.zero_grad(set_to_none=True)

    step(4)  # warm-up: one-time library set-up stays out of the timing
    # The peak just before the step, in the same process: on a shared machine the load can
    # change by a factor of several between measurements minutes apart.
    local_peak = matmul_peak_gflops(2048, repeats=3)
    load = load_average()
    start, cpu_start = time.perf_counter(), time.process_time()
    step(args.batch)
    # CPU time of this process: on a loaded machine wall time also counts the time spent
    # waiting for a core; CPU time does not (it still feels shared caches and memory).
    result: dict[str, object] = {"step_s": time.perf_counter() - start,
                                 "cpu_s": time.process_time() - cpu_start, "uptime": load,
                                 "peak_before": local_peak,
                                 "ncl": str(Path(sys.modules["ncl"].__file__).parent)}
    if count == "1":
        from torch.utils.flop_counter import FlopCounterMode

        counter = FlopCounterMode(display=False)
        with counter:
            step(args.batch)
        result["flop"] = counter.get_total_flops()
        result["flop_by_op"] = {str(op): int(flop) for op, flop in
                                counter.get_flop_counts().get("Global", {}).items()}
    if profile == "1":
        from torch.profiler import ProfilerActivity, profile as torch_profile

        with torch_profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            step(args.batch)
        print(prof.key_averages().table(sort_by="self_cpu_time_total",
                                        row_limit=args.profile_rows, max_name_column_width=38))
        print(matmul_shapes(prof, args.profile_rows))
    print(json.dumps(result))


def matmul_shapes(prof, rows: int) -> str:
    """The matrix products of a profile grouped by input shapes: time, GFLOP, GFLOP/s."""
    lines = [f"{'operator':<14} {'calls':>6} {'self s':>8} {'GFLOP':>8} {'GFLOP/s':>8}  "
             f"input shapes"]
    events = [e for e in prof.key_averages(group_by_input_shape=True)
              if e.key in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")]
    for event in sorted(events, key=lambda e: -e.self_cpu_time_total)[:rows]:
        flop = event.count * _matmul_flop(event.key, event.input_shapes)
        seconds = event.self_cpu_time_total / 1e6
        lines.append(f"{event.key[6:]:<14} {event.count:>6} {seconds:>8.2f} {flop / 1e9:>8.1f} "
                     f"{flop / 1e9 / max(seconds, 1e-9):>8.1f}  {event.input_shapes}")
    return "\n".join(lines)


def _matmul_flop(name: str, shapes: list) -> int:
    """``2 m n k`` (times the batch) of one call, from the profiler's input shapes."""
    if name in ("aten::mm",):
        (m, k), (_, n) = shapes[0], shapes[1]
        return 2 * m * n * k
    if name == "aten::addmm":
        (m, k), (_, n) = shapes[1], shapes[2]
        return 2 * m * n * k
    a, b = (shapes[0], shapes[1]) if name == "aten::bmm" else (shapes[1], shapes[2])
    return 2 * a[0] * a[1] * a[2] * b[2]


# ----------------------------------------------------------------------------- parent side


def spawn(argv: list[str], worker: str, src: Path) -> tuple[dict, str]:
    """Run one worker with ``src`` first on the path; return its JSON and its other output."""
    env = threads_env(parse_args(argv).threads)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(src)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    return run_worker_child(__file__, argv, worker, env=env, cwd=src)


def export_git(ref: str, into: Path) -> Path:
    """``git archive REF ncl`` unpacked under ``into`` (read-only use of git)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "ncl"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main(argv: list[str] | None = None) -> None:
    """Measure the peak, time every (module, variant) round by round, print the tables."""
    parsed = parse_or_run_worker(argv, parse_args, run_worker)
    if parsed is None:
        return
    args, argv = parsed
    print_header("bench_train_step", argv,
                 f"threads {args.threads}, batch {args.batch}x{args.batch}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ncl_bench_git_") as tmp:
        sources = {"tree": ROOT}
        if args.compare_git:
            sources[f"git:{args.compare_git}"] = export_git(args.compare_git, Path(tmp))
        peak, _ = spawn(argv, "peak", ROOT)
        print(f"\nfp32 matmul peak ({args.peak_n}^3, {args.threads} thread(s)): "
              f"{peak['gflops']:.1f} GFLOP/s ({peak['uptime']})")
        for module in args.modules:
            report_module(argv, args, module, sources, peak["gflops"])
        peak_end, _ = spawn(argv, "peak", ROOT)
        print(f"\nfp32 matmul peak again at the end: {peak_end['gflops']:.1f} GFLOP/s "
              f"({peak_end['uptime']})")
    print(f"benchmark wall time {time.perf_counter() - started:.0f} s; {load_average()}")


def report_module(argv: list[str], args: argparse.Namespace, module: str,
                  sources: dict[str, Path], peak: float) -> None:
    """Time one module's variants in interleaved rounds, then profile the working tree."""
    variants = [(name, src, chunk) for name, src in sources.items() for chunk in args.chunk_sizes]
    times: dict[tuple[str, int], list[tuple[float, str, float, float]]] = {
        (n, c): [] for n, _, c in variants}
    flops: dict[tuple[str, int], int] = {}
    for round_ in range(args.rounds):
        for name, src, chunk in variants:
            # Counted per variant: an exact change can remove products (e.g. SGR's query
            # matrices computed once per forward instead of once per chunk).
            count = "1" if round_ == 0 else "0"
            result, _ = spawn(argv, f"step:{module}:{chunk}:{count}:0", src)
            times[(name, chunk)].append((result["step_s"], result["uptime"],
                                         result["peak_before"], result["cpu_s"]))
            if "flop" in result:
                flops[(name, chunk)] = result["flop"]
                top = sorted(result["flop_by_op"].items(), key=lambda kv: -kv[1])
                print(f"\n## {module}, {name}, chunk {chunk or 'auto'}: matmul FLOP of one step by operator "
                      f"(FlopCounterMode): " + ", ".join(
                          f"{op} {flop / 1e9:.0f} G" for op, flop in top))
    best_peak = max([peak] + [run[2] for runs in times.values() for run in runs])
    print(f"\n## {module}, one {args.batch}x{args.batch} training step (forward+backward), "
          f"{args.threads} thread(s); GFLOP of matrix products: "
          + ", ".join(f"{name} (chunk {chunk or 'auto'}) {count / 1e9:.0f}"
                      for (name, chunk), count in flops.items()))
    print("'of peak': achieved GFLOP/s over the matmul peak measured in the same process just "
          f"before that step; 'of best': over the best peak of this run ({best_peak:.1f} GFLOP/s)")
    print(f"{'variant':<12} {'chunk':>5} {'round':>5} {'step s':>8} {'cpu s':>7} {'GFLOP/s':>8} "
          f"{'peak before':>11} {'of peak':>8} {'of best':>8}   load")
    for name, _, chunk in variants:
        for index, (seconds, load, local, cpu) in enumerate(times[(name, chunk)]):
            rate = flops[(name, chunk)] / seconds / 1e9
            print(f"{name:<12} {chunk or 'auto':>5} {index + 1:>5} {seconds:>8.2f} {cpu:>7.2f} "
                  f"{rate:>8.1f} {local:>11.1f} {rate / local:>8.0%} {rate / best_peak:>8.0%}   "
                  f"{load.replace('load average ', '')}")
    names = list(sources)
    for chunk in args.chunk_sizes if len(names) > 1 else []:
        pairs = list(zip(times[(names[0], chunk)], times[(names[-1], chunk)]))
        print(f"{names[-1]} / {names[0]} (chunk {chunk or 'auto'}), round by round: wall time "
              + ", ".join(f"{b[0] / a[0]:.2f}" for a, b in pairs) + "; CPU time "
              + ", ".join(f"{b[3] / a[3]:.2f}" for a, b in pairs))
    if not args.skip_profile:
        _, table = spawn(argv, f"step:{module}:{args.chunk_sizes[0]}:0:1", ROOT)
        print(f"\n## {module}: torch.profiler, one step of the working tree, top operators by "
              f"self CPU time ({load_average()})")
        print(table)


if __name__ == "__main__":
    main()
