"""ReCon's official computations written out by hand for the tests, in plain torch, from
qxzha/ReCon: ``model/ReCon.py`` at 2a40dcf (``info_nce_loss``, ``forward_relation``) and
``models/SGRAF.py`` at 75c60f7 (``EncoderSimilarity.forward_relation``, ``SCAN_attention`` with
``lens``). Nothing here calls ncl's loss or relation functions; the relation matrices are scored
with the network's own head modules (SGR steps or SAF, ``sim_eval_w``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def info_nce_by_hand(sims: Tensor, temp: float) -> tuple[Tensor, Tensor]:
    """``info_nce_loss``: positive on the diagonal, negatives off it, plain exponentials;
    returns the per-row loss and ``preds``, each (B,)."""
    eye = torch.eye(len(sims)).bool()
    pos = torch.exp(sims[eye].view(len(sims), -1) / temp).squeeze(1)
    neg = torch.exp(sims[~eye].view(len(sims), -1) / temp).sum(1)
    return -torch.log(pos / (pos + neg)), pos / (pos + neg)


def relation_by_hand(rel_imgs: Tensor, rel_caps: Tensor, cross: Tensor, mode: str,
                     eps: float = 1e-6) -> Tensor:
    """``ReCon.forward_relation``: the (B, B) entries of its two KLDivLoss calls."""
    length = len(cross)
    index = cross.argmax(-1).tolist()
    rows = [[i] * length for i in index]
    cols = [index] * length
    kl = nn.KLDivLoss(reduction="none")
    pseudo = nn.Softmax(dim=-1)(rel_caps[rows, cols])  # the caption relations in both modes
    own = nn.Softmax(dim=-1)(rel_imgs if mode == "v" else rel_caps)
    return kl(torch.log(own + eps), pseudo) + kl(torch.log(pseudo + eps), own)


def train_batch_losses(sims: Tensor, rel_img: Tensor, rel_cap: Tensor, targets: Tensor,
                       temp: float) -> tuple[Tensor, Tensor, Tensor]:
    """``train_batch``'s ``loss_rank`` (B,), scalar ``relation_loss`` and ``preds`` (B,)."""
    loss_rank, preds = info_nce_by_hand(sims, temp)
    loss_rank_t, preds_t = info_nce_by_hand(sims.t(), temp)
    loss_rank = (loss_rank + loss_rank_t) * 0.5 * targets
    relation_i2t = relation_by_hand(rel_img, rel_cap, sims, "v")
    relation_t2i = relation_by_hand(rel_img, rel_cap, sims.t(), "t")
    relation_loss = ((relation_i2t + relation_t2i) / 2 / len(sims)).mean()
    return loss_rank, relation_loss, (preds + preds_t) * 0.5


def _l2norm(x: Tensor, dim: int = -1) -> Tensor:
    return x / (torch.pow(x, 2).sum(dim=dim, keepdim=True).sqrt() + 1e-8)


def _head(sim_enc: nn.Module, sim_emb: Tensor) -> Tensor:
    if sim_enc.module_name == "SGR":
        for module in sim_enc.SGR_module:
            sim_emb = module(sim_emb)
        return sim_enc.sim_eval_w(sim_emb[:, 0, :])
    return sim_enc.sim_eval_w(sim_enc.SAF_module(sim_emb))


def relations_by_hand(sim_enc: nn.Module, img_emb: Tensor, cap_emb: Tensor,
                      cap_lens: list[int]) -> tuple[Tensor, Tensor]:
    """``EncoderSimilarity.forward_relation``: ``(sim_img, sim_cap)``, each (B, B)."""
    n_image = img_emb.size(0)
    img_glo = sim_enc.v_global_w(img_emb)  # ncl's VisualSA averages the regions itself
    sim_img = []
    for i in range(n_image):
        img_i_expand = img_emb[i].unsqueeze(0).repeat(n_image, 1, 1)
        sim_loc = _l2norm(sim_enc.sim_tranloc_w(torch.pow(img_emb - img_i_expand, 2) + 1e-6))
        sim_glo = _l2norm(sim_enc.sim_tranglo_w(torch.pow(img_glo - img_glo[i].unsqueeze(0), 2)
                                                + 1e-6))
        sim_img.append(_head(sim_enc, torch.cat([sim_glo.unsqueeze(1), sim_loc], 1)))
    n_caption = cap_emb.size(0)
    cap_glo = torch.cat([sim_enc.t_global_w(cap_emb[i, :n].unsqueeze(0))
                         for i, n in enumerate(cap_lens)], 0)
    sim_cap = []
    for i in range(n_caption):
        cap_i_expand = cap_emb[i, :cap_lens[i], :].unsqueeze(0).repeat(n_caption, 1, 1)
        context = cap_emb + 1e-6
        attn = torch.bmm(context, cap_i_expand.transpose(1, 2))  # (B, sourceL, queryL)
        attn = _l2norm(nn.LeakyReLU(0.1)(attn), 2)
        for k in range(len(cap_lens)):
            attn[k, cap_lens[k]:] = -1e9
        attn = F.softmax(attn.transpose(1, 2) * 9.0, dim=2)
        context_cap = _l2norm(torch.bmm(attn, context), -1)
        sim_loc = _l2norm(sim_enc.sim_tranloc_w(torch.pow(context_cap - cap_i_expand, 2)))
        sim_glo = _l2norm(sim_enc.sim_tranglo_w(torch.pow(cap_glo - cap_glo[i].unsqueeze(0), 2)
                                                + 1e-6))
        sim_cap.append(_head(sim_enc, torch.cat([sim_glo.unsqueeze(1), sim_loc], 1)))
    return torch.cat(sim_img, 1), torch.cat(sim_cap, 1)
