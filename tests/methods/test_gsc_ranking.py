"""GSC's ``ncl predict`` ranking ``structure`` (ncl/methods/gsc_ranking.py): the score of a
fixed batch by hand (the cosine of the pair's rows of the sigmoid structure matrices), the
split (the official ``split_batch`` GMM, transcribed with sklearn) and the CSV's order on
hand-made scores, and ``ncl predict --config <gsc fit config> --ckpt_path last`` on a tiny
GSC run, its table recomputed from the checkpoint's network."""

from __future__ import annotations

import csv
import json
import math
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from launch import ncl_here
from sklearn.mixture import GaussianMixture
from tiny_runs import TINY_SGRAF

from ncl.data.datamodule import SyntheticDataModule
from ncl.data.datasets import collate
from ncl.evaluation.ranked_output import write_outputs
from ncl.evaluation.ranking import COLUMNS, GMM, ranked_table, ranking_summary
from ncl.methods.gsc import GSC
from ncl.methods.gsc_ranking import STRUCTURE
from ncl.models.gsc_structure import caption_structure, image_structure
from ncl.models.sgraf import SGRAF

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "gsc_sgr_synthetic.yaml"
TINY = {"img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16, "sim_dim": 8}
NOISE = {"noise_type": "caption", "noise_ratio": 0.4, "noise_seed": 0, "noise_file": None}
STRUCTURE_COLUMNS = ("caption_index", "image_index", "caption", "clean_probability",
                     "structure_score", "similarity", "loss")


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _cosine(u: list[float], v: list[float]) -> float:
    dot = sum(a * b for a, b in zip(u, v))
    return dot / (math.sqrt(sum(a * a for a in u)) * math.sqrt(sum(b * b for b in v)))


def _hand_scores(s_img: torch.Tensor, s_cap: torch.Tensor) -> list[float]:
    """``cos(sigmoid(S_img)[i, :], sigmoid(S_cap)[i, :])`` by loops (every target 1)."""
    a = [[_sigmoid(x) for x in row] for row in s_img.tolist()]
    b = [[_sigmoid(x) for x in row] for row in s_cap.tolist()]
    return [_cosine(a[i], b[i]) for i in range(len(a))]


def _official_posterior(scores: np.ndarray) -> np.ndarray:
    """The official ``split_batch`` (min-max, GMM, posterior of the higher mean), seed 0."""
    x = ((scores - scores.min()) / (scores.max() - scores.min())).reshape(-1, 1)
    gmm = GaussianMixture(n_components=2, max_iter=10, tol=1e-2, reg_covar=5e-4, random_state=0).fit(x)
    return gmm.predict_proba(x)[:, gmm.means_.argmax()]


def test_the_score_of_a_fixed_batch_by_hand() -> None:
    torch.manual_seed(0)
    method = GSC(50, partial(SGRAF, **TINY_SGRAF)).eval()
    generator = torch.Generator().manual_seed(0)
    lengths = torch.tensor([7, 6, 5, 4, 3])
    batch = {"images": torch.randn(5, TINY_SGRAF["num_regions"], TINY_SGRAF["img_dim"], generator=generator),
             "tokens": torch.randint(1, 50, (5, 7), generator=generator), "lengths": lengths,
             "index": torch.tensor([3, 9, 0, 4, 7])}
    assert method.rankings[0] is STRUCTURE and GMM in method.rankings  # GSC's default
    method.predict_ranking = STRUCTURE
    with torch.no_grad():
        out = method.predict_step(batch, 0)
        net = method.net
        img = net.encode_images(batch["images"])
        cap = net.encode_captions(batch["tokens"], lengths)
        s_img, s_cap = image_structure(net.sim_enc, img), caption_structure(net.sim_enc, cap, lengths.tolist())
        scores = method.batch_scores(batch)
    assert set(out) == {"index", "scores", "structure"} and out["index"].tolist() == [3, 9, 0, 4, 7]
    assert out["structure"].dtype == torch.float64
    assert out["structure"].tolist() == pytest.approx(_hand_scores(s_img, s_cap), rel=1e-6, abs=1e-7)
    assert len(set(out["structure"].tolist())) == 5  # a score per pair, not a constant
    assert torch.equal(out["scores"], scores)  # the gmm ranking's columns are unchanged
    values = STRUCTURE.batch_values(out)
    assert list(values) == ["structure_score"] and torch.equal(values["structure_score"], out["structure"])


def test_split_order_metrics_and_csv_on_hand_made_scores(tmp_path: Path) -> None:
    # Two clusters of scores: pairs 1, 5, 3, 7 low, 2, 6, 0, 4 high. The GMM's posteriors are
    # 0 or (nearly) 1 within a cluster, so the tie-break (score ascending) orders each.
    score = np.array([0.90, 0.10, 0.85, 0.12, 0.95, 0.11, 0.88, 0.30])
    values = {"image": np.arange(8) + 10, "similarity": np.linspace(0.1, 0.8, 8),
              "loss": np.linspace(0.9, 0.2, 8), "structure_score": score}
    values.update(STRUCTURE.split_values(values))
    np.testing.assert_allclose(values["clean_probability"], _official_posterior(score), rtol=0, atol=1e-12)
    assert values["clean_probability"][[1, 3, 5, 7]].max() < 1e-9
    assert values["clean_probability"][[0, 2, 4, 6]].min() > 1 - 1e-9
    expected = [1, 5, 3, 7, 2, 6, 0, 4]
    assert STRUCTURE.order(values).tolist() == expected

    # truly noisy: 1, 3, 5, 6. Predicted noisy: 1, 3, 5, 7 -> tp 3, fp 1, fn 1.
    true_clean = np.array([True, False, True, False, True, False, False, True])
    summary = ranking_summary(STRUCTURE, values, true_clean, top_k=2)
    assert list(summary)[:2] == ["ranking", "threshold"] and summary["ranking"] == "structure"
    assert summary["n_noisy"] == 4 and summary["predicted_noisy"] == 4
    assert summary["precision"] == pytest.approx(0.75) and summary["recall"] == pytest.approx(0.75)
    assert summary["f1"] == pytest.approx(0.75)
    # top-4 = 1, 5, 3, 7 (three noisy); top-2 = 1, 5 (both noisy)
    assert summary["top_k_precision"] == {"k=4": pytest.approx(0.75), "k=2": pytest.approx(1.0)}

    out = tmp_path / "ranked.csv"
    write_outputs(ranked_table(STRUCTURE, values, [f"c{i}" for i in range(8)]), summary, out)
    rows = list(csv.DictReader(out.open(newline="", encoding="utf-8")))
    assert tuple(rows[0]) == STRUCTURE_COLUMNS == STRUCTURE.table_columns()
    assert [int(r["caption_index"]) for r in rows] == expected
    assert [r["caption"] for r in rows] == [f"c{i}" for i in expected]
    assert [int(r["image_index"]) for r in rows] == [i + 10 for i in expected]
    assert [float(r["structure_score"]) for r in rows] == score[expected].tolist()
    assert json.loads((tmp_path / "ranked.metrics.json").read_text())["f1"] == pytest.approx(0.75)


# ------------------------------------------------------------------ the CLI
def _scoring_batches(n: int, batch_size: int) -> list[list[int]]:
    """The co-divide's shuffle (seed 0, epoch 0), a last batch of one merged."""
    from ncl.training.passes import deal_batches
    from ncl.training.plans import DIVISION_STREAM, rng_for

    order = rng_for(0, 0, DIVISION_STREAM, 0).permutation(n)
    return [b.tolist() for b in deal_batches(order, batch_size)]


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.open(newline="", encoding="utf-8")))


