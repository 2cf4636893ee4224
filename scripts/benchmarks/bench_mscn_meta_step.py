"""The cost of MSCN's second-order meta step against a plain training step, in one process.

Both variants run on the same SGRAF + meta network and the same batch, interleaved round by
round (so a change of load hits both), and the minimum over the rounds is kept:

* ``plain``: what a step without meta update costs (``meta_interval`` > 1 between meta steps):
  the corrected similarities of the batch through the (frozen) meta network, the
  adaptive-margin triplet, backward, clip, Adam step;
* ``meta+plain``: a co-training step with a meta update (official ``meta_interval`` 1): the
  second-order meta step (:func:`ncl.training.meta_step.meta_gradient`: loss through the meta
  network, gradient with ``create_graph``, pseudo update, the meta batch's BCE through the
  pseudo network, double backward), the meta network's Adam step, then the plain step.

The printed ratio is ``meta+plain / plain``: how much slower MSCN's co-training epoch is than
the same epoch without meta steps. On CUDA the meta step runs with cuDNN off (its GRU has no
double backward), as in MSCN's code and in ncl.

Usage::

    python scripts/benchmarks/bench_mscn_meta_step.py --threads 1 --dims small
    python scripts/benchmarks/bench_mscn_meta_step.py --device cuda --dims official --batch 64
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import torch
from benchlib import print_header
from torch.func import functional_call

F30K_VOCAB = 8481
#: SGRAF sizes: the official ones, and a CPU-sized model (the synthetic configs' dimensions).
DIMS = {"official": dict(img_dim=2048, word_dim=300, embed_size=1024, sim_dim=256, num_regions=36),
        "small": dict(img_dim=64, word_dim=32, embed_size=64, sim_dim=32, num_regions=12),
        "toy": dict(img_dim=16, word_dim=8, embed_size=16, sim_dim=8, num_regions=6)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (fixed)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dims", default="small", choices=sorted(DIMS))
    parser.add_argument("--module", default="SGR", choices=["SGR", "SAF"])
    parser.add_argument("--batch", type=int, default=64, help="pairs per training and meta batch")
    parser.add_argument("--max-len", type=int, default=14)
    parser.add_argument("--pseudo-update", default="sgd", choices=["sgd", "adam"])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds; minimum kept")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def make_batch(args: argparse.Namespace, dims: dict, device: torch.device, gen: torch.Generator) -> dict:
    """Random regions, tokens (lengths 4 .. max_len) and 0/1 labels for ``args.batch`` pairs."""
    b = args.batch
    lengths = torch.randint(4, args.max_len + 1, (b,), generator=gen)
    tokens = torch.randint(4, F30K_VOCAB, (b, args.max_len), generator=gen)
    tokens = tokens * (torch.arange(args.max_len) < lengths.unsqueeze(1))
    images = torch.randn(b, dims["num_regions"], dims["img_dim"], generator=gen)
    labels = (torch.arange(b) % 2).float()
    return {"images": images.to(device), "tokens": tokens.to(device), "lengths": lengths,
            "label": labels.to(device)}


def main(argv: list[str] | None = None) -> None:
    import sys

    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    from ncl.losses.mscn import adaptive_margins, adaptive_triplet, meta_bce
    from ncl.models import SGRAF
    from ncl.models.mscn_meta import MetaSimilarity, corrected_batch, corrected_pairs
    from ncl.training.meta_step import adam_update, meta_gradient, sgd_update

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dims = DIMS[args.dims]
    print_header("bench_mscn_meta_step", argv,
                 f"{args.device}, {args.module} {args.dims} dims, batch {args.batch}, "
                 f"{args.threads} threads")
    torch.manual_seed(args.seed)
    net = SGRAF(F30K_VOCAB, args.module, **dims).to(device).train()
    meta = MetaSimilarity(dims["sim_dim"]).to(device).train()
    opt = torch.optim.Adam(net.parameters(), lr=2e-4)
    meta_opt = torch.optim.Adam(meta.parameters(), lr=17e-6)
    gen = torch.Generator().manual_seed(args.seed)
    batch, meta_batch = make_batch(args, dims, device, gen), make_batch(args, dims, device, gen)

    def train_loss(b: dict, n: torch.nn.Module, m) -> torch.Tensor:
        sims = corrected_batch(n, m, b)
        return adaptive_triplet(sims, adaptive_margins(sims.diagonal(), 0.2)).sum()

    def plain() -> None:
        frozen = {k: p.detach() for k, p in meta.named_parameters()}
        loss = train_loss(batch, net, partial(functional_call, meta, frozen))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 2.0)
        opt.step()

    def meta_then_plain() -> None:
        update = (sgd_update(opt.param_groups[0]["lr"]) if args.pseudo_update == "sgd"
                  else adam_update(opt, dict(net.named_parameters())))
        with torch.backends.cudnn.flags(enabled=False):
            _, grads = meta_gradient(net, meta, partial(train_loss, batch),
                                     lambda n, m: meta_bce(corrected_pairs(n, m, meta_batch),
                                                           meta_batch["label"]), update)
        for p, g in zip(meta.parameters(), grads):
            p.grad = g
        meta_opt.step()
        plain()

    def timed(fn) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    plain()  # warm-up of both paths (allocator, first Adam state)
    meta_then_plain()
    best = {"plain": float("inf"), "meta+plain": float("inf")}
    for _ in range(args.rounds):
        best["plain"] = min(best["plain"], timed(plain))
        best["meta+plain"] = min(best["meta+plain"], timed(meta_then_plain))
    print(f"{'variant':<12} {'seconds':>10}")
    for name, value in best.items():
        print(f"{name:<12} {value:>10.4f}")
    print(f"ratio meta+plain / plain: {best['meta+plain'] / best['plain']:.2f}")


if __name__ == "__main__":
    main()
