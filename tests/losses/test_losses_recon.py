"""ReCon's losses (Eq. 2-4, 13-15) against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from ncl.losses.recon import (
    SUBSET_CLEAN,
    SUBSET_LOCAL,
    SUBSET_NOISY,
    cross_modal_relation_loss,
    intra_modal_relation_loss,
    matrix_kl,
    proxy_relations,
    relation_consistency_objective,
)


def _kl(p: list[float], q: list[float]) -> float:
    return sum(a * math.log(a / b) for a, b in zip(p, q))


def _softmax(x: list[float], t: float = 1.0) -> list[float]:
    e = [math.exp(v / t) for v in x]
    return [v / sum(e) for v in e]


def test_cross_modal_loss_both_directions_by_hand() -> None:
    sims = torch.tensor([[2.0, 0.0], [1.0, 0.0]])  # rows images, columns captions
    terms = cross_modal_relation_loss(sims, tau=1.0)
    # pair 0: row softmax e^2/(e^2+1); column softmax e^2/(e^2+e)
    p_v2l, p_l2v = math.e ** 2 / (math.e ** 2 + 1), math.e / (math.e + 1)
    # pair 1: row [1, 0] -> 1/(e+1); column [0, 0] -> 1/2
    q_v2l, q_l2v = 1 / (math.e + 1), 0.5
    expected = [-(math.log(p_v2l) + math.log(p_l2v)), -(math.log(q_v2l) + math.log(q_l2v))]
    assert terms.loss.tolist() == pytest.approx(expected, rel=1e-6)
    mean_p = [(p_v2l + p_l2v) / 2, (q_v2l + q_l2v) / 2]
    assert terms.probability.tolist() == pytest.approx(mean_p, rel=1e-6)


def test_cross_modal_loss_is_weighted_by_the_label_and_scaled_by_tau() -> None:
    sims = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    full = 2 * math.log(1 + math.exp(-2.0))  # tau 0.5: logits 2 and 0
    terms = cross_modal_relation_loss(sims, torch.tensor([0.5, 0.0]), tau=0.5)
    assert terms.loss.tolist() == pytest.approx([0.5 * full, 0.0], rel=1e-5)
    with pytest.raises(ValueError, match="labels"):
        cross_modal_relation_loss(sims, torch.ones(3))


def test_proxy_relations_reads_the_other_modality_through_the_match() -> None:
    other = torch.arange(9.0).reshape(1, 3, 3)  # o[a, b] = 3a + b
    proxy = proxy_relations(other, torch.tensor([[2, 0]]))
    assert proxy.tolist() == [[[8.0, 6.0], [2.0, 0.0]]]  # [[o22, o20], [o02, o00]]


def test_matrix_kl_symmetric_forward_rows_and_mask() -> None:
    # row 0: P = (1/2, 1/2), Q = (3/4, 1/4); row 1: P = Q; a third, padded item is ignored
    relations = torch.tensor([[[0.0, 0.0, 7.0], [1.0, 2.0, -3.0], [5.0, 5.0, 5.0]]])
    proxy = torch.tensor([[[math.log(3.0), 0.0, -9.0], [1.0, 2.0, 4.0], [0.0, 0.0, 0.0]]])
    mask = torch.tensor([[True, True, False]])
    forward = _kl([0.5, 0.5], [0.75, 0.25])
    backward = _kl([0.75, 0.25], [0.5, 0.5])
    one_way = matrix_kl(relations, proxy, mask, 1.0, "forward", "sum").item()
    assert one_way == pytest.approx(forward, rel=1e-6)
    assert matrix_kl(relations, proxy, mask, 1.0, "symmetric", "sum").item() == pytest.approx(
        forward + backward, rel=1e-6)
    assert matrix_kl(relations, proxy, mask, 1.0, "symmetric", "mean").item() == pytest.approx(
        (forward + backward) / 2, rel=1e-6)
    # temperature 0.5 doubles the logits: Q = softmax(2 log 3, 0) = (9/10, 1/10)
    assert matrix_kl(relations, proxy, mask, 0.5, "forward", "sum").item() == pytest.approx(
        _kl([0.5, 0.5], [0.9, 0.1]), rel=1e-6)


def _pair() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two regions (1,0), (0,1); words (1,0), (0.6,0.8) and a pad word (0,1) that, were it not
    masked, would be region 1's best match."""
    regions = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    words = torch.tensor([[[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]]])
    return regions, words, torch.tensor([2])


def test_intra_modal_loss_by_hand() -> None:
    regions, words, lengths = _pair()
    terms = intra_modal_relation_loss(regions, words, lengths, temperature=1.0)
    # regions -> words (0, 1), words -> regions (0, 1): C_VV = I, C_LL = [[1, .6], [.6, 1]];
    # C_VV^p = C_LL and C_LL^p = C_VV, so both terms are the m-KL between the same two matrices.
    rows = [(_softmax([1.0, 0.0]), _softmax([1.0, 0.6])),
            (_softmax([0.0, 1.0]), _softmax([0.6, 1.0]))]
    m_kl = sum(_kl(p, q) + _kl(q, p) for p, q in rows)  # IAIS's m-KL: summed over rows
    assert terms.visual.item() == pytest.approx(m_kl, rel=1e-5)
    assert terms.textual.item() == pytest.approx(m_kl, rel=1e-5)
    assert terms.loss.item() == pytest.approx(2 * m_kl, rel=1e-5)
    mean = intra_modal_relation_loss(regions, words, lengths, temperature=1.0, rows="mean")
    assert mean.loss.item() == pytest.approx(m_kl, rel=1e-5)  # 2 terms x (m_kl / 2 rows)


