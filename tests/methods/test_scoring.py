"""Every method's batch scorer (``ncl/methods/scoring.py``, in the base class): the batch's
matrices recomputed from the networks themselves, for a two-network method (NCR: the mean of
its networks' scores, as evaluation averages them) and DECL (evidence at its own ``tau``)."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from tiny_runs import TINY_SGRAF

from ncl.errors import ConfigError
from ncl.evaluation.combine import evidence
from ncl.evaluation.ranking import GMM
from ncl.methods.decl import DECL
from ncl.methods.decl_ranking import UNCERTAINTY
from ncl.methods.ncr import NCR
from ncl.models.sgraf import SGRAF

BACKBONE = partial(SGRAF, **TINY_SGRAF)
B = 5


def _batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    lengths = torch.tensor([7, 6, 5, 4, 3])
    return {"images": torch.randn(B, TINY_SGRAF["num_regions"], TINY_SGRAF["img_dim"], generator=generator),
            "tokens": torch.randint(1, 50, (B, 7), generator=generator),
            "lengths": lengths, "index": torch.tensor([3, 9, 0, 4, 7])}


def test_two_networks_average_their_scores() -> None:
    torch.manual_seed(0)
    method = NCR(50, BACKBONE).eval()
    batch = _batch()
    with torch.no_grad():
        out = method.predict_step(batch, 0)
        each = [net(batch["images"], batch["tokens"], batch["lengths"]).double() for net in method.nets]
    assert set(out) == {"index", "scores"} and out["index"].tolist() == [3, 9, 0, 4, 7]
    assert out["scores"].dtype == torch.float64 and out["scores"].shape == (B, B)
    torch.testing.assert_close(out["scores"], (each[0] + each[1]) / 2, rtol=0, atol=1e-12)
    assert not torch.allclose(each[0], each[1])  # two networks, so the mean is a mean
    assert method.rankings == (GMM,) and method.rule == "score"
    with pytest.raises(ConfigError, match="NCR's model.combine resolved to 'score'"):
        method.batch_evidence(batch)


def test_decl_gives_its_evidence_at_its_own_tau() -> None:
    torch.manual_seed(0)
    method = DECL(50, BACKBONE, tau=0.2).eval()
    method.predict_ranking = UNCERTAINTY
    batch = _batch()
    with torch.no_grad():
        out = method.predict_step(batch, 0)
        net = method.net
        z = net.similarity_logits(net.encode_images(batch["images"]),
                                  net.encode_captions(batch["tokens"], batch["lengths"]), batch["lengths"])
    assert set(out) == {"index", "scores", "evidence"}
    torch.testing.assert_close(out["evidence"], evidence(z, 0.2), rtol=1e-12, atol=0)
    torch.testing.assert_close(out["evidence"], torch.exp(torch.tanh(z.double()) / 0.2), rtol=1e-12, atol=0)
    torch.testing.assert_close(out["scores"], torch.sigmoid(z).double(), rtol=0, atol=1e-12)
    assert method.rankings == (UNCERTAINTY, GMM)
