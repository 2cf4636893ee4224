"""Benchmark SGRAF similarity: the official per-caption loop versus ncl's ``auto`` path.

Measures, at official dimensions (36 x 2048 regions, embed 1024, sim 256, F30K vocabulary):

1. one ``B x B`` batch (default 128): inference forward (eval, no_grad; encoders and
   similarity timed separately) and a training forward+backward (train mode, backward of
   the summed scores);
2. the F30K-test-sized evaluation (1,000 images x 5,000 captions) by measuring a fraction
   (default 100 images x 500 captions, encoded once, similarity in shards) and
   extrapolating linearly in the number of pairs. Extrapolated numbers are labelled so.

Every (task, strategy) runs in a fresh subprocess so that peak memory is per variant.
Memory on CPU is the growth of the process's peak resident set (``ru_maxrss``) during
the timed calls over its high-water mark after set-up and a small warm-up; on CUDA it is
``torch.cuda.max_memory_allocated`` minus the allocation before the timed calls.
Times are the minimum over ``--repeats`` runs.

Usage::

    python scripts/bench_similarity.py                 # CPU, about 2-3 minutes on 2 cores
    python scripts/bench_similarity.py --device cuda --eval-images 1000 --eval-captions 5000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable

import torch

F30K_VOCAB = 8481
FULL_IMAGES, FULL_CAPTIONS = 1000, 5000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--module", default="SGR", choices=["SGR", "SAF"])
    parser.add_argument("--strategies", nargs="+", default=["loop", "auto"],
                        choices=["loop", "auto", "chunked"],
                        help="first one is the reference for the ratios")
    parser.add_argument("--chunk-size", type=int, default=32, help="SGRAF chunk_size")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--min-len", type=int, default=10,
                        help="shortest caption in tokens, <start>/<end> included")
    parser.add_argument("--max-len", type=int, default=18, help="longest caption in tokens")
    parser.add_argument("--eval-images", type=int, default=100)
    parser.add_argument("--eval-captions", type=int, default=500)
    parser.add_argument("--shard", type=int, default=100, help="images/captions per block")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--skip-eval", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# ----------------------------------------------------------------------------- worker side


class Meter:
    """Peak-memory meter: RSS high-water mark on CPU, allocator peak on CUDA."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def start(self) -> None:
        """Mark the baseline."""
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            self.base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def peak_mb(self) -> float:
        """Peak growth since :meth:`start`, MiB."""
        if self.device.type == "cuda":
            return (torch.cuda.max_memory_allocated() - self.base) / 2**20
        return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - self.base) / 2**20


