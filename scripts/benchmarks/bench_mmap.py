"""Peak memory of training and evaluation on memory-mapped official-size features.

Writes two synthetic datasets with official-size features (36 regions x 2048 float32, 295 KB
per image; default 4,000 and 16,000 training images: 1.2 and 4.7 GB) with the chunked,
low-memory writer of :func:`ncl.data.synthetic.generate`, then for each size runs in a fresh
subprocess:

* ``train``: ``PrecompDataModule.setup("fit")`` and its own training loader (shuffled, batch
  32 by default), ``--steps`` optimizer steps of a *small* SGRAF head (embed 64, sim 16: the
  data path is measured, not the model) on a hinge loss;
* ``eval``: the evaluation datasets (``ImageDataset``/``CaptionDataset`` + ``collate``) over
  ``--eval-images`` images spread evenly over the whole training file and their captions,
  encoded in batches of 128, then the image-caption similarity matrix.

Memory of each child (and its descendants, if DataLoader workers are used) is sampled from
``/proc/<pid>/status`` every 10 ms: ``RssAnon`` (private anonymous memory: heap, tensors)
and ``RssFile`` (resident pages of mapped files, here mostly the touched pages of the
feature memory map: shared, clean and reclaimable page cache, but counted in the resident
set) separately, and the kernel's peak resident set (``ru_maxrss`` of the child from
``wait4``, the same as its ``VmHWM``). The claim to check: anonymous memory does not grow
with the file; file-backed residency follows the pages touched, not the file size.

The generator's own peak resident set is reported too. The datasets are deleted at the end
unless ``--keep``.

Usage::

    python scripts/benchmarks/bench_mmap.py                         # ~6 GB under /tmp/ncl_bench
    python scripts/benchmarks/bench_mmap.py --sizes 500 2000 --steps 10   # quick check
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

from benchlib import (ROOT, load_average, parse_or_run_worker, parse_worker_output, print_header,
                      threads_env, worker_command)
MB = 1024.0  # /proc/*/status and ru_maxrss are in kB


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/ncl_bench", help="where datasets are written")
    parser.add_argument("--sizes", type=int, nargs="+", default=[4000, 16000],
                        help="training images per dataset (5 captions each)")
    parser.add_argument("--steps", type=int, default=50, help="training steps per run")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--eval-images", type=int, default=500)
    parser.add_argument("--num-workers", type=int, default=0, help="DataLoader workers")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in the children")
    parser.add_argument("--chunk-images", type=int, default=256, help="writer chunk")
    parser.add_argument("--keep", action="store_true", help="do not delete the datasets")
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def dataset_root(out: Path, n_train: int) -> Path:
    return out / f"official_{n_train}"


def official_spec(n_train: int):
    """The ``bench`` preset at official feature size (36 x 2048), small dev/test splits."""
    from ncl.data.synthetic import preset

    return preset("bench", n_train=n_train, n_dev=100, n_test=100, num_regions=36,
                  feature_dim=2048)


# ----------------------------------------------------------------------------- memory sampling


def _status(pid: int) -> dict[str, int]:
    """``RssAnon``/``RssFile``/``VmRSS`` of one process in kB (empty once it is gone)."""
    fields = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                key = line.split(":", 1)[0]
                if key in ("RssAnon", "RssFile", "RssShmem", "VmRSS"):
                    fields[key] = int(line.split()[1])
    except (OSError, ValueError):
        return {}
    return fields


def _tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (from ``/proc/<pid>/task/*/children``)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children", encoding="ascii") as kids:
                    todo.extend(int(k) for k in kids.read().split())
        except OSError:
            continue
    return found


class Sampler(threading.Thread):
    """Polls a process tree's memory; keeps the peaks of the sums over the tree."""

    def __init__(self, pid: int, period: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.pid, self.period = pid, period
        self.peak = {"RssAnon": 0, "RssFile": 0, "VmRSS": 0}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            total = {key: 0 for key in self.peak}
            for pid in _tree(self.pid):
                for key, value in _status(pid).items():
                    if key in total:
                        total[key] += value
            for key, value in total.items():
                self.peak[key] = max(self.peak[key], value)
            time.sleep(self.period)


def run_child(argv: list[str], worker: str) -> dict:
    """Run ``--worker worker`` in a fresh interpreter, sampling its memory; merge the JSON."""
    cmd = worker_command(__file__, argv, worker)
    env = threads_env(parse_args(argv).threads)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=env)
    sampler = Sampler(proc.pid)
    sampler.start()
    out, err = proc.communicate()
    sampler.stop.set()
    sampler.join()
    # communicate() reaped the child; its resource usage is in RUSAGE_CHILDREN, which is a
    # maximum over all children so far: the child reports its own VmHWM instead (below).
    result, _ = parse_worker_output(worker, proc.returncode, out, err)
    result["wall_s"] = time.perf_counter() - start
    result["sampled_peak_mb"] = {k: v / MB for k, v in sampler.peak.items()}
    return result


