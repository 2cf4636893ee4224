"""Evaluate and ensemble trained checkpoints: ncl ``.ckpt`` files and official ``.pth.tar``.

``ncl test --config configs/eval_official_f30k.yaml`` (official NCR/RCL/CRCL/DECL files) or
``configs/eval_sgraf_f30k.yaml`` (ncl runs) loads each checkpoint into a backbone built from
the matching ``backbones`` entry (parallel lists: one factory per checkpoint). The format is
detected per file from its contents, so any mix works: an ncl checkpoint of any method (RCL,
CRCL and the baselines have one network ``nets.0``, NCR/LNC two, ``nets.0``/``nets.1``) or an
official one (NCR's ``model_A``/``model_B``, otherwise ``model``).

Reported systems (spec 4.2.9, 4.3.5, 4.4.5, 4.6.7, 5.4), in this order:

* every network alone (``<model>`` or, for a two-network checkpoint, ``<model>_A``/``_B``);
* each two-network checkpoint's internal average ``<model>`` (NCR's reported number);
* with several checkpoints, the ensemble ``<ensemble_name>``: the equal-weight mean of the
  models (so "SGRAF" = mean of SGR and SAF; an NCR checkpoint counts once, not twice).

What is averaged is ``combine`` (see :mod:`ncl.evaluation.combine`): sigmoid scores,
DECL's evidence, or the raw logits (an open choice for ReCon, whose networks are trained on raw
SGRAF logits; docs/methods/recon.md). The official code does not need to be installed.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Literal

from torch import Tensor, nn

from ncl.errors import ConfigError, NclWarning
from ncl.evaluation.combine import evidence, hierarchical_mean, resolve_combine
from ncl.evaluation.metric import Embeddings, RetrievalEvaluation
from ncl.evaluation.nonfinite import (
    EvalSite,
    check_finite_embeddings,
    check_finite_similarities,
)
from ncl.evaluation.ranking import GMM, Ranking
from ncl.evaluation.sharded import rank_sharded_similarity
from ncl.methods.base import BackboneFactory, RetrievalMethod
from ncl.methods.decl_ranking import UNCERTAINTY
from ncl.models.loading import LoadedModel, load_checkpoint

#: ``combine`` values: :data:`~ncl.evaluation.combine.Combine` plus ``"logits"``, the mean of
#: the raw scores before the sigmoid (ReCon trains on them; its paper does not say which of
#: the two its "SGRAF" averages, and the published eval.py calls code that was never released).
EnsembleCombine = Literal["auto", "score", "evidence", "logits"]


class Pretrained(RetrievalMethod):
    """Evaluation-only method over trained checkpoints (ncl or official, any mix).

    Args:
        vocab_size: linked from the DataModule.
        backbones: one backbone factory per checkpoint (e.g. an SGR and an SAF SGRAF), built
            with the options the checkpoint was trained with.
        checkpoints: ncl Lightning ``.ckpt`` or official ``.pth.tar`` files, in the order of
            ``backbones``; the format is detected per file.
        combine: what the ensembles average. ``"score"``: the sigmoid scores (NCR, RCL,
            CRCL). ``"evidence"``: DECL's ``exp(tanh(z)/tau)`` of the raw score ``z``
            (computed from ``z`` in float64; the backbone needs ``similarity_logits``).
            ``"logits"``: the raw scores ``z`` themselves (float64 means; ReCon trains its
            networks on ``z``, and whether its "SGRAF" averages ``z`` or ``sigmoid(z)`` is not
            published; the backbone needs ``similarity_logits``). ``"auto"`` (default):
            evidence when every checkpoint is a DECL checkpoint (an official file whose
            ``opt`` has ``lambda1``, ``lambda2`` and ``mu``, which only DECL defines; or an
            ncl checkpoint of a method class named ``DECL``), score otherwise (ReCon's
            included). Single networks rank identically under every rule (all are monotone
            in ``z``); only the averages differ.
        evidence_tau: the evidence temperature; ``None`` takes each DECL checkpoint's own
            ``opt.tau`` and 0.1 (DECL's value, spec 4.6.1) for the others.
        names: one display name per checkpoint (e.g. ``[SGR, SAF]``); default: the file
            names without extensions, made unique with their folders where needed.
        ensemble_name: name of the ensemble of all checkpoints (e.g. ``SGRAF``); default
            the model names joined by ``+``.
        eval_shard_size: images/captions per block of the similarity computation.
        eval_autocast: the similarity under the trainer's autocast (see the base class).
    """

    def __init__(self, vocab_size: int, backbones: list[BackboneFactory], checkpoints: list[str],
                 combine: EnsembleCombine = "auto", evidence_tau: float | None = None,
                 names: list[str] | None = None, ensemble_name: str | None = None,
                 eval_shard_size: int = 1000, eval_autocast: bool = False) -> None:
        _check_options(backbones, checkpoints, evidence_tau, names)
        super().__init__(vocab_size, backbones[0], eval_shard_size=eval_shard_size,
                         eval_autocast=eval_autocast)
        loaded = [load_checkpoint(factory, path, vocab_size)
                  for factory, path in zip(backbones, checkpoints)]
        self.model_names = tuple(names) if names else default_names(checkpoints)
        self.rule = resolve_combine(combine, [m.is_decl for m in loaded])
        _warn_if_mixed(combine, loaded, checkpoints)
        self.nets = nn.ModuleList([net for m in loaded for net in m.nets])
        self.network_names = tuple(_network_names(self.model_names, loaded))
        self.model_sizes = tuple(len(m.nets) for m in loaded)
        self.taus = tuple(evidence_tau or m.tau for m in loaded for _ in m.nets)
        self.ensemble_name = ensemble_name or "+".join(self.model_names)
        self.evaluation = RetrievalEvaluation(len(self.nets))
        if self.rule in ("evidence", "logits"):
            _check_logits(self.nets, self.network_names, self.rule)
        _check_unique(self.system_names())

    def system_names(self) -> list[str]:
        """The rows of the results, in order: networks (each model's followed by its
        average when it has several), then the ensemble of all models."""
        rows, start = [], 0
        for model, size in zip(self.model_names, self.model_sizes):
            rows += list(self.network_names[start:start + size])
            rows += [model] if size > 1 else []
            start += size
        return rows + ([self.ensemble_name] if len(self.model_names) > 1 else [])

    # ------------------------------------------------------------------ evaluation
    def similarities(self, emb: Embeddings, site: EvalSite) -> dict[str, Tensor]:
        """Every network's matrix, each multi-network model's mean and the ensemble.

        Matrices are (N_img, N_cap): float32 sigmoid scores or raw logits, or float64 evidence;
        means are float64 (see :func:`ncl.evaluation.combine.hierarchical_mean`).
        """
        matrices = []
        for k, (name, net) in enumerate(zip(self.network_names, self.nets)):
            img, cap = emb.image(k), emb.caption(k)
            check_finite_embeddings(site, name, img, cap, emb.lengths)
            matrices.append(self._network_matrix(k, net, img, cap, emb.lengths, site))
        groups, start = [], 0
        for size in self.model_sizes:
            groups.append(matrices[start:start + size])
            start += size
        means, overall = hierarchical_mean(groups)
        values = []
        for group, mean in zip(groups, means):
            values += group + ([mean] if len(group) > 1 else [])
        values += [overall] if len(groups) > 1 else []
        return dict(zip(self.system_names(), values))

    def _network_matrix(self, k: int, net: nn.Module, img: Tensor, cap: Tensor,
                        lengths: Tensor, site: EvalSite) -> Tensor:
        """Network ``k``'s (N_img, N_cap) matrix under :attr:`rule`."""
        name, shard = self.network_names[k], self.hparams.eval_shard_size
        if self.rule == "score":
            sims = rank_sharded_similarity(net.similarity, img, cap, lengths, shard, device=self.device,
                                           description=f"similarity ({name})")
            check_finite_similarities(site, name, sims)
            return sims
        logits = rank_sharded_similarity(net.similarity_logits, img, cap, lengths, shard,
                                         device=self.device, description=f"similarity logits ({name})")
        check_finite_similarities(site, name, logits)
        return logits if self.rule == "logits" else evidence(logits, self.taus[k])

    # ------------------------------------------------------------------ prediction
    # ``predict_step``, ``batch_scores`` and ``batch_evidence`` are the base class's
    # (:class:`~ncl.methods.scoring.BatchScoring`); what differs is the mean (the models with
    # equal weight) and each network's temperature, from its checkpoint.

    #: ``gmm`` by default; DECL's ``uncertainty`` when the checkpoints' matrices are evidence
    #: (:attr:`rule`; the ranking's check says so otherwise). Rankings that need a method's
    #: own networks (GSC's ``structure``) are offered by that method's fit-config form only.
    rankings: ClassVar[tuple[Ranking, ...]] = (GMM, UNCERTAINTY)

    def evidence_taus(self) -> tuple[float, ...]:
        """Each network's evidence temperature (:attr:`taus`)."""
        return self.taus

    def _model_mean(self, matrices: list[Tensor]) -> Tensor:
        """One matrix per network -> the float64 mean within each model, then over models, as
        :meth:`similarities` averages the test matrices."""
        groups, start = [], 0
        for size in self.model_sizes:
            groups.append(matrices[start:start + size])
            start += size
        return hierarchical_mean(groups)[1]

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        raise ConfigError("ncl.methods.pretrained.Pretrained only evaluates: use `ncl test`, "
                          "`ncl validate` or `ncl predict`")

    def configure_optimizers(self) -> None:
        return None


# ---------------------------------------------------------------------- loading
def _check_options(backbones: Sequence[BackboneFactory], checkpoints: Sequence[str],
                   evidence_tau: float | None, names: Sequence[str] | None) -> None:
    """One ConfigError for the first inconsistent option, and one listing missing files."""
    if not checkpoints or len(backbones) != len(checkpoints):
        raise ConfigError(f"model.backbones ({len(backbones)}) and model.checkpoints "
                          f"({len(checkpoints)}) must be non-empty lists of equal length")
    if evidence_tau is not None and not evidence_tau > 0:
        raise ConfigError(f"model.evidence_tau must be > 0 (or null), got {evidence_tau!r}")
    if names is not None and len(names) != len(checkpoints):
        raise ConfigError(f"model.names ({len(names)}) must name each of the "
                          f"{len(checkpoints)} model.checkpoints")
    missing = [str(p) for p in checkpoints if not Path(p).is_file()]
    if missing:
        raise ConfigError(f"model.checkpoints: no checkpoint file at {', '.join(missing)} "
                          f"(working directory {Path.cwd()})")


# ---------------------------------------------------------------------- names and checks
def default_names(paths: Sequence[str]) -> tuple[str, ...]:
    """File names without extensions (``f30k_SGR_model_best``, ``best-epoch=7``).

    Files sharing a name are told apart by the folders where their paths first differ
    (``checkpoints`` folders skipped): ``runs/ncl/rcl_sgr_f30k/<time>/checkpoints/best.ckpt``
    and ``runs/ncl/rcl_saf_f30k/...`` become ``rcl_sgr_f30k_best`` and ``rcl_saf_f30k_best``.
    """
    stems = [Path(p).name.split(".")[0] for p in paths]
    folders = [[f for f in Path(p).resolve().parent.parts[1:] if f != "checkpoints"] for p in paths]
    names = list(stems)
    for stem in {s for s in stems if stems.count(s) > 1}:
        group = [i for i, s in enumerate(stems) if s == stem]
        first = _first_difference([folders[i] for i in group])
        for depth in range(1, max(len(folders[i]) for i in group) - first + 1):
            for i in group:
                names[i] = "_".join(folders[i][first:first + depth] + [stem])
            if len({names[i] for i in group}) == len(group):
                break
    return tuple(names)


def _first_difference(folder_lists: Sequence[Sequence[str]]) -> int:
    """Index of the first folder at which the lists are not all equal."""
    k = 0
    while all(len(f) > k for f in folder_lists) and len({f[k] for f in folder_lists}) == 1:
        k += 1
    return k


def _network_names(model_names: Sequence[str], loaded: Sequence[LoadedModel]) -> list[str]:
    """``<model>`` for one network, ``<model>_A``, ``<model>_B``, ... for several."""
    names = []
    for model, m in zip(model_names, loaded):
        if len(m.nets) == 1:
            names.append(model)
        else:
            names += [f"{model}_{chr(ord('A') + k)}" for k in range(len(m.nets))]
    return names


def _check_unique(rows: Sequence[str]) -> None:
    repeated = sorted({r for r in rows if rows.count(r) > 1})
    if repeated:
        raise ConfigError(f"the results would have several rows named {repeated}; set "
                          "model.names (one per checkpoint) and model.ensemble_name")


def _check_logits(nets: Sequence[nn.Module], names: Sequence[str], rule: str) -> None:
    """Evidence and logit means need the raw score before the sigmoid, which only some
    backbones expose."""
    for name, net in zip(names, nets):
        if not callable(getattr(net, "similarity_logits", None)):
            raise ConfigError(f"model.combine {rule}: network {name} ({type(net).__name__}) "
                              "has no similarity_logits (raw scores before the sigmoid); use "
                              "model.combine score")


def _warn_if_mixed(combine: str, loaded: Sequence[LoadedModel], paths: Sequence[str]) -> None:
    """DECL files next to others under ``auto``: say which rule was taken."""
    decl = [p for p, m in zip(paths, loaded) if m.is_decl]
    if combine == "auto" and decl and len(decl) < len(paths):
        warnings.warn(f"model.combine auto: {', '.join(decl)} are DECL checkpoints, whose own "
                      "ensemble averages evidence, but the others are not, so sigmoid scores "
                      "are averaged; set model.combine evidence to average evidence",
                      NclWarning, stacklevel=3)
