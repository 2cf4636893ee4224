"""SPS (IJCAI 2025): strictly clean pairs, consistency terms and proxy captions, on CREAM's code
base (official code: C-TeaRanger/SPS, folder ``code/``; ncl's reading in ``docs/methods/sps.md``).

* Warm-up and division as CREAM (:class:`~ncl.methods.cream_support.SplitCoTraining`): A then
  B over their own shuffles, InfoNCE at ``T = 0.07``; the warm-up selection keeps the last
  epoch whose rSum and six recalls are all **at or above** the maxima of the last kept epoch;
  the division pass, one GMM per network.
* Each network's probabilities are split on their own (:func:`~ncl.division.cream.sps_split`):
  **strictly clean** ``prob > 0.6``, **clean** the rest of the official ``prob > 0.5`` mask
  (1 % rule), **noisy** the others. Network A trains on B's split and B on A's.
* An iteration of network ``k`` (driven by the strictly clean loader; the clean loader is never
  restarted, the noisy one cycles), its targets first (eval mode, no gradient):
  1. always, one Adam step on the strictly clean batch: InfoNCE + ``25 mean((S - S^T)^2)`` +
     ``25 mean((M_img - M_txt)^2)`` (:mod:`ncl.losses.sps`);
  2. from co-training epoch ``clean_start_epoch`` (10): the clean batch, ``mean_i y_i l_i`` with
     CREAM's clean targets ``w_peer + (1 - w_peer) p_own``;
  3. from ``noisy_start_epoch`` (15): every noisy image with the caption of its most similar
     image (cosine of mean region embeddings) **within the current strictly clean batch**, label
     ``p_i cos_i`` zeroed below 0.5, ``mean_i y_i l_i`` on those proxy pairs.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from ncl.callbacks.protocols import EpochDiagnostics
from ncl.data.datasets import Batch
from ncl.division.cream import CLEAN, NOISY, STRICT, clean_targets, sps_split
from ncl.errors import ConfigError
from ncl.losses.sps import (mean_word_embeddings, proxy_captions, proxy_labels, structure_penalty,
                            symmetry_penalty, weighted_infonce)
from ncl.losses.cream import per_sample_infonce
from ncl.methods.base import BackboneFactory
from ncl.methods.cream import WarmupSelection
from ncl.methods.cream_support import SplitCoTraining, subset_report
from ncl.methods.declaration import BENCHMARK_WARMUP, MethodSpec, RegressionCase, Row, TINY_RUN_ARGS
from ncl.methods.skeleton import check_ranges
from ncl.models.contracts import encode_images, forward_batch
from ncl.streams import declare_stream
from ncl.training.cream_plans import PlanStreams
from ncl.training.passes import eval_mode

#: Stream ids of SPS (81-89): the plan's four shuffles, the division pass, fresh networks.
SPS_STREAMS = PlanStreams(warmup=declare_stream(81, "sps.warmup"),
                          driving=declare_stream(82, "sps.strict"),
                          held=declare_stream(83, "sps.clean"),
                          cycled=declare_stream(84, "sps.noisy"))
DIVISION_STREAM = declare_stream(85, "sps.division")
REINIT_STREAM = declare_stream(86, "sps.reinit")

# The grid rows: the official starts (co-training epochs 10 and 15 of 40) scaled as CREAM's
# (ncl/methods/cream.py): 2 and 3 of the benchmark's 9 co-training epochs, 1 and 2 of
# synthetic-small's 5.
BENCHMARK_STARTS = ("--model.clean_start_epoch=2", "--model.noisy_start_epoch=3")
SMALL_STARTS = ("--model.clean_start_epoch=1", "--model.noisy_start_epoch=2")


class SPS(SplitCoTraining):
    """SPS LightningModule (two networks A and B, manual optimisation).

    Args:
        vocab_size, backbone: as :class:`~ncl.methods.base.RetrievalMethod` (Adam 2e-4, clip
            2.0 per optimiser step, ``lr_update`` 10 co-training epochs, ``select_warmup``
            false).
        warmup_epochs: InfoNCE warm-up epochs (5).
        temperature: ``T`` of every InfoNCE (0.07, hard-coded officially).
        p_threshold: the clean threshold of each network's GMM (0.5; the official split
            hard-codes 0.5 and ignores its ``--p_threshold``).
        strict_threshold: strictly clean above this probability (0.6, hard-coded officially).
        clean_start_epoch: co-training epoch from which the clean batch trains (10).
        noisy_start_epoch: co-training epoch from which the proxy pairs train (15).
        symmetry_weight: weight of ``mean((S - S^T)^2)`` (25).
        structure_weight: weight of ``mean((M_img - M_txt)^2)`` (25).
        proxy_threshold: proxy labels below it are 0 (0.5).
        warmup_selection: ``official`` (SPS's rule: at or above the last kept epoch's values) or
            ``last``.
        gmm_seed, division_shuffle, seed: as :class:`~ncl.methods.cream.CREAM`.
    """

    spec: ClassVar[MethodSpec] = MethodSpec(
        rows=(Row("sps", "SPS-{}", order=170, warmup=True, paper_config="sps_{bb}_{ds}",
                  divides="per-network split", small_backbones=("SGR",),
                  overrides=("--model=ncl.methods.sps.SPS", f"--model.warmup_epochs={BENCHMARK_WARMUP}",
                             *BENCHMARK_STARTS),
                  small=SMALL_STARTS),),
        tiny={"sps": {"warmup_epochs": 1, "clean_start_epoch": 0, "noisy_start_epoch": 1}},
        regression={"sps": RegressionCase("sps_sgr_f30k.yaml", (
            *TINY_RUN_ARGS, "--model.warmup_epochs=2", "--model.clean_start_epoch=0",
            "--model.noisy_start_epoch=1"))},
        page="sps.md", config_prefixes=("sps_",))

    division_stream, reinit_stream = DIVISION_STREAM, REINIT_STREAM
    plan_codes, plan_streams = (STRICT, CLEAN, NOISY), SPS_STREAMS
    warmup_ties = True

    def __init__(self, vocab_size: int, backbone: BackboneFactory, *, warmup_epochs: int = 5,
                 temperature: float = 0.07, p_threshold: float = 0.5, strict_threshold: float = 0.6,
                 clean_start_epoch: int = 10, noisy_start_epoch: int = 15,
                 symmetry_weight: float = 25.0, structure_weight: float = 25.0,
                 proxy_threshold: float = 0.5, warmup_selection: WarmupSelection = "official",
                 gmm_seed: int | None = 0, division_shuffle: bool = True, seed: int | None = None,
                 lr_update: int = 10, **kwargs: Any) -> None:
        super().__init__(vocab_size, backbone, n_networks=2, lr_update=lr_update, **kwargs)
        self.save_hyperparameters(ignore=["backbone", "optimizer"])
        _check_ranges(self.hparams)
        self.init_state(seed)

    def split(self, prob: Tensor) -> Tensor:
        """``(2, N)``: row ``k`` is network ``k``'s own split (its peer trains on it)."""
        hp = self.hparams
        return torch.stack([sps_split(p, hp.p_threshold, hp.strict_threshold) for p in prob])

    # ------------------------------------------------------------------ an iteration
    def proxy_batch(self, k: int, strict: Batch, noisy: Batch) -> tuple[Batch, Tensor]:
        """The noisy images with the captions of their most similar strictly clean images
        (network ``k``, eval mode, no gradient) and the proxy labels (B_n,)."""
        net = self.nets[k]
        with torch.no_grad(), eval_mode(net):
            index, cosine = proxy_captions(encode_images(net, strict).mean(1),
                                           encode_images(net, noisy).mean(1))
            batch = dict(noisy)
            batch["tokens"], batch["lengths"] = strict["tokens"][index], strict["lengths"][index]
            labels = proxy_labels(self.predict_pairs(net, batch), cosine, self.hparams.proxy_threshold)
        return batch, labels

    def strict_step(self, k: int, batch: Batch) -> dict[str, Tensor]:
        """One step on the strictly clean batch: InfoNCE + the two consistency terms."""
        hp, net = self.hparams, self.nets[k]
        img = encode_images(net, batch)
        cap = net.encode_captions(batch["tokens"], batch["lengths"])
        sims = net.similarity(img, cap, batch["lengths"])
        infonce = per_sample_infonce(sims, hp.temperature).mean()
        symmetry = symmetry_penalty(sims, hp.symmetry_weight)
        structure = structure_penalty(img.mean(1), mean_word_embeddings(cap, batch["lengths"]),
                                      hp.structure_weight)
        self.optimize(k, infonce + symmetry + structure)
        return {"loss_strict": infonce.detach(), "symmetry": symmetry.detach(),
                "structure": structure.detach()}

    def labelled_step(self, k: int, batch: Batch, labels: Tensor) -> Tensor:
        """One step on ``mean_i y_i l_i`` (SPS's ``mode="train"``)."""
        sims = self.forward_sims(k, batch)
        loss = weighted_infonce(sims, labels, self.hparams.temperature)
        self.optimize(k, loss)
        return loss.detach()

    def forward_sims(self, k: int, batch: Batch) -> Tensor:
        return forward_batch(self.nets[k], batch)

    def cotrain_step(self, k: int, strict: Batch, clean: Batch | None, clean_fresh: bool,
                     noisy: Batch | None) -> None:
        """One iteration of network ``k`` on its peer's split (official ``train_one_epoch``)."""
        hp, epoch = self.hparams, self.cotrain_epoch()
        t_c = proxy = None
        if epoch >= hp.clean_start_epoch and clean is not None:
            net = self.nets[k]
            w_peer = self.division.prob_on(clean["index"].device)[1 - k][clean["index"]]
            with torch.no_grad(), eval_mode(net):
                t_c = clean_targets(w_peer, self.predict_pairs(net, clean))
        if epoch >= hp.noisy_start_epoch and noisy is not None:
            proxy = self.proxy_batch(k, strict, noisy)
        logs = self.strict_step(k, strict)
        if t_c is not None and clean_fresh and len(clean["index"]) > 1:
            logs["loss_clean"] = self.labelled_step(k, clean, t_c)
            logs["target_clean"] = t_c.mean()
        if proxy is not None and len(noisy["index"]) > 1:
            logs["loss_proxy"] = self.labelled_step(k, *proxy)
            logs["proxy_label"] = proxy[1].mean()
        self.log_net(k, logs, int(strict["index"].shape[0]))

    # ------------------------------------------------------------------ diagnostics
    def epoch_diagnostics(self, epoch: int, true_clean: Tensor | None) -> EpochDiagnostics:
        """The division made for ``epoch``: per network ``sps/<net>/{strict,clean,noisy}``
        (the split its peer trains on), with the ground truth the truly noisy pairs in each;
        the noise detection is the mean over both networks' noisy subsets."""
        division = self.division
        if division is None or division.epoch != epoch:
            return EpochDiagnostics()
        reports = [subset_report(division, division.subset[k], self.network_names, self.hparams.gmm_seed,
                                 true_clean, f"sps/{name}", codes=self.plan_codes)
                   for k, name in enumerate(self.network_names)]
        out = reports[0]
        out.scalars.update(reports[1].scalars)
        out.detection = {name: r.detection["noisy subset"] for name, r in zip(self.network_names, reports)}
        if out.noise_detection:
            out.noise_detection = {key: (reports[0].noise_detection[key] + reports[1].noise_detection[key]) / 2
                                   for key in out.noise_detection}
        return out


def _check_ranges(hp: Any) -> None:
    """Raise ConfigError naming the offending ``model.*`` option."""
    if hp.warmup_selection not in ("official", "last"):
        raise ConfigError(f"model.warmup_selection must be 'official' or 'last', got {hp.warmup_selection!r}")
    check_ranges(hp, integers={"warmup_epochs": 0, "clean_start_epoch": 0, "noisy_start_epoch": 0},
                 positive=["temperature"], nonnegative=["symmetry_weight", "structure_weight"],
                 unit=["p_threshold", "strict_threshold", "proxy_threshold"])
