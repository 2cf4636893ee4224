#!/usr/bin/env bash
# Per-epoch validation rSum of a seed-fixed NCR and LNC (MR + RNA) run on the tiny synthetic
# preset, in a given checkout: run it in two checkouts and `diff` the outputs to show that a
# refactoring left NCR/LNC's numbers unchanged (docs/design.md, "Per-sample machinery").
# Dropout is 0 so that the comparison also holds across the per-epoch reseeding of torch's
# stream (issue 9), one thread so that summation order is fixed.
#   usage: scripts/ncr_regression.sh CHECKOUT OUT_DIR > rsum.txt
set -euo pipefail
checkout=$(cd "$1" && pwd)
out=$2
cd "$checkout"
for extra in "" "--model.momentum_regularization=true --model.noise_abandon=true"; do
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 WANDB_MODE=disabled PYTHONPATH="$checkout" python -m ncl.cli fit \
    --config configs/ncr_sgr_f30k.yaml \
    --trainer.logger=lightning.pytorch.loggers.CSVLogger --trainer.logger.save_dir="$out" \
    --trainer.default_root_dir="$out" --trainer.max_epochs=4 --trainer.accelerator=cpu \
    --trainer.enable_progress_bar=false --model.warmup_epochs=2 --model.unlabelled_start=1 \
    --model.backbone.init_args.img_dim=16 --model.backbone.init_args.num_regions=6 \
    --model.backbone.init_args.word_dim=8 --model.backbone.init_args.embed_size=16 \
    --model.backbone.init_args.sim_dim=8 --model.backbone.init_args.dropout=0.0 \
    --data=ncl.data.datamodule.SyntheticDataModule --data.preset=tiny \
    --data.cache_dir="$out/cache" --data.batch_size=16 --data.noise_type=caption \
    --data.noise_ratio=0.2 --data.num_workers=0 $extra 2>&1 | grep -E "validation|error"
done
