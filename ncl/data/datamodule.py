"""LightningDataModule for the official precomputed-feature layout, with noise injection.

:class:`PrecompDataModule` is the base of every DataModule ncl ships (the video ones in
:mod:`ncl.data.video` too). It reads the splits and the vocabulary, injects the noise and
serves the evaluation loaders; its other jobs are parts in their own modules:

* :class:`~ncl.data.train_loader.TrainLoader`: the training loader and the plan hook through
  which a method supplies its own batches (batches per process: :mod:`ncl.data.batch_policy`);
* :class:`~ncl.data.noise_record.NoiseRecord`: the noise written into the run folder, logged
  with the hyperparameters and kept in checkpoints;
* :class:`~ncl.data.start_checks.StartChecks`: the warnings and checks at the start of a fit;
* :class:`~ncl.data.predict_split.PredictSplit`: the split ``ncl predict`` scores.

What ncl knows of the official datasets (counts, real noise) is :mod:`ncl.data.facts`.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader

from ncl.data.augment import Augmentation
from ncl.data.batch_policy import pin_memory
from ncl.data.cache import default_cache_dir, spec_folder
from ncl.data.datasets import CaptionDataset, ImageDataset, PairDataset, collate
from ncl.data.eval_batches import PairBatches, whole_batch
from ncl.data.facts import real_noise_default
from ncl.data.noise import Noise, NoiseType, check_ratio, make_noise, resolve_noise_file
from ncl.data.noise_record import NoiseRecord
from ncl.data.precomp import NanCheck, PrecompSplit, load_split
from ncl.data.predict_split import PredictSplit
from ncl.data.start_checks import StartChecks
from ncl.data.train_loader import TrainLoader, TrainPlan
from ncl.data.vocab import Vocabulary, load_vocabulary
from ncl.errors import ConfigError, DataError

#: errno values of a cache folder that cannot be made or written (not a bug of ncl).
_CACHE_ERRNOS = {errno.EEXIST, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC}

Protocol = Literal["1k", "5fold1k", "5k"]
DATA_HINT = ("see the README section 'Preparing the datasets' for where to download the "
             "precomputed features and vocabularies and how to lay them out")


class PrecompDataModule(TrainLoader, NoiseRecord, StartChecks, PredictSplit, L.LightningDataModule):
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
        self.vocab: Vocabulary = self._read_vocabulary(self.vocab_path)
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
        # How val/test loaders batch: images and captions apart, or pairs (use_eval_pairs).
        self.eval_pairs = False

    def _read_vocabulary(self, path: Path) -> Vocabulary:
        """The vocabulary at ``path`` (the official JSON, :func:`load_vocabulary`); a layout
        with vocabularies of its own (NoW's, :mod:`ncl.data.now`) reads them here."""
        return load_vocabulary(path)

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

    def state_dict(self) -> dict[str, Any]:
        """The shuffle seed actually used, so that a resumed run keeps it, and the training
        noise (SHA-256, pairing digest and registry name), so that ``ncl test`` of the
        checkpoint can say in ``test_results.json`` what noise the model was trained on."""
        state: dict[str, Any] = {"shuffle_seed": self.shuffle_seed}
        noise = self.training_noise()
        if noise:
            state["training_noise"] = noise
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("shuffle_seed") is not None:
            self.shuffle_seed = int(state_dict["shuffle_seed"])
        # Absent from checkpoints written before issue 27: nothing is claimed then.
        self.trained_noise = dict(state_dict.get("training_noise") or {})

    def use_eval_pairs(self, pairs: bool) -> None:
        """Serve evaluation as batches of pairs (:class:`~ncl.data.eval_batches.PairBatches`,
        what a backbone whose embeddings depend on the batch asks for) or, by default, as
        separate image and caption loaders; the method chooses in its ``setup``."""
        self.eval_pairs = bool(pairs)

    def eval_loaders(self, split: PrecompSplit) -> list[DataLoader]:
        """``[images, captions]`` loaders: each image and each caption encoded once; or, with
        :meth:`use_eval_pairs`, ``[pairs]``: ``eval_batch_size`` pairs in caption order, one
        whole batch per item (a ``DistributedSampler`` deals whole batches to the ranks)."""
        size = self.eval_batch_size
        if self.eval_pairs:
            options = {**self._worker_options(), "collate_fn": whole_batch}
            return [DataLoader(PairBatches(split, size), batch_size=None, shuffle=False, **options)]
        return [self._loader(ImageDataset(split), size, False),
                self._loader(CaptionDataset(split), size, False)]

    def val_dataloader(self) -> list[DataLoader]:
        return self.eval_loaders(self.val_data)

    def test_dataloader(self) -> list[DataLoader]:
        return self.eval_loaders(self.test_data)

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
        from ncl.data.synthetic import generate
        from ncl.data.synthetic import preset as make_spec

        overrides = {k: v for k, v in dict(n_train=n_train, n_dev=n_dev, n_test=n_test,
                                           captions_per_image=captions_per_image,
                                           num_regions=num_regions, feature_dim=feature_dim,
                                           seed=synthetic_seed).items() if v is not None}
        spec = make_spec(preset, **overrides)
        if cache_dir is None:
            cache_dir = str(default_cache_dir())
        root = spec_folder(cache_dir, preset, spec)
        try:
            generate(root, spec)
        except OSError as err:  # a file where the folder goes, no permission, a full disk
            if err.errno not in _CACHE_ERRNOS:
                raise
            raise ConfigError(f"data.cache_dir={cache_dir} cannot hold the generated dataset: "
                              f"{err.strerror or err} ({err.filename}); give a folder that "
                              f"can be written") from None
        self.spec = spec
        super().__init__(data_root=str(root), data_name="synthetic_precomp", vocab_path=None,
                         batch_size=batch_size, eval_batch_size=eval_batch_size,
                         num_workers=num_workers, noise_type=noise_type, noise_ratio=noise_ratio,
                         noise_file=noise_file, noise_seed=noise_seed,
                         dev_max_images=dev_max_images, val_split="dev", test_split="test",
                         test_protocols=test_protocols, nan_check_samples=nan_check_samples,
                         nan_check=nan_check, augment=augment, real_noise=real_noise,
                         per_device_batch=per_device_batch)
