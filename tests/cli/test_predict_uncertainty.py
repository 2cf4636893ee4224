"""``ncl predict --ranking uncertainty``: DECL's Dirichlet uncertainty and argmax prediction.

The pure functions are checked on hand-made evidence matrices against a direct transcription
of the formulas (spec 4.6.1, 4.6.4): ``e`` (B x B, images x captions), ``K = B``,
``u_i = K / sum_j (e + 1)[i, j] + K / sum_j (e^T + 1)[i, j]``, and pair ``i`` predicted clean
iff ``argmax_j ((e + e^T) / rowsum)[i, j] == i``. The CLI runs on tiny synthetic data with
untrained DECL-like checkpoints (an official ``.pth.tar`` whose ``opt`` is DECL's and an ncl
``.ckpt`` of a class named DECL), and its table is recomputed from the networks' logits.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from helpers_official import DECL_OPT, ncl_checkpoint, official_checkpoint

from ncl.cli import main
from ncl.data.datamodule import SyntheticDataModule
from ncl.errors import ConfigError
from ncl.evaluation.ranking import (
    COLUMNS,
    GMM,
    choose_ranking,
    ranked_table,
    ranking_summary,
)
from ncl.losses.decl import decl_predicted_clean, dirichlet_uncertainty
from ncl.methods.decl import DECL
from ncl.methods.decl_ranking import UNCERTAINTY, uncertainty_order
from ncl.methods.pretrained import Pretrained
from ncl.models import SGRAF

REPO = Path(__file__).resolve().parents[2]
TINY = {"img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16, "sim_dim": 8}
NOISE = {"noise_type": "caption", "noise_ratio": 0.4, "noise_seed": 0, "noise_file": None}
UNCERTAINTY_COLUMNS = ("caption_index", "image_index", "caption", "uncertainty", "predicted_clean",
                       "similarity", "loss")
BATCH = 13  # 300 pairs: 22 batches of 13 and a last one of 14 (a tail of one merged)


# ------------------------------------------------------------------ the formulas, transcribed
def _direct_uncertainty(e: np.ndarray) -> list[float]:
    """``u_i`` by loops: ``K / S_i2t[i] + K / S_t2i[i]``."""
    k = e.shape[0]
    alpha_i2t = [[e[i][j] + 1.0 for j in range(k)] for i in range(k)]
    alpha_t2i = [[e[j][i] + 1.0 for j in range(k)] for i in range(k)]  # e^T + 1
    return [k / sum(alpha_i2t[i]) + k / sum(alpha_t2i[i]) for i in range(k)]


def _direct_prediction(e: np.ndarray) -> list[bool]:
    """Pair ``i`` clean iff the first maximum of row ``i`` of normalised ``e + e^T`` is ``i``."""
    k = e.shape[0]
    out = []
    for i in range(k):
        row = [e[i][j] + e[j][i] for j in range(k)]
        total = sum(row)
        row = [v / total for v in row]
        out.append(max(range(k), key=lambda j: (row[j], -j)) == i)
    return out


# Symmetrised rows: [8.0, 6.4, 2.6], [6.4, 6.0, 0.5], [2.6, 0.5, 4.0]. Rows of e alone would call
# every pair clean, columns alone pairs 1 and 2 noisy; e + e^T calls pair 1 noisy only.
HAND = np.array([[4.0, 3.5, 2.5],
                 [2.9, 3.0, 0.2],
                 [0.1, 0.3, 2.0]])


def test_hand_made_evidence() -> None:
    e = torch.tensor(HAND)
    # K = 3; sum(e + 1) by rows 13.0, 9.1, 5.4; by columns 10.0, 9.8, 7.7
    expected = [3 / 13.0 + 3 / 10.0, 3 / 9.1 + 3 / 9.8, 3 / 5.4 + 3 / 7.7]
    u = dirichlet_uncertainty(e)
    assert u.dtype == torch.float64 and u.tolist() == pytest.approx(expected, rel=1e-15)
    assert decl_predicted_clean(e).tolist() == [True, False, True]
    assert uncertainty_order(u.numpy()).tolist() == [2, 1, 0]


@pytest.mark.parametrize("size", [2, 5, 16])
def test_random_evidence_matches_the_transcription(size: int) -> None:
    g = torch.Generator().manual_seed(size)
    z = torch.randn(size, size, generator=g, dtype=torch.float64) * 3
    z += torch.eye(size, dtype=torch.float64) * torch.randn(size, generator=g, dtype=torch.float64)
    e = torch.exp(torch.tanh(z) / 0.1)  # DECL's evidence, in [e^-10, e^10]
    assert dirichlet_uncertainty(e).tolist() == pytest.approx(_direct_uncertainty(e.numpy()), rel=1e-12)
    assert decl_predicted_clean(e).tolist() == _direct_prediction(e.numpy())
    assert decl_predicted_clean(e.float()).tolist() == _direct_prediction(e.numpy())  # any float dtype


def test_ties_and_limits() -> None:
    flat = torch.ones(3, 3, dtype=torch.float64)
    assert dirichlet_uncertainty(flat).tolist() == [1.0, 1.0, 1.0]  # 3/6 + 3/6
    assert decl_predicted_clean(flat).tolist() == [True, False, False]  # the first maximum
    assert dirichlet_uncertainty(torch.zeros(4, 4)).tolist() == [2.0] * 4  # no evidence: u = 2
    assert uncertainty_order(np.array([0.5, 0.9, 0.5, 0.9])).tolist() == [1, 3, 0, 2]
    with pytest.raises(ValueError, match=r"\(B, B\)"):
        dirichlet_uncertainty(torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"\(B, B\)"):
        decl_predicted_clean(torch.ones(3))


def test_uncertainty_summary_on_hand_built_numbers() -> None:
    # predicted noisy: 0, 1, 4; truly noisy: 0, 2, 3. Order by uncertainty: 3, 0, 1, 2, 4
    values = {"uncertainty": np.array([0.9, 0.8, 0.7, 1.5, 0.1]),
              "predicted_clean": np.array([False, False, True, True, False])}
    true_clean = np.array([False, True, False, False, True])
    s = ranking_summary(UNCERTAINTY, values, true_clean, top_k=4)
    assert list(s)[:2] == ["ranking", "prediction"]  # the JSON's first keys, as before
    assert s["ranking"] == "uncertainty" and s["n_noisy"] == 3 and s["predicted_noisy"] == 3
    assert s["precision"] == pytest.approx(1 / 3) and s["recall"] == pytest.approx(1 / 3)
    assert s["f1"] == pytest.approx(1 / 3)
    # top-3 = 3, 0, 1 (two noisy); top-4 adds 2 (noisy)
    assert s["top_k_precision"] == {"k=3": pytest.approx(2 / 3), "k=4": pytest.approx(3 / 4)}
    with pytest.raises(ValueError, match="one shape"):
        ranking_summary(UNCERTAINTY, values, true_clean[:4])


def test_uncertainty_table_columns_and_order() -> None:
    values = {"image": np.array([5, 6, 7]), "similarity": np.array([0.1, 0.2, 0.3]),
              "loss": np.array([1.0, 2.0, 3.0]), "uncertainty": np.array([0.4, 1.2, 0.4]),
              "predicted_clean": np.array([True, False, True])}
    table = ranked_table(UNCERTAINTY, values, ["a", "b", "c"])
    assert tuple(table) == UNCERTAINTY_COLUMNS == UNCERTAINTY.table_columns()
    assert table["caption_index"] == [1, 0, 2] and table["caption"] == ["b", "a", "c"]
    assert table["image_index"] == [6, 5, 7] and table["predicted_clean"] == [False, True, True]
    assert table["uncertainty"] == [1.2, 0.4, 0.4] and table["loss"] == [2.0, 1.0, 3.0]


def test_unknown_ranking_is_refused() -> None:
    with pytest.raises(ConfigError, match="^--ranking must be one of uncertainty, gmm, got 'dirichlet'$"):
        choose_ranking(DECL.rankings, "dirichlet")
    with pytest.raises(ConfigError, match="^--ranking must be one of gmm, uncertainty, got 'structure'$"):
        choose_ranking(Pretrained.rankings, "structure")
    assert choose_ranking(DECL.rankings, None) is UNCERTAINTY  # the method's own
    assert choose_ranking(Pretrained.rankings, None) is GMM
    assert choose_ranking(DECL.rankings, "gmm") is GMM


# ------------------------------------------------------------------ Pretrained
def _nets(vocab: int) -> tuple[SGRAF, SGRAF]:
    torch.manual_seed(3)
    return (SGRAF(vocab, module_name="SGR", add_mask_token=True, **TINY).eval(),
            SGRAF(vocab, module_name="SAF", add_mask_token=True, **TINY).eval())


def _logits(net: SGRAF, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    img = net.encode_images(batch["images"])
    return net.similarity_logits(img, net.encode_captions(batch["tokens"], batch["lengths"]), batch["lengths"])


@pytest.fixture(scope="module")
def noisy_data(synthetic_cache: Path) -> SyntheticDataModule:
    dm = SyntheticDataModule(preset="tiny", cache_dir=str(synthetic_cache), **NOISE)
    dm.setup("fit")
    return dm


@pytest.fixture(scope="module")
def decl_checkpoints(tmp_path_factory: pytest.TempPathFactory,
                     noisy_data: SyntheticDataModule) -> list[Path]:
    """Untrained DECL-like checkpoints: official SGR (DECL's ``opt``), ncl SAF (class DECL)."""
    root = tmp_path_factory.mktemp("decl_ckpts")
    sgr, saf = _nets(noisy_data.vocab_size)
    return [official_checkpoint(root / "decl_sgr.pth.tar", [sgr], module_name="SGR", **DECL_OPT),
            ncl_checkpoint(root / "decl_saf.ckpt", [saf], class_path="ncl.methods.decl.DECL")]


def _pretrained(dm: SyntheticDataModule, paths: list[Path], **kwargs: object) -> Pretrained:
    factories = [lambda v, m=m: SGRAF(v, module_name=m, add_mask_token=True, **TINY) for m in ("SGR", "SAF")]
    return Pretrained(dm.vocab_size, factories[:len(paths)], [str(p) for p in paths], **kwargs).eval()


def test_batch_evidence_is_the_mean_of_the_networks_evidence(
        noisy_data: SyntheticDataModule, decl_checkpoints: list[Path]) -> None:
    from ncl.data.datasets import collate

    model = _pretrained(noisy_data, decl_checkpoints)
    assert model.rule == "evidence"
    pairs = noisy_data.train_pairs()
    batch = collate([pairs[i] for i in range(BATCH)])
    sgr, saf = _nets(noisy_data.vocab_size)  # the checkpoints' weights
    with torch.no_grad():
        hand = [torch.exp(torch.tanh(_logits(n, batch).double()) / 0.1) for n in (sgr, saf)]
        ev = model.batch_evidence(batch)
        model.predict_ranking = UNCERTAINTY
        step = model.predict_step(batch, 0)
        scores = model.batch_scores(batch)
    assert ev.dtype == torch.float64 and ev.shape == (BATCH, BATCH)
    torch.testing.assert_close(ev, (hand[0] + hand[1]) / 2, rtol=1e-12, atol=0)
    assert torch.equal(step["evidence"], ev)
    assert torch.equal(step["scores"], scores)  # one pass gives the same sigmoid scores, bit for bit


def test_batch_evidence_needs_the_evidence_rule(noisy_data: SyntheticDataModule,
                                                decl_checkpoints: list[Path]) -> None:
    model = _pretrained(noisy_data, decl_checkpoints, combine="score")
    with pytest.raises(ConfigError, match="model.combine resolved to 'score'"):
        model.batch_evidence({})


# ------------------------------------------------------------------ the CLI
def _write(path: Path, content: dict) -> Path:
    path.write_text(yaml.safe_dump(content))
    return path


def _predict_args(root: Path, cache: Path, ckpts: list[Path], out: Path) -> list[str]:
    modules = ["SGR", "SAF"][:len(ckpts)]
    override = _write(root / "predict.yaml", {
        "data": {"class_path": "ncl.data.datamodule.SyntheticDataModule",
                 "init_args": {"preset": "tiny", "n_train": None, "cache_dir": str(cache),
                               "batch_size": 16, "eval_batch_size": 32, **NOISE}},
        "model": {"init_args": {
            "backbones": [{"class_path": "ncl.models.SGRAF",
                           "init_args": {"module_name": m, "add_mask_token": True, **TINY}} for m in modules],
            "checkpoints": [str(c) for c in ckpts], "names": modules, "ensemble_name": None}},
        "trainer": {"accelerator": "cpu", "default_root_dir": str(root / "eval")}})
    return ["predict", "--config", str(REPO / "configs" / "eval_sgraf_f30k.yaml"),
            "--config", str(override), "--out", str(out)]


def _scoring_batches(n: int, batch_size: int) -> list[list[int]]:
    """The co-divide's shuffle (seed 0, epoch 0), a last batch of one merged."""
    from ncl.training.passes import deal_batches
    from ncl.training.plans import DIVISION_STREAM, rng_for

    order = rng_for(0, 0, DIVISION_STREAM, 0).permutation(n)
    return [b.tolist() for b in deal_batches(order, batch_size)]


def test_cli_ranks_by_decl_uncertainty(tmp_path: Path, synthetic_cache: Path,
                                       noisy_data: SyntheticDataModule, decl_checkpoints: list[Path],
                                       capsys: pytest.CaptureFixture) -> None:
    from ncl.data.datasets import collate

    out = tmp_path / "suspicious.csv"
    main([*_predict_args(tmp_path, synthetic_cache, decl_checkpoints, out),
          "--ranking", "uncertainty", "--batch_size", str(BATCH)])
    rows = list(csv.DictReader(out.open(newline="", encoding="utf-8")))
    assert tuple(rows[0]) == UNCERTAINTY_COLUMNS

    # recompute from the networks: per batch, the mean evidence of SGR and SAF, then the formulas
    pairs = noisy_data.train_pairs()
    sgr, saf = _nets(noisy_data.vocab_size)
    u, clean = np.full(len(pairs), np.nan), np.zeros(len(pairs), dtype=bool)
    batches = _scoring_batches(len(pairs), BATCH)
    assert {len(b) for b in batches} == {BATCH, BATCH + 1}  # K is the batch's own size
    with torch.no_grad():
        for index in batches:
            batch = collate([pairs[i] for i in index])
            e = sum(torch.exp(torch.tanh(_logits(n, batch).double()) / 0.1) for n in (sgr, saf)) / 2
            u[index] = _direct_uncertainty(e.numpy())
            clean[index] = _direct_prediction(e.numpy())

    caption = np.array([int(r["caption_index"]) for r in rows])
    assert sorted(caption.tolist()) == list(range(len(pairs)))
    got_u = np.array([float(r["uncertainty"]) for r in rows])
    np.testing.assert_allclose(got_u, u[caption], rtol=1e-12, atol=0)
    assert [r["predicted_clean"] == "True" for r in rows] == clean[caption].tolist()
    assert np.all(np.diff(got_u) <= 0)  # most uncertain first
    by_caption = np.empty(len(pairs))
    by_caption[caption] = got_u
    assert caption.tolist() == uncertainty_order(by_caption).tolist()  # ties by caption index
    for r in rows:
        assert int(r["image_index"]) == int(pairs.cap2img[int(r["caption_index"])])

    metrics = json.loads((tmp_path / "suspicious.metrics.json").read_text())
    true_clean = noisy_data.clean_mask
    tp = int((~clean & ~true_clean).sum())
    assert metrics["ranking"] == "uncertainty" and metrics["n_noisy"] == int((~true_clean).sum())
    assert metrics["predicted_noisy"] == int((~clean).sum())
    assert metrics["precision"] == pytest.approx(tp / max(int((~clean).sum()), 1))
    assert metrics["recall"] == pytest.approx(tp / int((~true_clean).sum()))
    k = metrics["n_noisy"]
    assert metrics["top_k_precision"][f"k={k}"] == pytest.approx(float((~true_clean[caption[:k]]).mean()))
    assert metrics["top_k_precision"]["k=100"] == pytest.approx(float((~true_clean[caption[:100]]).mean()))
    text = capsys.readouterr().out
    assert "ranked by DECL uncertainty (K = batch size 13..14)" in text and "F1" in text


def test_cli_refuses_sigmoid_scores(tmp_path: Path, synthetic_cache: Path,
                                    noisy_data: SyntheticDataModule,
                                    capsys: pytest.CaptureFixture) -> None:
    rcl = ncl_checkpoint(tmp_path / "rcl.ckpt", [_nets(noisy_data.vocab_size)[0]])  # not DECL
    out = tmp_path / "suspicious.csv"
    with pytest.raises(SystemExit) as exit_info:
        main([*_predict_args(tmp_path, synthetic_cache, [rcl], out), "--ranking", "uncertainty"])
    assert exit_info.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1
    assert lines[0].startswith("ncl: error: --ranking uncertainty needs DECL evidence, but "
                               "model.combine auto resolved to 'score'")
    assert not out.exists()

    # forcing the evidence rule makes any SGRAF checkpoint rankable
    main([*_predict_args(tmp_path, synthetic_cache, [rcl], out), "--ranking", "uncertainty",
          "--model.combine", "evidence"])
    rows = list(csv.DictReader(out.open(newline="", encoding="utf-8")))
    assert len(rows) == len(noisy_data.train_pairs()) and tuple(rows[0]) == UNCERTAINTY_COLUMNS


def test_cli_gmm_is_the_default(tmp_path: Path, synthetic_cache: Path,
                                decl_checkpoints: list[Path]) -> None:
    default, explicit = tmp_path / "default.csv", tmp_path / "gmm.csv"
    main(_predict_args(tmp_path, synthetic_cache, decl_checkpoints, default))
    main([*_predict_args(tmp_path, synthetic_cache, decl_checkpoints, explicit), "--ranking", "gmm"])
    assert default.read_bytes() == explicit.read_bytes()
    assert default.read_text().splitlines()[0] == ",".join(COLUMNS)
    assert ((tmp_path / "default.metrics.json").read_bytes()
            == (tmp_path / "gmm.metrics.json").read_bytes())


def test_help_lists_the_ranking_option(capsys: pytest.CaptureFixture) -> None:
    import re

    with pytest.raises(SystemExit) as exit_info:
        main(["predict", "--help"])
    assert exit_info.value.code == 0
    assert re.search(r"^\s+--ranking ", capsys.readouterr().out, re.MULTILINE)
