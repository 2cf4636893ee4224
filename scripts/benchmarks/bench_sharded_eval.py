"""Benchmark: the validation similarity matrix with 1 process versus 2 gloo processes.

What it measures, on the synthetic benchmark data (``ncl.data.synthetic``, preset ``bench``:
16 regions x 96 dims) with a validation split of ``--images`` images x 5 captions:

1. The split is encoded once by a randomly initialised SGRAF at the synthetic configs'
   dimensions (``configs/recon_saf_synthetic.yaml``: word 32, embed 64, sim 32; SAF by
   default, ``--module SGR`` for SGR) and the embeddings are written to a temporary file.
2. For every ``--shard-sizes`` value, fresh processes (``torch.multiprocessing.spawn``) load
   the embeddings and compute the matrix with
   :func:`ncl.evaluation.sharded.rank_sharded_similarity`, as ``RetrievalMethod`` does in
   validation: once with 1 process (no process group: ``sharded_similarity`` itself) and
   once with 2 gloo processes, each with ``--threads`` torch threads (default 1: one core
   per process, as one GPU per process would be). Optionally (``--baseline-threads 2``)
   also 1 process with 2 threads, the fair CPU comparison on 2 cores.
3. Reported per run: wall time of the similarity call (the slowest rank, gather included;
   process start-up and loading excluded), the seconds each rank spent inside ``sim_fn``
   (its own scoring, without waiting for the other rank), pairs each rank scored (a counting wrapper
   around ``sim_fn``), and, for 2 processes, the maximum absolute difference from the
   1-process matrix and whether the two are bit-identical.

The machine (CPU model, cores) and the load average before and after are printed: on a shared
machine the load changes the numbers, read them with it.

Usage::

    OMP_NUM_THREADS=1 python scripts/benchmarks/bench_sharded_eval.py   # ~4-6 min on the shared 2 cores
    python scripts/benchmarks/bench_sharded_eval.py --images 200 --shard-sizes 100  # quick check
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp
from benchlib import load_average, print_header

#: SGRAF sizes of the synthetic configs (configs/recon_saf_synthetic.yaml, crcl_saf_synthetic).
BACKBONE = {"img_dim": 96, "num_regions": 16, "word_dim": 32, "embed_size": 64, "sim_dim": 32,
            "similarity_strategy": "chunked"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000, help="validation images (x5 captions)")
    parser.add_argument("--module", default="SAF", choices=["SGR", "SAF"])
    parser.add_argument("--shard-sizes", type=int, nargs="+", default=[1000, 500],
                        help="eval_shard_size values (default: 1000, ncl's default, and 500)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--baseline-threads", type=int, default=0,
                        help="also run 1 process with this many threads (0: skip)")
    parser.add_argument("--cache-dir", default=None, help="synthetic data cache (default: temp)")
    args = parser.parse_args(argv)
    if args.images < 1 or min(args.shard_sizes) < 1 or args.threads < 1:
        parser.error("--images, --shard-sizes and --threads must be positive")
    return args


def build_net(vocab_size: int, module: str) -> torch.nn.Module:
    """The synthetic configs' SGRAF with seed-0 weights, in eval mode."""
    from ncl.models.sgraf import SGRAF

    torch.manual_seed(0)
    return SGRAF(vocab_size, module_name=module, **BACKBONE).eval()


@torch.no_grad()
def encode_split(args: argparse.Namespace, cache_dir: str, out: Path) -> dict[str, int]:
    """Generate (or reuse) the synthetic data, encode its validation split, save to ``out``."""
    from ncl.data.datamodule import SyntheticDataModule

    dm = SyntheticDataModule(preset="bench", cache_dir=cache_dir, n_train=50, n_dev=args.images,
                             dev_max_images=args.images, eval_batch_size=250)
    dm.setup("validate")
    net = build_net(dm.vocab_size, args.module)
    images, captions = dm.val_dataloader()
    img = torch.cat([net.encode_images(b["images"]) for b in images])  # (N_img, R, E)
    caps, lens = [], []
    for b in captions:
        caps.append(net.encode_captions(b["tokens"], b["lengths"]))
        lens.append(b["lengths"])
    width = max(c.shape[1] for c in caps)
    cap = torch.cat([torch.nn.functional.pad(c, (0, 0, 0, width - c.shape[1])) for c in caps])
    torch.save({"img": img, "cap": cap, "lens": torch.cat(lens), "vocab": dm.vocab_size,
                "state": net.state_dict()}, out)
    return {"images": img.shape[0], "captions": cap.shape[0]}


