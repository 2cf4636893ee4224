"""PC² by value (docs/methods/pc2.md): the pseudo-classification loss and its entropy, the bank,
the combined division, the pseudo-caption assignment and one co-training step, each against an
independent computation (loops and hand values, not the functions under test)."""

from __future__ import annotations

import math

import pytest
import torch
from callbacks.ncr_fakes import SgrafPairs

from ncl.data.datasets import collate
from ncl.division.co_divide import Division
from ncl.division.pc2 import (DistributionBank, PC2Division, labelled_targets,
                              match_pseudo_captions, oscillation, pc2_division, subset_positions)
from ncl.errors import ConfigError
from ncl.losses.pc2 import pseudo_classification, selected_mean_hinges
from ncl.methods.pc2 import PC2
from ncl.models.pc2_head import fit_positions
from ncl.models.sgraf import SGRAF


def _entropy(row: list[float]) -> float:
    return -sum(p * math.log(p) for p in row)


def _softmax(row: list[float]) -> list[float]:
    e = [math.exp(v) for v in row]
    return [v / sum(e) for v in e]


@pytest.mark.parametrize("entropy_of", ["samples", "batch_mean"])
def test_pseudo_classification_by_hand(entropy_of: str) -> None:
    img = [[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]]
    txt = [[0.0, 0.0, 3.0], [0.0, 1.0, 0.0]]  # argmax q: classes 2 and 1
    p = [_softmax(r) for r in img]
    ce = -(math.log(p[0][2]) + math.log(p[1][1])) / 2
    if entropy_of == "samples":
        h = (_entropy(p[0]) + _entropy(p[1])) / 2
    else:
        h = _entropy([(a + b) / 2 for a, b in zip(*p)])
    terms = pseudo_classification(torch.tensor(img), torch.tensor(txt), 10.0, entropy_of)
    assert terms.ce_image.item() == pytest.approx(ce, rel=1e-6)
    assert terms.entropy.item() == pytest.approx(h, rel=1e-6)
    assert terms.loss.item() == pytest.approx(ce - 10.0 * h, rel=1e-6)  # the entropy is subtracted
    q = [_softmax(r) for r in txt]
    assert terms.caption_entropy.item() == pytest.approx(_entropy([(a + b) / 2 for a, b in zip(*q)]), rel=1e-6)
    assert terms.ce_caption.item() == pytest.approx(-(math.log(q[0][0]) + math.log(q[1][1])) / 2, rel=1e-6)


def test_entropy_term_raises_entropy() -> None:
    """A gradient step on -lambda H alone makes the image predictions flatter (official sign)."""
    logits = torch.tensor([[3.0, 0.0, 0.0]], requires_grad=True)
    terms = pseudo_classification(logits, torch.tensor([[3.0, 0.0, 0.0]]), 10.0)
    (-10.0 * terms.entropy).backward()
    assert logits.grad[0, 0] > 0 and logits.grad[0, 1] < 0  # descent lowers the top logit


def test_warmup_keeps_the_smallest_half() -> None:
    sims = torch.tensor([[0.9, 0.1, 0.0, 0.0], [0.0, 0.9, 0.0, 0.0],
                         [0.8, 0.8, 0.1, 0.8], [0.0, 0.0, 0.8, 0.2]])
    out = selected_mean_hinges(sims, 0.2, 0.5)
    losses = []
    for i in range(4):  # mean hinges by hand, floor 1e-8, diagonals 0
        cs = sum(max(0.2 + sims[i, j].item() - sims[i, i].item(), 1e-8) for j in range(4) if j != i)
        ci = sum(max(0.2 + sims[r, i].item() - sims[i, i].item(), 1e-8) for r in range(4) if r != i)
        losses.append(cs / 4 + ci / 4)
    kept = sorted(range(4), key=lambda i: losses[i])[:2]
    want = [losses[i] if i in kept else 0.0 for i in range(4)]
    torch.testing.assert_close(out, torch.tensor(want))


