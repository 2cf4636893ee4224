"""The ``data.augment`` hook: a pure function of (seed, epoch, index), training pairs only,
the same with and without workers, after a resume, and under Lightning's DDP sampler swap."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from torch import nn

from helpers import TINY_BACKBONE_ARGS
from ncl.data.augment import CaptionRegionAugment, sample_rng
from ncl.data.datamodule import PrecompDataModule
from ncl.data.datasets import EpochBatchSampler
from ncl.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def _item(length: int = 12, regions: int = 6) -> dict[str, object]:
    tokens = torch.tensor([1, *range(4, 4 + length - 2), 2], dtype=torch.long)
    return {"image": torch.arange(regions * 4, dtype=torch.float32).reshape(regions, 4) + 1,
            "tokens": tokens, "index": 0}


def _same(a: dict[str, object], b: dict[str, object]) -> bool:
    return torch.equal(a["tokens"], b["tokens"]) and torch.equal(a["image"], b["image"])


# ------------------------------------------------------------------ the augmentation itself
def test_pure_function_of_seed_epoch_index() -> None:
    aug, item = CaptionRegionAugment(), _item()
    first = aug(item, sample_rng(0, 1, 5), vocab_size=50)
    assert _same(first, aug(item, sample_rng(0, 1, 5), vocab_size=50))
    others = [aug(item, sample_rng(*key), vocab_size=50) for key in [(0, 2, 5), (0, 1, 6), (1, 1, 5)]]
    assert not any(_same(first, o) for o in others)
    assert torch.equal(item["tokens"], _item()["tokens"])  # the input is not modified


def test_captions_and_regions_draw_from_separate_streams() -> None:
    item = _item()
    both = CaptionRegionAugment()(item, sample_rng(0, 0, 3), 50)
    captions_only = CaptionRegionAugment(region_rate=0)(item, sample_rng(0, 0, 3), 50)
    regions_only = CaptionRegionAugment(caption_rate=0)(item, sample_rng(0, 0, 3), 50)
    assert torch.equal(both["tokens"], captions_only["tokens"])
    assert torch.equal(both["image"], regions_only["image"])
    assert torch.equal(captions_only["image"], item["image"])
    assert torch.equal(regions_only["tokens"], item["tokens"])


def test_never_an_empty_caption() -> None:
    aug = CaptionRegionAugment(caption_rate=1.0, region_mode="remove", region_rate=1.0)
    for index in range(300):
        out = aug(_item(length=2, regions=2), sample_rng(0, 0, index), 50)
        assert len(out["tokens"]) >= 1 and out["image"].shape[0] >= 1


def test_bad_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="caption_rate must lie in"):
        CaptionRegionAugment(caption_rate=1.5)
    with pytest.raises(ConfigError, match="region_mode must be one of"):
        CaptionRegionAugment(region_mode="drop")  # type: ignore[arg-type]
    assert CaptionRegionAugment().uses_mask_token and not CaptionRegionAugment(caption_rate=0).uses_mask_token


# ------------------------------------------------------------------ the DataModule
def _dm(root: Path, augment: CaptionRegionAugment | None = CaptionRegionAugment(),
        workers: int = 0, **kwargs: object) -> PrecompDataModule:
    dm = PrecompDataModule(str(root), "toy_precomp", batch_size=16, num_workers=workers,
                           augment=augment, **kwargs)
    dm.setup("fit")
    dm.setup("test")
    return dm


def _epoch(dm: PrecompDataModule, epoch: int) -> list[dict[str, torch.Tensor]]:
    loader = dm.train_dataloader()
    loader.batch_sampler.sampler.set_epoch(epoch)
    return list(loader)


def _equal_batches(a: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x) for x, y in zip(a, b))


def test_training_batches_are_augmented_deterministically(tiny_root: Path) -> None:
    dm = _dm(tiny_root)
    e0, e1 = _epoch(dm, 0), _epoch(dm, 1)
    assert _equal_batches(e0, _epoch(_dm(tiny_root), 0))  # a fresh DataModule draws the same
    assert not _equal_batches(e0, e1)
    plain = PrecompDataModule(str(tiny_root), "toy_precomp", batch_size=16)
    plain.setup("fit")
    assert plain.hparams_initial["augment"] is None
    assert "CaptionRegionAugment(caption_rate=0.2" in dm.hparams_initial["augment"]
    # Same shuffle as without augmentation: only the items change.
    order = [b["index"] for b in plain.train_dataloader()]
    assert all(torch.equal(i, b["index"]) for i, b in zip(order, e0))
    masked = sum(int((b["tokens"] == dm.vocab_size).sum()) for b in e0)
    assert masked > 0  # <mask> is id V
    fill = sum(int((b["images"] == 1e-10).all(-1).sum()) for b in e0)
    assert fill > 0  # dropped regions (fill mode keeps R)
    assert all(b["images"].shape[1] == 4 and "image_lengths" not in b for b in e0)


def test_remove_mode_gives_image_lengths(tiny_root: Path) -> None:
    batches = _epoch(_dm(tiny_root, CaptionRegionAugment(region_mode="remove")), 0)
    assert any("image_lengths" in b for b in batches)
    for b in batches:
        if "image_lengths" in b:
            assert b["images"].shape[1] == int(b["image_lengths"].max())


def test_validation_test_and_per_sample_passes_are_never_augmented(tiny_root: Path) -> None:
    aug, plain = _dm(tiny_root), _dm(tiny_root, augment=None)
    for a, p in zip(aug.val_dataloader() + aug.test_dataloader(),
                    plain.val_dataloader() + plain.test_dataloader()):
        assert _equal_batches(list(a), list(p))
    assert aug.train_pairs().augment is None  # what the per-sample passes read


def test_workers_do_not_change_the_batches(tiny_root: Path) -> None:
    single = _epoch(_dm(tiny_root), 1)
    loader_dm = _dm(tiny_root, workers=2)
    loader = loader_dm.train_dataloader()
    loader.batch_sampler.sampler.set_epoch(1)  # before the (persistent) workers start
    assert _equal_batches(single, list(loader))
    loader.batch_sampler.sampler.set_epoch(2)  # the same workers, a later epoch
    assert _equal_batches(_epoch(_dm(tiny_root), 2), list(loader))


def _resumed_trainer(epoch: int) -> SimpleNamespace:
    """What a resumed Trainer shows the DataModule when it asks for the first loader."""
    progress = SimpleNamespace(current=SimpleNamespace(processed=epoch))
    return SimpleNamespace(world_size=1, fit_loop=SimpleNamespace(epoch_progress=progress))


def test_a_resumed_loader_starts_at_the_restored_epoch_even_with_workers(tiny_root: Path) -> None:
    # Lightning creates the first iterator of a resumed run *before* calling set_epoch, and
    # worker loaders draw their first batches at creation.
    expected = _epoch(_dm(tiny_root), 3)
    dm = _dm(tiny_root, workers=2)
    dm.trainer = _resumed_trainer(3)
    loader = dm.train_dataloader()
    batches = iter(loader)  # the first batches are drawn here
    loader.batch_sampler.sampler.set_epoch(3)  # what Lightning does next
    got = list(batches)
    del batches, loader  # stop the persistent workers now
    assert _equal_batches(expected, got)


def test_plans_cannot_be_combined_with_augmentation(tiny_root: Path) -> None:
    with pytest.raises(ConfigError, match="supplies its own training batches"):
        _dm(tiny_root).use_train_plan(lambda pairs: [])


def test_mask_token_is_checked_against_the_backbone(tiny_root: Path, tmp_path: Path) -> None:
    def trainer(rows: int) -> SimpleNamespace:
        module = SimpleNamespace(nets=[SimpleNamespace(vocab_size=rows)])
        return SimpleNamespace(lightning_module=module, is_global_zero=True, log_dir=str(tmp_path))

    dm = PrecompDataModule(str(tiny_root), "toy_precomp", augment=CaptionRegionAugment())
    dm.trainer = trainer(10)  # V = 10 rows: no <mask>
    with pytest.raises(ConfigError, match="add_mask_token=true"):
        dm.setup("fit")
    dm = PrecompDataModule(str(tiny_root), "toy_precomp", augment=CaptionRegionAugment())
    dm.trainer = trainer(11)
    dm.setup("fit")


def test_ddp_sampler_swap_keeps_the_epoch_tags(tiny_root: Path) -> None:
    """Replays what Lightning does to the training loader under DDP (no processes needed)."""
    from lightning.fabric.utilities.data import _replace_dunder_methods, _set_sampler_epoch
    from lightning.pytorch.trainer.connectors.data_connector import _get_distributed_sampler
    from lightning.pytorch.trainer.states import RunningStage
    from lightning.pytorch.utilities.data import _update_dataloader
    from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

    dm = _dm(tiny_root)
    dm.trainer = _resumed_trainer(2)
    dm.trainer.world_size = 2
    with _replace_dunder_methods(DataLoader, "dataset"), _replace_dunder_methods(BatchSampler):
        loader = dm.train_dataloader()  # as Lightning's _request_dataloader calls it
    for rank in (0, 1):
        sampler = _get_distributed_sampler(loader, shuffle=True, overfit_batches=0,
                                           num_replicas=2, rank=rank)
        assert type(sampler) is DistributedSampler  # the same sampler as without augmentation
        ddp = _update_dataloader(loader, sampler, mode=RunningStage.TRAINING)
        assert isinstance(ddp.batch_sampler, EpochBatchSampler) and ddp.batch_sampler.sampler is sampler
        assert sampler.epoch == 2  # a resumed run's first iterator starts at the restored epoch
        _set_sampler_epoch(ddp, 3)
        keys = [k for batch in ddp.batch_sampler for k in batch]
        assert {e for e, _ in keys} == {3} and [i for _, i in keys] == list(sampler)
        single = dm._augmented_pairs(dm.shuffle_seed)
        batch = next(iter(ddp))
        want = single[keys[0]]  # a sample's augmentation does not depend on the rank
        assert torch.equal(batch["tokens"][0, : len(want["tokens"])], want["tokens"])


# ------------------------------------------------------------------ through Lightning
class Recorder(L.LightningModule):
    """Records every training batch; one parameter so that the optimiser has work."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(()))
        self.seen: list[tuple[int, dict[str, torch.Tensor]]] = []

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.seen.append((self.current_epoch, {k: v.clone() for k, v in batch.items()}))
        return self.w * batch["images"].mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(root: Path, epochs: int, workers: int, ckpt: Path | None = None,
         save: Path | None = None) -> list[tuple[int, dict[str, torch.Tensor]]]:
    L.seed_everything(7, verbose=False)
    dm = PrecompDataModule(str(root), "toy_precomp", batch_size=16, num_workers=workers,
                           augment=CaptionRegionAugment(region_mode="remove"))
    module = Recorder()
    trainer = L.Trainer(max_epochs=epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        default_root_dir=str(root))
    trainer.fit(module, datamodule=dm, ckpt_path=str(ckpt) if ckpt else None)
    if save is not None:
        trainer.save_checkpoint(save)
    return module.seen