def test_intra_modal_loss_is_zero_for_identical_structure() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 5, 4)
    terms = intra_modal_relation_loss(x, x.clone(), torch.tensor([5, 5, 5]))
    assert terms.loss.abs().max().item() < 1e-5


def test_intra_modal_loss_ignores_padding_and_gives_it_no_gradient() -> None:
    regions, words, lengths = _pair()
    words = words.clone().requires_grad_(True)
    terms = intra_modal_relation_loss(regions, words, lengths, temperature=1.0)
    changed = words.detach().clone()
    changed[0, 2] = torch.tensor([5.0, -3.0])
    again = intra_modal_relation_loss(regions, changed, lengths, temperature=1.0)
    assert again.loss.item() == pytest.approx(terms.loss.item(), rel=1e-6)
    terms.loss.sum().backward()
    assert torch.isfinite(words.grad).all()
    assert words.grad[0, 2].abs().max().item() == 0.0
    assert words.grad[0, :2].abs().max().item() > 0.0


def test_detach_proxy_stops_the_gradient_through_the_proxies() -> None:
    torch.manual_seed(1)
    regions = torch.randn(2, 4, 6, requires_grad=True)
    words = torch.randn(2, 5, 6, requires_grad=True)
    lengths = torch.tensor([5, 3])
    # the visual term reaches the words only through C_VV^p = Psi(C_LL, ...)
    intra_modal_relation_loss(regions, words, lengths, detach_proxy=True).visual.sum().backward()
    assert words.grad is None and regions.grad.abs().max().item() > 0.0
    intra_modal_relation_loss(regions, words, lengths).visual.sum().backward()
    assert words.grad.abs().max().item() > 0.0


def test_relation_features_replace_the_intra_modal_matrices_only() -> None:
    regions, words, lengths = _pair()
    # identity-like region features and the words' own features: C_VV stays I, C_LL unchanged
    region_features = torch.tensor([[[3.0, 0.0, 0.0], [0.0, 0.0, 2.0]]])
    same = intra_modal_relation_loss(regions, words, lengths, region_features=region_features,
                                     temperature=1.0)
    base = intra_modal_relation_loss(regions, words, lengths, temperature=1.0)
    assert same.loss.item() == pytest.approx(base.loss.item(), rel=1e-6)
    parallel = torch.tensor([[[1.0, 0.0], [1.0, 0.0]]])  # C_VV = all ones: another value
    other = intra_modal_relation_loss(regions, words, lengths, region_features=parallel,
                                      temperature=1.0)
    assert other.loss.item() != pytest.approx(base.loss.item(), rel=1e-3)


def test_intra_modal_loss_refuses_bad_lengths() -> None:
    regions, words, _ = _pair()
    with pytest.raises(ValueError, match="lengths"):
        intra_modal_relation_loss(regions, words, torch.tensor([0]))
    with pytest.raises(ValueError, match="lengths"):
        intra_modal_relation_loss(regions, words, torch.tensor([4]))


def test_objective_per_subset_by_hand() -> None:
    cm = torch.tensor([1.0, 2.0, 3.0])
    im = torch.tensor([10.0, 10.0, 10.0])
    subset = torch.tensor([SUBSET_CLEAN, SUBSET_LOCAL, SUBSET_NOISY])
    labels = torch.tensor([0.3, 0.3, 0.3])  # Eq. 11: only D_n reads its label
    penalty = torch.tensor([100.0, 4.0, 100.0])  # only D_l reads its penalty
    out = relation_consistency_objective(cm, im, subset, labels, penalty, xi=5.0)
    assert out.tolist() == pytest.approx([5 * 1 + 10, 5 * 2 + 10 / 4, 0.3 * 3])
    with_xi = relation_consistency_objective(cm, im, subset, labels, penalty, xi=5.0,
                                             xi_on_noisy=True)
    assert with_xi.tolist() == pytest.approx([15.0, 12.5, 5 * 0.3 * 3])


def test_objective_keeps_a_noisy_pairs_relation_loss_out_entirely() -> None:
    im = torch.tensor([1.0, float("nan")], requires_grad=True)
    cm = torch.tensor([1.0, 1.0], requires_grad=True)
    subset = torch.tensor([SUBSET_CLEAN, SUBSET_NOISY])
    out = relation_consistency_objective(cm, im, subset, torch.tensor([1.0, 0.5]), torch.ones(2))
    assert out.tolist() == pytest.approx([6.0, 0.5])
    out.sum().backward()
    assert im.grad.tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="codes"):
        relation_consistency_objective(cm, im, torch.tensor([0, 3]), torch.ones(2), torch.ones(2))
