"""NCR/LNC clip their gradients in true units under a loss-scaling precision (``16-mixed``).

NCR optimises manually. Under ``16-mixed`` Lightning multiplies the loss by the GradScaler's
scale before the backward and unscales the gradients only inside ``opt.step()``; a clip made
before ``opt.step()`` sees gradients ``scale`` times too large. CPUs cannot autocast to
float16 here, so the test uses the real :class:`MixedPrecision` plugin and a real
``GradScaler`` with autocast switched off: float32 arithmetic whose gradients are scaled by a
power of two, which is exact, so the run must equal the plain ``32`` run bit for bit.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from torch.amp.grad_scaler import OptState

from ncl.data.datamodule import SyntheticDataModule
from ncl.methods.ncr import NCR
from ncl.models.sgraf import SGRAF

SCALE = 2.0 ** 16


class ScaledFloat32(MixedPrecision):
    """``16-mixed``'s loss scaling and unscaling without autocast (float32 compute)."""

    def __init__(self) -> None:
        super().__init__("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=SCALE))

    def autocast_context_manager(self) -> Any:
        return nullcontext()


class ClipSpy(NCR):
    """NCR recording, at every clip, whether the scaler had unscaled that optimiser."""

    def clip_gradients(self, optimizer: Any, *args: Any, **kwargs: Any) -> None:
        precision = self.trainer.precision_plugin
        scaler = getattr(precision, "scaler", None)
        if scaler is not None:
            raw = getattr(optimizer, "optimizer", optimizer)  # LightningOptimizer or torch's
            stage = scaler._per_optimizer_states[id(raw)]["stage"]
            self.clip_stages.append(stage)
        super().clip_gradients(optimizer, *args, **kwargs)


def _backbone(vocab: int) -> SGRAF:
    return SGRAF(vocab, img_dim=16, num_regions=6, word_dim=8, embed_size=16, sim_dim=8,
                 dropout=0.0, similarity_strategy="chunked")


def _fit(cache: Path, root: Path, plugins: list) -> tuple[dict[str, torch.Tensor], list]:
    """Warm-up epoch + co-training epoch (with the unlabelled step), 4 steps each."""
    L.seed_everything(0)
    data = SyntheticDataModule(preset="tiny", cache_dir=str(cache), batch_size=16,
                               eval_batch_size=64, noise_type="caption", noise_ratio=0.4)
    model = ClipSpy(data.vocab_size, _backbone, warmup_epochs=1, unlabelled_start=0, grad_clip=2.0,
                    optimizer=lambda params: torch.optim.Adam(params, lr=2e-3))
    model.clip_stages = []
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=2, limit_train_batches=4,
                        limit_val_batches=0, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        deterministic=True, default_root_dir=str(root), plugins=plugins)
    trainer.fit(model, datamodule=data)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, model.clip_stages


def test_clipping_sees_unscaled_gradients(tmp_path: Path, synthetic_cache: Path) -> None:
    plain, no_stages = _fit(synthetic_cache, tmp_path / "fp32", [])
    scaled, stages = _fit(synthetic_cache, tmp_path / "scaled", [ScaledFloat32()])
    assert no_stages == [] and len(stages) >= 8  # every optimiser step clipped
    assert all(stage is OptState.UNSCALED for stage in stages), stages  # unscaled first
    for key, value in plain.items():  # clipping in true units: the same run as float32
        assert torch.equal(value, scaled[key]), key
