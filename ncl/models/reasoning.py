"""Reasoning heads over similarity nodes: SGR and SAF (spec 3.3; NCR supplement eqs. 5-6).

Each head has two entry points:

* ``forward(nodes)``: the reference, for ``(B, N, D)`` nodes that are all real (one caption
  against a batch of images), as in the official per-caption loop.
* a ``*_masked`` function for ``(M, N, D)`` nodes padded to a common ``N`` with a
  ``(M, N)`` node mask, used by the batched path. They compute the same numbers up to
  float rounding (eval mode), see the docstrings for the algebra used.

Names (``graph_query_w``, ``graph_key_w``, ``sim_graph_w``, ``attn_sim_w``, ``bn``) equal the
official ones (spec 3.4).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ncl.models.layers import init_similarity_weights, l1norm, l2norm


class GraphReasoning(nn.Module):
    """One SGR step (NCR supplement eqs. 5-6; spec 3.3).

    ``Q = W_q U + b_q``, ``K = W_k U + b_k``, ``E = softmax_row(Q K^T)`` (no scaling),
    ``U <- ReLU(W_r (E U) + b_r)``; no residual.

    Args:
        sim_dim: Node size (256).
    """

    def __init__(self, sim_dim: int) -> None:
        super().__init__()
        self.graph_query_w = nn.Linear(sim_dim, sim_dim)
        self.graph_key_w = nn.Linear(sim_dim, sim_dim)
        self.sim_graph_w = nn.Linear(sim_dim, sim_dim)
        init_similarity_weights(self)

    def forward(self, nodes: Tensor) -> Tensor:
        """Reference step: ``(B, N, D) -> (B, N, D)``."""
        query = self.graph_query_w(nodes)  # (B, N, D)
        key = self.graph_key_w(nodes)  # (B, N, D)
        edges = torch.bmm(query, key.transpose(1, 2)).softmax(dim=-1)  # (B, N, N)
        return torch.relu(self.sim_graph_w(torch.bmm(edges, nodes)))

    def fused_query(self) -> tuple[Tensor, Tensor]:
        """Matrix ``A`` and vector ``beta`` with ``softmax_m(Q K^T) = softmax_m((U A + beta) U^T)``.

        Row ``n`` of ``Q K^T`` is ``u_n^T W_q^T W_k u_m + (W_k u_m).b_q + (W_q u_n).b_k +
        b_q.b_k``. The last two terms do not depend on the key ``m`` and cancel in the row
        softmax, so ``A = W_q^T W_k`` and ``beta = W_k^T b_q``: one ``D x D`` product per node
        instead of two (the key projection disappears). Exact up to rounding.

        Returns:
            ``A`` of shape ``(D, D)`` and ``beta`` of shape ``(D,)``.
        """
        w_q, w_k = self.graph_query_w.weight, self.graph_key_w.weight  # (D, D) each
        return w_q.t() @ w_k, w_k.t() @ self.graph_query_w.bias


FusedStep = tuple[Tensor, Tensor, Tensor]


def fused_queries(steps: nn.ModuleList) -> list[FusedStep]:
    """``(A, beta, b_q . b_k)`` of every step (:meth:`GraphReasoning.fused_query`).

    They depend on the weights only, so the chunked path computes them once per forward
    and hands them to :func:`sgr_masked` for every chunk (autograd sums the chunks'
    gradients into one ``D x D`` matrix per step before the one backward product).
    """
    return [(*step.fused_query(), step.graph_query_w.bias @ step.graph_key_w.bias)
            for step in steps]


def sgr_masked(steps: nn.ModuleList, nodes: Tensor, node_mask: Tensor,
               fused: list[FusedStep] | None = None) -> Tensor:
    """Run SGR on padded node sets and return the global node after the last step.

    Padded nodes are masked out as keys, so they never influence real nodes; node 0 (the
    global node) is always real. Two exact savings over the reference: the fused query of
    :meth:`GraphReasoning.fused_query`, and in the last step only node 0 is updated because
    only it is read (spec 3.3: "The final vector is U[0]").

    Args:
        steps: The ``GraphReasoning`` modules, applied in order.
        nodes: ``(M, N, D)`` nodes, padded.
        node_mask: ``(M, N)`` bool, True at real nodes; column 0 must be True.
        fused: :func:`fused_queries` of ``steps``, if already computed.

    Returns:
        ``(M, D)`` reasoned global node.
    """
    key_mask = torch.zeros(node_mask.shape, dtype=nodes.dtype, device=nodes.device)
    key_mask = key_mask.masked_fill(~node_mask, float("-inf")).unsqueeze(1)  # (M, 1, N)
    # b_q . b_k (the offset) is one of the terms that cancel in the softmax; adding it back
    # costs nothing and keeps b_k in the graph (a zero gradient, as in the reference), which
    # DistributedDataParallel needs: it fails on parameters that get no gradient.
    fused = fused_queries(steps) if fused is None else fused
    for index, (step, (a_mat, beta, offset)) in enumerate(zip(steps, fused, strict=True)):
        queries = nodes[:, :1] if index == len(steps) - 1 else nodes  # (M, Nq, D)
        projected = torch.addmm(beta, queries.reshape(-1, queries.shape[-1]), a_mat)
        scores = torch.baddbmm(key_mask + offset, projected.view(queries.shape),
                               nodes.transpose(1, 2))
        edges = scores.softmax(dim=-1)  # (M, Nq, N)
        # In-place ReLU is safe: a Linear's backward needs its input, not its output.
        nodes = torch.relu_(step.sim_graph_w(torch.bmm(edges, nodes)))
    return nodes[:, 0]


class AttentionFiltration(nn.Module):
    """SAF head (spec 3.3): ``a = l1norm(sigmoid(BN_1(W_a U)))``, ``vec = l2norm(sum_n a_n U_n)``.

    Args:
        sim_dim: Node size (256).
    """

    def __init__(self, sim_dim: int) -> None:
        super().__init__()
        self.attn_sim_w = nn.Linear(sim_dim, 1)
        self.bn = nn.BatchNorm1d(1)
        init_similarity_weights(self)

    def forward(self, nodes: Tensor) -> Tensor:
        """Reference: ``(B, N, D) -> (B, D)``; BatchNorm statistics over all ``B x N`` scores."""
        scores = self.attn_sim_w(nodes).transpose(1, 2)  # (B, 1, N)
        attn = l1norm(torch.sigmoid(self.bn(scores)), dim=-1)  # (B, 1, N)
        return l2norm(torch.bmm(attn, nodes).squeeze(1), dim=-1)


def saf_masked(head: AttentionFiltration, nodes: Tensor, node_mask: Tensor) -> tuple[
        Tensor, Tensor | None, Tensor | None]:
    """SAF on ``B_img x C`` padded node sets, one caption per column.

    The reference calls SAF once per caption with all images, so in train mode BatchNorm
    statistics are taken per caption over its ``B_img x (L_j + 1)`` real scores. This
    reproduces that; the running-statistic update is left to the caller
    (:func:`update_running_stats`) so that it can follow the reference caption order.

    Args:
        head: The SAF module (its ``bn`` decides train/eval behaviour).
        nodes: ``(B_img, C, N, D)`` nodes, padded.
        node_mask: ``(C, N)`` bool, True at real nodes.

    Returns:
        ``(B_img, C, D)`` vectors, then per-caption batch mean and unbiased variance
        ``(C,)`` (None when running statistics are used, i.e. in eval mode).
    """
    bn = head.bn
    scores = head.attn_sim_w(nodes).squeeze(-1)  # (B_img, C, N)
    maskf = node_mask.to(scores.dtype).unsqueeze(0)  # (1, C, N)
    use_batch_stats = bn.training or bn.running_mean is None
    if use_batch_stats:
        count = maskf.sum(dim=(0, 2)) * scores.shape[0]  # (C,)
        mean = (scores * maskf).sum(dim=(0, 2)) / count
        var = ((scores - mean[None, :, None]).pow(2) * maskf).sum(dim=(0, 2)) / count
    else:
        mean, var = bn.running_mean, bn.running_var  # (1,) each
    normed = (scores - _col(mean)) / torch.sqrt(_col(var) + bn.eps) * bn.weight + bn.bias
    attn = l1norm(torch.sigmoid(normed) * maskf, dim=-1)  # (B_img, C, N)
    vec = l2norm(torch.einsum("icn,icnd->icd", attn, nodes), dim=-1)
    if not use_batch_stats:
        return vec, None, None
    return vec, mean.detach(), (var * count / (count - 1)).detach()


def _col(stat: Tensor) -> Tensor:
    """Broadcast a ``(C,)`` or ``(1,)`` statistic over ``(B_img, C, N)``."""
    return stat.view(1, -1, 1)


def update_running_stats(bn: nn.BatchNorm1d, means: Tensor, variances: Tensor) -> None:
    """Apply ``len(means)`` successive BatchNorm running-statistic updates, in order.

    Equivalent to calling ``bn`` once per caption in train mode, as the reference loop does:
    with momentum ``m``, ``r <- (1 - m) r + m x_j`` for ``j = 1..C``.

    Args:
        bn: A ``BatchNorm1d(1)`` with running statistics.
        means: ``(C,)`` per-call batch means.
        variances: ``(C,)`` per-call unbiased batch variances.
    """
    if bn.running_mean is None or not bn.track_running_stats:
        return
    with torch.no_grad():
        if bn.momentum is None:  # cumulative moving average: sequential by definition
            for mean, var in zip(means, variances, strict=True):
                bn.num_batches_tracked += 1
                factor = 1.0 / float(bn.num_batches_tracked)
                bn.running_mean.mul_(1 - factor).add_(factor * mean)
                bn.running_var.mul_(1 - factor).add_(factor * var)
            return
        # Closed form of the C sequential updates: one kernel each, not C.
        keep = 1.0 - bn.momentum
        steps = means.shape[0]
        powers = torch.arange(steps - 1, -1, -1, device=means.device, dtype=means.dtype)
        weights = bn.momentum * keep ** powers  # (C,)
        bn.running_mean.mul_(keep ** steps).add_((weights * means).sum())
        bn.running_var.mul_(keep ** steps).add_((weights * variances).sum())
        bn.num_batches_tracked += steps
