"""Issue 29, item 7: ReCon's m-KL read as IAIS's (symmetric KL summed over the rows) reaches the
paper's threshold ``e - 1`` for a clearly mismatched row, where the old mean over rows cannot;
and regions overwritten by the training augmentation stay out of the relation matrices."""

from __future__ import annotations

import math

import pytest
import torch

from ncl.data.augment import REGION_FILL_VALUE
from ncl.division.three_way import intra_modal_discrepancy, three_way_split
from ncl.losses.recon import (
    SUBSET_CLEAN,
    SUBSET_LOCAL,
    cosine_relations,
    intra_modal_relation_loss,
    matrix_kl,
)
from ncl.losses.recon_forward import RelationOptions, relation_forward, unfilled_regions
from ncl.models import SGRAF

THRESHOLD = math.e - 1  # y^IM >= omega2 = 0.5 exactly when L_IM >= e - 1 (Eq. 7-8)


def _mismatched_row(n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """(1, n, n) relations and proxy that agree everywhere except row 0, where the relation
    peaks at item 1 and the proxy at item 2 (cosines of -1 elsewhere)."""
    relations = torch.full((1, n, n), -1.0)
    relations[0].fill_diagonal_(1.0)
    proxy = relations.clone()
    relations[0, 0] = -1.0
    relations[0, 0, 1] = 1.0
    proxy[0, 0] = -1.0
    proxy[0, 0, 2] = 1.0
    return relations, proxy


def test_default_m_kl_is_iais_sum_and_reaches_the_threshold() -> None:
    relations, proxy = _mismatched_row()
    mask = torch.ones(1, 8, dtype=torch.bool)
    # by hand: symmetric KL of the one differing row = sum_j (p_j - q_j)(a_j - b_j)
    p, q = relations[0, 0].softmax(0), proxy[0, 0].softmax(0)
    hand = float(((p - q) * (relations[0, 0] - proxy[0, 0])).sum())
    assert hand > THRESHOLD
    summed = matrix_kl(relations, proxy, mask)  # the default reading
    assert float(summed) == pytest.approx(hand, rel=1e-5)
    mean = matrix_kl(relations, proxy, mask, rows="mean")  # the old reading: hand / 8
    assert float(mean) == pytest.approx(hand / 8, rel=1e-5) and float(mean) < THRESHOLD
    # under the default the pair lands in D_l, under the old reading in D_c
    subsets = three_way_split(torch.ones(2), intra_modal_discrepancy(torch.stack([summed[0], mean[0]])))
    assert subsets.tolist() == [SUBSET_LOCAL, SUBSET_CLEAN]


def test_matching_relations_stay_below_the_threshold() -> None:
    relations, _ = _mismatched_row()
    assert float(matrix_kl(relations, relations.clone(), torch.ones(1, 8, dtype=torch.bool))) == 0.0


# ---------------------------------------------------------------------- augmentation leak
DIMS = {"img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16, "sim_dim": 8}
FILLED = [1, 4]  # regions overwritten in every image of the batch


def _batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    images = torch.randn(3, 6, 16, generator=g)
    images[:, FILLED] = REGION_FILL_VALUE  # what CaptionRegionAugment's fill mode writes
    lengths = torch.tensor([5, 4, 3])
    tokens = torch.randint(4, 30, (3, 5), generator=g) * (torch.arange(5) < lengths[:, None])
    return {"images": images, "tokens": tokens, "lengths": lengths}


@pytest.fixture()
def net() -> SGRAF:
    torch.manual_seed(0)
    return SGRAF(30, module_name="SAF", **DIMS).eval()


def test_filled_regions_are_found() -> None:
    kept = unfilled_regions(_batch()["images"])
    assert kept.tolist() == [[i not in FILLED for i in range(6)]] * 3
    everything_filled = torch.full((1, 6, 16), REGION_FILL_VALUE)
    assert unfilled_regions(everything_filled).all()  # no image is left without a row


def test_filled_regions_leak_without_the_mask(net: SGRAF) -> None:
    batch = _batch()
    with torch.no_grad():
        img = net.encode_images(batch["images"])
    # the leak: filled regions become one embedding, with mutual cosine 1 in C_VV
    assert float(cosine_relations(img)[0, FILLED[0], FILLED[1]]) == pytest.approx(1.0, abs=1e-6)
    with torch.no_grad():
        _, masked = relation_forward(net, batch, RelationOptions())
        _, leaky = relation_forward(net, batch, RelationOptions(mask_filled_regions=False))
    keep = [i for i in range(6) if i not in FILLED]
    with torch.no_grad():  # the relations of the same images with the filled regions removed
        cap = net.encode_captions(batch["tokens"], batch["lengths"])
        removed = intra_modal_relation_loss(img[:, keep], cap, batch["lengths"])
    torch.testing.assert_close(masked.loss, removed.loss)
    torch.testing.assert_close(masked.visual, removed.visual)
    assert not torch.allclose(leaky.loss, removed.loss)
