"""The wide probe of user mistakes (the options a user sets with a bad value), kept as a table
beside :mod:`test_probe` (the mistakes first reported, the huge batch, truncated checkpoints,
config-file keys): every numeric Lightning trainer option, ncl's data and model options of
several methods (on configs/quickstart.yaml and on paper configs with the tiny synthetic
data), bad files, types and choices, unknown keys, subcommand typos, ``ncl data`` and
``python -m ncl.reproduce``.

Each case is a command line -> its exit status and the prefix of the one line that says
what is wrong (``ncl: error:``, exit 2, the last line of stderr, no traceback, usage or
type dump) or of a right warning (``ncl: warning:``, the run goes on); ``None``: a run that
must succeed without an error or warning line. Everything runs in-process (``ncl.cli.main``,
``ncl.reproduce.cli.main``); the runs that train stop after two batches.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import tiny

import ncl.reproduce.cli as reproduce
from ncl.reproduce.cells import METHODS as METHOD_ROWS  # the declared rows: no list here
from ncl import cli

REPO = Path(__file__).resolve().parents[2]
E, W = "ncl: error: ", "ncl: warning: "
#: Two training batches, one of validation and test; a log line every step (10 would warn).
SHORT = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1",
         "--trainer.limit_test_batches=1", "--trainer.log_every_n_steps=1"]
#: A paper config's data replaced by the tiny synthetic set, its backbone by tiny dimensions.
SYNTHETIC = ["--data", "ncl.data.datamodule.SyntheticDataModule", "--data.preset=tiny",
             "--data.cache_dir={cache}", "--data.batch_size=16", "--data.noise_file=null",
             "--trainer.logger=false", "--trainer.enable_progress_bar=false",
             "--model.backbone.init_args.img_dim=16", "--model.backbone.init_args.num_regions=6",
             "--model.backbone.init_args.word_dim=8", "--model.backbone.init_args.embed_size=16",
             "--model.backbone.init_args.sim_dim=8"]
#: Files the cases name, written into the test's folder (``None``: a 7-entry noise array).
FILES: dict[str, str | None] = {
    "bad.npy": None, "text.npy": "hello\n", "empty.ckpt": "", "broken.yaml": "trainer: {max_epochs: 3\n",
    "list.yaml": "- a\n- b\n",
    "bb.yaml": "model:\n  init_args:\n    backbone:\n      init_args:\n        embed_sizee: 3\n",
    "opt.yaml": "model:\n  init_args:\n    optimizer:\n      init_args:\n        lrr: 0.1\n",
    "mt.yaml": "model:\n  init_args:\n    tauu: 0.1\n",
    "cb.yaml": ("trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
               "      init_args: {monitr: val/rsum}\n"),
    "compose.yaml": "compose: [data/nope.yaml]\n",
    "m2.yaml": "model:\n  tauu: 1\n", "d2.yaml": "data:\n  batch_sizee: 3\n", "t5.yaml": "trainer: 5\n",
    "cbl.yaml": "trainer:\n  callbacks: 3\n",
    "lg.yaml": ("trainer:\n  logger:\n    class_path: lightning.pytorch.loggers.CSVLogger\n"
               "    init_args: {save_dirr: x}\n"),
}


def fit(*extra: str) -> list[str]:
    """``ncl fit`` of the quickstart on the tiny preset, two batches, then ``extra``."""
    return ["fit", *tiny(Path("{cache}")), *SHORT, *extra]


def sub(name: str, *extra: str) -> list[str]:
    """Another subcommand on the same options."""
    return [name, *tiny(Path("{cache}")), *SHORT, *extra]


def paper(config: str, *extra: str) -> list[str]:
    """``ncl fit --config configs/<config>`` on the tiny synthetic data."""
    return ["fit", "--config", str(REPO / "configs" / config), *SYNTHETIC, *SHORT, *extra]


def data(*argv: str) -> list[str]:
    return ["data", *argv]


def grid(*argv: str) -> list[str]:
    """``python -m ncl.reproduce ARGV`` (marked for :func:`run`)."""
    return ["<reproduce>", *argv]


RCL_F30K = str(REPO / "configs" / "rcl_sgr_f30k.yaml")
GPU = torch.cuda.is_available()

# (case id, argv (``{tmp}``: the test's folder, ``{cache}``: the synthetic data), exit status,
# the line's prefix or None)
CASES = [
    # trainer numerics
    ('devices 0', fit("--trainer.devices", "0"),
     2, E + "trainer.devices is '0', but it must be a number of devices (1 or more), -1 (all), auto, or device"),
    ('devices -2', fit("--trainer.devices", "-2"),
     2, E + "trainer.devices is '-2', but it must be a number of devices (1 or more), -1 (all), auto, or"),
    ('devices abc', fit("--trainer.devices", "abc"),
     2, E + "trainer.devices is 'abc', but it must be a number of devices (1 or more), -1 (all), auto, or"),
    ('num_nodes 0', fit("--trainer.num_nodes", "0"),
     2, E + 'trainer.num_nodes is 0, but it must be 1 or more'),
    ('max_epochs 0', fit("--trainer.max_epochs", "0"),
     2, E + 'trainer.max_epochs is 0, so ncl fit would train nothing and leave an empty run; set it to 1 or'),
    ('min_epochs -1', fit("--trainer.min_epochs", "-1"),
     2, E + 'trainer.min_epochs is -1, but it must be 0 or more'),
    ('max_steps -5', fit("--trainer.max_steps", "-5"),
     2, E + 'trainer.max_steps is -5, but it must be -1 (no limit) or more'),
    ('min_steps -1', fit("--trainer.min_steps", "-1"),
     2, E + 'trainer.min_steps is -1, but it must be 0 or more'),
    ('limit_train_batches 1.5', fit("--trainer.limit_train_batches", "1.5"),
     2, E + 'trainer.limit_train_batches=1.5: You have passed invalid value 1.5 for limit_train_batches, it'),
    ('limit_train_batches 0', fit("--trainer.limit_train_batches", "0"),
     2, E + 'trainer.limit_train_batches is 0, so ncl fit would train nothing and leave an empty run; set it'),
    ('limit_val_batches -5', fit("--trainer.limit_val_batches", "-5"),
     2, E + 'trainer.limit_val_batches is -5, but it must be 0 or more (a fraction up to 1.0, or a number of'),
    ('limit_val_batches 1.5', fit("--trainer.limit_val_batches", "1.5"),
     2, E + 'trainer.limit_val_batches=1.5: You have passed invalid value 1.5 for limit_val_batches, it has to'),
    ('limit_test_batches -5', sub("test", "--allow_untrained", "true", "--trainer.limit_test_batches", "-5"),
     2, E + 'trainer.limit_test_batches is -5, but it must be 0 or more (a fraction up to 1.0, or a number of'),
    ('limit_test_batches 1.5', sub("test", "--allow_untrained", "true", "--trainer.limit_test_batches", "1.5"),
     2, E + 'trainer.limit_test_batches=1.5: You have passed invalid value 1.5 for limit_test_batches, it has'),
    ('limit_predict_batches -1', sub("predict", "--allow_untrained", "true", "--trainer.limit_predict_batches", "-1", "--out", "{tmp}/p.csv"),
     2, E + 'trainer.limit_predict_batches is -1, but it must be 0 or more (a fraction up to 1.0, or a number'),
    ('val_check_interval 0', fit("--trainer.val_check_interval", "0"),
     2, E + 'trainer.val_check_interval is 0, but it must be more than 0'),
    ('val_check_interval -1', fit("--trainer.val_check_interval", "-1"),
     2, E + 'trainer.val_check_interval is -1, but it must be more than 0'),
    ('val_check_interval 1.5', fit("--trainer.val_check_interval", "1.5"),
     2, E + 'trainer.val_check_interval=1.5: You have passed invalid value 1.5 for val_check_interval, it has'),
    ('val_check_interval 1000', fit("--trainer.val_check_interval", "1000"),
     2, E + 'trainer.val_check_interval=1000: `val_check_interval` (1000) must be less than or equal to the'),
    ('check_val_every_n_epoch -1', fit("--trainer.check_val_every_n_epoch", "-1"),
     2, E + 'trainer.check_val_every_n_epoch is -1, but it must be 1 or more'),
    ('log_every_n_steps 0', fit("--trainer.log_every_n_steps", "0"),
     0, None),
    ('log_every_n_steps -1', fit("--trainer.log_every_n_steps", "-1"),
     2, E + 'trainer.log_every_n_steps is -1, but it must be 0 or more'),
    ('accumulate_grad_batches -1', fit("--trainer.accumulate_grad_batches", "-1"),
     2, E + 'trainer.accumulate_grad_batches is -1, but it must be 1 or more'),
    ('gradient_clip_val -1', fit("--trainer.gradient_clip_val", "-1"),
     2, E + 'trainer.gradient_clip_val is -1, but it must be 0 or more'),
    ('gradient_clip_algorithm foo', fit("--trainer.gradient_clip_algorithm", "foo"),
     2, E + 'trainer.gradient_clip_algorithm=foo: `gradient_clip_algorithm` foo is invalid. Allowed'),
    ('precision 16-mixed cpu', fit("--trainer.precision", "16-mixed"),
     0, W + "You passed `Trainer(accelerator='cpu', precision='16-mixed')` but AMP with fp16 is not"),
    ('accelerator tpu', fit("--trainer.accelerator", "tpu"),
     2, E + "trainer.accelerator is 'tpu', but this machine has no TPU that torch can use; use cpu"),
    ('accelerator gpu', fit("--trainer.accelerator", "gpu"),
     2, E + "trainer.accelerator is 'gpu', but this machine has no GPU that torch can use; use cpu or auto"),
    ('accelerator cuda', fit("--trainer.accelerator", "cuda"),
     2, E + "trainer.accelerator is 'cuda', but this machine has no CUDA that torch can use; use cpu or auto"),
    ('accelerator foo', fit("--trainer.accelerator", "foo"),
     2, E + "trainer.accelerator=foo: You selected an invalid accelerator name: `accelerator='foo'`. Available"),
    ('overfit_batches -1', fit("--trainer.overfit_batches", "-1"),
     2, E + 'trainer.overfit_batches is -1, but it must be 0 or more'),
    ('overfit_batches 1.5', fit("--trainer.overfit_batches", "1.5"),
     2, E + 'trainer.overfit_batches=1.5: You have passed invalid value 1.5 for overfit_batches, it has to be'),
    ('max_time bogus', fit("--trainer.max_time", "bogus"),
     2, E + "trainer.max_time is 'bogus', but it must be days:hours:minutes:seconds (e.g. 00:12:00:00 for 12"),
    ('reload_dataloaders_every_n_epochs -1', fit("--trainer.reload_dataloaders_every_n_epochs", "-1"),
     2, E + 'trainer.reload_dataloaders_every_n_epochs is -1, but it must be 0 or more'),
    ('deterministic maybe', fit("--trainer.deterministic", "maybe"),
     2, E + "trainer.deterministic 'maybe' is not valid: it must be one of true, false, warn"),
    ('seed_everything abc', fit("--seed_everything", "abc"),
     2, E + "seed_everything 'abc' is not valid: it must be true or false or an integer"),
    # data options
    ('batch_size 0', fit("--data.batch_size", "0"),
     2, E + 'data.batch_size is 0, but it must be a positive integer (1 or more)'),
    ('batch_size -4', fit("--data.batch_size", "-4"),
     2, E + 'data.batch_size is -4, but it must be a positive integer (1 or more)'),
    ('batch_size 1', fit("--data.batch_size", "1"),
     2, E + 'data.batch_size must be at least 2 (BatchNorm over a batch of one fails), got 1'),
    ('noise_ratio 1.5', fit("--data.noise_ratio", "1.5"),
     2, E + 'data.noise_ratio must be in [0, 1), got 1.5'),
    ('noise_ratio -0.1', fit("--data.noise_ratio", "-0.1"),
     2, E + 'data.noise_ratio must be in [0, 1), got -0.1'),
    ('noise_ratio 1.0', fit("--data.noise_ratio", "1.0"),
     2, E + 'data.noise_ratio must be in [0, 1), got 1.0'),
    ('noise_seed -1', fit("--data.noise_seed", "-1"),
     2, E + 'data.noise_seed is -1, but it must be an integer from 0 to 4294967295'),
    ('synthetic_seed -1', fit("--data.synthetic_seed", "-1"),
     2, E + 'data.synthetic_seed is -1, but it must be an integer from 0 to 4294967295'),
    ('n_train 0', fit("--data.n_train", "0"),
     2, E + "data.n_train is 0, but it must be a positive integer (1 or more), or null for the preset's"),
    ('n_train -5', fit("--data.n_train", "-5"),
     2, E + "data.n_train is -5, but it must be a positive integer (1 or more), or null for the preset's"),
    ('n_dev 0', fit("--data.n_dev", "0"),
     2, E + "data.n_dev is 0, but it must be a positive integer (1 or more), or null for the preset's"),
    ('captions_per_image 0', fit("--data.captions_per_image", "0"),
     2, E + 'data.captions_per_image is 0, but it must be a positive integer (1 or more), or null for the'),
    ('num_regions 0 data', fit("--data.num_regions", "0"),
     2, E + 'data.num_regions is 0, but it must be a positive integer (1 or more)'),
    ('feature_dim -1', fit("--data.feature_dim", "-1"),
     2, E + 'data.feature_dim is -1, but it must be a positive integer (1 or more)'),
    ('dev_max_images 0', fit("--data.dev_max_images", "0"),
     2, E + 'data.dev_max_images is 0, but it must be a positive integer (1 or more), or null for every dev'),
    ('nan_check_samples -1', fit("--data.nan_check_samples", "-1"),
     2, E + 'data.nan_check_samples is -1, but it must be 0 (no NaN check) or more'),
    ('test_protocols 3k', fit("--data.test_protocols", "[3k]"),
     2, E + "data.test_protocols '3k' is not valid: it must be one of 1k, 5fold1k, 5k"),
    ('nan_check maybe', fit("--data.nan_check", "maybe"),
     2, E + "data.nan_check 'maybe' is not valid: it must be one of sample, full, off"),
    ('noise_file missing', fit("--data.noise_file", "{tmp}/nope.npy"),
     2, E + "noise file not found: {tmp}/nope.npy (data.noise_file='{tmp}/nope.npy'); RCL's image-level"),
    ('noise_file wrong format', fit("--data.noise_file", "{tmp}/bad.npy"),
     2, E + 'noise file {tmp}/bad.npy has length 7; expected 300 (caption level, one entry per caption) or 60'),
    ('noise_file text', fit("--data.noise_file", "{tmp}/text.npy"),
     2, E + 'noise file {tmp}/text.npy is not a readable .npy array: This file contains pickled (object) data.'),
    ('cache_dir a file', fit("--data.cache_dir", "{tmp}/text.npy"),
     2, E + 'data.cache_dir={tmp}/text.npy cannot hold the generated dataset: Not a directory'),
    # model options
    ('weight_decay -1', fit("--model.optimizer.init_args.weight_decay", "-1"),
     2, E + 'model.optimizer.weight_decay is -1.0, but it must be 0 or more'),
    ('betas bad', fit("--model.optimizer.init_args.betas", "[1.5,0.9]"),
     2, E + 'model.optimizer.betas=(1.5, 0.9): Invalid beta parameter at index 0: 1.5'),
    ('optimizer class bogus', fit("--model.optimizer", "torch.optim.Nope"),
     2, E + "model.optimizer 'torch.optim.Nope' is not valid: it must be an importable class path (such as"),
    ('sim_dim -1', fit("--model.backbone.init_args.sim_dim", "-1"),
     2, E + 'model.backbone.sim_dim is -1, but it must be a positive integer (1 or more)'),
    ('module_name XYZ', fit("--model.backbone.init_args.module_name", "XYZ"),
     2, E + "model.backbone.module_name 'XYZ' is not valid: it must be one of SGR, SAF"),
    ('rcl tau 0', fit("--model.tau", "0"),
     2, E + 'model.tau must be > 0, got 0.0'),
    ('rcl warmup -1', fit("--model.warmup_epochs", "-1"),
     2, E + "unknown option --model.warmup_epochs: RCL has no option 'warmup_epochs' (its options: ablation,"),
    ('ncr margin -0.2', paper("ncr_sgr_f30k.yaml", "--model.margin", "-0.2"),
     2, E + 'model.margin must be > 0, got -0.2'),
    ('ncr warmup -1', paper("ncr_sgr_f30k.yaml", "--model.warmup_epochs", "-1"),
     2, E + 'model.warmup_epochs is -1, but it must be 0 or more'),
    ('ncr mr_weight -1', paper("ncr_sgr_f30k.yaml", "--model.mr_weight", "-1"),
     2, E + 'model.mr_weight must be >= 0, got -1.0'),
    ('crcl tau 0', paper("crcl_sgr_f30k.yaml", "--model.tau", "0"),
     2, E + 'model.tau must be > 0, got 0.0'),
    ('decl mu 0', paper("decl_sgr_f30k.yaml", "--model.mu", "0"),
     2, E + 'model.mu must be an integer >= 1, got 0'),
    ('recon div 0', paper("recon_sgr_f30k.yaml", "--model.division_interval", "0"),
     2, E + 'model.division_interval must be an integer >= 1, got 0'),
    ('l2rm queue 0', paper("l2rm_sgr_f30k.yaml", "--model.queue_length", "0"),
     2, E + 'model.queue_length must be an integer >= 1, got 0'),
    ('gsc lr_decay 1.5', paper("gsc_sgr_f30k.yaml", "--model.lr_decay", "1.5"),
     2, E + 'model.lr_decay must lie in (0, 1), got 1.5'),
    ('paper no data', ["fit", "--config", RCL_F30K, "--trainer.default_root_dir={tmp}"],
     2, E + "dataset folder not found: data/f30k_precomp (data_root='data', data_name='f30k_precomp'); see the"),
    ('paper vocab missing', ["fit", "--config", RCL_F30K, "--data.data_root={tmp}/real", "--data.noise_file=null", "--trainer.default_root_dir={tmp}", "--trainer.logger=false"],
     2, E + 'vocabulary file not found: {tmp}/real/vocab/f30k_precomp_vocab.json; pass data.vocab_path or see'),
    ('paper data_root a file', ["fit", "--config", RCL_F30K, "--data.data_root={tmp}/text.npy", "--trainer.logger=false"],
     2, E + "dataset folder not found: {tmp}/text.npy/f30k_precomp (data_root='{tmp}/text.npy',"),
    ('decl tau 0', paper("decl_sgr_f30k.yaml", "--model.tau", "0"),
     2, E + 'model.tau must be > 0, got 0.0'),
    ('recon warmup 1.5', paper("recon_sgr_f30k.yaml", "--model.warmup_epochs", "1.5"),
     2, E + "model.warmup_epochs '1.5' is not valid: it must be an integer"),
    ('l2rm sinkhorn 0', paper("l2rm_sgr_f30k.yaml", "--model.sinkhorn_max_iter", "0"),
     2, E + 'model.sinkhorn_max_iter must be an integer >= 1, got 0'),
    ('lnc margin -1', paper("lnc_sgr_f30k.yaml", "--model.margin", "-1"),
     2, E + 'model.margin must be > 0, got -1.0'),
    ('triplet margin -1', paper("baseline_triplet_sgr_f30k.yaml", "--model.margin", "-1"),
     2, E + 'model.margin must be >= 0, got -1.0'),
    ('infonce tau 0', paper("baseline_infonce_sgr_f30k.yaml", "--model.tau", "0"),
     2, E + 'model.tau must be > 0, got 0.0'),
    ('rcl q 0 gce', fit("--model.loss", "gce", "--model.q", "0"),
     2, E + 'model.q must lie in (0, 1], got 0.0'),
    ('rcl loss choice', fit("--model.loss", "cube"),
     2, E + "model.loss 'cube' is not valid: it must be one of log, exp, gce, tan, mae"),
    ('grad_clip -1', fit("--model.grad_clip", "-1"),
     2, E + 'model.grad_clip is -1.0, but it must be 0 (no clipping) or more'),
    ('lr_update 0', fit("--model.lr_update", "0"),
     2, E + 'model.lr_update must be >= 1 epoch, got 0'),
    ('eval_shard_size 0', fit("--model.eval_shard_size", "0"),
     2, E + 'model.eval_shard_size is 0, but it must be a positive integer (1 or more)'),
    ('paper row trains', paper("ncr_sgr_f30k.yaml", "--data.num_workers=0"),
     0, None),
    ('validate batch_size 0', sub("validate", "--allow_untrained", "true", "--data.eval_batch_size", "0"),
     2, E + 'data.eval_batch_size is 0, but it must be a positive integer (1 or more)'),
    ('predict batch_size 0', sub("predict", "--allow_untrained", "true", "--out", "{tmp}/p.csv", "--batch_size", "0"),
     2, E + '--batch_size is 0, but it must be a positive integer (1 or more)'),
    ('predict split nope', sub("predict", "--allow_untrained", "true", "--out", "{tmp}/p.csv", "--split", "nope"),
     2, E + "--split must be one of train, dev, test, got 'nope'"),
    ('predict ranking nope', sub("predict", "--allow_untrained", "true", "--out", "{tmp}/p.csv", "--ranking", "nope"),
     2, E + "--ranking must be one of gmm"),
    ('predict out a folder', sub("predict", "--allow_untrained", "true", "--out", "{tmp}"),
     2, E + '--out {tmp}: the name must end with .csv or .parquet'),
    ('predict untrained allowed', sub("predict", "--allow_untrained", "true", "--out", "{tmp}/p.csv"),
     0, None),
    ('test unknown key', sub("test", "--allow_untrained", "true", "--trainer.max_epohcs", "1"),
     2, E + 'unknown option --trainer.max_epohcs; did you mean --trainer.max_epochs?'),
    ('print_config', fit("--print_config"),
     0, None),
    ('logging interval', fit("--trainer.log_every_n_steps", "10"),
     0, W + 'The number of training batches (2) is smaller than the logging interval'),
    ('default_root_dir a file', fit("--trainer.default_root_dir", "{tmp}/text.npy"),
     2, E + 'output folder trainer.default_root_dir={tmp}/text.npy cannot be created or written:'),
    # files
    ('config missing', ["fit", "--config", "{tmp}/missing.yaml"],
     2, E + 'config file {tmp}/missing.yaml does not exist'),
    ('config bad yaml', ["fit", "--config", "{tmp}/broken.yaml"],
     2, E + "config file {tmp}/broken.yaml is not valid YAML at line 2, column 1: expected ',' or '}', but got"),
    ('config a list', ["fit", "--config", "{tmp}/list.yaml"],
     2, E + 'config file {tmp}/list.yaml must hold a mapping of options, not a list'),
    ('ckpt missing', fit("--ckpt_path", "{tmp}/none.ckpt"),
     2, E + '--ckpt_path {tmp}/none.ckpt: no such checkpoint file'),
    ('ckpt empty', fit("--ckpt_path", "{tmp}/empty.ckpt"),
     2, E + 'checkpoint {tmp}/empty.ckpt cannot be read (RuntimeError: mmap can only be used with files saved'),
    ('ckpt folder', fit("--ckpt_path", "{tmp}"),
     2, E + '--ckpt_path {tmp} is a folder; give a checkpoint file (.ckpt), best or last'),
    ('ckpt text', sub("test", "--ckpt_path", "{tmp}/text.npy"),
     2, E + 'checkpoint {tmp}/text.npy cannot be read (RuntimeError: mmap can only be used with files saved'),
    ('ckpt best no run', sub("test", "--ckpt_path", "best", "--trainer.default_root_dir={tmp}/noruns"),
     2, E + '--ckpt_path best: no trained run of this config under {tmp}/noruns/lightning_logs (no run folder'),
    ('ckpt last no run', fit("--ckpt_path", "last", "--trainer.default_root_dir={tmp}/noruns"),
     2, E + '--ckpt_path last: no run to resume under {tmp}/noruns/lightning_logs (no run folder has'),
    ('test untrained', sub("test"),
     2, E + "ncl test: no --ckpt_path, so this would score the model's untrained initial weights; pass"),
    ('predict untrained', sub("predict", "--out", "{tmp}/p.csv"),
     2, E + "ncl predict: no --ckpt_path, so this would score the model's untrained initial weights; pass"),
    # unknown keys
    ('cli --model.tauu', fit("--model.tauu", "1"),
     2, E + "unknown option --model.tauu: RCL has no option 'tauu'; did you mean --model.tau?"),
    ('cli --trainer.max_epohcs', fit("--trainer.max_epohcs", "1"),
     2, E + 'unknown option --trainer.max_epohcs; did you mean --trainer.max_epochs?'),
    ('cli --dat.batch_size', fit("--dat.batch_size", "1"),
     2, E + 'unknown option --dat.batch_size; did you mean --data.batch_size?'),
    ('cli --optimizer lrr', fit("--model.optimizer.init_args.lrr", "1"),
     2, E + "unknown option --model.optimizer.init_args.lrr: Adam has no option 'lrr'; did you mean"),
    ('file backbone embed_sizee', fit("--config", "{tmp}/bb.yaml"),
     2, E + 'unknown option model.init_args.backbone.init_args.embed_sizee in a --config file: SGRAF has no'),
    ('file optimizer lrr', fit("--config", "{tmp}/opt.yaml"),
     2, E + "unknown option model.init_args.optimizer.init_args.lrr in a --config file: Adam has no option"),
    ('file model tauu', fit("--config", "{tmp}/mt.yaml"),
     2, E + "unknown option model.init_args.tauu in a --config file: RCL has no option 'tauu'; did you mean"),
    ('file callback key', fit("--config", "{tmp}/cb.yaml"),
     2, E + "unknown option trainer.callbacks...monitr in a --config file: ModelCheckpoint has no option"),
    ('file compose missing', ["fit", "--config", "{tmp}/compose.yaml"],
     2, E + 'config file {tmp}/data/nope.yaml does not exist'),
    ('file model key without init_args', fit("--config", "{tmp}/m2.yaml"),
     2, E + "unknown option model.tauu in a --config file: RCL has no option 'tauu'; did you mean model.tau?"),
    ('file data key without init_args', fit("--config", "{tmp}/d2.yaml"),
     2, E + "unknown option data.batch_sizee in a --config file: SyntheticDataModule has no option 'batch_sizee'"),
    ('file logger key', fit("--config", "{tmp}/lg.yaml"),
     2, E + "unknown option trainer.logger.init_args.save_dirr in a --config file: CSVLogger has no option"),
    ('cli --data.batch_sizee', fit("--data.batch_sizee", "3"),
     2, E + "unknown option --data.batch_sizee: SyntheticDataModule has no option 'batch_sizee'; did you mean"),
    # group and class-path shapes
    ('file trainer: 5', fit("--config", "{tmp}/t5.yaml"),
     2, E + "trainer is 5, but it must be a mapping of trainer options"),
    ('file callbacks: 3', fit("--config", "{tmp}/cbl.yaml"),
     2, E + "trainer.callbacks '3' is not valid: it must be a list"),
    ('cli callback class bogus', fit("--trainer.callbacks+=NoSuchCallback"),
     2, E + "trainer.callbacks 'NoSuchCallback' is not valid: it must be an importable class path (such as"),
    ('cli backbone class bogus', fit("--model.backbone", "NoSuchNet"),
     2, E + "model.backbone 'NoSuchNet' is not valid: it must be an importable class path (such as ncl.models.SGRAF)"),
    ('data class bogus', fit("--data", "NoSuchData"),
     2, E + "--data NoSuchData: no such class; ncl's are PrecompDataModule, SyntheticDataModule"),
    ('noise_ratio abc', fit("--data.noise_ratio", "abc"),
     2, E + "data.noise_ratio 'abc' is not valid: it must be a number"),
    ('max_epochs 1.5', fit("--trainer.max_epochs", "1.5"),
     2, E + "trainer.max_epochs '1.5' is not valid: it must be an integer"),
    ('devices []', fit("--trainer.devices", "[]"),
     2, E + "trainer.devices is [], but it must be a number of devices (1 or more)"),
    ('devices [0,1] on cpu', fit("--trainer.devices", "[0,1]"),
     2, E + "trainer.devices=[0, 1]: `devices` selected with `CPUAccelerator` should be an int > 0."),
    ('validate no ckpt', sub("validate"),
     2, E + "ncl validate: no --ckpt_path, so this would score the model's untrained initial weights"),
    ('predict no out no ckpt', sub("predict", "--allow_untrained", "true"),
     2, E + "ncl predict needs --out FILE (.csv or .parquet)"),
    # subcommands
    ('no subcommand', [],
     2, E + 'no subcommand given; one of fit, validate, test, predict, data, results (ncl --help says what each'),
    ('ncl fitt', ["fitt"],
     2, E + "unknown subcommand 'fitt'; did you mean fit?"),
    ('ncl tset', ["tset"],
     2, E + "unknown subcommand 'tset'; did you mean test?"),
    ('ncl --help', ["--help"],
     0, None),
    ('ncl data', ["data"],
     2, E + "ncl data: the following arguments are required: {noise,check,get} (see 'ncl data --help')"),
    ('ncl data nois', data("nois"),
     2, E + "ncl data: argument {noise,check,get}: invalid choice: 'nois' (choose from 'noise', 'check',"),
    ('ncl data noise identify missing', data("noise", "identify", "{tmp}/nope.npy"),
     2, E + 'noise file not found: {tmp}/nope.npy'),
    ('ncl data noise identify text', data("noise", "identify", "{tmp}/text.npy"),
     2, E + 'noise file {tmp}/text.npy is not a readable .npy array: This file contains pickled (object) data.'),
    ('ncl data noise list', data("noise", "list"),
     0, None),
    ('ncl data check missing root', data("check", "--data_root", "{tmp}/nodata", "--dataset", "f30k_precomp"),
     2, E + '{tmp}/nodata/f30k_precomp: dataset folder missing'),
    ('ncl data check bad dataset', data("check", "--data_root", "{tmp}", "--dataset", "f31k"),
     2, E + '{tmp}/f31k: dataset folder missing'),
    ('ncl data get retries -1', data("get", "http://x/y", "--out", "{tmp}", "--retries", "-1"),
     2, E + "ncl data get: argument --retries: expected a whole number >= 0, got '-1' (see 'ncl data get"),
    ('reproduce bad preset', grid("--preset", "huge", "--out", "{tmp}/g"),
     2, E + "python -m ncl.reproduce: argument --preset: invalid choice: 'huge' (choose from 'benchmark',"),
    ('reproduce no out', grid("--preset", "quickstart"),
     2, E + "python -m ncl.reproduce: the following arguments are required: --out (see 'python -m"),
    ('reproduce jobs 0', grid("--out", "{tmp}/g", "--jobs", "0", "--dry-run"),
     2, E + 'python -m ncl.reproduce: --jobs 0: must be at least 1'),
    ('reproduce epochs -1', grid("--out", "{tmp}/g", "--epochs", "-1", "--dry-run"),
     2, E + 'python -m ncl.reproduce: --epochs -1: must be at least 1'),
    ('reproduce noise 1.5', grid("--out", "{tmp}/g", "--noise", "1.5", "--dry-run"),
     2, E + 'python -m ncl.reproduce: --noise [1.5]: ratios must lie in [0, 1)'),
    ('reproduce seeds abc', grid("--out", "{tmp}/g", "--seeds", "abc", "--dry-run"),
     2, E + "python -m ncl.reproduce: argument --seeds: invalid int value: 'abc' (see 'python -m ncl.reproduce"),
    ('reproduce method typo', grid("--out", "{tmp}/g", "--methods", "rcll", "--dry-run"),
     2, E + f"python -m ncl.reproduce: --methods: unknown ['rcll']; known: {sorted(METHOD_ROWS)}"),
    ('reproduce threads 0', grid("--out", "{tmp}/g", "--threads", "0", "--dry-run"),
     2, E + 'python -m ncl.reproduce: --threads 0: must be at least 1'),
    ('reproduce slurm no out', grid("slurm"),
     2, E + "python -m ncl.reproduce: the following arguments are required: --out (see 'python -m ncl.reproduce slurm --help')"),
    ('reproduce dry run', grid("--out", "{tmp}/g", "--dry-run"),
     0, None),
    ('seed_everything -1', fit("--seed_everything", "-1"),
     2, E + '--seed_everything is -1, but it must be an integer from 0 to 4294967295, or true/false'),
    ('seed_everything 2**32', fit("--seed_everything", "4294967296"),
     2, E + '--seed_everything is 4294967296, but it must be an integer from 0 to 4294967295, or true/false'),
    # successes
    ('validate untrained allowed', sub("validate", "--allow_untrained", "true"),
     0, None),
]
#: With a GPU these are correct runs, not mistakes.
NEEDS_NO_GPU = {"accelerator gpu", "accelerator cuda"}


def prepare(root: Path) -> None:
    """The files of :data:`FILES` and an empty official layout (no vocabulary) in ``root``."""
    (root / "real" / "f30k_precomp").mkdir(parents=True)
    for name, text in FILES.items():
        if text is None:
            np.save(root / name, np.arange(7))
        else:
            (root / name).write_text(text)


def run(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    """The command in this process -> ``(exit status, stderr)``; a traceback fails the test.
    Warnings are shown as on a user's console (pytest's own filters would hide Lightning's)."""
    code = 0
    with warnings.catch_warnings():
        warnings.resetwarnings()  # Python's defaults: deprecations hidden, others shown once
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", category)
        try:
            if argv[:1] == ["<reproduce>"]:
                code = reproduce.main(argv[1:])
            else:
                cli.main(argv)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("case, argv, status, prefix", CASES, ids=[c[0] for c in CASES])