# ----------------------------------------------------------------------------- worker side


def own_memory() -> dict[str, float]:
    """This process's peak resident set (``VmHWM``) and current ``RssAnon``/``RssFile``, MB."""
    values = {}
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            key = line.split(":", 1)[0]
            if key in ("VmHWM", "RssAnon", "RssFile"):
                values[key] = int(line.split()[1]) / MB
    return values


def work_generate(args: argparse.Namespace, n_train: int) -> dict:
    """Write one dataset with the chunked writer."""
    from ncl.data.synthetic import generate

    start = time.perf_counter()
    data_dir = generate(dataset_root(Path(args.out), n_train), official_spec(n_train),
                        chunk_images=args.chunk_images)
    size = (data_dir / "train_ims.npy").stat().st_size
    return {"seconds": time.perf_counter() - start, "train_bytes": size, **own_memory()}


def small_model(vocab_size: int):
    """A small SGR head on official-size inputs: the data path dominates, not the model."""
    import torch

    from ncl.models import SGRAF

    torch.manual_seed(0)
    return SGRAF(vocab_size, "SGR", img_dim=2048, word_dim=32, embed_size=64, sim_dim=16)


def datamodule(args: argparse.Namespace, n_train: int):
    from ncl.data.datamodule import PrecompDataModule

    return PrecompDataModule(data_root=str(dataset_root(Path(args.out), n_train)),
                             data_name="synthetic_precomp", batch_size=args.batch,
                             num_workers=args.num_workers, dev_max_images=100)


def hinge_loss(scores):
    """Sum-of-violations triplet loss (margin 0.2) on a ``(B, B)`` score matrix."""
    import torch

    diag = scores.diag()
    eye = torch.eye(len(scores), dtype=torch.bool)
    cost = (0.2 + scores - diag[:, None]).clamp_min(0) + (0.2 + scores - diag[None, :]).clamp_min(0)
    return cost.masked_fill(eye, 0).sum()


def work_train(args: argparse.Namespace, n_train: int) -> dict:
    """``--steps`` training steps through the DataModule's own loader."""
    import torch

    torch.set_num_threads(args.threads)
    dm = datamodule(args, n_train)
    dm.setup("fit")
    after_setup = own_memory()
    model = small_model(dm.vocab_size).train()
    optim = torch.optim.Adam(model.parameters(), lr=2e-4)
    start = time.perf_counter()
    steps = 0
    for batch in dm.train_dataloader():
        loss = hinge_loss(model(batch["images"], batch["tokens"], batch["lengths"]))
        optim.zero_grad()
        loss.backward()
        optim.step()
        steps += 1
        if steps == args.steps:
            break
    return {"steps": steps, "seconds": time.perf_counter() - start, "after_setup": after_setup,
            "n_captions": dm.train_split.n_captions, **own_memory()}


