"""Benchmark SGRAF similarity: the official per-caption loop versus ncl's ``auto`` path.

Measures, at official dimensions (36 x 2048 regions, embed 1024, sim 256, F30K vocabulary):

1. one ``B x B`` batch (default 128x128, SGR): the inference similarity forward (eval,
   no_grad, from stored embeddings), the encoders alone, and a training forward+backward
   of the whole model (train mode, encoders included, backward of the summed scores);
2. the F30K-test-sized evaluation, 1,000 images x 5,000 captions, by measuring a fraction
   (default 100 images x 500 captions: encode once, then similarity in shards) and
   extrapolating linearly in images, captions and pairs. Extrapolated numbers are labelled.

How it measures (be careful when reading the numbers):

* Every (task, strategy) runs in fresh subprocesses, one for time and one for memory.
* Time: wall clock, minimum over ``--repeats``, after a tiny warm-up call.
* Memory on CPU: growth of the resident set's peak during the measured call over the
  resident set just before it (the kernel's high-water mark is reset through
  ``/proc/self/clear_refs``; ``ru_maxrss`` where that is impossible). The memory run sets
  ``GLIBC_TUNABLES=glibc.malloc.mmap_threshold=65536`` so that every large tensor is its own
  mapping, returned to the system when freed; the resident set then follows live tensor
  memory instead of glibc's retained heap. (That setting slows allocation, which is why
  time is measured in a separate run with the default allocator.) On CUDA, memory is
  ``torch.cuda.max_memory_allocated`` minus the allocation before the call.
* The machine may be shared: the load average at start and end is printed.

Usage::

    python scripts/benchmarks/bench_similarity.py                    # CPU, ~2-3 min on 2 idle cores
    python scripts/benchmarks/bench_similarity.py --device cuda --strategies loop auto chunked
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from collections.abc import Callable

import torch
from benchlib import load_average, parse_or_run_worker, print_header, run_worker_child

F30K_VOCAB = 8481
FULL_IMAGES, FULL_CAPTIONS = 1000, 5000
TUNABLE = "glibc.malloc.mmap_threshold=65536"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--module", default="SGR", choices=["SGR", "SAF"])
    parser.add_argument("--strategies", nargs="+", default=["loop", "auto"],
                        choices=["loop", "auto", "chunked"],
                        help="similarity_strategy values; the first is the reference")
    parser.add_argument("--chunk-size", type=int, default=32, help="SGRAF chunk_size")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--min-len", type=int, default=10,
                        help="shortest caption in tokens, <start>/<end> included")
    parser.add_argument("--max-len", type=int, default=18, help="longest caption in tokens")
    parser.add_argument("--eval-images", type=int, default=100)
    parser.add_argument("--eval-captions", type=int, default=500)
    parser.add_argument("--shard", type=int, default=100, help="images/captions per block")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs, minimum kept")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--skip-eval", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# ----------------------------------------------------------------------------- worker side


def _proc_status_mb(key: str) -> float:
    """A ``kB`` field of ``/proc/self/status`` (Linux), MiB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(key)


