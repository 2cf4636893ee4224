"""Evaluation: sharded similarity matrices, ensembles, protocols and result reports."""

from ncl.evaluation.protocol import PROTOCOLS, Protocol, Results, evaluate_sims, evaluate_systems
from ncl.evaluation.report import format_table, write_results
from ncl.evaluation.similarity import SimFn, ensemble, sharded_similarity

__all__ = [
    "PROTOCOLS",
    "Protocol",
    "Results",
    "SimFn",
    "ensemble",
    "evaluate_sims",
    "evaluate_systems",
    "format_table",
    "sharded_similarity",
    "write_results",
]
