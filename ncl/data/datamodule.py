"""LightningDataModule for the official precomputed-feature layout, with noise injection."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities.parsing import AttributeDict
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler

from ncl.data.augment import Augmentation
from ncl.data.datasets import (
    CaptionDataset,
    EpochBatchSampler,
    ImageDataset,
    PairDataset,
    collate,
)
from ncl.data.noise import (
    Noise,
    NoiseType,
    check_ratio,
    make_noise,
    ratio_mismatch,
    resolve_noise_file,
)
from ncl.data.noise_registry import pairing_digest, pairing_name
from ncl.data.precomp import NanCheck, PrecompSplit, load_split
from ncl.data.samplers import EpochShuffleSampler, global_seed, loader_generator
from ncl.data.vocab import Vocabulary, load_vocabulary
from ncl.errors import ConfigError, DataError, NclWarning
from ncl.input_checks import batch_size_note
from ncl.predict import SPLITS as PREDICT_SPLITS
from ncl.predict import ScoringBatchSampler
from ncl.run_record import save_noise_record

Protocol = Literal["1k", "5fold1k", "5k"]
# A method-supplied training loader: the (noisy) training pairs -> an iterable of batches.
TrainPlan = Callable[[PairDataset], Iterable]
DATA_HINT = ("see the README section 'Preparing the datasets' for where to download the "
             "precomputed features and vocabularies and how to lay them out")
#: Datasets whose stored pairs are noisy already (web-crawled): their clean pairs are unknown.
REAL_NOISE_PREFIXES = ("cc152k",)
#: What a checkpoint keeps of its training noise (``state_dict``) for ``ncl test`` to report.
TRAINING_NOISE_KEYS = ("noise_sha256", "noise_rate", "noise_format", "noise_pairing_digest",
                       "noise_pairing")


def real_noise_default(data_name: str) -> bool:
    """Whether ``data_name`` holds real (unknown) noise: CC152K's web pairs (about 3-20%
    mismatched, never annotated); F30K, COCO and the synthetic benchmark are taken as clean."""
    return data_name.lower().startswith(REAL_NOISE_PREFIXES)


def per_device_batch_note(world_size: int, batch_size: int, acknowledged: bool) -> str | None:
    """The start-up warning about batches under DDP, or ``None`` when there is nothing to say.

    Every DDP process draws its own ``batch_size`` pairs and computes its loss over them alone:
    in-batch negatives (the hardest negative, RCL's complementary terms, InfoNCE) come from
    those ``batch_size`` pairs only, and the gradients are averaged over processes. So
    ``--trainer.devices N`` changes the method, not only the speed. Silent once the user says
    so (``data.per_device_batch: true``) and on one process.
    """
    if world_size <= 1 or acknowledged:
        return None
    return (f"{world_size} processes each train on data.batch_size={batch_size} pairs: "
            f"{world_size * batch_size} pairs per optimizer step, but each loss sees only its "
            f"own {batch_size} (in-batch negatives come from those alone; gradients are averaged "
            f"over processes). The papers train on one GPU with batch 128; see the README, "
            f"'Multi-GPU and clusters'. Set data.init_args.per_device_batch: true to confirm this "
            f"and silence the warning")


def pairs_per_rank(n_pairs: int, world_size: int = 1, distributed_sampler: bool = True) -> int:
    """How many training pairs one process batches in an epoch.

    Under DDP Lightning gives each rank a ``DistributedSampler`` (``drop_last`` false, also
    inside :class:`~ncl.data.datasets.EpochBatchSampler`): it pads the order with repeats to
    ``ceil(N / W)`` pairs per rank. Without it (``use_distributed_sampler`` false) every
    rank iterates all ``N``.
    """
    if world_size <= 1 or not distributed_sampler:
        return n_pairs
    return -(-n_pairs // world_size)


def drop_single_pair_batch(pairs_per_process: int, batch_size: int) -> bool:
    """Whether the training loader drops its last batch: only when it would hold one pair.

    A one-pair batch breaks BatchNorm in train mode ("Expected more than 1 value per
    channel", spec 7.2) and leaves a contrastive loss without negatives. What counts is
    the remainder of what *one process* batches (:func:`pairs_per_rank`), not of ``N``.
    """
    return pairs_per_process % batch_size == 1


def pin_memory(trainer: Any) -> bool:
    """Whether loaders pin their batches: only when the trainer runs on CUDA, where
    page-locked host memory lets the copy to the GPU overlap compute. On the CPU pinning
    buys nothing (torch warns), so CPU runs keep unpinned loaders."""
    device = getattr(getattr(trainer, "strategy", None), "root_device", None)
    return isinstance(device, torch.device) and device.type == "cuda"


def uses_distributed_sampler(trainer: Any) -> bool:
    """Whether Lightning swaps a ``DistributedSampler`` into the training loader
    (``Trainer(use_distributed_sampler=...)``, true by default; read where Lightning keeps it)."""
    connector = getattr(trainer, "_accelerator_connector", None)
    return bool(getattr(connector, "use_distributed_sampler", True))


class PrecompDataModule(L.LightningDataModule):
    """Train/dev/test loaders over ``<data_root>/<data_name>/{split}_ims.npy + _caps.txt``.

    Args:
        data_root: folder holding ``<data_name>/`` (and, by default, ``vocab/``).
        data_name: ``f30k_precomp``, ``coco_precomp``, ``cc152k_precomp`` or your own.
        vocab_path: the official vocabulary JSON; default
            ``<data_root>/vocab/<data_name>_vocab.json``.
        batch_size: training batch size (128 in every paper).
        eval_batch_size: batch size used to encode images/captions for evaluation.
        num_workers: DataLoader workers.
        noise_type: synthetic noise when no ``noise_file`` is given: ``caption`` (NCR's
            caption shuffling, format A), ``image`` (RCL's image-level permutation, format B)
            or ``none``.
        noise_ratio: fraction of captions (caption level) or images (image level) re-paired,
            in [0, 1).
        noise_file: an official noise file of either format (detected by length).
        noise_seed: seed of the noise generator (numpy's legacy stream, as NCR's scripts).
        dev_max_images: validation keeps the first this many dev images (1,000 officially).
        val_split: split used for validation/model selection.
        test_split: split used by ``ncl test`` (COCO: ``testall``).
        test_protocols: ``1k`` (whole matrix), ``5fold1k`` (COCO 5-fold 1K), ``5k``.
        nan_check_samples: images per feature file checked for NaN/Inf (``nan_check:
            sample``); 0 checks none.
        nan_check: ``sample`` (default: ``nan_check_samples`` images spread over each
            feature file), ``full`` (every image, memory-mapped and read in chunks with a
            progress bar: minutes for COCO's 33 GB) or ``off``.
        augment: training-pair augmentation (``class_path`` of an
            :class:`~ncl.data.augment.Augmentation`, e.g. CRCL's
            :class:`~ncl.data.augment.CaptionRegionAugment`); applied to the default training
            loader only, as a pure function of ``(seed, epoch, caption index)``. ``None``: off.
        real_noise: the stored pairs are noisy already and nobody knows which (CC152K), so
            there is no ground-truth clean mask: noise-detection diagnostics are skipped and
            the clean-only oracle refuses to run. ``None``: true for ``cc152k*`` data names.
        per_device_batch: acknowledge that with several DDP processes ``batch_size`` is per
            process (each loss sees only its own batch); silences the start-up warning.

    ``noise_file`` may be a bare file name, looked up in ``<data_root>/<data_name>/`` as RCL
    does, and may contain ``{noise_ratio}`` (``noise_inx_{noise_ratio}.npy``: the ratio picks
    the file; at ratio 0 no file is read). A missing file is reported here, before a run
    folder exists.

    Satisfies :class:`ncl.data.contracts.RetrievalData`, the contract methods and callbacks
    rely on.
    """

    def __init__(self, data_root: str, data_name: str = "f30k_precomp", vocab_path: str | None = None,
                 batch_size: int = 128, eval_batch_size: int = 128, num_workers: int = 0,
                 noise_type: NoiseType = "none", noise_ratio: float = 0.0,
                 noise_file: str | None = None, noise_seed: int = 0,
                 dev_max_images: int | None = 1000, val_split: str = "dev",
                 test_split: str = "test", test_protocols: Sequence[Protocol] = ("1k",),
                 nan_check_samples: int = 64, nan_check: NanCheck = "sample",
                 augment: Augmentation | None = None, real_noise: bool | None = None,
                 per_device_batch: bool = False) -> None:
        super().__init__()
        # Logged with the run; a subclass's own arguments included. The augmentation is logged
        # as its repr (an object in the checkpoint's hyperparameters would need unpickling).
        self.save_hyperparameters(ignore=["augment"])
        self.augment = augment
        self.hparams["augment"] = self._augment_hparam()
        check_ratio(noise_ratio, "data.noise_ratio")
        self.batch_size, self.eval_batch_size, self.num_workers = batch_size, eval_batch_size, num_workers
        self.noise_type, self.noise_ratio, self.noise_seed = noise_type, noise_ratio, noise_seed
        self.noise_file = noise_file
        self.real_noise = real_noise_default(data_name) if real_noise is None else bool(real_noise)
        self.per_device_batch = per_device_batch
        self.dev_max_images, self.val_split, self.test_split = dev_max_images, val_split, test_split
        self.test_protocols = list(test_protocols)
        self.nan_check_samples, self.nan_check = nan_check_samples, nan_check
        if batch_size < 2:
            raise ConfigError(f"data.batch_size must be at least 2 (BatchNorm over a batch of "
                              f"one fails), got {batch_size}")
        self.data_dir = Path(data_root) / data_name
        if not self.data_dir.is_dir():
            raise DataError(f"dataset folder not found: {self.data_dir} (data_root={data_root!r}, "
                            f"data_name={data_name!r}); {DATA_HINT}")
        self.noise_path = resolve_noise_file(noise_file, self.data_dir, noise_ratio)
        self.vocab_path = Path(vocab_path) if vocab_path else Path(data_root) / "vocab" / f"{data_name}_vocab.json"
        if not self.vocab_path.is_file():
            raise DataError(f"vocabulary file not found: {self.vocab_path}; pass data.vocab_path "
                            f"or {DATA_HINT}")
        self.vocab: Vocabulary = load_vocabulary(self.vocab_path)
        self.train_split: PrecompSplit | None = None
        self.val_data: PrecompSplit | None = None
        self.test_data: PrecompSplit | None = None
        self.noise: Noise | None = None
        self._noise_record: tuple[Noise, dict[str, object]] | None = None  # noise_hparams' cache
        # The noise of the run a restored checkpoint was trained on (load_state_dict), which
        # ``ncl test`` writes into test_results.json; empty when unknown.
        self.trained_noise: dict[str, Any] = {}
        self._train_plan: TrainPlan | None = None
        self.shuffle_seed: int | None = None  # seed_everything's value at the first epoch
        # What predict_dataloader serves (use_predict_split), and that split once loaded.
        self.predict_split, self.predict_batch_size = "train", None
        self.predict_data: PrecompSplit | None = None
        self._predict_pairs: PairDataset | None = None

    # ----------------------------------------------------------------- properties
    @property
    def vocab_size(self) -> int:
        """Rows of the official vocabulary (without ``<mask>``); linked to the method."""
        return len(self.vocab)

    @property
    def clean_mask(self) -> np.ndarray:
        """Ground-truth clean flag per training caption. Diagnostics only, never a loss.

        With ``real_noise`` it only says which pairs the *synthetic* noise left in place:
        check :attr:`clean_mask_known` before scoring anything against it.
        """
        if self.noise is None:
            raise RuntimeError("clean_mask is known after setup('fit')")
        return self.noise.clean

    @property
    def clean_mask_known(self) -> bool:
        """Whether :attr:`clean_mask` is the ground truth (false for real noise, CC152K).

        Optional in :class:`~ncl.data.contracts.RetrievalData`: a DataModule without it is
        taken to know its mask."""
        return not self.real_noise

    def feature_shape(self) -> tuple[int, int]:
        """``(regions, feature dim)`` read from the dev (or train) feature file."""
        split = self.val_data or self.train_split or self.test_data or self.predict_data
        if split is None:
            split = self._load(self.val_split, self.dev_max_images)
        return split.num_regions, split.feature_dim

    # ----------------------------------------------------------------- setup
    def _load(self, split: str, max_images: int | None = None) -> PrecompSplit:
        trainer = getattr(self, "trainer", None)
        progress = trainer is None or trainer.is_global_zero  # one progress bar, not one per rank
        return load_split(self.data_dir, split, self.vocab, max_images, self.nan_check_samples,
                          self.nan_check, progress)

    def setup(self, stage: str) -> None:
        if stage == "fit" and self.train_split is None:
            self._load_noisy_train()
            self._save_noise()
            self._check_mask_token()
            self._warn_one_batch()
        if stage in ("fit", "validate") and self.val_data is None:
            self.val_data = self._load(self.val_split, self.dev_max_images)
        if stage == "test" and self.test_data is None:
            self.test_data = self._load(self.test_split)
        # "predict": nothing yet; the split is chosen after setup (use_predict_split) and
        # loaded by predict_pairs.

    def _load_noisy_train(self) -> None:
        """Read the training split and draw (or read) its noise; what ``setup("fit")`` and a
        prediction on the training split share (neither writes anything)."""
        self.train_split = self._load("train")
        split = self.train_split
        self.noise = make_noise(split.n_images, split.n_captions, self.noise_type,
                                self.noise_ratio, self.noise_seed, self.noise_path)
        self.hparams.update(self.noise_hparams())
        self._warn_at_start()

    def _warn_at_start(self) -> None:
        """Rank 0, once per fit: a noise file that contradicts ``noise_ratio``, and the per-device
        meaning of ``batch_size`` under DDP."""
        trainer = getattr(self, "trainer", None)
        if trainer is not None and not trainer.is_global_zero:
            return
        if self.noise_path is not None and self.noise is not None:
            mismatch = ratio_mismatch(self.noise_path, self.noise.noise_rate, self.noise_ratio)
            if mismatch:
                warnings.warn(mismatch, NclWarning, stacklevel=2)
        world_size = int(getattr(trainer, "world_size", 1) or 1)
        note = per_device_batch_note(world_size, self.batch_size, self.per_device_batch)
        if note:
            warnings.warn(note, NclWarning, stacklevel=2)

    def nan_check_coverage(self) -> tuple[int, int] | None:
        """``(checked, total)`` training images looked at for NaN/Inf when the split was read
        (``None`` before ``setup("fit")``): a NaN loss points at the data first when
        ``checked < total`` (:func:`ncl.evaluation.nonfinite.diverged_message`)."""
        if self.train_split is None:
            return None
        total = self.train_split.n_images
        checked = {"full": total, "off": 0}.get(self.nan_check, min(self.nan_check_samples, total))
        return max(0, checked), total

    def _warn_one_batch(self) -> None:
        """Rank 0: warn when one batch holds the whole training set (a batch size meant for
        another dataset, or a tiny experiment): :func:`ncl.input_checks.batch_size_note`."""
        trainer = getattr(self, "trainer", None)
        if self.train_split is None or (trainer is not None and not trainer.is_global_zero):
            return
        world_size = int(getattr(trainer, "world_size", 1) or 1)
        note = batch_size_note(self.batch_size, self.train_split.n_captions,
                               self.train_split.caption_path, world_size)
        if note:
            warnings.warn(note, NclWarning, stacklevel=2)

    def noise_hparams(self) -> dict[str, object]:
        """The noise actually used (after ``setup("fit")``): SHA-256, rate, format, file, and
        the pairing it gives (issue 27).

        ``noise_sha256`` names the *file*, which differs between two formats of one pairing
        (RCL's image-level and L2RM's caption-level F30K files); ``noise_pairing_digest``
        does not, so two runs on the same noise can be recognised, and ``noise_pairing`` is
        its registry name (``"rcl/f30k/0.2 = l2rm/f30k/0.2"``), ``"clean"`` when no caption is
        moved, or ``"new"``. Computed once (the noise is fixed after ``setup``).
        """
        if self.noise is None:
            return {}
        if self._noise_record is None or self._noise_record[0] is not self.noise:
            digest = pairing_digest(self.noise.cap2img)
            record = {"noise_sha256": self.noise.sha256,
                      "noise_rate": round(self.noise.noise_rate, 6),
                      "noise_format": self.noise.format, "noise_source": str(self.noise.source),
                      "noise_pairing_digest": digest,
                      "noise_pairing": pairing_name(digest, self.noise.noise_rate)}
            self._noise_record = (self.noise, record)
        return dict(self._noise_record[1])

    @property
    def hparams_initial(self) -> AttributeDict:
        """The constructor arguments plus, once known, the noise provenance.

        Lightning sends ``hparams_initial`` to every logger (CSV ``hparams.yaml``, W&B config)
        *after* ``setup``, but ``save_hyperparameters`` froze it in ``__init__``, before the
        noise was drawn or read; adding the noise here is what makes the logged
        hyperparameters name the exact noise pattern of the run.
        """
        initial = super().hparams_initial
        initial.update(self.noise_hparams())
        initial["augment"] = self._augment_hparam()
        return initial

    def _augment_hparam(self) -> str | None:
        return None if self.augment is None else repr(self.augment)

    def run_dir(self) -> Path | None:
        """The trainer's log directory (where the config is saved), if attached."""
        trainer = getattr(self, "trainer", None)
        if trainer is None:
            return None
        return Path(trainer.log_dir or trainer.default_root_dir)

    def _save_noise(self) -> None:
        """Write the noise indices, their SHA-256 and their pairing (digest and registry name)
        into the run directory (rank 0), never over the noise record a run started with
        (:func:`ncl.run_record.save_noise_record`)."""
        out, trainer = self.run_dir(), getattr(self, "trainer", None)
        if out is None or self.noise is None or not trainer.is_global_zero:
            return
        hparams = self.noise_hparams()  # the pairing too: noise.json names the published file
        summary = {**self.noise.summary(), "pairing_digest": hparams["noise_pairing_digest"],
                   "pairing": hparams["noise_pairing"]}
        save_noise_record(out, self.noise.array, summary)

    # ----------------------------------------------------------------- loaders
    def _loader(self, dataset: torch.utils.data.Dataset, batch_size: int, shuffle: bool,
                drop_last: bool = False) -> DataLoader:
        return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last,
                          **self._worker_options())

    def _worker_options(self) -> dict[str, Any]:
        """DataLoader options every loader of this module shares (workers, collation, pinning)."""
        return dict(num_workers=self.num_workers, collate_fn=collate,
                    persistent_workers=self.num_workers > 0,
                    pin_memory=pin_memory(getattr(self, "trainer", None)))

    def _check_mask_token(self) -> None:
        """Stop before training when the augmentation emits ``<mask>`` (id V) but a network's
        word embedding has only V rows (a CRCL config without ``add_mask_token: true``)."""
        module = getattr(getattr(self, "trainer", None), "lightning_module", None)
        if self.augment is None or not self.augment.uses_mask_token or module is None:
            return
        for net in getattr(module, "nets", []):
            rows = getattr(net, "vocab_size", None)
            if isinstance(rows, int) and rows <= self.vocab_size:
                raise ConfigError(
                    f"data.augment masks caption tokens with <mask> (id {self.vocab_size}), but "
                    f"the backbone embeds only {rows} ids; set "
                    f"model.init_args.backbone.init_args.add_mask_token=true")

    def train_pairs(self) -> PairDataset:
        """The noisy training pairs, never augmented (division passes, plans, diagnostics)."""
        if self.train_split is None or self.noise is None:
            raise RuntimeError("call setup('fit') first")
        return PairDataset(self.train_split, self.noise.cap2img)

    def train_images(self) -> tuple[np.ndarray, np.ndarray]:
        """``(paired, written_for)`` image of every training caption (RetrievalData)."""
        pairs = self.train_pairs()
        written_for = np.arange(len(pairs), dtype=np.int64) // int(pairs.split.im_div)
        return np.asarray(pairs.cap2img, dtype=np.int64), written_for

    def _augmented_pairs(self, seed: int) -> PairDataset:
        """The training pairs with ``self.augment``, keyed by ``(epoch, index)``."""
        pairs = self.train_pairs()
        return PairDataset(pairs.split, pairs.cap2img, self.augment, seed, self.vocab_size)

    def _upcoming_epoch(self) -> int:
        """The epoch the training loader is built for: the value Lightning passes to
        ``set_epoch`` (``epoch_progress.current.processed``; restored on resume).

        Lightning creates the first iterator of a run, and of a resumed run, *before* it calls
        ``set_epoch``; with ``num_workers > 0`` that iterator already draws the first batches.
        A sampler that starts at this epoch makes those batches the ones the uninterrupted run
        drew.
        """
        trainer = getattr(self, "trainer", None)
        if trainer is None:
            return 0
        return int(trainer.fit_loop.epoch_progress.current.processed)

    def use_train_plan(self, plan: TrainPlan | None) -> None:
        """Let a method build the training loader from the pairs (``None`` restores the default).

        Methods whose batches depend on per-epoch state (NCR's co-divided labelled/unlabelled
        plan) register ``plan(pairs) -> iterable of batches`` in their ``setup("fit")``; the
        DataModule still owns the data. ``reload_dataloaders_every_n_epochs=1`` makes Lightning
        ask again every epoch. A plan receives the pairs without ``data.augment``; asking for
        both is an error.
        """
        if plan is not None and self.augment is not None:
            raise ConfigError("data.augment applies to the DataModule's own training loader, but "
                              "this method supplies its own training batches (use_train_plan); "
                              "remove data.init_args.augment")
        self._train_plan = plan

    def train_dataloader(self) -> Iterable:
        pairs = self.train_pairs()
        if self._train_plan is not None:
            return self._train_plan(pairs)
        trainer = getattr(self, "trainer", None)
        distributed = trainer is not None and trainer.world_size > 1
        world = trainer.world_size if distributed else 1
        per_rank = pairs_per_rank(len(pairs), world, uses_distributed_sampler(trainer))
        drop_last = drop_single_pair_batch(per_rank, self.batch_size)
        if distributed and self.augment is None:
            # Lightning swaps in a DistributedSampler, itself seeded by (seed, epoch).
            return self._loader(pairs, self.batch_size, shuffle=True, drop_last=drop_last)
        # The shuffle is a function of (seed, epoch) so that a resumed run sees the batches
        # the uninterrupted run saw (torch's RandomSampler draws from the global stream).
        seed = self.shuffle_seed if self.shuffle_seed is not None else global_seed()
        self.shuffle_seed = seed  # kept in the checkpoint (state_dict)
        epoch = self._upcoming_epoch()
        if distributed:  # Lightning swaps its DistributedSampler into the EpochBatchSampler
            sampler: torch.utils.data.Sampler[int] = RandomSampler(pairs)
        else:
            sampler = EpochShuffleSampler(len(pairs), seed)
            sampler.set_epoch(epoch)
        common: dict[str, Any] = dict(self._worker_options(), generator=loader_generator(seed))
        if self.augment is None:
            return DataLoader(pairs, batch_size=self.batch_size, sampler=sampler,
                              drop_last=drop_last, **common)
        # Items are read by (epoch, index) keys, so the augmentation knows its epoch in any
        # worker process (ncl.data.datasets.EpochBatchSampler).
        return DataLoader(self._augmented_pairs(seed), **common,
                          batch_sampler=EpochBatchSampler(sampler, self.batch_size, drop_last, epoch))

    def state_dict(self) -> dict[str, Any]:
        """The shuffle seed actually used, so that a resumed run keeps it, and the training
        noise (SHA-256, pairing digest and registry name), so that ``ncl test`` of the
        checkpoint can say in ``test_results.json`` what noise the model was trained on."""
        state: dict[str, Any] = {"shuffle_seed": self.shuffle_seed}
        noise = self.training_noise()
        if noise:
            state["training_noise"] = noise
        return state

    def training_noise(self) -> dict[str, Any]:
        """:data:`TRAINING_NOISE_KEYS` of the noise this run trains on (after ``setup("fit")``)
        or of the run whose checkpoint was restored; empty when neither is known."""
        noise = self.noise_hparams() or self.trained_noise
        return {k: noise[k] for k in TRAINING_NOISE_KEYS if k in noise}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("shuffle_seed") is not None:
            self.shuffle_seed = int(state_dict["shuffle_seed"])
        # Absent from checkpoints written before issue 27: nothing is claimed then.
        self.trained_noise = dict(state_dict.get("training_noise") or {})

    def eval_loaders(self, split: PrecompSplit) -> list[DataLoader]:
        """``[images, captions]`` loaders: each image and each caption encoded once."""
        size = self.eval_batch_size
        return [self._loader(ImageDataset(split), size, False),
                self._loader(CaptionDataset(split), size, False)]

    def val_dataloader(self) -> list[DataLoader]:
        return self.eval_loaders(self.val_data)

    def test_dataloader(self) -> list[DataLoader]:
        return self.eval_loaders(self.test_data)

    # ----------------------------------------------------------------- prediction
    def use_predict_split(self, split: str = "train", batch_size: int | None = None) -> None:
        """Choose what :meth:`predict_dataloader` serves (``ncl predict``'s ``--split`` and
        ``--batch_size``; the writer calls this in its ``setup``).

        Args:
            split: ``train`` (the noisy training pairs), ``dev`` or ``test`` (the stored pairs
                of :attr:`val_split` / :attr:`test_split`, every image).
            batch_size: pairs per batch; ``None``: :attr:`batch_size`, the co-divide's.
        """
        if split not in PREDICT_SPLITS:
            raise ConfigError(f"--split must be one of {', '.join(PREDICT_SPLITS)}, got {split!r}")
        if split != self.predict_split:
            self._predict_pairs = None
        self.predict_split, self.predict_batch_size = split, batch_size

    def predict_pairs(self) -> PairDataset:
        """The pairs of the predict split, read once: the training split with its noise, or
        an evaluation split as stored (caption ``c`` with image ``c // im_div``)."""
        if self._predict_pairs is None:
            if self.predict_split == "train":
                if self.train_split is None:
                    self._load_noisy_train()
                self._predict_pairs = self.train_pairs()
            else:
                name = self.val_split if self.predict_split == "dev" else self.test_split
                data = self._load(name)  # the whole split, dev_max_images not applied
                self._predict_pairs = PairDataset(data, np.arange(data.n_captions) // data.im_div)
            self.predict_data = self._predict_pairs.split
        return self._predict_pairs

    def predict_clean_mask(self) -> np.ndarray | None:
        """``(N,)`` bool ground truth of :meth:`predict_pairs`, or ``None`` where nobody knows
        which pairs are mismatched (real noise; the evaluation splits are taken as stored)."""
        if self.predict_split != "train" or not self.clean_mask_known:
            return None
        self.predict_pairs()
        return np.asarray(self.clean_mask, dtype=bool)

    def predict_dataloader(self) -> DataLoader:
        """The predict split in the scoring pass's batches
        (:class:`ncl.predict.ScoringBatchSampler`: shuffled as NCR's co-divide,
        ``predict_batch_size`` or :attr:`batch_size` pairs), never augmented."""
        pairs = self.predict_pairs()
        size = self.predict_batch_size or self.batch_size
        batches = ScoringBatchSampler(SequentialSampler(pairs), size)
        return DataLoader(pairs, batch_sampler=batches, **self._worker_options())


class SyntheticDataModule(PrecompDataModule):
    """:class:`PrecompDataModule` over a generated dataset (see :mod:`ncl.data.synthetic`).

    The dataset is written once, in the official layout, under
    ``<cache_dir>/<preset>-<hash of the spec>/`` and reused by later runs.

    Args:
        preset: ``tiny`` (tests, seconds), ``quickstart`` (about two minutes of training on
            a 2-core CPU) or ``bench`` (robustness tables).
        cache_dir: where generated datasets are kept; default ``$XDG_CACHE_HOME/ncl`` or
            ``~/.cache/ncl``.
        synthetic_seed: seed of the generator.
        n_train, n_dev, n_test, captions_per_image, num_regions, feature_dim: overrides of
            the preset's sizes (``None`` keeps the preset's).
        Other arguments: as :class:`PrecompDataModule`.
    """

    def __init__(self, preset: Literal["tiny", "quickstart", "bench"] = "quickstart",
                 cache_dir: str | None = None, synthetic_seed: int = 0,
                 n_train: int | None = None, n_dev: int | None = None, n_test: int | None = None,
                 captions_per_image: int | None = None, num_regions: int | None = None,
                 feature_dim: int | None = None, batch_size: int = 128, eval_batch_size: int = 128,
                 num_workers: int = 0, noise_type: NoiseType = "none", noise_ratio: float = 0.0,
                 noise_file: str | None = None, noise_seed: int = 0,
                 dev_max_images: int | None = 1000, test_protocols: Sequence[Protocol] = ("1k",),
                 nan_check_samples: int = 64, nan_check: NanCheck = "sample",
                 augment: Augmentation | None = None, real_noise: bool | None = None,
                 per_device_batch: bool = False) -> None:
        import hashlib
        import os
        from dataclasses import asdict

        from ncl.data.synthetic import generate
        from ncl.data.synthetic import preset as make_spec

        overrides = {k: v for k, v in dict(n_train=n_train, n_dev=n_dev, n_test=n_test,
                                           captions_per_image=captions_per_image,
                                           num_regions=num_regions, feature_dim=feature_dim,
                                           seed=synthetic_seed).items() if v is not None}
        spec = make_spec(preset, **overrides)
        if cache_dir is None:
            base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
            cache_dir = str(Path(base) / "ncl")
        digest = hashlib.sha256(json.dumps(asdict(spec), sort_keys=True).encode()).hexdigest()[:10]
        root = Path(cache_dir) / f"{preset}-{digest}"
        generate(root, spec)
        self.spec = spec
        super().__init__(data_root=str(root), data_name="synthetic_precomp", vocab_path=None,
                         batch_size=batch_size, eval_batch_size=eval_batch_size,
                         num_workers=num_workers, noise_type=noise_type, noise_ratio=noise_ratio,
                         noise_file=noise_file, noise_seed=noise_seed,
                         dev_max_images=dev_max_images, val_split="dev", test_split="test",
                         test_protocols=test_protocols, nan_check_samples=nan_check_samples,
                         nan_check=nan_check, augment=augment, real_noise=real_noise,
                         per_device_batch=per_device_batch)
