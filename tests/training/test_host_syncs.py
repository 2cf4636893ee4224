"""Host syncs in the training step's hot path (issue 28).

On a GPU every ``int(t)``, ``t.item()``, ``t.tolist()``, ``t.cpu()``, ``bool(t)``,
``float(t)`` of a device tensor waits for every queued kernel (a device -> host sync), and so
does a blocking ``torch.tensor(data, device=...)`` (a host -> device copy from pageable
memory). CPUs have no such stalls, so these tests count the *calls* instead: every batch
tensor stands for a device tensor, as it is after Lightning's transfer. ``.numpy()`` is not
counted: it fails on a device tensor, so it only ever runs on host data.

The bounds are the syncs that remain (see the constants); each remaining one is named where
it is made:

* ``SGRAF`` forward: one ``tolist()`` of the lengths together with the token range
  (:func:`ncl.models.sgraf.host_lengths`): packing the GRU input and chunking the captions
  need the lengths on the host, and an out-of-range token must fail with a clear message
  rather than a CUDA device-side assert.
* The NaN/Inf loss check before every backward: one ``bool()``
  (:func:`ncl.evaluation.nonfinite.check_finite_loss`), which has to stop training before the
  optimiser step uses a diverged loss.
* NCR's co-training step reads its peer's clean probability ``w`` from a table on the host:
  no sync (the table is copied to the device once per division).
"""

from __future__ import annotations

import sys
import traceback
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ncl.data.datamodule import SyntheticDataModule
from ncl.evaluation.nonfinite import any_rank
from ncl.methods.ncr import NCR
from ncl.methods.rcl import RCL
from ncl.models.sgraf import SGRAF

#: Tensor methods that copy a device tensor's value to the host.
SYNC_METHODS = ("item", "tolist", "cpu", "__int__", "__bool__", "__float__", "__index__")
#: torch's own calls on data that it keeps on the host (not syncs, so not counted): the GRU
#: reads ``PackedSequence.batch_sizes`` (always a host tensor); Adam/AdamW read their ``step``
#: counters, which live on the host unless ``capturable``/``fused``.
HOST_ONLY_TORCH = ("torch/nn/modules/rnn.py", "torch/optim/")
#: SGRAF forward + backward: the lengths and token range in one copy.
SGRAF_SYNCS = 1
#: The NaN/Inf check of a loss before its backward.
LOSS_CHECK_SYNCS = 1
#: RCL: one SGRAF forward and the loss check.
RCL_SYNCS = SGRAF_SYNCS + LOSS_CHECK_SYNCS
#: Syncs of NCR's loss and division helpers (ncl/losses, ncl/division): none in warm-up (the
#: triplet margin is made with ``torch.full``, not ``torch.tensor(margin, device=...)``); per
#: co-training iteration 10 ``check_finite`` of ``memorization_prediction`` (3 P's) and
#: ``rectify_*`` (the targets), 3 ``bool(tau <= 0)`` of ``normalize_by_top_fraction`` and 2
#: ``soft_margin`` label-range checks.
NCR_HELPER_WARMUP, NCR_HELPER_COTRAIN = 0, 10 + 3 + 2
#: NCR warm-up step of one network: one forward, one loss check.
NCR_WARMUP_SYNCS = SGRAF_SYNCS + LOSS_CHECK_SYNCS + NCR_HELPER_WARMUP
#: NCR co-training step with the unlabelled loss, two optimiser steps: five forwards
#: (labelled P, unlabelled P of both networks, the labelled and the unlabelled loss) and
#: two loss checks; the peer's ``w`` is read on the device (no copy of the batch's indices).
NCR_COTRAIN_SYNCS = 5 * SGRAF_SYNCS + 2 * LOSS_CHECK_SYNCS + NCR_HELPER_COTRAIN

def _call_site() -> str:
    """``file:line (function)`` of the innermost frame outside torch and this module, prefixed
    with torch's own frame when torch made the call (``rnn.py:345 < encoders.py:88 (forward)``)."""
    frames = [f for f in traceback.extract_stack()[:-2] if f.filename != __file__]
    inner = frames[-1]
    prefix = f"{Path(inner.filename).name}:{inner.lineno} < " if "/torch/" in inner.filename else ""
    for frame in reversed(frames):
        if "/torch/" not in frame.filename:
            return f"{prefix}{Path(frame.filename).name}:{frame.lineno} ({frame.name})"
    return prefix + "?"


class SyncCounter:
    """Counts calls that would sync a device tensor, by call site, while ``active``."""

    def __init__(self) -> None:
        self.sites: Counter[str] = Counter()
        self.active = False

    def record(self) -> None:
        if not self.active:
            return
        caller = traceback.extract_stack()[-3].filename  # the patched call's caller
        if not any(part in caller for part in HOST_ONLY_TORCH):
            self.sites[_call_site()] += 1

    @property
    def total(self) -> int:
        return sum(self.sites.values())

    def report(self) -> str:
        return "\n".join(f"{n:4d}  {site}" for site, n in self.sites.most_common())