def _network(run: Path, checkpoint: Path, vocab_size: int) -> SGRAF:
    """The run's SGRAF (its config's backbone options) with the checkpoint's weights."""
    backbone = yaml.safe_load((run / "config.yaml").read_text())["model"]["init_args"]["backbone"]
    net = SGRAF(vocab_size, **backbone["init_args"])
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    net.load_state_dict({k.removeprefix("nets.0."): v for k, v in state.items() if k.startswith("nets.0.")})
    return net.eval()


def test_predict_from_the_fit_config_ranks_by_structure(tmp_path: Path, synthetic_cache: Path) -> None:
    override = tmp_path / "gsc.yaml"
    override.write_text(yaml.safe_dump({
        "data": {"class_path": "ncl.data.datamodule.SyntheticDataModule",
                 "init_args": {"preset": "tiny", "n_train": None, "cache_dir": str(synthetic_cache),
                               "batch_size": 16, "eval_batch_size": 32, **NOISE}},
        "model": {"init_args": {"backbone": {"init_args": TINY}, "gamma": 1.0}},
        "trainer": {"max_epochs": 1, "limit_train_batches": 2, "limit_val_batches": 1,
                    "enable_progress_bar": False}}))
    fit = ncl_here("fit", "--config", str(CONFIG), "--config", str(override), cwd=tmp_path)
    assert fit.returncode == 0, fit.stderr
    [run] = (tmp_path / "runs" / "gsc_sgr_synthetic" / "lightning_logs").iterdir()

    result = ncl_here("predict", "--config", str(CONFIG), "--config", str(override),
                      "--ckpt_path", "last", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "ranked by GSC structure consistency (batches of 12..16)" in result.stdout
    rows = _rows(run / "predictions" / "train.csv")
    assert tuple(rows[0]) == STRUCTURE_COLUMNS  # GSC's default ranking

    # recompute: per co-divide batch of 16, the structure score of the checkpoint's network
    dm = SyntheticDataModule(preset="tiny", cache_dir=str(synthetic_cache), **NOISE)
    dm.setup("fit")
    pairs = dm.train_pairs()
    net = _network(run, run / "checkpoints" / "last.ckpt", dm.vocab_size)
    score = np.full(len(pairs), np.nan)
    with torch.no_grad():
        for index in _scoring_batches(len(pairs), 16):
            batch = collate([pairs[i] for i in index])
            img = net.encode_images(batch["images"])
            cap = net.encode_captions(batch["tokens"], batch["lengths"])
            score[index] = _hand_scores(image_structure(net.sim_enc, img),
                                        caption_structure(net.sim_enc, cap, batch["lengths"].tolist()))
    caption = np.array([int(r["caption_index"]) for r in rows])
    assert sorted(caption.tolist()) == list(range(len(pairs)))
    got_score = np.array([float(r["structure_score"]) for r in rows])
    np.testing.assert_allclose(got_score, score[caption], rtol=1e-5, atol=1e-6)
    got_prob = np.array([float(r["clean_probability"]) for r in rows])
    by_caption_score, by_caption_prob = np.empty(len(pairs)), np.empty(len(pairs))
    by_caption_score[caption], by_caption_prob[caption] = got_score, got_prob
    np.testing.assert_allclose(by_caption_prob, _official_posterior(by_caption_score), rtol=0, atol=1e-9)
    assert caption.tolist() == np.lexsort((np.arange(len(pairs)), by_caption_score, by_caption_prob)).tolist()
    assert len(set(got_prob.round(6).tolist())) > 2  # a ranking, not a constant
    metrics = json.loads((run / "predictions" / "train.metrics.json").read_text())
    noisy = ~(by_caption_prob > 0.5)
    assert metrics["ranking"] == "structure" and metrics["predicted_noisy"] == int(noisy.sum())
    assert metrics["n_noisy"] == int((~dm.clean_mask).sum())

    out = tmp_path / "gmm.csv"
    result = ncl_here("predict", "--config", str(CONFIG), "--config", str(override),
                      "--ckpt_path", "last", "--ranking", "gmm", "--out", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    gmm_rows = _rows(out)
    assert tuple(gmm_rows[0]) == COLUMNS
    similarity = {r["caption_index"]: r["similarity"] for r in gmm_rows}
    assert all(similarity[r["caption_index"]] == r["similarity"] for r in rows)  # same scores

    result = ncl_here("predict", "--config", str(CONFIG), "--config", str(override),
                      "--ckpt_path", "last", "--ranking", "uncertainty", cwd=tmp_path)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and lines == [
        "ncl: error: --ranking must be one of structure, gmm, got 'uncertainty'"], result.stderr