def test_bank_last_write_wins_and_oscillation() -> None:
    bank = DistributionBank(2, 3)
    bank.reset(4)
    v = torch.tensor([[0.2, 0.3, 0.5], [0.6, 0.2, 0.2], [0.1, 0.1, 0.8]])
    bank.write(0, torch.tensor([1, 2, 1]), v)
    assert bank.present.tolist() == [[False, True, True, False], [False] * 4]
    torch.testing.assert_close(bank.values[0, 1], v[2])  # the later write of index 1
    torch.testing.assert_close(bank.values[0, 2], v[1])
    pred = torch.tensor([[0.3, 0.3, 0.4], [0.5, 0.25, 0.25], [0.2, 0.2, 0.6], [0.1, 0.8, 0.1]])
    got = bank.oscillation(0, pred)
    want = [0.0] + [sum(a * math.log(a / b) for a, b in zip(pred[i].tolist(), bank.values[0, i].tolist()))
                    for i in (1, 2)] + [0.0]
    torch.testing.assert_close(got, torch.tensor(want))
    again = DistributionBank(2, 3)
    again.load_state_dict(bank.state_dict())
    assert torch.equal(again.values, bank.values) and torch.equal(again.present, bank.present)
    with pytest.raises(ValueError, match="shape"):
        DistributionBank(2, 4).load_state_dict(bank.state_dict())


def test_oscillation_refuses_misfit_shapes() -> None:
    with pytest.raises(ValueError):
        oscillation(torch.rand(3, 2), torch.rand(3, 4), torch.ones(3, dtype=torch.bool))


def test_labelled_targets_by_value() -> None:
    y = labelled_targets(torch.tensor([0.9, 0.2, 0.5]), torch.tensor([0.8, 0.3, 0.6]),
                         torch.tensor([True, False, True]))
    torch.testing.assert_close(y, torch.tensor([0.9 + 0.1 * 0.8, 0.2, 0.5 + 0.5 * 0.6]))


def test_combined_division_on_fixed_inputs() -> None:
    g = torch.Generator().manual_seed(0)
    low, high = 0.1 + 0.01 * torch.rand(12, generator=g), 0.9 + 0.01 * torch.rand(8, generator=g)
    losses = torch.stack([torch.cat([low, high]), torch.cat([high, low])]).double()
    osc = torch.stack([torch.cat([high[:4], low, high[4:]]), torch.cat([low, high])]).double()
    div = pc2_division(3, losses, osc, 0.5, 0)
    assert div.epoch == 3
    assert div.loss.clean[0].tolist() == [True] * 12 + [False] * 8
    assert div.loss.clean[1].tolist() == [False] * 8 + [True] * 12
    assert div.stable[0].tolist() == [False] * 4 + [True] * 12 + [False] * 4
    assert div.stable[1].tolist() == [True] * 12 + [False] * 8
    assert bool((div.loss.prob[0, :12] > 0.99).all()) and bool((div.stable_prob[0, :4] < 0.01).all())
    again = PC2Division.from_state(div.state())
    assert torch.equal(again.stable, div.stable) and torch.equal(again.loss.prob, div.loss.prob)


def test_pseudo_caption_assignment_by_hand() -> None:
    pred_u = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
    pred_l = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.7, 0.7], [1.0, 0.0]])
    donor, label = match_pseudo_captions(pred_u, pred_l, 0.5)
    assert donor.tolist() == [1, 2, 0]  # row 0: a tie of 1 and 3 takes the first
    torch.testing.assert_close(label, torch.tensor([1.0, (0.42 + 0.56) / math.sqrt(0.98), 1.0]))
    donor, label = match_pseudo_captions(torch.tensor([[0.0, 1.0]]), torch.tensor([[1.0, 0.0], [0.9, 0.3]]))
    assert donor.tolist() == [1] and label.tolist() == [0.0]  # cosine 0.316 < 0.5


def test_subset_positions_and_fit_positions() -> None:
    subset = torch.tensor([True, False, True, True, False])
    assert subset_positions(subset, torch.tensor([3, 0, 2])).tolist() == [2, 0, 1]
    assert subset_positions(~subset, torch.tensor([4, 1])).tolist() == [1, 0]
    with pytest.raises(ValueError, match="outside"):
        subset_positions(subset, torch.tensor([1]))
    short = torch.tensor([[[1.0], [2.0]]])  # (1, 2, 1) -> 5: one zero before, two after
    assert fit_positions(short, 5).flatten().tolist() == [0.0, 1.0, 2.0, 0.0, 0.0]
    long = torch.arange(4.0).reshape(1, 4, 1)  # align_corners=False: sources 0.5 and 2.5
    assert fit_positions(long, 2).flatten().tolist() == [0.5, 2.5]


# ---------------------------------------------------------------- one co-training step
def _backbone(vocab: int) -> SGRAF:
    return SGRAF(vocab, img_dim=16, num_regions=6, word_dim=8, embed_size=16, sim_dim=8,
                 dropout=0.0, similarity_strategy="chunked")