def test_probe(tmp_path: Path, synthetic_cache: Path, capsys, monkeypatch, case: str,
               argv: list[str], status: int, prefix: str | None) -> None:
    if GPU and case in NEEDS_NO_GPU:
        pytest.skip("this machine has the accelerator")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setattr("sys.argv", ["ncl"])  # LightningCLI warns about pytest's own arguments
    prepare(tmp_path)
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{cache}", str(synthetic_cache)) for a in argv]
    code, err = run(argv, capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and "usage:" not in err and "tip:" not in err, err
    assert code == status, err
    errors = [line for line in lines if line.startswith(E)]
    if prefix is None:  # a correct run: no error and no warning line
        assert errors == [] and not [line for line in lines if line.startswith(W)], err
        return
    prefix = prefix.replace("{tmp}", str(tmp_path))
    if prefix.startswith(E):
        assert len(errors) == 1 and lines[-1] == errors[0], err
        assert errors[0].startswith(prefix), err
    else:
        assert errors == [] and [line for line in lines if line.startswith(prefix)], err
        assert not [line for line in lines if ".py:" in line and "Warning:" in line], err  # one line


def _kind(prefix: str | None) -> str:
    return "success" if prefix is None else "error" if prefix.startswith(E) else "warning"


def test_the_user_guide_gives_the_probes_counts() -> None:
    """docs/usage.md states how many mistakes the two probe tables try and how each ends."""
    spec = importlib.util.spec_from_file_location("first_probe", Path(__file__).parent / "test_probe.py")
    first = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(first)
    kinds = Counter([_kind(c[4]) for c in first.CASES] + [_kind(c[3]) for c in CASES])
    guide = " ".join((REPO / "docs" / "usage.md").read_text().split())
    assert (f"{sum(kinds.values())} command lines tried as a new user would" in guide
            and f"{kinds['error']} of them end with one `ncl: error:` line" in guide
            and f"{kinds['warning']} with the right one-line `ncl: warning:`" in guide
            and f"{kinds['success']} are correct runs" in guide), kinds


def test_the_probe_is_wide() -> None:
    """The table keeps its breadth: every numeric trainer option ncl checks has a case here or
    in test_probe.py, and every kind of outcome is there."""
    from ncl.cli.input_checks import TRAINER_BOUNDS

    names = " ".join(" ".join([c[0], *c[1]]) for c in CASES)
    names += (Path(__file__).parent / "test_probe.py").read_text()
    missing = [option for option in TRAINER_BOUNDS if option not in names]
    assert missing == [], missing
    assert {_kind(c[3]) for c in CASES} == {"error", "warning", "success"} and len(CASES) >= 100
