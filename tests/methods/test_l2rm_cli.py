"""L2RM through the real CLI on tiny synthetic data (issue 26): the warm-up, the Beta-mixture
division logged against the ground truth, rematching with the learned cost and the partial
plan, a test of the best checkpoint; a kill after a rematching epoch resumed exactly (the
queue and the cost network restored; the kill inside the first rematching epoch is in
tests/cli/test_resume.py through ``tiny_runs.METHODS``); two CPU processes (DDP on gloo) with
a queue per rank (the same weights, cost network and division on both ranks:
tests/cli/test_ddp_methods.py, ``l2rm`` in ``tiny_runs.METHODS``)."""

from __future__ import annotations

import json
import math
from functools import partial
from pathlib import Path

import pytest
import torch
from cli_helpers import error_lines, main_exit
from resume_helpers import fit_killed_at
from tiny_runs import (
    DDP_DATA,
    DDP_TRAINER,
    METHODS,
    TINY_SGRAF,
    assert_same_checkpoints,
    last_checkpoint,
    method_config,
    per_epoch,
    run_folder,
    sync_check_args,
)

from ncl.cli import main
from ncl.data.datamodule import SyntheticDataModule
from ncl.data.datasets import collate
from ncl.methods.pretrained import Pretrained
from ncl.models.sgraf import SGRAF

STEPS = 4


def l2rm_config(root: Path, cache: Path, epochs: int = 3, steps: int = STEPS, init_args: dict | None = None,
                **kwargs) -> Path:
    method = {**METHODS["l2rm"], "init_args": {**METHODS["l2rm"]["init_args"], **(init_args or {})}}
    return method_config(root, cache, method, max_epochs=epochs, steps=steps, **kwargs)


