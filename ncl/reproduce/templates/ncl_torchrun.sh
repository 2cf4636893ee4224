#!/bin/bash
# Multi-node DDP with torchrun (no SLURM): 2 nodes x 4 GPUs = 8 processes (world size 8).
# Write it with `python -m ncl.reproduce slurm --out slurm`, edit the `ncl fit` line at the end,
# and run it on every node, from the folder that holds configs/, with that node's rank:
#   node 0 (HOST):  NODE_RANK=0 MASTER_HOST=HOST slurm/ncl_torchrun.sh
#   node 1:         NODE_RANK=1 MASTER_HOST=HOST slurm/ncl_torchrun.sh
# HOST is an address of one of the nodes that all nodes can reach on port 29500.
#
# torchrun starts --nproc_per_node processes on each node and sets RANK, LOCAL_RANK,
# WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT and TORCHELASTIC_RUN_ID for each; Lightning
# recognises them (TorchElasticEnvironment) and does not launch processes itself. The trainer
# flags must still agree with torchrun's: --trainer.num_nodes = --nnodes and
# --trainer.devices = --nproc_per_node (Lightning checks the world size against them).
#
# What changes with world size (README "Multi-GPU and clusters"): data.batch_size is per
# process, and each loss sees only its own batch (in-batch negatives come from those pairs
# alone; gradients are averaged over the 8 processes); ncl does not scale the learning rate.
# --data.init_args.per_device_batch true acknowledges the per-process batch and silences ncl's
# start-up warning about it.

set -euo pipefail

NNODES=${NNODES:-2}
NPROC_PER_NODE=${NPROC_PER_NODE:-4}
NODE_RANK=${NODE_RANK:?set NODE_RANK to this node rank (0 .. NNODES-1)}
MASTER_HOST=${MASTER_HOST:?set MASTER_HOST to the address of the rendezvous node}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

# --rdzv_backend c10d: the nodes meet at MASTER_HOST:29500 (the c10d store runs there).
# --rdzv_id: the same string on every node of one job.
# -m ncl.cli fit ...: the same as the `ncl fit` entry point, run by each process.
torchrun \
    --nnodes "$NNODES" \
    --nproc_per_node "$NPROC_PER_NODE" \
    --node_rank "$NODE_RANK" \
    --rdzv_id "ncl-${RUN_ID:-rcl-coco}" \
    --rdzv_backend c10d \
    --rdzv_endpoint "$MASTER_HOST:29500" \
    -m ncl.cli fit --config configs/rcl_sgr_coco.yaml \
    --trainer.num_nodes "$NNODES" \
    --trainer.devices "$NPROC_PER_NODE" \
    --trainer.strategy ddp \
    --data.init_args.per_device_batch true