@pytest.mark.filterwarnings("ignore")
def test_resumed_run_sees_the_uninterrupted_runs_batches(tiny_root: Path, tmp_path: Path) -> None:
    straight = _fit(tiny_root, 2, workers=0)
    ckpt = tmp_path / "epoch0.ckpt"
    _fit(tiny_root, 1, workers=2, save=ckpt)
    resumed = _fit(tiny_root, 2, workers=2, ckpt=ckpt)
    assert {e for e, _ in resumed} == {1}
    assert _equal_batches([b for e, b in straight if e == 1], [b for _, b in resumed])
    assert not _equal_batches([b for e, b in straight if e == 0], [b for e, b in straight if e == 1])


def test_cli_fit_with_augmentation(tmp_path: Path, synthetic_cache: Path, monkeypatch) -> None:
    from ncl import cli

    monkeypatch.chdir(tmp_path)
    cli.main(["fit", "--config", str(REPO / "configs" / "quickstart.yaml"), *TINY_BACKBONE_ARGS,
              "--data.preset=tiny", "--data.n_train=null", f"--data.cache_dir={synthetic_cache}",
              "--data.batch_size=16", "--data.augment=ncl.data.augment.CaptionRegionAugment",
              "--data.augment.init_args.region_rate=0.1", "--trainer.max_epochs=1",
              "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=2",
              "--trainer.num_sanity_val_steps=0", "--trainer.enable_progress_bar=false"])
    config = next(tmp_path.rglob("config.yaml")).read_text()
    assert "ncl.data.augment.CaptionRegionAugment" in config and "region_rate: 0.1" in config
    assert list(tmp_path.rglob("last.ckpt"))


def test_cli_mask_token_error(tmp_path: Path, synthetic_cache: Path, monkeypatch, capsys) -> None:
    from ncl import cli

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        cli.main(["fit", "--config", str(REPO / "configs" / "quickstart.yaml"), *TINY_BACKBONE_ARGS,
                  "--data.preset=tiny", "--data.n_train=null", f"--data.cache_dir={synthetic_cache}",
                  "--data.augment=ncl.data.augment.CaptionRegionAugment",
                  "--model.backbone.init_args.add_mask_token=false", "--trainer.max_epochs=1"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "add_mask_token=true" in err and "Traceback" not in err
