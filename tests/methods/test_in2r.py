"""IN2R: the method's rules without a trainer (schedule, options, optimiser groups, the queue
push rule, retrieval from the peer's queue), then through the real CLI on tiny synthetic data
(fit with the co-divide logged against the ground truth, queues and refiners in the checkpoint,
a kill after a co-training epoch resumed exactly, test, predict ranked by the GMM). Two CPU
processes: tests/methods/test_in2r_ddp.py; a kill in the first co-training epoch and bf16:
tests/cli/test_resume.py and tests/cli/test_bf16.py (``in2r`` in tiny_runs.METHODS)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import torch
from resume_helpers import fit_killed_at
from tiny_runs import (
    METHODS,
    assert_same_checkpoints,
    best_tested_and_predicted,
    last_checkpoint,
    method_config,
    per_epoch,
    run_folder,
)

from ncl.cli import main
from ncl.division.co_divide import Division
from ncl.division.in2r_queue import EmbeddingQueue
from ncl.errors import ConfigError
from ncl.evaluation.ranking import COLUMNS
from ncl.methods.in2r import IN2R
from ncl.methods.in2r_support import restored_queues
from ncl.models.in2r_vse import In2rVSE
from ncl.models.sgraf import SGRAF

BACKBONE = partial(In2rVSE, img_dim=8, word_dim=6, embed_size=8)


def in2r(**options) -> IN2R:
    return IN2R(30, BACKBONE, **options)


def official_infonce(s: torch.Tensor, tau: float = 0.05) -> torch.Tensor:
    """``vse.py``'s ``infonce`` written out: softmaxes of ``exp(S / tau)``, RCE against
    ``log(I + 1e-7)`` plus the diagonal cross-entropy, halved."""
    e = (s / tau).exp()
    i2t, t2i = e / e.sum(1, keepdim=True), e.t() / e.t().sum(1, keepdim=True)
    log_mask = (torch.eye(s.shape[0], dtype=s.dtype) + 1e-7).log()
    rce = -(log_mask * i2t).sum(1).mean() - (log_mask * t2i).sum(1).mean()
    return 0.5 * (rce - i2t.diag().log().mean() - t2i.diag().log().mean())


def test_learning_rate_is_lr0_in_the_warmup_then_falls_tenfold() -> None:
    method = in2r(warmup_epochs=1, lr_update=15)  # official: 1 + 40 epochs, x0.1 every 15
    assert [method.lr_factor(e) for e in (0, 1, 15, 16, 30, 31, 40)] == \
        pytest.approx([1, 1, 1, 0.1, 0.1, 0.01, 0.01])


@pytest.mark.parametrize(("option", "value"), [("k", 0), ("queue_size", 0), ("p_threshold", 1.5),
                                               ("intra_margin", 0.0), ("tau", -1.0),
                                               ("correction_weight", -0.5), ("refiner_dropout", 1.0),
                                               ("warmup_epochs", -1)])
def test_bad_options_name_themselves(option: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"model.{option}"):
        in2r(**{option: value})


def test_a_backbone_without_pooled_embeddings_is_refused() -> None:
    with pytest.raises(ConfigError, match="pooled embeddings"):
        IN2R(30, partial(SGRAF, img_dim=8, num_regions=4, word_dim=6, embed_size=8, sim_dim=4))


def test_refiners_are_a_second_parameter_group_on_the_same_schedule() -> None:
    method = in2r(warmup_epochs=1, lr_update=2)
    configs = method.configure_optimizers()
    assert len(configs) == 2
    for k, config in enumerate(configs):
        opt, sched = config["optimizer"], config["lr_scheduler"]["scheduler"]
        assert isinstance(opt, torch.optim.AdamW) and len(opt.param_groups) == 2
        assert opt.param_groups[0]["lr"] == opt.param_groups[1]["lr"] == 5e-4
        assert opt.param_groups[1]["weight_decay"] == 1e-4  # the optimiser's default, official
        assert {id(p) for p in opt.param_groups[1]["params"]} == \
            {id(p) for p in method.refiners[k].parameters()}
        assert len(sched.lr_lambdas) == 2  # both groups decay (official adjust_learning_rate)


def divided(method: IN2R, prob: list[list[float]], clean: list[list[bool]]) -> None:
    p = torch.tensor(prob)
    method.division = Division(1, torch.zeros_like(p), p, torch.tensor(clean))


def test_push_queues_pairs_above_the_own_mean_by_the_peers_probability() -> None:
    method = in2r(queue_size=8)
    # A's own mean clean probability: (0.9 + 0.7) / 2 = 0.8; B's: (0.6 + 0.5) / 2 = 0.55
    divided(method, [[0.9, 0.7, 0.1, 0.2], [0.6, 0.85, 0.5, 0.95]],
            [[True, True, False, False], [True, False, True, False]])
    index = torch.tensor([0, 1, 2, 3])
    images, captions = torch.eye(4, 8), torch.eye(4, 8) * 2
    queued = method.push(0, index, images, captions)  # A: B's w > 0.8 -> pairs 1 and 3
    assert float(queued) == 2
    assert method.queues[0].images[:2].tolist() == images[[1, 3]].tolist()
    assert method.queues[0].captions[:2].tolist() == captions[[1, 3]].tolist()
    peer = in2r(queue_size=8, enqueue_mean="peer")
    peer.division = method.division
    peer.push(0, index, images, captions)  # B's w > B's mean 0.55 -> pairs 0, 1, 3
    assert peer.queues[0].filled == 3


def test_rectification_reads_the_peers_queue() -> None:
    torch.manual_seed(0)
    method = in2r(k=1, i2t=True, t2i=True, refiner="mean")
    queue = EmbeddingQueue.empty(4, 8)
    queue.push(torch.eye(8)[:2], torch.eye(8)[4:6])  # images e0, e1 paired with captions e4, e5
    method.queues[1] = queue  # B's queue
    images = torch.nn.functional.normalize(torch.tensor([[1.0, 0.2] + [0.0] * 6, [0.1, 1.0] + [0.0] * 6]), dim=1)
    captions = torch.nn.functional.normalize(torch.tensor([[0.0] * 5 + [1.0, 0.3, 0.0], [0.0] * 4 + [1.0, 0.0, 0.0, 0.5]]), dim=1)
    losses = method.rectification(0, images, captions)  # A searches B's queue
    # i2t: image 0's nearest queued image is e0 -> caption e4; image 1's is e1 -> e5
    want_i2t = 0.5 * official_infonce(images @ torch.eye(8)[[4, 5]].t())
    # t2i: caption 0's nearest queued caption is e5 -> image e1; caption 1's is e4 -> e0
    want_t2i = 0.5 * official_infonce(captions @ torch.eye(8)[[1, 0]].t())
    assert float(losses["rectified_i2t"]) == pytest.approx(float(want_i2t), rel=1e-5)
    assert float(losses["rectified_t2i"]) == pytest.approx(float(want_t2i), rel=1e-5)
    assert method.rectification(1, images, captions) == {}  # B searches A's queue: not made yet
    few = in2r(k=3, i2t=True, t2i=True)
    few.queues[1] = queue  # 2 entries < k 3: no correction (official: retrieve returns None)
    assert few.rectification(0, images, captions) == {}
    own = in2r(k=1, i2t=True, retrieve_from="own")
    own.queues[1] = queue
    assert own.rectification(0, images, captions) == {}


def test_queues_are_restored_from_either_checkpoint_layout() -> None:
    queue = EmbeddingQueue.empty(4, 2)
    queue.push(torch.ones(3, 2), torch.zeros(3, 2))
    restored = restored_queues([queue.state(), None], torch.device("cpu"))  # shared: [A's, B's]
    assert restored[1] is None and restored[0].ptr == 3 and restored[0].size == 4
    assert torch.equal(restored[0].images[:3], torch.ones(3, 2))
    old = [[queue.state(), None], [queue.state(), None]]  # per rank, before the queues were shared
    with pytest.warns(UserWarning, match="2 processes"):
        assert restored_queues(old, torch.device("cpu")) is None
    restored = restored_queues(old[:1], torch.device("cpu"))  # one process: its own
    assert restored[1] is None and restored[0].ptr == 3


def tiny_config(root: Path, cache: Path, epochs: int = 3, steps: int = 4, **kwargs) -> Path:
    return method_config(root, cache, METHODS["in2r"], max_epochs=epochs, steps=steps, **kwargs)


def test_fit_queues_rectifies_checkpoints_resumes_tests_and_predicts(tmp_path: Path,
                                                                    synthetic_cache: Path) -> None:
    config = tiny_config(tmp_path, synthetic_cache)
    main(["fit", "--config", str(config)])
    folder = run_folder(tmp_path)
    assert sorted(per_epoch(folder, "val/rsum")) == [0, 1, 2]
    assert sorted(per_epoch(folder, "train/detection/f1")) == [1, 2]  # co-divide after the warm-up
    # A trains first in the first co-training epoch: B's queue is still empty, so only B rectifies
    assert sorted(per_epoch(folder, "train/A/rectified_i2t_epoch")) == [2]
    assert sorted(per_epoch(folder, "train/B/rectified_t2i_epoch")) == [1, 2]
    ckpt = last_checkpoint(folder)
    queues = ckpt["ncl_training_state"]["queues"]  # [A's, B's]
    for q in queues:
        assert q["size"] == 32 and q["images"].shape[1] == 16 and q["images"].shape[0] >= 2
        assert torch.allclose(q["images"].norm(dim=1), torch.ones(q["images"].shape[0]), atol=1e-4)
    assert ckpt["ncl_training_state"]["division"]["prob"].shape[0] == 2
    refiner_keys = [k for k in ckpt["state_dict"] if k.startswith("refiners.")]
    assert "refiners.0.i2t.q_proj.weight" in refiner_keys and len(refiner_keys) == 2 * 2 * 10
    assert all(len(s["param_groups"]) == 2 for s in ckpt["optimizer_states"])

    # killed after the first co-training epoch (4 steps an epoch): its checkpoint holds filled
    # queues and trained refiners, and the resumed run ends as the uninterrupted one
    killed_cfg = tiny_config(tmp_path / "killed", synthetic_cache)
    killed = fit_killed_at(killed_cfg, tmp_path, 4 + 4 + 2)
    assert killed.returncode == -9, killed.stderr[-2000:]
    killed_folder = run_folder(tmp_path / "killed")
    assert last_checkpoint(killed_folder)["epoch"] == 1
    assert all(q is not None for q in last_checkpoint(killed_folder)["ncl_training_state"]["queues"])
    main(["fit", "--config", str(killed_cfg), "--ckpt_path", "last"])
    assert per_epoch(killed_folder, "val/rsum") == per_epoch(folder, "val/rsum")
    assert_same_checkpoints(ckpt, last_checkpoint(killed_folder))  # queues included

    _, rows = best_tested_and_predicted(config, tmp_path)
    assert tuple(rows[0]) == COLUMNS  # the GMM ranking, IN2R's division
    prob = [float(r["clean_probability"]) for r in rows]
    assert prob == sorted(prob) and len(set(prob)) > 2 and all(0 <= p <= 1 for p in prob)


def test_the_division_pass_reads_pairs_augmented_from_a_stream_of_its_own(
        tiny_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace
    from types import SimpleNamespace

    import numpy as np

    from ncl.data.datasets import PairDataset
    from ncl.data.precomp import load_split
    from ncl.data.vocab import load_vocabulary
    from ncl.methods import in2r as in2r_module
    from ncl.methods.in2r_support import augmented
    from ncl.training.passes import run_pass

    vocab = load_vocabulary(tiny_root / "vocab" / "toy_precomp_vocab.json")
    split = load_split(tiny_root / "toy_precomp", "train", vocab)
    pairs = PairDataset(split, np.arange(split.n_captions) // 5)
    monkeypatch.setattr(in2r_module, "retrieval_data",
                        lambda *_: SimpleNamespace(batch_size=8, vocab_size=len(vocab)))
    method = in2r(seed=3)
    method._trainer = SimpleNamespace()  # read only by the patched retrieval_data
    spec, _ = method.division_pass(2)

    def lengths(net: torch.nn.Module, batch: dict) -> torch.Tensor:  # (B,) what the pass read
        regions = batch.get("image_lengths", torch.full((len(batch["index"]),), 4))
        return torch.stack([batch["lengths"], regions], dim=1).float()

    net = torch.nn.Linear(1, 1)
    seen = run_pass(replace(spec, fn=lengths), [net, net], pairs, 2, torch.device("cpu"))[0]  # (N, 2)
    plain = torch.tensor([[len(pairs[i]["tokens"]), 4] for i in range(len(pairs))]).float()
    assert not torch.equal(seen, plain)  # tokens deleted, regions removed (20 % each)
    assert (seen <= plain).all()
    again = run_pass(replace(spec, fn=lengths), [net, net], pairs, 2, torch.device("cpu"))[0]
    assert torch.equal(seen, again)  # a pure function of (seed, epoch, caption): exact on resume
    trained = augmented(pairs, 2, method.plan_seed, len(vocab))  # the training loader's draw
    drawn = torch.tensor([[len(trained[i]["tokens"]), trained[i]["image"].shape[0]] for i in range(len(pairs))])
    assert not torch.equal(seen, drawn.float())  # another stream than training's
    plain_pass = in2r(division_augmentation=False)
    plain_pass._trainer = SimpleNamespace()
    assert plain_pass.division_pass(2)[0].view is None  # the plain pass
