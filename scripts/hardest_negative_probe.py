"""Probe what a triplet loss does to SGRAF's similarity head, step by step (no Lightning).

Trains one SGRAF network on the synthetic quickstart data with the hinge triplet loss and
prints, every ``--every`` steps: the summed loss, the gradient norm, the mean positive and
negative similarity, the spread of the scores over the batch (``std`` of the similarities and
of the logits), the spread of the image/caption embeddings and of the vector fed to the score
layer over the batch, the score layer's weight norm and bias, and the fraction of captions
whose positive image is ranked first in the batch. ``--switch N`` uses summed negatives for
the first N steps and ``--negatives`` afterwards (the "SGR*" warm-up).

A collapse shows as ``logit_std`` going to 0 and the loss sticking at ``2 * 0.2 * B``.
This is the tool behind docs/results.md ("Hardest versus summed negatives"); example:

    OMP_NUM_THREADS=1 python scripts/hardest_negative_probe.py --module SAF --batch-size 16 \
        --lr 2e-4 --steps 20000 --every 500
"""

from __future__ import annotations

import argparse
import time

import torch

from ncl.data.datamodule import SyntheticDataModule
from ncl.losses import triplet_loss
from ncl.models.sgraf import SGRAF


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--module", default="SGR", choices=["SGR", "SAF"])
    p.add_argument("--negatives", default="hardest", choices=["hardest", "sum"])
    p.add_argument("--switch", type=int, default=0, help="summed negatives for the first N steps")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--every", type=int, default=25)
    p.add_argument("--clip", type=float, default=2.0)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def main() -> None:
    args = parse()
    torch.manual_seed(args.seed)
    dm = SyntheticDataModule(preset="quickstart", n_train=1000, batch_size=args.batch_size)
    dm.setup("fit")
    regions, dim = dm.feature_shape()
    net = SGRAF(dm.vocab_size, module_name=args.module, img_dim=dim, num_regions=regions,
                word_dim=32, embed_size=64, sim_dim=32, similarity_strategy="chunked")
    head_input: dict[str, torch.Tensor] = {}
    net.sim_enc.sim_eval_w.register_forward_hook(
        lambda m, inputs, out: head_input.__setitem__("vec", inputs[0].detach()))
    opt = torch.optim.Adam(net.parameters(), lr=args.lr)
    step, start = 0, time.time()
    while step < args.steps:
        for batch in dm.train_dataloader():
            net.train()
            sims = net(batch["images"], batch["tokens"], batch["lengths"])  # (B, B)
            negatives = "sum" if step < args.switch else args.negatives
            loss = triplet_loss(sims, 0.2, negatives).sum()
            opt.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(net.parameters(), args.clip if args.clip > 0 else float("inf"))
            opt.step()
            if step % args.every == 0:
                report(net, batch, sims, loss, grad_norm, head_input, step, time.time() - start)
            step += 1
            if step >= args.steps:
                break


@torch.no_grad()
def report(net: SGRAF, batch: dict, sims: torch.Tensor, loss: torch.Tensor, grad_norm: torch.Tensor,
           head_input: dict, step: int, seconds: float) -> None:
    off_diag = ~torch.eye(len(sims), dtype=torch.bool)
    img = net.encode_images(batch["images"])
    cap = net.encode_captions(batch["tokens"], batch["lengths"])
    # From the training step's own forward pass: no second similarity pass (which would also
    # move SAF's BatchNorm statistics).
    logits = torch.logit(sims.detach().double()).float()
    vec = head_input["vec"].reshape(-1, head_input["vec"].shape[-1])
    top1 = (sims.argmax(1) == torch.arange(len(sims))).float().mean()
    head = net.sim_enc.sim_eval_w
    print(f"step {step} loss {loss.item():.3f} grad {grad_norm.item():.3f} "
          f"pos {sims.diag().mean():.4f} neg {sims[off_diag].mean():.4f} std {sims.std():.5f} "
          f"logit_std {logits.std():.4f} logit_mean {logits.mean():.3f} "
          f"img_std {img.mean(1).std(0).mean():.4f} cap_std {cap.mean(1).std(0).mean():.4f} "
          f"vec_std {vec.std(0).mean():.5f} |w| {head.weight.norm():.3f} b {head.bias.item():.3f} "
          f"batch_r1 {top1:.2f} t {seconds:.0f}s", flush=True)


if __name__ == "__main__":
    main()
