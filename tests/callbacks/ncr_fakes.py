"""Tiny fakes shared by the NCR/LNC callback and method tests."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch import Tensor, nn

from ncl.division.co_divide import mean_hinge
from ncl.training.distributed import all_gather_cat
from ncl.training.passes import PassSpec
from ncl.training.plans import DIVISION_STREAM


class FakePairs(torch.utils.data.Dataset):
    """``n`` pairs with a 1-region 4-d image and a 3-token caption; item like PairDataset's."""

    def __init__(self, n: int, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.images = torch.randn(n, 1, 4, generator=g)
        self.tokens = torch.randint(1, 9, (n, 3), generator=g)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> dict[str, object]:
        return {"image": self.images[i], "tokens": self.tokens[i], "index": i}


class BilinearNet(nn.Module):
    """Deterministic stand-in backbone: ``S = sigmoid(img W cap^T)`` over mean embeddings."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.emb = nn.Parameter(torch.randn(10, 4, generator=g))
        self.w = nn.Parameter(torch.randn(4, 4, generator=g))

    def forward(self, images: Tensor, tokens: Tensor, lengths: Tensor) -> Tensor:
        img = images.mean(1)  # (B, 4)
        cap = self.emb[tokens].mean(1)  # (B, 4)
        return torch.sigmoid(img @ self.w @ cap.T)  # (B, B)


def naive_mean_hinge(sims: Tensor, margin: float = 0.2) -> Tensor:
    """Loop reference of spec 4.2.1 "eval_loss": mean over all B entries of both hinges."""
    b = sims.shape[0]
    out = torch.zeros(b)
    for i in range(b):
        row = sum(max(0.0, margin + float(sims[i, j]) - float(sims[i, i])) for j in range(b) if j != i)
        col = sum(max(0.0, margin + float(sims[r, i]) - float(sims[i, i])) for r in range(b) if r != i)
        out[i] = (row + col) / b
    return out


def bimodal_losses(n: int = 400, noisy_frac: float = 0.25, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Per-sample losses with a low clean mode and a high noisy mode, and the truth."""
    rng = np.random.default_rng(seed)
    truth = rng.random(n) >= noisy_frac
    losses = np.where(truth, rng.normal(0.2, 0.05, n), rng.normal(0.8, 0.05, n))
    return torch.tensor(losses, dtype=torch.float32), torch.tensor(truth)


class SgrafPairs(torch.utils.data.Dataset):
    """``n`` random pairs shaped for a tiny SGRAF (6 regions x 16 dims, captions of 3-7 ids)."""

    def __init__(self, n: int, seed: int = 0, vocab: int = 30) -> None:
        g = torch.Generator().manual_seed(seed)
        self.images = torch.randn(n, 6, 16, generator=g)
        lengths = torch.randint(3, 8, (n,), generator=g)
        self.tokens = [torch.randint(1, vocab, (int(k),), generator=g) for k in lengths]

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> dict[str, object]:
        return {"image": self.images[i], "tokens": self.tokens[i], "index": i}


def tiny_sgraf(seed: int) -> nn.Module:
    """A tiny SGR network with deterministic initial weights."""
    from ncl.models.sgraf import SGRAF

    torch.manual_seed(seed)
    return SGRAF(30, img_dim=16, num_regions=6, word_dim=8, embed_size=16, sim_dim=8,
                 similarity_strategy="chunked")


def ncr_pass(seed: int = 5, batch_size: int = 8, shuffle: bool = True) -> PassSpec:
    """NCR's co-divide pass (mean hinge, margin 0.2, one shuffle per network)."""
    return PassSpec(mean_hinge(0.2), (0, 1), batch_size, shuffle, DIVISION_STREAM, seed,
                    per_net_shuffle=True)


def ddp_worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    """One gloo process: division, gradient averaging and momentum sync; saves its results."""
    import torch.distributed as dist

    from ncl.division import momentum_update
    from ncl.training.distributed import average_gradients
    from ncl.callbacks.division import fit_mixtures
    from ncl.callbacks.protocols import GMMSpec
    from ncl.division.co_divide import divide
    from ncl.training.passes import run_pass
    from ncl.training.state import PerSampleState

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        nets = [tiny_sgraf(0), tiny_sgraf(1)]
        losses = run_pass(ncr_pass(), nets, SgrafPairs(37), 2, torch.device("cpu"), rank, world)
        prob, clean = divide(losses, gmm_seed=0)
        np.random.seed(rank)  # different global RNG per rank: only the broadcast makes them agree
        prob_global = fit_mixtures(losses, GMMSpec(seed=None))  # GMMDivision's fit
        lin = nn.Linear(3, 2)
        torch.manual_seed(0)
        lin.weight.data, lin.bias.data = torch.randn(2, 3), torch.zeros(2)
        x = torch.full((4, 3), float(rank + 1))
        lin(x).pow(2).sum().backward()
        average_gradients(lin)
        mom = PerSampleState(1, fill=1.0)
        mom.reset(4)
        mom.scatter(0, torch.tensor([rank, 2]), torch.tensor([0.0, float(rank)]),
                    lambda old, new: momentum_update(old, new, 0.5))
        torch.save({"losses": losses, "prob": prob, "clean": clean, "grad": lin.weight.grad,
                    "prob_global": prob_global,
                    "gamma": mom.values}, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()



class SyncCheck(L.Callback):
    """DDP tests: at the end of fit every rank must hold the same weights in both networks
    (the manual gradient average kept them in lock step); rank 0 leaves a marker file.

    Args:
        marker_dir: folder of the ``sync_ok_world<W>`` marker.
    """

    def __init__(self, marker_dir: str = ".") -> None:
        self.marker_dir = marker_dir

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        flat = torch.cat([p.detach().reshape(-1) for p in pl_module.nets.parameters()])
        gathered = all_gather_cat(flat.unsqueeze(0)).reshape(trainer.world_size, -1)  # (W, P)
        if not all(torch.equal(gathered[0], row) for row in gathered):
            raise AssertionError("the ranks' weights diverged")
        if trainer.is_global_zero:
            Path(self.marker_dir, f"sync_ok_world{trainer.world_size}").write_text("ok")
