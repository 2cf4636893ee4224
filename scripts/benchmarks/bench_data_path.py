"""Share of a training step spent waiting for data, on an official-size feature file.

For each ``--workers`` value, in a fresh subprocess: ``PrecompDataModule.setup("fit")`` on a
dataset written by ``scripts/benchmarks/bench_mmap.py --keep`` (or any official-layout folder), its own
training loader (shuffled, ``--batch`` pairs), and ``--steps`` training steps. Per step it
times ``next(iterator)`` (the wait for the batch: in the main process with 0 workers, the
hand-over from the worker processes otherwise) and the step itself (forward, backward,
Adam). The first batch is reported apart: it includes starting the workers.

Models: ``official`` is SGR at official dimensions (embed 1024, sim 256; the configs' model),
``small`` a small SGR head (embed 64, sim 16) whose step is short, which shows what the data
path can deliver when the model is fast (as on a GPU).

Page cache: the file is usually cached after being written. ``--cold`` first asks the kernel
to drop this file's cached pages (``posix_fadvise(DONTNEED)``; only this file, no root needed),
so that the batches are read from disk.

Usage::

    python scripts/benchmarks/bench_mmap.py --sizes 16000 --keep --steps 1
    python scripts/benchmarks/bench_data_path.py --data /tmp/ncl_bench/official_16000 --model official
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from benchlib import load_average, parse_or_run_worker, print_header, run_worker_child, threads_env


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="/tmp/ncl_bench/official_16000",
                        help="data_root holding synthetic_precomp/ and vocab/")
    parser.add_argument("--data-name", default="synthetic_precomp")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2, 4],
                        help="DataLoader num_workers values (the configs use 4)")
    parser.add_argument("--model", choices=["official", "small"], default="official")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5, help="timed steps after the first")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, main process")
    parser.add_argument("--cold", action="store_true", help="drop the file's page cache first")
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def drop_file_cache(path: Path) -> None:
    """Evict ``path``'s clean pages from the page cache (this file only)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def build_model(kind: str, vocab_size: int):
    """SGR at official dimensions or a small SGR head (both read 36 x 2048 regions)."""
    import torch

    from ncl.models import SGRAF

    torch.manual_seed(0)
    if kind == "official":
        return SGRAF(vocab_size, "SGR")
    return SGRAF(vocab_size, "SGR", word_dim=32, embed_size=64, sim_dim=16)


def run_worker(args: argparse.Namespace) -> None:
    """One ``num_workers`` value: time ``next()`` and the step for ``--steps`` steps."""
    import torch

    from ncl.data.datamodule import PrecompDataModule

    torch.set_num_threads(args.threads)
    num_workers = int(args.worker)
    dm = PrecompDataModule(data_root=args.data, data_name=args.data_name, batch_size=args.batch,
                           num_workers=num_workers, dev_max_images=100)
    dm.setup("fit")
    if args.cold:
        drop_file_cache(Path(args.data) / args.data_name / "train_ims.npy")
    model = build_model(args.model, dm.vocab_size).train()
    optim = torch.optim.Adam(model.parameters(), lr=2e-4)
    iterator = iter(dm.train_dataloader())
    waits, steps = [], []
    for index in range(args.steps + 1):
        start = time.perf_counter()
        batch = next(iterator)
        got = time.perf_counter()
        scores = model(batch["images"], batch["tokens"], batch["lengths"])
        diag = scores.diag()
        loss = ((0.2 + scores - diag[:, None]).clamp_min(0)
                + (0.2 + scores - diag[None, :]).clamp_min(0)).sum()  # hinge, sum of violations
        optim.zero_grad()
        loss.backward()
        optim.step()
        waits.append(got - start)
        steps.append(time.perf_counter() - got)
    print(json.dumps({"first_wait_s": waits[0], "first_step_s": steps[0], "waits": waits[1:],
                      "steps": steps[1:], "uptime": load_average()}))


def main(argv: list[str] | None = None) -> None:
    """Run each ``num_workers`` in a fresh process and print the table."""
    parsed = parse_or_run_worker(argv, parse_args, run_worker)
    if parsed is None:
        return
    args, argv = parsed
    feats = Path(args.data) / args.data_name / "train_ims.npy"
    if not feats.is_file():
        raise SystemExit(f"--data: {feats} not found; write it with "
                         f"'python scripts/benchmarks/bench_mmap.py --sizes 16000 --keep'")
    print_header("bench_data_path", argv,
                 f"model {args.model}, batch {args.batch}, threads {args.threads} (main process; "
                 f"workers use 1 each), {'cold' if args.cold else 'warm'} page cache, "
                 f"file {feats.stat().st_size / 1e9:.2f} GB")
    print(f"\n{'workers':>7} {'first next() s':>15} {'first step s':>13} {'mean next() s':>14} "
          f"{'max next() s':>13} {'mean step s':>12} {'wait share':>11}   load")
    for workers in args.workers:
        res, _ = run_worker_child(__file__, argv, str(workers), env=threads_env(args.threads))
        wait, step = sum(res["waits"]), sum(res["steps"])
        print(f"{workers:>7} {res['first_wait_s']:>15.3f} {res['first_step_s']:>13.2f} "
              f"{wait / len(res['waits']):>14.3f} {max(res['waits']):>13.3f} "
              f"{step / len(res['steps']):>12.2f} {wait / (wait + step):>11.1%}   "
              f"{res['uptime'].replace('load average ', '')}")
    print(f"wait share = sum of next() / (sum of next() + sum of steps) over {args.steps} steps "
          f"after the first. ({load_average()})")


if __name__ == "__main__":
    main()
