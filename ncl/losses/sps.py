"""SPS's (IJCAI 2025) losses and proxy captions as pure functions.

On top of CREAM's pieces (:mod:`ncl.losses.cream`), SPS trains its strictly clean batch with
two consistency terms (official ``InfoNCELoss`` ``mode="train_sc"``) and gives each noisy image
the caption of its most similar strictly clean image as a proxy (official
``process_noisy_p1``):

* :func:`symmetry_penalty` - ``w mean((S - S^T)^2)`` of the ``(B, B)`` similarities;
* :func:`structure_penalty` - ``w mean((M_img - M_txt)^2)`` with ``M`` the cosine matrices
  (:func:`cosine_matrix`) of the mean region embedding of each image and the mean word
  embedding of each caption (:func:`mean_word_embeddings`);
* :func:`proxy_captions` - per noisy image, the strictly clean image of largest cosine;
* :func:`proxy_labels` - ``p_i cos_i``, zeroed below 0.5;
* :func:`weighted_infonce` - ``mean_i y_i l_i`` (SPS's ``mode="train"``: no soft negatives).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ncl.losses._checks import check_square
from ncl.losses.cream import per_sample_infonce


def cosine_matrix(a: Tensor, b: Tensor, eps: float = 1e-8) -> Tensor:
    """``(N_a, N_b)`` cosines ``a_i . b_j / max(|a_i| |b_j|, eps)`` (official ``SIM_PAIR``,
    whose arguments are the other way round)."""
    dots = a @ b.t()
    norms = a.norm(dim=1).unsqueeze(1) * b.norm(dim=1).unsqueeze(0)
    return dots / norms.clamp_min(eps)


def mean_word_embeddings(cap_emb: Tensor, lengths: Tensor) -> Tensor:
    """``(B, D)`` mean of each caption's first ``lengths[i]`` word embeddings ``(B, L, D)``."""
    steps = torch.arange(cap_emb.shape[1], device=cap_emb.device)
    mask = (steps.unsqueeze(0) < lengths.to(cap_emb.device).unsqueeze(1)).to(cap_emb.dtype)  # (B, L)
    return (cap_emb * mask.unsqueeze(2)).sum(1) / mask.sum(1, keepdim=True)


def symmetry_penalty(sims: Tensor, weight: float = 25.0) -> Tensor:
    """``weight * mean((S - S^T)^2)`` (a scalar)."""
    check_square(sims)
    return weight * ((sims - sims.t()) ** 2).mean()


def structure_penalty(image_means: Tensor, caption_means: Tensor, weight: float = 25.0) -> Tensor:
    """``weight * mean((M_img - M_txt)^2)`` of the ``(B, B)`` cosine matrices of the images'
    ``(B, D)`` mean region embeddings and the captions' ``(B, D)`` mean word embeddings."""
    return weight * ((cosine_matrix(image_means, image_means)
                      - cosine_matrix(caption_means, caption_means)) ** 2).mean()


def proxy_captions(clean_images: Tensor, noisy_images: Tensor) -> tuple[Tensor, Tensor]:
    """For each of the ``(B_n, D)`` noisy images, the index (B_n,) of the ``(B_s, D)`` strictly
    clean image of largest cosine, and that cosine (B_n,)."""
    best = cosine_matrix(noisy_images, clean_images).max(dim=1)
    return best.indices, best.values


def proxy_labels(prediction: Tensor, cosine: Tensor, threshold: float = 0.5) -> Tensor:
    """``p_i cos_i`` (B,), set to 0 where below ``threshold`` (official 0.5)."""
    labels = prediction * cosine.to(prediction.dtype)
    return torch.where(labels < threshold, torch.zeros_like(labels), labels)


def weighted_infonce(sims: Tensor, labels: Tensor, temperature: float = 0.07) -> Tensor:
    """``mean_i y_i (L^r_ii + L^c_ii)`` (a scalar; SPS's ``mode="train"``)."""
    losses = per_sample_infonce(sims, temperature)
    return (losses * labels.to(losses.dtype)).mean()