def _model(**kwargs) -> PC2:  # noqa: ANN003 - switches
    torch.manual_seed(0)
    model = PC2(30, _backbone, proj_dim=5, **kwargs)
    model.bank.reset(40)
    return model


def _resize(emb: torch.Tensor, size: int) -> torch.Tensor:
    """(L, E) -> (size, E): centred zero padding or linear interpolation, by loops."""
    length = emb.shape[0]
    if length <= size:
        before = (size - length) // 2
        out = torch.zeros(size, emb.shape[1])
        out[before: before + length] = emb
        return out
    rows = []
    for i in range(size):
        src = max((i + 0.5) * length / size - 0.5, 0.0)
        lo = int(math.floor(src))
        hi = min(lo + 1, length - 1)
        rows.append(emb[lo] * (1 - (src - lo)) + emb[hi] * (src - lo))
    return torch.stack(rows)


def _hinge_sum(sims: torch.Tensor, margin: list[float], by: str) -> torch.Tensor:
    """Summed hardest-negative hinge, floor 1e-8, the margin of image row i ('row') or of
    caption column j ('col') in both matrices."""
    n = sims.shape[0]
    total = 0.0
    for i in range(n):
        total += max(max((margin[i] if by == "row" else margin[j]) + sims[i, j].item() - sims[i, i].item(), 1e-8)
                     for j in range(n) if j != i)
    for j in range(n):
        total += max(max((margin[i] if by == "row" else margin[j]) + sims[i, j].item() - sims[j, j].item(), 1e-8)
                     for i in range(n) if i != j)
    return torch.tensor(total)


def _expected(model: PC2, k: int, lab: dict, unl: dict, clean_peer: torch.Tensor,
              div: PC2Division) -> tuple[torch.Tensor, torch.Tensor, dict[int, torch.Tensor]]:
    net, head, peer = model.nets[k], model.heads[k], 1 - k
    with torch.no_grad():
        idx = lab["index"].tolist()
        y = [div.loss.prob[peer, i].item() + (1 - div.loss.prob[peer, i].item())
             * div.stable_prob[peer, i].item() * float(div.stable[peer, i]) for i in idx]
        m = [0.2 * (10 ** v - 1) / 9 for v in y]
        img_l = net.encode_images(lab["images"])
        cap_l = net.encode_captions(lab["tokens"], lab["lengths"])[:, : int(lab["lengths"].max())]
        triplet = _hinge_sum(net.similarity(img_l, cap_l, lab["lengths"]), m, "row")
        logits = head(img_l.reshape(len(idx), -1))
        txt = torch.stack([head(_resize(c, 6).reshape(1, -1))[0] for c in cap_l])
        p = logits.softmax(1)
        ce = -sum(math.log(p[i, int(txt[i].argmax())].item()) for i in range(len(idx))) / len(idx)
        h = sum(_entropy(r) for r in p.tolist()) / len(idx)
        loss_l = triplet + ce - 10.0 * h
        # the pseudo-caption step
        img_u = net.encode_images(unl["images"])
        width = int(unl["lengths"].max())
        cap_u = net.encode_captions(unl["tokens"], unl["lengths"])[:, :width]
        pu, pl = head(img_u.reshape(len(img_u), -1)).softmax(1), p
        donors, labels = [], []
        for i in range(len(pu)):
            cos = [float(pu[i] @ pl[j] / (pu[i].norm() * pl[j].norm())) for j in range(len(pl))]
            donors.append(max(range(len(cos)), key=lambda j: (cos[j], -j)))
            labels.append(cos[donors[-1]] if cos[donors[-1]] >= 0.5 else 0.0)
        caps = torch.stack([1e-8 * cap_u[i] + _resize(cap_l[d], width) for i, d in enumerate(donors)])
        lens = torch.tensor([min(int(lab["lengths"][d]), width) for d in donors])
        sims_u = net.similarity(img_u, caps, lens)
        loss_u = _hinge_sum(sims_u, [0.2 * (10 ** v - 1) / 9 for v in labels], "col")
        clean_ids = torch.nonzero(clean_peer).flatten().tolist()
        noisy_ids = torch.nonzero(~clean_peer).flatten().tolist()
        bank = {noisy_ids.index(i): pu[r] for r, i in enumerate(unl["index"].tolist())}
        bank.update({clean_ids.index(i): pl[r] for r, i in enumerate(idx)})
    return loss_l, loss_u, bank