def timed(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Minimum wall time of ``fn`` over ``repeats`` calls, seconds."""
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def make_batch(n_img: int, n_cap: int, args: argparse.Namespace,
               device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random region features and zero-padded token ids with lengths in [min_len, max_len]."""
    gen = torch.Generator().manual_seed(args.seed)
    images = torch.randn(n_img, 36, 2048, generator=gen)
    lengths = torch.randint(args.min_len, args.max_len + 1, (n_cap,), generator=gen)
    tokens = torch.randint(4, F30K_VOCAB, (n_cap, args.max_len), generator=gen)
    tokens = tokens * (torch.arange(args.max_len) < lengths.unsqueeze(1))
    return images.to(device), tokens.to(device), lengths


def build_model(args: argparse.Namespace, strategy: str, device: torch.device):
    """An SGRAF at official dimensions (import here: the parent process needs no ncl)."""
    from ncl.models import SGRAF

    torch.manual_seed(args.seed)
    return SGRAF(F30K_VOCAB, args.module, similarity_strategy=strategy,
                 chunk_size=args.chunk_size).to(device)


def work_batch(args: argparse.Namespace, strategy: str, device: torch.device) -> dict:
    """Inference forward and training forward+backward on one B x B batch."""
    model = build_model(args, strategy, device)
    images, tokens, lengths = make_batch(args.batch, args.batch, args, device)
    meter = Meter(device)
    model.train()
    model(images[:8], tokens[:8], lengths[:8]).sum().backward()  # warm-up
    model.zero_grad(set_to_none=True)
    model.eval()
    with torch.no_grad():
        meter.start()
        img_emb = model.encode_images(images)
        cap_emb = model.encode_captions(tokens, lengths)
        t_enc = timed(lambda: (model.encode_images(images),
                               model.encode_captions(tokens, lengths)), device, args.repeats)
        t_sim = timed(lambda: model.similarity(img_emb, cap_emb, lengths), device,
                      args.repeats)
        mem_fwd = meter.peak_mb()
    model.train()

    def step() -> None:
        model(images, tokens, lengths).sum().backward()
        model.zero_grad(set_to_none=True)

    meter.start()
    t_train = timed(step, device, args.repeats)
    return {"encode_s": t_enc, "similarity_s": t_sim, "forward_peak_mb": mem_fwd,
            "train_step_s": t_train, "train_peak_mb": meter.peak_mb()}


def work_eval(args: argparse.Namespace, strategy: str, device: torch.device) -> dict:
    """Encode a fraction of the 1K x 5K evaluation and fill its similarity in shards."""
    model = build_model(args, strategy, device).eval()
    images, tokens, lengths = make_batch(args.eval_images, args.eval_captions, args, device)
    meter = Meter(device)
    with torch.no_grad():
        model.similarity(model.encode_images(images[:4]),
                         model.encode_captions(tokens[:4], lengths[:4]), lengths[:4])
        meter.start()
        start = time.perf_counter()
        img_emb = torch.cat([model.encode_images(images[i:i + 128])
                             for i in range(0, len(images), 128)])
        t_img = time.perf_counter() - start
        start = time.perf_counter()
        cap_emb = torch.cat([model.encode_captions(tokens[i:i + 128], lengths[i:i + 128])
                             for i in range(0, len(tokens), 128)])
        t_cap = time.perf_counter() - start
        sims = torch.empty(len(images), len(tokens))

        def fill() -> None:
            for i in range(0, len(images), args.shard):
                for j in range(0, len(tokens), args.shard):
                    block_len = lengths[j:j + args.shard]
                    block = model.similarity(img_emb[i:i + args.shard],
                                             cap_emb[j:j + args.shard, :int(block_len.max())],
                                             block_len)
                    sims[i:i + args.shard, j:j + args.shard] = block.float().cpu()

        t_sim = timed(fill, device, 1)
        peak = meter.peak_mb()
    return {"encode_images_s": t_img, "encode_captions_s": t_cap, "similarity_s": t_sim,
            "peak_mb": peak, "pairs": len(images) * len(tokens)}


def run_worker(args: argparse.Namespace) -> None:
    """Entry point of a subprocess: one task, one strategy, JSON on stdout."""
    task, strategy = args.worker.split(":")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    result = work_batch(args, strategy, device) if task == "batch" else work_eval(
        args, strategy, device)
    print(json.dumps(result))


# ----------------------------------------------------------------------------- parent side


def spawn(argv: list[str], task: str, strategy: str) -> dict:
    """Run one measurement in a fresh interpreter and parse its JSON line."""
    cmd = [sys.executable, os.path.abspath(__file__), *argv, "--worker", f"{task}:{strategy}"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"worker {task}:{strategy} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def report_batch(args: argparse.Namespace, results: dict[str, dict]) -> None:
    """Print the batch table and the ratios against the first strategy."""
    ref = args.strategies[0]
    print(f"\n## {args.batch}x{args.batch} batch, {args.module}, official dims "
          f"(captions {args.min_len}-{args.max_len} tokens)")
    print(f"{'strategy':<9} {'encode s':>9} {'similarity s':>13} {'fwd peak MB':>12} "
          f"{'train fwd+bwd s':>16} {'train peak MB':>14}")
    for name in args.strategies:
        r = results[name]
        print(f"{name:<9} {r['encode_s']:>9.2f} {r['similarity_s']:>13.2f} "
              f"{r['forward_peak_mb']:>12.0f} {r['train_step_s']:>16.2f} "
              f"{r['train_peak_mb']:>14.0f}")
    for name in args.strategies[1:]:
        r, q = results[ref], results[name]
        print(f"ratio {ref}/{name}: similarity forward {r['similarity_s'] / q['similarity_s']:.2f}x"
              f", train step {r['train_step_s'] / q['train_step_s']:.2f}x")


def report_eval(args: argparse.Namespace, results: dict[str, dict]) -> None:
    """Print measured fraction and the extrapolation to 1,000 x 5,000."""
    scale = FULL_IMAGES * FULL_CAPTIONS / (args.eval_images * args.eval_captions)
    print(f"\n## Evaluation {args.eval_images} images x {args.eval_captions} captions "
          f"(MEASURED), shards of {args.shard}; EXTRAPOLATED to "
          f"{FULL_IMAGES} x {FULL_CAPTIONS} (x{scale:g} pairs)")
    print(f"{'strategy':<9} {'encode s':>9} {'similarity s':>13} {'peak MB':>8} | "
          f"{'extrap. encode s':>17} {'extrap. similarity s':>21}")
    for name in args.strategies:
        r = results[name]
        enc = r["encode_images_s"] + r["encode_captions_s"]
        enc_full = (r["encode_images_s"] * FULL_IMAGES / args.eval_images
                    + r["encode_captions_s"] * FULL_CAPTIONS / args.eval_captions)
        print(f"{name:<9} {enc:>9.2f} {r['similarity_s']:>13.2f} {r['peak_mb']:>8.0f} | "
              f"{enc_full:>17.1f} {r['similarity_s'] * scale:>21.1f}")
    stored = (FULL_IMAGES * 36 * 1024 + FULL_CAPTIONS * args.max_len * 1024
              + FULL_IMAGES * FULL_CAPTIONS) * 4 / 2**20
    print(f"EXTRAPOLATED memory for {FULL_IMAGES} x {FULL_CAPTIONS}: the per-shard working "
          f"set is the same as measured; stored float32 embeddings and score matrix add "
          f"{stored:.0f} MB (computed, not measured).")


def main(argv: list[str] | None = None) -> None:
    """Run every (task, strategy) in a subprocess and print the tables."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.worker:
        run_worker(args)
        return
    print(f"# bench_similarity: {platform.processor() or platform.machine()}, "
          f"torch {torch.__version__}, device {args.device}, "
          f"threads {args.threads or torch.get_num_threads()}, "
          f"load average at start {os.getloadavg()[0]:.2f}")
    print("command: python scripts/bench_similarity.py " + " ".join(argv))
    batch = {name: spawn(argv, "batch", name) for name in args.strategies}
    report_batch(args, batch)
    if not args.skip_eval:
        evals = {name: spawn(argv, "eval", name) for name in args.strategies}
        report_eval(args, evals)
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
