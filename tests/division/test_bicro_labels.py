"""BiCro's soft labels (ncl.division.bicro_labels) on fixed embeddings and scores, against the
official ``predict`` written out in plain Python loops (cosines, nearest anchors, ratios)."""

from __future__ import annotations

import math

import torch

from ncl.division.bicro_labels import (choose_anchors, consistency, global_embeddings,
                                       labelled_soft_labels, unlabelled_soft_labels)

B, E = 12, 3


def _fixed(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _mean_hinges(sims: list[list[float]], margin: float) -> list[float]:
    n = len(sims)
    out = []
    for i in range(n):
        c_s = sum(max(0.0, margin + sims[i][j] - sims[i][i]) for j in range(n) if j != i)
        c_im = sum(max(0.0, margin + sims[r][i] - sims[i][i]) for r in range(n) if r != i)
        out.append(c_s / n + c_im / n)
    return out


def _cos(u: list[float], v: list[float]) -> float:
    dot = sum(a * b for a, b in zip(u, v))
    return dot / max(math.sqrt(sum(a * a for a in u)) * math.sqrt(sum(b * b for b in v)), 1e-8)


def _sele(t: float, v: float) -> float:
    return t / v if t / v < 1 else v / t


def _bidirectional(img: list, cap: list, a_img: list, a_cap: list) -> float:
    """i2t + t2i of one pair against the anchors (official SIM_PAIR + SIM_SELE)."""
    ci = [_cos(img, a) for a in a_img]
    ct = [_cos(cap, a) for a in a_cap]
    ki, kt = max(range(len(ci)), key=ci.__getitem__), max(range(len(ct)), key=ct.__getitem__)
    return _sele(ci[ki], ct[ki]) + _sele(ct[kt], ci[kt])


def _floor(v: float, floor: float | None) -> float:
    return v if floor is None or v > floor else 0.0


def test_consistency_by_hand() -> None:
    """Nearest by ``first``: row 0 anchor 0 (t 0.9, v 0.6 -> 0.6 / 0.9), row 1 anchor 1
    (t 0.5, v 0.25 -> 0.25 / 0.5), row 2 anchor 0 (t 0.4, v 0.8 -> 0.4 / 0.8)."""
    first = torch.tensor([[0.9, 0.2], [0.1, 0.5], [0.4, -0.3]])
    second = torch.tensor([[0.6, 0.8], [0.3, 0.25], [0.8, 0.1]])
    torch.testing.assert_close(consistency(first, second), torch.tensor([2 / 3, 0.5, 0.5]))


def test_global_embeddings_mean_of_regions_and_first_words() -> None:
    img, cap = _fixed(0, 2, 4, E), _fixed(1, 2, 5, E)
    cap[0, 3:] = 0.0  # padding
    img_g, cap_g = global_embeddings(img, cap, torch.tensor([3, 5]))
    torch.testing.assert_close(img_g, img.mean(dim=1))
    torch.testing.assert_close(cap_g[0], cap[0, :3].mean(dim=0))
    torch.testing.assert_close(cap_g[1], cap[1].mean(dim=0))


def test_anchors_are_the_most_confident_tenth() -> None:
    sims = torch.rand(B, B, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    anchors, rest = choose_anchors(sims, 0.2)
    losses = _mean_hinges(sims.tolist(), 0.2)
    p = [min(max(0.2 - v / 2, 0.0), 0.2) for v in losses]
    order = sorted(range(B), key=lambda i: p[i])
    assert anchors.tolist() == order[-2:] and rest.tolist() == order[:-2]  # A = 12 // 10 + 1


def _reference_labels(sims: torch.Tensor, img_g: torch.Tensor, cap_g: torch.Tensor,
                      floor: float | None, aligned: bool) -> list[float]:
    losses = _mean_hinges(sims.tolist(), 0.2)
    p = [min(max(0.2 - v / 2, 0.0), 0.2) for v in losses]
    order = sorted(range(B), key=lambda i: p[i])
    anchors, rest = order[-2:], order[:-2]
    a_img, a_cap = [img_g[a].tolist() for a in anchors], [cap_g[a].tolist() for a in anchors]
    d = [min(max(_floor(0.5 + _bidirectional(img_g[i].tolist(), cap_g[i].tolist(), a_img, a_cap) / 4,
                        floor), 0.0), 1.0) for i in range(B)]
    y = [0.0] * B
    for a in anchors:
        y[a] = 1.0
    for k, i in enumerate(rest):
        y[i] = d[i] if aligned else d[k]  # the official scatter_: pair k's value lands on rest[k]
    return y


def test_labelled_soft_labels_official_scatter_and_aligned() -> None:
    sims = torch.rand(B, B, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    img_g, cap_g = _fixed(5, B, E), _fixed(6, B, E)
    for floor in (0.5, None):
        official, anchors = labelled_soft_labels(sims, img_g, cap_g, 0.2, floor, "official")
        aligned, _ = labelled_soft_labels(sims, img_g, cap_g, 0.2, floor, "aligned")
        torch.testing.assert_close(official, torch.tensor(
            _reference_labels(sims, img_g, cap_g, floor, aligned=False), dtype=torch.float64))
        torch.testing.assert_close(aligned, torch.tensor(
            _reference_labels(sims, img_g, cap_g, floor, aligned=True), dtype=torch.float64))
        assert official[anchors].tolist() == [1.0, 1.0]
        assert not torch.equal(official, aligned)  # the scatter moves labels between pairs


def test_unlabelled_soft_labels_against_the_labelled_anchors() -> None:
    img_u, cap_u = _fixed(7, 5, E), _fixed(8, 5, E)
    a_img, a_cap = _fixed(9, 2, E), _fixed(10, 2, E)
    for floor in (0.5, None):
        got = unlabelled_soft_labels(img_u, cap_u, a_img, a_cap, floor)
        want = [min(max(_floor(_bidirectional(img_u[i].tolist(), cap_u[i].tolist(), a_img.tolist(),
                                              a_cap.tolist()) / 2, floor), 0.0), 1.0) for i in range(5)]
        torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64))
    assert (unlabelled_soft_labels(img_u, cap_u, a_img, a_cap, 0.5) <= 1).all()