class Meter:
    """Peak-memory growth: resident-set high-water mark on CPU, allocator peak on CUDA.

    On Linux the kernel's high-water mark is reset first (``/proc/self/clear_refs``), so the
    peak is that of the measured call alone; elsewhere ``ru_maxrss`` (a process-lifetime
    maximum) is the fallback.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.base = 0.0
        self.reset_ok = False

    def start(self) -> None:
        """Mark the baseline."""
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated() / 2**20
            return
        try:
            with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
                refs.write("5")  # reset the peak resident set to the current one
            self.base = _proc_status_mb("VmRSS")
            self.reset_ok = True
        except OSError:
            self.base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def peak_mb(self) -> float:
        """Peak growth since :meth:`start`, MiB."""
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() / 2**20 - self.base
        if self.reset_ok:
            return _proc_status_mb("VmHWM") - self.base
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - self.base


def timed(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Minimum wall time of ``fn`` over ``repeats`` calls, seconds."""
    best = float("inf")
    for _ in range(max(repeats, 1)):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def make_tokens(n_cap: int, args: argparse.Namespace,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero-padded random token ids, lengths uniform in [min_len, max_len] (unsorted)."""
    gen = torch.Generator().manual_seed(args.seed + 1)
    lengths = torch.randint(args.min_len, args.max_len + 1, (n_cap,), generator=gen)
    tokens = torch.randint(4, F30K_VOCAB, (n_cap, args.max_len), generator=gen)
    tokens = tokens * (torch.arange(args.max_len) < lengths.unsqueeze(1))
    return tokens.to(device), lengths


def make_images(n_img: int, args: argparse.Namespace, device: torch.device) -> torch.Tensor:
    """Random region features ``(n_img, 36, 2048)``."""
    gen = torch.Generator().manual_seed(args.seed)
    return torch.randn(n_img, 36, 2048, generator=gen).to(device)


def build_model(args: argparse.Namespace, strategy: str, device: torch.device):
    """An SGRAF at official dimensions (imported here: the parent process needs no ncl)."""
    from ncl.models import SGRAF

    torch.manual_seed(args.seed)
    return SGRAF(F30K_VOCAB, args.module, similarity_strategy=strategy,
                 chunk_size=args.chunk_size).to(device)


def work_forward(args: argparse.Namespace, strategy: str, device: torch.device,
                 memory: bool) -> dict:
    """Similarity forward of one B x B batch from stored embeddings (eval, no_grad)."""
    model = build_model(args, strategy, device).eval()
    tokens, lengths = make_tokens(args.batch, args, device)
    gen = torch.Generator().manual_seed(args.seed)
    img_emb = torch.nn.functional.normalize(torch.randn(args.batch, 36, 1024, generator=gen),
                                            dim=-1).to(device)
    valid = (torch.arange(args.max_len) < lengths.unsqueeze(1)).unsqueeze(-1)
    cap_emb = (torch.nn.functional.normalize(torch.randn(args.batch, args.max_len, 1024,
                                                         generator=gen), dim=-1) * valid)
    cap_emb = cap_emb.to(device)
    meter = Meter(device)
    with torch.no_grad():
        # Warm-up at full size: one-time allocations (library buffers) stay out of the peak.
        model.similarity(img_emb, cap_emb, lengths)
        if memory:
            meter.start()
            model.similarity(img_emb, cap_emb, lengths)
            return {"peak_mb": meter.peak_mb()}
        t_sim = timed(lambda: model.similarity(img_emb, cap_emb, lengths), device,
                      args.repeats)
        images = make_images(args.batch, args, device)
        t_enc = timed(lambda: (model.encode_images(images),
                               model.encode_captions(tokens, lengths)), device, args.repeats)
    return {"similarity_s": t_sim, "encode_s": t_enc,
            "plan": list(model.similarity_plan(device))}


def work_train(args: argparse.Namespace, strategy: str, device: torch.device,
               memory: bool) -> dict:
    """Training forward+backward of one B x B batch (train mode, encoders included)."""
    model = build_model(args, strategy, device).train()
    images = make_images(args.batch, args, device)
    tokens, lengths = make_tokens(args.batch, args, device)

    def step(n: int) -> None:
        model(images[:n], tokens[:n], lengths[:n]).sum().backward()
        model.zero_grad(set_to_none=True)

    step(2)  # warm-up
    if memory:
        meter = Meter(device)
        meter.start()
        step(args.batch)
        return {"peak_mb": meter.peak_mb()}
    return {"step_s": timed(lambda: step(args.batch), device, args.repeats)}


def work_eval(args: argparse.Namespace, strategy: str, device: torch.device,
              memory: bool) -> dict:
    """Encode a fraction of the 1K x 5K evaluation, then fill its similarity in shards."""
    model = build_model(args, strategy, device).eval()
    images = make_images(args.eval_images, args, device)
    tokens, lengths = make_tokens(args.eval_captions, args, device)
    meter = Meter(device)
    with torch.no_grad():
        model(images[:2], tokens[:2], lengths[:2])  # warm-up
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
        start = time.perf_counter()
        for i in range(0, len(images), args.shard):
            for j in range(0, len(tokens), args.shard):
                block_len = lengths[j:j + args.shard]
                block = model.similarity(img_emb[i:i + args.shard],
                                         cap_emb[j:j + args.shard, :int(block_len.max())],
                                         block_len)
                sims[i:i + args.shard, j:j + args.shard] = block.float().cpu()
        if device.type == "cuda":
            torch.cuda.synchronize()
        t_sim = time.perf_counter() - start
    if memory:
        return {"peak_mb": meter.peak_mb()}
    return {"encode_images_s": t_img, "encode_captions_s": t_cap, "similarity_s": t_sim}


WORKERS = {"forward": work_forward, "train": work_train, "eval": work_eval}


def run_worker(args: argparse.Namespace) -> None:
    """Entry point of a subprocess: one task, one strategy, time or memory; JSON on stdout."""
    task, strategy, mode = args.worker.split(":")
    if args.threads:
        torch.set_num_threads(args.threads)
    result = WORKERS[task](args, strategy, torch.device(args.device), mode == "memory")
    print(json.dumps(result))


# ----------------------------------------------------------------------------- parent side


def spawn(argv: list[str], task: str, strategy: str) -> dict:
    """Run the time and the memory measurement in fresh interpreters; merge their JSON."""
    merged = {}
    for mode in ("time", "memory"):
        env = dict(os.environ)
        if mode == "memory":
            env["GLIBC_TUNABLES"] = ":".join(filter(None, [env.get("GLIBC_TUNABLES"), TUNABLE]))
        result, _ = run_worker_child(__file__, argv, f"{task}:{strategy}:{mode}", env=env)
        merged.update(result)
    return merged


def report_batch(args: argparse.Namespace, fwd: dict[str, dict],
                 train: dict[str, dict] | None) -> None:
    """Print the one-batch table and the speed-ups over the first strategy."""
    ref = args.strategies[0]
    print(f"\n## One {args.batch}x{args.batch} batch, {args.module}, official dims, captions "
          f"{args.min_len}-{args.max_len} tokens (MEASURED)")
    print(f"{'strategy (resolved)':<24} {'similarity s':>13} {'peak MB':>8} {'encoders s':>11}"
          f" {'train fwd+bwd s':>16} {'train peak MB':>14}")
    for name in args.strategies:
        f = fwd[name]
        label = f"{name} ({f['plan'][0]}, {f['plan'][1]})" if f["plan"][0] == "chunked" \
            else name
        row = (f"{label:<24} {f['similarity_s']:>13.2f} {f['peak_mb']:>8.0f} "
               f"{f['encode_s']:>11.2f}")
        if train:
            row += f" {train[name]['step_s']:>16.2f} {train[name]['peak_mb']:>14.0f}"
        print(row)
    for name in args.strategies[1:]:
        line = (f"{name} vs {ref}: similarity forward "
                f"{fwd[ref]['similarity_s'] / fwd[name]['similarity_s']:.2f}x faster, "
                f"memory x{fwd[name]['peak_mb'] / max(fwd[ref]['peak_mb'], 1e-9):.2f}")
        if train:
            line += (f"; train step {train[ref]['step_s'] / train[name]['step_s']:.2f}x "
                     f"faster, memory x{train[name]['peak_mb'] / train[ref]['peak_mb']:.2f}")
        print(line)


def report_eval(args: argparse.Namespace, results: dict[str, dict]) -> None:
    """Print the measured evaluation and, for a fraction, its extrapolation to 1,000 x 5,000."""
    scale = FULL_IMAGES * FULL_CAPTIONS / (args.eval_images * args.eval_captions)
    full = args.eval_images == FULL_IMAGES and args.eval_captions == FULL_CAPTIONS
    print(f"\n## Evaluation: MEASURED on {args.eval_images} images x {args.eval_captions} "
          f"captions (shards of {args.shard})"
          + ("" if full else f"; EXTRAPOLATED to {FULL_IMAGES} x {FULL_CAPTIONS} (x{scale:g} pairs)"))
    header = f"{'strategy':<9} {'encode s':>9} {'similarity s':>13} {'peak MB':>8}"
    print(header + ("" if full else f" | {'EXTRAP. encode s':>17} {'EXTRAP. similarity s':>21} "
                                    f"{'EXTRAP. total min':>18}"))
    for name in args.strategies:
        r = results[name]
        enc = r["encode_images_s"] + r["encode_captions_s"]
        row = f"{name:<9} {enc:>9.2f} {r['similarity_s']:>13.2f} {r['peak_mb']:>8.0f}"
        if not full:
            enc_full = (r["encode_images_s"] * FULL_IMAGES / args.eval_images
                        + r["encode_captions_s"] * FULL_CAPTIONS / args.eval_captions)
            sim_full = r["similarity_s"] * scale
            row += f" | {enc_full:>17.1f} {sim_full:>21.0f} {(enc_full + sim_full) / 60:>18.1f}"
        print(row)
    stored = (FULL_IMAGES * 36 * 1024 + FULL_CAPTIONS * args.max_len * 1024
              + FULL_IMAGES * FULL_CAPTIONS) * 4 / 2**20
    if full:
        print(f"Peak MB includes the stored float32 embeddings and the score matrix (about "
              f"{stored:.0f} MB by their sizes) and the per-shard working set.")
    else:
        print(f"EXTRAPOLATED memory for {FULL_IMAGES} x {FULL_CAPTIONS}: the per-shard working set "
              f"does not grow with the totals; the stored float32 embeddings and score matrix "
              f"take {stored:.0f} MB (computed, not measured) instead of the fraction's.")


def main(argv: list[str] | None = None) -> None:
    """Run every (task, strategy) in subprocesses and print the tables."""
    parsed = parse_or_run_worker(argv, parse_args, run_worker)
    if parsed is None:
        return
    args, argv = parsed
    print_header("bench_similarity", argv,
                 f"device {args.device}, threads {args.threads or torch.get_num_threads()}")
    started = time.perf_counter()
    fwd = {name: spawn(argv, "forward", name) for name in args.strategies}
    train = None
    if not args.skip_train:
        train = {name: spawn(argv, "train", name) for name in args.strategies}
    report_batch(args, fwd, train)
    if not args.skip_eval:
        report_eval(args, {name: spawn(argv, "eval", name) for name in args.strategies})
    print(f"\nbenchmark wall time {time.perf_counter() - started:.0f} s; {load_average()} at end")


if __name__ == "__main__":
    main()