@contextmanager
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[SyncCounter]:
    """Patch the sync-making calls with counting wrappers (inactive until switched on)."""
    counter = SyncCounter()

    def wrap(original: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            counter.record()
            return original(*args, **kwargs)
        return counted

    for name in SYNC_METHODS:
        monkeypatch.setattr(torch.Tensor, name, wrap(getattr(torch.Tensor, name)))
    factory = torch.tensor

    def tensor(*args: Any, **kwargs: Any) -> torch.Tensor:
        if kwargs.get("device") is not None:  # a blocking host -> device copy on a GPU
            counter.record()
        return factory(*args, **kwargs)

    monkeypatch.setattr(torch, "tensor", tensor)
    yield counter


class StepCounter(L.Callback):
    """Counts the syncs of each training step (batch start to batch end), per epoch."""

    def __init__(self, counter: SyncCounter) -> None:
        self.counter = counter
        self.per_step: dict[int, list[int]] = {}
        self.reports: dict[int, str] = {}
        self._before = 0

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        self.counter.active = True
        self._before = self.counter.total

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self.counter.active = False
        self.per_step.setdefault(trainer.current_epoch, []).append(self.counter.total - self._before)
        self.reports[trainer.current_epoch] = self.reports.get(trainer.current_epoch, "") + \
            f"step {len(self.per_step[trainer.current_epoch])}:\n{self.counter.report()}\n"
        self.counter.sites.clear()


def _backbone(vocab: int) -> SGRAF:
    return SGRAF(vocab, img_dim=16, num_regions=6, word_dim=8, embed_size=16, sim_dim=8)


def _fit(model: L.LightningModule, data: SyntheticDataModule, root: Path, epochs: int,
         counter: SyncCounter) -> StepCounter:
    steps = StepCounter(counter)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=epochs, limit_train_batches=3,
                        limit_val_batches=0, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=str(root), callbacks=[steps])
    trainer.fit(model, datamodule=data)
    return steps


def _data(cache: Path) -> SyntheticDataModule:
    return SyntheticDataModule(preset="tiny", cache_dir=str(cache), batch_size=16,
                               eval_batch_size=64, noise_type="caption", noise_ratio=0.4)


def test_sgraf_forward_backward(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    net = _backbone(20)
    images = torch.randn(8, 6, 16)
    lengths = torch.tensor([5, 3, 7, 2, 7, 4, 6, 3])
    tokens = torch.randint(1, 20, (8, 7)) * (torch.arange(7) < lengths[:, None])
    with counting(monkeypatch) as counter:
        counter.active = True
        net(images, tokens, lengths).sum().backward()
        counter.active = False
    print(f"SGRAF forward + backward: {counter.total} syncs\n{counter.report()}", file=sys.stderr)
    assert counter.total <= SGRAF_SYNCS, counter.report()


def test_rcl_step(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, synthetic_cache: Path) -> None:
    L.seed_everything(0)
    data = _data(synthetic_cache)
    with counting(monkeypatch) as counter:
        steps = _fit(RCL(data.vocab_size, _backbone), data, tmp_path, 1, counter)
    print(f"RCL steps: {steps.per_step}\n{steps.reports[0]}", file=sys.stderr)
    assert steps.per_step[0] and max(steps.per_step[0]) <= RCL_SYNCS, steps.reports[0]


def test_ncr_steps(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, synthetic_cache: Path) -> None:
    L.seed_everything(0)
    data = _data(synthetic_cache)
    model = NCR(data.vocab_size, _backbone, warmup_epochs=1, unlabelled_start=0)
    with counting(monkeypatch) as counter:
        steps = _fit(model, data, tmp_path, 2, counter)
    print(f"NCR steps: {steps.per_step}\nwarm-up:\n{steps.reports[0]}\nco-training:\n"
          f"{steps.reports[1]}", file=sys.stderr)
    assert max(steps.per_step[0]) <= NCR_WARMUP_SYNCS, steps.reports[0]
    # The first step of an epoch also logs the epoch's division diagnostics (once an epoch).
    assert max(steps.per_step[1][1:]) <= NCR_COTRAIN_SYNCS, steps.reports[1]


#: Which ranks' losses are NaN/Inf, and what every rank must conclude.
ANY_RANK_CASES = [((), False), ((1,), True), ((0, 1), True)]


def _any_rank_worker(rank: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        flags = [bool(any_rank(torch.tensor(rank in bad))) for bad, _ in ANY_RANK_CASES]
        Path(f"{out}{rank}").write_text(repr(flags))
    finally:
        dist.destroy_process_group()


def test_loss_check_flag_agrees_over_ranks(tmp_path: Path) -> None:
    """The loss check's one all-reduce (no barrier, no host copy first): every rank learns
    that some rank's loss is NaN/Inf, so all of them stop at the same step."""
    out = str(tmp_path / "flags")
    mp.start_processes(_any_rank_worker, args=(str(tmp_path / "store"), out),
                       nprocs=2, start_method="fork")  # fork: tiny_runs.DDP_TRAINER
    expected = repr([want for _, want in ANY_RANK_CASES])
    assert [Path(f"{out}{r}").read_text() for r in range(2)] == [expected, expected]