def work_eval(args: argparse.Namespace, n_train: int) -> dict:
    """Encode images spread over the whole file and their captions; fill the score matrix."""
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, Subset

    from ncl.data.datasets import CaptionDataset, ImageDataset, collate

    torch.set_num_threads(args.threads)
    dm = datamodule(args, n_train)
    split = dm._load("train")  # the big file; evaluation code reads any split the same way
    images = np.linspace(0, split.n_images - 1, args.eval_images).astype(np.int64)
    captions = (images[:, None] * split.im_div + np.arange(split.im_div)).reshape(-1)
    model = small_model(dm.vocab_size).eval()
    loader = dict(batch_size=128, collate_fn=collate, num_workers=args.num_workers)
    start = time.perf_counter()
    with torch.no_grad():
        img_emb = torch.cat([model.encode_images(b["images"]) for b in
                             DataLoader(Subset(ImageDataset(split), images.tolist()), **loader)])
        caps = list(DataLoader(Subset(CaptionDataset(split), captions.tolist()), **loader))
        scores = torch.cat([model.similarity(img_emb,
                                             model.encode_captions(b["tokens"], b["lengths"]),
                                             b["lengths"]) for b in caps], dim=1)
    return {"scores_shape": list(scores.shape), "seconds": time.perf_counter() - start,
            **own_memory()}


WORKERS = {"generate": work_generate, "train": work_train, "eval": work_eval}


def run_worker(args: argparse.Namespace) -> None:
    task, size = args.worker.split(":")
    print(json.dumps(WORKERS[task](args, int(size))))


# ----------------------------------------------------------------------------- parent side


def main(argv: list[str] | None = None) -> None:
    """Generate, measure each size in fresh processes, print the table, clean up."""
    parsed = parse_or_run_worker(argv, parse_args, run_worker)
    if parsed is None:
        return
    args, argv = parsed
    print_header("bench_mmap", argv, f"threads {args.threads}, num_workers {args.num_workers}, "
                 f"batch {args.batch}, steps {args.steps}")
    out = Path(args.out)
    try:
        rows = []
        for size in args.sizes:
            gen = run_child(argv, f"generate:{size}")
            print(f"generated {size} images: train_ims.npy {gen['train_bytes'] / 1e9:.2f} GB in "
                  f"{gen['seconds']:.0f} s; generator peak RSS {gen['VmHWM']:.0f} MB "
                  f"(sampled peak RssAnon {gen['sampled_peak_mb']['RssAnon']:.0f} MB) "
                  f"({load_average()})")
            rows.append((size, gen, run_child(argv, f"train:{size}"),
                         run_child(argv, f"eval:{size}")))
        report(args, rows)
    finally:
        if not args.keep:
            for size in args.sizes:
                shutil.rmtree(dataset_root(out, size), ignore_errors=True)
            print(f"deleted the datasets under {out}")


def report(args: argparse.Namespace, rows: list) -> None:
    """One line per (size, task): file size, peaks, time."""
    print(f"\n{'images':>7} {'file GB':>8} {'task':<6} {'peak RSS MB':>12} {'peak RssAnon':>13} "
          f"{'peak RssFile':>13} {'end RssAnon':>12} {'end RssFile':>12} {'seconds':>8}")
    for size, gen, train, evaluation in rows:
        for task, res in (("train", train), ("eval", evaluation)):
            peak = res["sampled_peak_mb"]
            print(f"{size:>7} {gen['train_bytes'] / 1e9:>8.2f} {task:<6} {res['VmHWM']:>12.0f} "
                  f"{peak['RssAnon']:>13.0f} {peak['RssFile']:>13.0f} {res['RssAnon']:>12.0f} "
                  f"{res['RssFile']:>12.0f} {res['seconds']:>8.1f}")
    print(f"train: {args.steps} steps of batch {args.batch} ({args.steps * args.batch} images "
          f"read); eval: {args.eval_images} images spread over the file and their captions. "
          f"MB = MiB. 'peak RSS' is the child's VmHWM (kernel high-water mark, main process); "
          f"RssAnon/RssFile peaks are sampled every 10 ms over the process tree. "
          f"({load_average()})")


if __name__ == "__main__":
    main()