class CountingSim:
    """Counts the (image, caption) pairs ``fn`` scores and the seconds spent in it."""

    def __init__(self, fn) -> None:
        self.fn, self.pairs, self.seconds = fn, 0, 0.0

    def __call__(self, img, cap, lens):
        self.pairs += img.shape[0] * cap.shape[0]
        start = time.perf_counter()
        out = self.fn(img, cap, lens)
        self.seconds += time.perf_counter() - start
        return out


def worker(rank: int, world: int, threads: int, init_file: str, emb_path: str, shard: int,
           out_dir: str, module: str) -> None:
    """One process: load the embeddings, time the (rank-sharded) similarity, save results."""
    import torch.distributed as dist

    from ncl.evaluation.sharded import rank_sharded_similarity

    torch.set_num_threads(threads)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                                world_size=world)
    try:
        emb = torch.load(emb_path)
        net = build_net(emb["vocab"], module)
        net.load_state_dict(emb["state"])
        sim = CountingSim(net.similarity)
        if world > 1:
            dist.barrier()  # start together: the time is the collective's, not the start-up's
        start = time.perf_counter()
        sims = rank_sharded_similarity(sim, emb["img"], emb["cap"], emb["lens"], shard,
                                       device="cpu")
        seconds = time.perf_counter() - start
        result = {"seconds": seconds, "pairs": sim.pairs, "sim_seconds": sim.seconds}
        if rank == 0:
            result["sims"] = sims
        torch.save(result, f"{out_dir}/rank{rank}.pt")
    finally:
        if world > 1:
            dist.destroy_process_group()


def run(world: int, threads: int, emb_path: Path, shard: int, module: str, tmp: Path) -> dict:
    """Spawn ``world`` processes: the slowest rank's time, per-rank pairs and sim_fn seconds,
    and rank 0's matrix."""
    out = Path(tempfile.mkdtemp(dir=tmp))
    mp.spawn(worker, args=(world, threads, str(out / "pg"), str(emb_path), shard, str(out), module),
             nprocs=world, join=True)
    ranks = [torch.load(out / f"rank{r}.pt") for r in range(world)]
    return {"seconds": max(r["seconds"] for r in ranks), "pairs": [r["pairs"] for r in ranks],
            "sim_seconds": [r["sim_seconds"] for r in ranks], "sims": ranks[0]["sims"]}


def main(argv: list[str] | None = None) -> None:
    """Encode the split once, then time 1 against 2 processes for every shard size."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    print_header("bench_sharded_eval", argv,
                 f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
                 f"{args.module}, {args.threads} thread(s) per process")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        emb_path = tmp / "embeddings.pt"
        sizes = encode_split(args, args.cache_dir or str(tmp / "cache"), emb_path)
        print(f"split: {sizes['images']} images x {sizes['captions']} captions, {args.module} "
              f"at {BACKBONE}, {args.threads} thread(s) per process")
        print(f"{'shard':>6} {'processes':>9} {'threads':>7} {'seconds':>8} {'speed-up':>8} "
              f"{'pairs per rank':>20} {'sim_fn s per rank':>17} {'max |diff|':>10} "
              f"{'bit-identical':>13}")
        for shard in args.shard_sizes:
            one = run(1, args.threads, emb_path, shard, args.module, tmp)
            rows = [(1, args.threads, one)]
            if args.baseline_threads:
                rows.append((1, args.baseline_threads,
                             run(1, args.baseline_threads, emb_path, shard, args.module, tmp)))
            rows.append((2, args.threads, run(2, args.threads, emb_path, shard, args.module, tmp)))
            for world, threads, res in rows:
                diff = float((res["sims"] - one["sims"]).abs().max())
                same = torch.equal(res["sims"], one["sims"])
                print(f"{shard:>6} {world:>9} {threads:>7} {res['seconds']:>8.2f} "
                      f"{one['seconds'] / res['seconds']:>8.2f} "
                      f"{'/'.join(str(p) for p in res['pairs']):>20} "
                      f"{'/'.join(f'{t:.1f}' for t in res['sim_seconds']):>17} "
                      f"{diff:>10.3g} {str(same):>13}",
                      flush=True)
    print(f"at the end: {load_average()}")


if __name__ == "__main__":
    sys.exit(main())