def hand_recalls(ckpt: dict, cache: Path) -> dict[str, float]:
    """R@1, 5, 10 both ways on the tiny preset's test split (30 images, 5 captions each, the
    captions of image i at 5i..5i+4) from the retrieval network's weights in ``ckpt``: every
    score in one eval-mode forward, every rank counted here."""
    data = SyntheticDataModule(preset="tiny", cache_dir=str(cache), batch_size=16)
    data.setup("test")
    split = data.test_data
    net = SGRAF(ckpt["hyper_parameters"]["vocab_size"], **TINY_SGRAF)
    net.load_state_dict({k.removeprefix("nets.0."): v for k, v in ckpt["state_dict"].items()
                         if k.startswith("nets.0.")})
    net.eval()
    n_img, n_cap = split.n_images, split.n_captions
    per = n_cap // n_img
    captions = collate([{"tokens": torch.from_numpy(split.tokens(c).astype("int64")), "index": c}
                        for c in range(n_cap)])
    with torch.no_grad():
        scores = net(torch.tensor(split.features[:n_img]), captions["tokens"], captions["lengths"]).tolist()
    i2t = []  # per image: the best rank of its own captions among all captions
    for i in range(n_img):
        order = sorted(range(n_cap), key=lambda c: -scores[i][c])
        i2t.append(min(order.index(c) for c in range(per * i, per * (i + 1))))
    t2i = []  # per caption: the rank of its image among all images
    for c in range(n_cap):
        order = sorted(range(n_img), key=lambda i: -scores[i][c])
        t2i.append(order.index(c // per))
    return {f"{name}_r{k}": 100.0 * sum(r < k for r in ranks) / len(ranks)
            for name, ranks in (("i2t", i2t), ("t2i", t2i)) for k in (1, 5, 10)}


def test_fit_warms_up_divides_rematches_and_tests(tmp_path: Path, synthetic_cache: Path) -> None:
    config = l2rm_config(tmp_path, synthetic_cache)
    main(["fit", "--config", str(config)])
    folder = run_folder(tmp_path)
    assert sorted(per_epoch(folder, "val/rsum")) == [0, 1, 2]
    assert sorted(per_epoch(folder, "train/warmup_epoch")) == [0]
    # the division of every epoch after the warm-up, scored against the ground truth
    for key in ("l2rm/predicted_clean", "l2rm/precision", "l2rm/recall", "l2rm/f1"):
        assert sorted(per_epoch(folder, key)) == [1, 2], key
    # rematching: the symmetric KL, the cost network's key-point loss, the transported mass
    for key in ("train/noisy_epoch", "train/cost_epoch", "train/clean_epoch"):
        assert sorted(per_epoch(folder, key)) == [1, 2], key
    mass = per_epoch(folder, "train/transported_epoch")
    assert all(0.05 < m <= 0.11 for m in mass.values()), mass  # rho = 0.1 of the unit mass
    ckpt = last_checkpoint(folder)
    state = ckpt["ncl_training_state"]
    division = state["division"]  # the shared Division record, one row
    assert division["epoch"] == 2 and division["prob"].shape == (1, 300)
    queues = state["queues"]
    assert queues.shape == (1, 32) and bool((queues >= 0).all()) and bool((queues < 300).all())
    weight = ckpt["state_dict"]["cost_net.weight"]
    assert weight.shape == (16, 16)  # the batch size
    assert not torch.equal(weight, -torch.eye(16)), "the cost network never trained"
    assert {k.split(".")[0] for k in ckpt["state_dict"]} == {"nets", "cost_net"}
    names = {p.name for p in (folder / "figures").iterdir()}
    assert {"loss_gmm_epoch001.png", "detection.png"} <= names, names

    best = next((folder / "checkpoints").glob("best*.ckpt"))
    main(["test", "--config", str(config), f"--ckpt_path={best}",
          f"--trainer.default_root_dir={tmp_path / 'test'}"])
    results = json.loads(next((tmp_path / "test").rglob("test_results.json")).read_text())
    assert set(results) == {"net", "training_noise"}
    # the tested checkpoint is the best epoch's (the first maximum of val/rsum, the warm-up
    # included: select_warmup), and its test rSum is the one its weights give on the test split
    rsum = per_epoch(folder, "val/rsum")
    tested = torch.load(best, weights_only=False)
    assert best.name == f"best-epoch={tested['epoch']}.ckpt"
    assert tested["epoch"] == min(e for e, v in rsum.items() if v == max(rsum.values()))
    recalls = hand_recalls(tested, synthetic_cache)
    got = results["net"]["1k"]
    for key, value in recalls.items():
        assert got[key] == pytest.approx(value, abs=1e-4), key  # the file keeps 4 decimals
    assert got["rsum"] == pytest.approx(sum(recalls.values()), abs=1e-4)
    # "L2RM-SGRAF": two L2RM checkpoints ensemble by their scores (the cost network is not
    # part of a retrieval network and is left out)
    vocab = ckpt["hyper_parameters"]["vocab_size"]
    ensemble = Pretrained(vocab, [partial(SGRAF, **TINY_SGRAF)] * 2, [str(best), str(folder / "checkpoints" / "last.ckpt")],
                          names=["a", "b"])
    assert ensemble.rule == "score"
    assert torch.equal(ensemble.nets[1].state_dict()["img_enc.fc.weight"],
                       ckpt["state_dict"]["nets.0.img_enc.fc.weight"])


def test_kill_after_a_rematching_epoch_resumes_exactly(tmp_path: Path, synthetic_cache: Path) -> None:
    """Killed in epoch 2, resumed from epoch 1's checkpoint: its queue (the last noisy batches),
    cost network, both optimisers and division carry on as in the uninterrupted run."""
    straight_cfg = l2rm_config(tmp_path / "straight", synthetic_cache, epochs=3)
    main(["fit", "--config", str(straight_cfg)])
    straight = run_folder(tmp_path / "straight")

    killed_cfg = l2rm_config(tmp_path / "killed", synthetic_cache, epochs=3)
    # one step per warm-up batch, two per rematching batch (cost network, then the network)
    killed = fit_killed_at(killed_cfg, tmp_path, STEPS + 2 * STEPS + 4)
    assert killed.returncode == -9, killed.stderr[-2000:]
    folder = run_folder(tmp_path / "killed")
    assert last_checkpoint(folder)["epoch"] == 1
    assert bool((last_checkpoint(folder)["ncl_training_state"]["queues"] >= 0).all())
    main(["fit", "--config", str(killed_cfg), "--ckpt_path", "last"])
    assert per_epoch(folder, "val/rsum") == per_epoch(straight, "val/rsum")
    assert_same_checkpoints(last_checkpoint(straight), last_checkpoint(folder))


def test_two_cpu_processes_keep_a_queue_each(tmp_path: Path, synthetic_cache: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint keeps both ranks' queues, which differ (each holds its own noisy
    batches), and a cost network as wide as one process's batch; a resume on two processes
    continues. (The same weights, cost network and division on both ranks and the validation
    counted once, for every tiny case: tests/cli/test_ddp_methods.py.)"""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # read by the spawned processes' torch
    # batches of 4 per process (a division after three warm-up steps is rough: batches of 16
    # would need 32 pairs called clean), a queue of two batches
    config = l2rm_config(tmp_path, synthetic_cache, epochs=2, steps=DDP_TRAINER["limit_train_batches"],
                         init_args={"queue_length": 8}, trainer=DDP_TRAINER,
                         data={**DDP_DATA, "batch_size": 4})
    main(["fit", "--config", str(config), *sync_check_args(tmp_path)])
    assert (tmp_path / "sync_ok_world2").read_text() == "1"
    folder = run_folder(tmp_path)
    queues = last_checkpoint(folder)["ncl_training_state"]["queues"]
    assert queues.shape == (2, 8) and not torch.equal(queues[0], queues[1])
    assert last_checkpoint(folder)["state_dict"]["cost_net.weight"].shape == (4, 4)
    main(["fit", "--config", str(config), "--trainer.max_epochs=3", "--ckpt_path=last",
          *sync_check_args(tmp_path)])  # each rank takes its own queue back
    assert (tmp_path / "sync_ok_world2").read_text() == "2"


@pytest.mark.parametrize(("option", "value", "message"), [
    ("queue_length", 8, "model.queue_length (8) must be at least the per-process batch size"),
    ("rho", 1.5, "model.rho must lie in (0, 1)"),
])
def test_bad_options_are_one_error_line(tmp_path: Path, synthetic_cache: Path, capsys,
                                        option: str, value: object, message: str) -> None:
    config = l2rm_config(tmp_path, synthetic_cache, epochs=1, steps=1)
    err = main_exit(capsys, "fit", "--config", str(config), f"--model.init_args.{option}={value}")
    lines = error_lines(err)
    assert len(lines) == 1 and message in lines[0], err


def test_rematching_in_bf16_mixed_logs_finite_values(tmp_path: Path, synthetic_cache: Path) -> None:
    """The step after the warm-up under bf16 autocast (tests/cli/test_bf16.py runs L2RM's
    warm-up in bf16 and its rematching in float32): the transport still runs in float64."""
    config = l2rm_config(tmp_path, synthetic_cache, epochs=2, steps=2)
    main(["fit", "--config", str(config), "--trainer.precision=bf16-mixed"])
    folder = run_folder(tmp_path)
    for key in ("train/noisy_epoch", "train/cost_epoch", "train/transported_epoch"):
        values = per_epoch(folder, key)
        assert list(values) == [1] and all(math.isfinite(v) for v in values.values()), key


def test_a_division_without_a_clean_batch_idles_the_epoch(tmp_path: Path, synthetic_cache: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A Beta mixture that calls fewer pairs clean than a batch (a collapsed model: a few
    outliers at the smallest loss form the clean component) trains nothing that epoch, as the
    official code's empty clean loader, and divides again the next epoch: the weights, so the
    validation, stay those of the warm-up."""
    import ncl.callbacks.division as division

    def three_clean(values, *args, **kwargs):
        prob = torch.zeros_like(values, dtype=torch.float32)
        prob[:3] = 1.0
        return prob

    monkeypatch.setattr(division, "beta_clean_probability", three_clean)
    config = l2rm_config(tmp_path, synthetic_cache, epochs=3)
    main(["fit", "--config", str(config)])
    folder = run_folder(tmp_path)
    assert per_epoch(folder, "train/idle") == {1: 1.0, 2: 1.0}
    assert per_epoch(folder, "l2rm/predicted_clean") == {1: 3.0, 2: 3.0}
    rsum = per_epoch(folder, "val/rsum")
    assert rsum[0] == rsum[1] == rsum[2]
