"""Memory-lean local similarity vectors for the batched path (spec 3.3, section 6 item 1).

``W_loc (l2norm(sum_r alpha_kr v_r) - t_k)^2 + b`` for every image and word of a chunk. Written
with autograd ops, a training step keeps three ``(B_img, C L, 1024)`` tensors per chunk for
the backward pass (the attended regions, their difference to the words and its square):
about 2.8 GB for a 128 x 128 batch at official sizes. This Function keeps only its inputs
(the ``(B_img, C L, 36)`` attention weights, regions, words and weight) and recomputes the
rest in the backward pass: one extra ``bmm`` of ``R = 36`` terms per word, small next to the
``1024 -> 256`` projection. Forward values are identical to the plain expression.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from ncl.models.layers import NORM_EPS


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The autocast dtype active for ``device_type`` (``"cpu"``, ``"cuda"``), else ``None``.

    ``torch.is_autocast_enabled(device_type)`` exists from torch 2.4; 2.3 has per-device
    functions, so ``pyproject.toml``'s ``torch>=2.3`` keeps working.
    """
    try:
        if torch.is_autocast_enabled(device_type):
            return torch.get_autocast_dtype(device_type)
        return None
    except (TypeError, AttributeError):  # torch 2.3
        if device_type == "cpu":
            return torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else None
        return torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else None


class LocalSimilarity(torch.autograd.Function):
    """``(attn, img_emb, words, weight, bias) -> W (l2norm(attn @ img_emb) - words)^2 + b``.

    Shapes: ``attn (B, CL, R)``, ``img_emb (B, R, E)``, ``words (CL, E)``,
    ``weight (S, E)``, ``bias (S,)``; output ``(B, CL, S)``.

    Mixed precision: ``dtype`` is the autocast dtype of the caller (or the inputs' own). The
    two matrix products of each pass run in it; the norm, the difference and its square stay
    in the inputs' dtype (float32), as autocast would keep them. Casts are explicit, not
    ``torch.amp.custom_fwd``/``custom_bwd``: those bind one device type, and under CPU
    autocast a CUDA-bound backward mixed bfloat16 and float32 (a traceback in ``bf16-mixed``).
    With ``dtype`` equal to the inputs' dtype every cast is a no-op, so float32 values are
    the same to the bit as before.
    """

    @staticmethod
    def forward(ctx: FunctionCtx, attn: Tensor, img_emb: Tensor, words: Tensor,
                weight: Tensor, bias: Tensor, dtype: torch.dtype) -> Tensor:
        """Compute in place on one buffer; save only the inputs."""
        work = img_emb.dtype
        context = torch.bmm(attn.to(dtype), img_emb.to(dtype)).to(work)
        denom = torch.linalg.vector_norm(context, dim=-1, keepdim=True).add_(NORM_EPS)
        squared = context.div_(denom).sub_(words.to(work)).pow_(2)  # (B, CL, E), one buffer
        ctx.save_for_backward(attn, img_emb, words, weight)
        ctx.dtype = dtype
        return F.linear(squared.to(dtype), weight.to(dtype), bias.to(dtype))

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        """Recompute ``d`` and differentiate by hand.

        With ``y = x / (n + eps)``, ``n = ||x||``:
        ``dL/dx = g / (n + eps) - x (g . x) / (n (n + eps)^2)`` (zero where ``x = 0``).
        """
        attn, img_emb, words, weight = ctx.saved_tensors
        low, work = ctx.dtype, img_emb.dtype
        context = torch.bmm(attn.to(low), img_emb.to(low)).to(work)
        norm = torch.linalg.vector_norm(context, dim=-1, keepdim=True)
        diff = (context / (norm + NORM_EPS)).sub_(words.to(work))
        denom = norm + NORM_EPS
        grad_out = grad_out.to(low)
        # The factor 2 of d(d^2) goes on the small (B, CL, S) side: exact (a power of two)
        # and one pass less over the (B, CL, E) buffer.
        grad_diff = (grad_out * 2.0 @ weight.to(low)).to(work).mul_(diff)  # (B, CL, E)
        flat_out = grad_out.reshape(-1, grad_out.shape[-1])  # (B CL, S)
        grad_weight = flat_out.t() @ diff.pow_(2).reshape(-1, diff.shape[-1]).to(low)
        del diff  # the largest buffers are freed as soon as they are used
        grad_bias = flat_out.sum(dim=0)
        grad_words = -grad_diff.sum(dim=0)
        dot = torch.linalg.vecdot(grad_diff, context).unsqueeze(-1)  # (B, CL, 1)
        # x = 0 exactly where n = 0, so the second term is 0 there; avoid 0/0.
        scale = torch.where(norm > 0, dot / (norm.clamp_min(1e-30) * denom.pow(2)),
                            torch.zeros_like(dot))
        grad_context = grad_diff.div_(denom).addcmul_(context, scale, value=-1.0).to(low)
        needs = ctx.needs_input_grad
        grad_attn = (torch.bmm(grad_context, img_emb.to(low).transpose(1, 2)).to(attn.dtype)
                     if needs[0] else None)
        grad_img = (torch.bmm(attn.to(low).transpose(1, 2), grad_context).to(work)
                    if needs[1] else None)
        return (grad_attn, grad_img, grad_words.to(words.dtype), grad_weight.to(weight.dtype),
                grad_bias.to(weight.dtype), None)


def local_similarity(attn: Tensor, img_emb: Tensor, words: Tensor, weight: Tensor,
                     bias: Tensor) -> Tensor:
    """``W_loc (c_k - t_k)^2 + b_loc`` with ``c_k = l2norm(sum_r attn_kr v_r)`` (spec 3.3).

    Args:
        attn: ``(B_img, C L, R)`` attention of each word over the regions.
        img_emb: ``(B_img, R, E)`` regions.
        words: ``(C L, E)`` word embeddings.
        weight: ``(S, E)`` of ``sim_tranloc_w``.
        bias: ``(S,)`` of ``sim_tranloc_w``.

    Returns:
        ``(B_img, C L, S)``, before the final l2norm.
    """
    device = img_emb.device.type
    dtype = autocast_dtype(device) or img_emb.dtype
    with torch.autocast(device_type=device, enabled=False):  # the Function casts explicitly
        return LocalSimilarity.apply(attn, img_emb, words, weight, bias, dtype)
