"""Protocol dispatch and multi-system evaluation."""

from __future__ import annotations

import pytest
import torch

from ncl.evaluation import ensemble, evaluate_sims, evaluate_systems
from ncl.metrics import fold5_metrics, retrieval_metrics


def sims_with_signal(seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    sims = torch.randn(10, 50, generator=gen)
    caps = torch.arange(50)
    sims[caps // 5, caps] += 1.5
    return sims


def test_protocol_dispatch() -> None:
    sims = sims_with_signal(0)
    whole, folds = retrieval_metrics(sims, 5), fold5_metrics(sims, 5)
    assert whole != folds  # the test below could not tell them apart otherwise
    assert evaluate_sims(sims, 5, "1k") == whole
    assert evaluate_sims(sims, 5, "5k") == whole
    assert evaluate_sims(sims, 5, "5fold1k") == folds


def test_unknown_protocol_raises() -> None:
    with pytest.raises(ValueError, match="protocol must be one of"):
        evaluate_sims(sims_with_signal(0), 5, "1K")  # type: ignore[arg-type]


def test_evaluate_systems_structure_and_values() -> None:
    s1, s2 = sims_with_signal(1), sims_with_signal(2)
    systems = {"SGR": s1, "SAF": s2, "SGRAF": ensemble([s1, s2])}
    results = evaluate_systems(systems, 5, ["5fold1k", "5k"])
    assert list(results) == ["SGR", "SAF", "SGRAF"]
    for name, sims in systems.items():
        assert list(results[name]) == ["5fold1k", "5k"]
        assert results[name]["5k"] == retrieval_metrics(sims, 5)
        assert results[name]["5fold1k"] == fold5_metrics(sims, 5)


def test_evaluate_systems_bad_arguments() -> None:
    systems = {"SGR": sims_with_signal(0)}
    with pytest.raises(ValueError, match="systems"):
        evaluate_systems({}, 5, ["5k"])
    with pytest.raises(ValueError, match="protocols must be a non-empty"):
        evaluate_systems(systems, 5, [])
    with pytest.raises(ValueError, match="protocols must be a non-empty"):
        evaluate_systems(systems, 5, "5k")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="repeat"):
        evaluate_systems(systems, 5, ["5k", "5k"])
    with pytest.raises(ValueError, match="protocol must be one of"):
        evaluate_systems(systems, 5, ["5k", "10k"])  # type: ignore[list-item]
