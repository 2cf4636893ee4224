"""What every method gives ``ncl predict``: the rankings it offers, each batch's score matrix
(and, for a method whose scores are DECL evidence, the batch's evidence), averaged over its
networks as evaluation averages them.

:class:`BatchScoring` is mixed into :class:`~ncl.methods.base.RetrievalMethod`, so every
trained method implements the writer's protocol
(:class:`~ncl.callbacks.prediction_writer.BatchScorer`) and
``ncl predict --config <fit config> --ckpt_path best`` ranks pairs with the run's own networks.
A method sets what differs as class attributes: :attr:`BatchScoring.rankings` (the
:class:`~ncl.evaluation.ranking.Ranking` strategies it offers, its own first: the default of
``--ranking``; e.g. DECL's ``uncertainty``, GSC's ``structure``, declared in their own
modules), :attr:`BatchScoring.rule` (``"evidence"`` when its matrices are DECL evidence) and
:meth:`BatchScoring.evidence_taus`. :class:`~ncl.methods.pretrained.Pretrained` overrides the
mean (models with equal weight) and its rule and temperatures come from its checkpoints.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn

from ncl.errors import ConfigError
from ncl.evaluation.combine import evidence, hierarchical_mean
from ncl.evaluation.ranking import GMM, Ranking
from ncl.models.contracts import forward_batch, forward_logits


class BatchScoring:
    """``predict_step``, ``batch_scores`` and ``batch_evidence`` over ``self.nets``."""

    nets: nn.ModuleList

    #: The rankings ``ncl predict`` offers for this method, the method's own first (the
    #: default of ``--ranking``): ``gmm`` (the two-component GMM of the mean hinge, the
    #: co-divide of NCR and its successors) in the base; every method keeps ``gmm``.
    rankings: ClassVar[tuple[Ranking, ...]] = (GMM,)

    #: ``"evidence"`` when the method's matrices are DECL evidence (then
    #: :meth:`batch_evidence` works and ``--ranking uncertainty`` is allowed), else ``"score"``.
    rule: str = "score"

    #: The ranking in use, set by ``ncl predict`` (the writer's ``setup``): what
    #: :meth:`predict_step` computes (:meth:`~ncl.evaluation.ranking.Ranking.predict`);
    #: ``None``: the score matrix alone.
    predict_ranking: Ranking | None = None

    def evidence_taus(self) -> tuple[float, ...]:
        """The evidence temperature of every network (only read under ``rule == "evidence"``)."""
        raise ConfigError(f"{type(self).__name__} defines no evidence temperature")

    def _model_mean(self, matrices: list[Tensor]) -> Tensor:
        """One ``(B, B)`` matrix per network -> their float64 mean, as evaluation averages
        the networks of one method (:func:`ncl.evaluation.combine.hierarchical_mean`)."""
        return hierarchical_mean([matrices])[1]

    def batch_scores(self, batch: dict[str, Tensor]) -> Tensor:
        """``(B, B)`` float64 score matrix (images x captions) of a collated batch, pair ``i``
        on the diagonal: the networks' sigmoid scores averaged (:meth:`_model_mean`). Always
        the sigmoid scores, whatever :attr:`rule` is: the mean hinge ranked on them has its
        margin (0.2) on the scores' [0, 1] scale, not on DECL's evidence (up to ``e^10``)."""
        return self._model_mean([forward_batch(net, batch).double() for net in self.nets])

    def batch_evidence(self, batch: dict[str, Tensor]) -> Tensor:
        """``(B, B)`` float64 DECL evidence (images x captions) of a collated batch: network
        ``k``'s ``exp(tanh(z_k) / tau_k)`` of its raw logits (:func:`evidence`, float64),
        averaged as :meth:`batch_scores` averages.

        Raises:
            ConfigError: :attr:`rule` is not ``"evidence"`` (the networks may have no logits).
        """
        return self._batch_matrices(batch, scores=False)[1]

    def scores_and_evidence(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """``(scores, evidence)``, each ``(B, B)`` float64, as :meth:`batch_scores` and
        :meth:`batch_evidence` give them, from one pass of the networks."""
        scores, ev = self._batch_matrices(batch, scores=True)
        assert scores is not None
        return scores, ev

    def _batch_matrices(self, batch: dict[str, Tensor], scores: bool) -> tuple[Tensor | None, Tensor]:
        """``(scores, evidence)``, each ``(B, B)`` float64 and averaged as in
        :meth:`batch_scores` / :meth:`batch_evidence`, from one pass of the networks: the
        scores are the sigmoid of the same logits (what SGRAF's ``forward`` computes, bit for
        bit), ``None`` unless ``scores``."""
        if self.rule != "evidence":
            raise ConfigError(f"the batch evidence needs DECL evidence (a DECL run, or "
                              f"model.combine evidence), but {type(self).__name__}'s "
                              f"model.combine resolved to {self.rule!r}")
        logits = [forward_logits(net, batch) for net in self.nets]
        ev = self._model_mean([evidence(z, tau) for z, tau in zip(logits, self.evidence_taus())])
        if not scores:
            return None, ev
        return self._model_mean([torch.sigmoid(z).double() for z in logits]), ev

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        """``ncl predict``'s step: ``{"index": (B,) int64 caption indices, "scores": (B, B)
        float64}`` (:meth:`batch_scores`) plus what the ranking in use needs
        (:attr:`predict_ranking`'s :meth:`~ncl.evaluation.ranking.Ranking.predict`, e.g.
        DECL's ``"evidence"``); the per-pair values and the ranking are
        :class:`~ncl.callbacks.prediction_writer.RankedPairsWriter`'s."""
        ranking = self.predict_ranking or GMM
        return {"index": batch["index"], **ranking.predict(self, batch)}