def _division(n: int = 40) -> PC2Division:
    g = torch.Generator().manual_seed(3)
    clean = torch.zeros(2, n, dtype=torch.bool)
    clean[:, :24] = True
    prob = torch.rand(2, n, generator=g)
    stable_prob = torch.rand(2, n, generator=g)
    return PC2Division(Division(1, torch.rand(2, n, generator=g), prob, clean), torch.rand(2, n),
                       stable_prob, stable_prob > 0.5)


@pytest.mark.parametrize(("lab_ids", "unl_ids"), [
    ((3, 7, 11, 0, 19, 22, 5, 14), (30, 25, 38, 27, 33)),  # longest captions 7 and 7
    ((3, 7, 11, 0, 19, 22, 5, 14), (25, 26, 32, 35)),      # donors (7) interpolated to 4
    ((1, 7, 8, 9, 10, 11, 4, 6), (30, 25, 38, 27, 33))])   # donors (4) padded to 7
def test_one_cotrain_step_by_value(lab_ids: tuple[int, ...], unl_ids: tuple[int, ...]) -> None:
    """Network 1's labelled and pseudo-caption losses and its bank writes (official switches)."""
    model = _model()
    model.eval()  # no dropout: the same embeddings in the step and here
    model.division = _division()
    losses: list[tuple[int, torch.Tensor]] = []
    model.optimize = lambda k, loss: losses.append((k, loss.detach()))
    model.log_net = lambda *args, **kwargs: None
    model.pseudo_captions_on = lambda: True
    pairs = SgrafPairs(40)
    lab, unl = collate([pairs[i] for i in lab_ids]), collate([pairs[i] for i in unl_ids])
    loss_l, loss_u, bank = _expected(model, 1, lab, unl, model.division.loss.clean[0], model.division)
    model.cotrain_step(1, lab, unl)
    assert [k for k, _ in losses] == [1, 1]
    torch.testing.assert_close(losses[0][1], loss_l, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(losses[1][1], loss_u, rtol=1e-5, atol=1e-5)
    assert sorted(bank) == torch.nonzero(model.bank.present[1]).flatten().tolist()
    for i, value in bank.items():
        torch.testing.assert_close(model.bank.values[1, i], value)
    assert not model.bank.present[0].any()


def test_bank_index_dataset_writes_at_the_pairs() -> None:
    model = _model(bank_index="dataset")
    model.eval()
    model.division = _division()
    model.optimize = lambda k, loss: None
    model.log_net = lambda *args, **kwargs: None
    model.pseudo_captions_on = lambda: True
    pairs = SgrafPairs(40)
    model.cotrain_step(0, collate([pairs[i] for i in (1, 2, 3)]), collate([pairs[i] for i in (30, 31)]))
    assert torch.nonzero(model.bank.present[0]).flatten().tolist() == [1, 2, 3, 30, 31]


def test_pseudo_label_grad_switch() -> None:
    """The official labels carry gradient into the head; detached, the head gets none from
    the pseudo-caption loss."""
    grads = []
    for keep in (True, False):
        model = _model(pseudo_label_grad=keep)
        model.division = _division()
        pairs = SgrafPairs(40)
        loss, _ = model.pseudo_caption_loss(0, collate([pairs[i] for i in (1, 2, 3, 4)]),
                                            collate([pairs[i] for i in (30, 31, 32)]))
        loss.backward()
        grads.append(sum(float(p.grad.abs().sum()) for p in model.heads[0].parameters()
                         if p.grad is not None))
    assert grads[0] > 0 and grads[1] == 0


def test_selection_restarts_at_pseudo_captions() -> None:
    model = _model(warmup_epochs=2, pseudo_caption_start=3)
    model.trainer = type("T", (), {"max_epochs": 10})()  # type: ignore[assignment]
    assert [model.selectable(e) for e in range(10)] == [False] * 5 + [True] * 5
    model.hparams.select_from_pseudo_captions = False
    assert [model.selectable(e) for e in range(10)] == [False] * 2 + [True] * 8


@pytest.mark.parametrize(("kwargs", "name"), [({"proj_dim": 0}, "proj_dim"),
                                               ({"lambda_en": -1.0}, "lambda_en"),
                                               ({"pseudo_caption_start": -1}, "pseudo_caption_start"),
                                               ({"soft_margin": "sigmoid"}, "soft_margin")])
def test_bad_options_name_the_option(kwargs: dict, name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        PC2(30, _backbone, **kwargs)
