"""CRCL's training-time augmentation of captions and region features (spec 1.7).

Pure functions of one sample; the caller passes a seeded ``numpy.random.Generator`` (one per
DataLoader worker, derived from the run's seed), so the draws are reproducible, unlike the
official Python ``random`` / global numpy streams (spec 7.1).

**Caption** (:func:`augment_caption`). Every token of ``[<start>, w_1, ..., w_n, <end>]`` draws
``u ~ U(0, 1)``; with ``v = u / rate`` for ``u < rate`` (rate 0.2):

* ``v < 0.5``: the token becomes ``<mask>`` (10 % of tokens);
* ``0.5 <= v < 0.6``: it becomes a uniformly random id (2 %);
* ``v >= 0.6``: it is deleted (8 %; the official comment's "40 %" is 40 % of the chosen 20 %).

Where the official code differs from a clean implementation, with the switch that chooses:

* ``special_tokens``: the code draws for ``<start>``/``<end>`` too, so they can be masked,
  replaced or deleted (``"augment"``, the official behaviour and default); ``"keep"`` leaves
  both untouched.
* ``random_ids``: the code draws the replacement from ``[0, V + 1)``, which includes
  ``<pad>``, ``<start>``, ``<end>``, ``<unk>`` and ``<mask>`` (``"official"``, default);
  ``"words"`` draws only real words ``[4, V)``.
* Empty result: the code can delete every token (probability ``0.08^L``) and then crashes in
  the GRU packer (spec 7.2). Here an empty result is replaced by the caption unchanged (no
  switch: the official behaviour is a crash).

The ``<mask>`` id is ``V`` (= ``vocab_size``, the size of the loaded vocabulary), the row the
backbones add with ``add_mask_token=True`` (spec 1.4); CRCL configs must set it.

**Regions** (:func:`drop_regions`), one image's (R, D) features, ``r ~ U(0, 1)^R``:

* ``mode="fill"`` (SGR/SAF): regions with ``r < rate`` are overwritten with ``1e-10``; the
  image keeps R regions (``BatchNorm1d(36)`` in VisualSA needs all 36);
* ``mode="remove"`` (VSE-inf): only regions with ``r > rate`` are kept (variable length). The
  official guard against keeping too few regions tests the feature size instead of the region
  count and never fires; here, if no region survives, all are kept (probability ``0.2^R``).
"""

from __future__ import annotations

from typing import Literal, TypeVar

import numpy as np
import torch
from torch import Tensor

from ncl.data.vocab import END, START

SpecialTokens = Literal["augment", "keep"]
RandomIds = Literal["official", "words"]
RegionDropMode = Literal["fill", "remove"]

#: Fraction of tokens that are augmented, and of regions that are dropped (spec 1.7).
AUGMENT_RATE = 0.2
#: Split of the augmented tokens by ``v = u / rate``: mask below 0.5, random below 0.6, else delete.
MASK_BELOW, RANDOM_BELOW = 0.5, 0.6
#: The constant that overwrites dropped regions of SGR/SAF inputs.
REGION_FILL_VALUE = 1e-10
#: First id of a real word (ids 0-3 are <pad>, <start>, <end>, <unk>).
FIRST_WORD_ID = 4

KEEP, MASK, RANDOM, DELETE = 0, 1, 2, 3

ArrayT = TypeVar("ArrayT", Tensor, np.ndarray)


def _check_rate(rate: float) -> None:
    if not 0.0 <= float(rate) <= 1.0:
        raise ValueError(f"`rate` must lie in [0, 1], got {rate}")


def _check_choice(value: str, choices: tuple[str, ...], name: str) -> None:
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {choices}, got {value!r}")


def caption_actions(
    num_tokens: int, rng: np.random.Generator, rate: float = AUGMENT_RATE
) -> np.ndarray:
    """One uniform draw per token -> what happens to it (spec 1.7).

    Args:
        num_tokens: L, tokens in the caption including ``<start>``/``<end>``.
        rng: numpy generator (exactly ``L`` uniforms are drawn).
        rate: probability that a token is augmented at all (0.2).

    Returns:
        (L,) int array of ``KEEP``, ``MASK``, ``RANDOM`` or ``DELETE``.
    """
    _check_rate(rate)
    u = rng.random(num_tokens)  # (L,)
    actions = np.full(num_tokens, KEEP, dtype=np.int64)
    chosen = u < rate
    v = u / rate if rate > 0 else np.ones_like(u)  # where chosen, v ~ U(0, 1) again
    actions[chosen & (v < MASK_BELOW)] = MASK
    actions[chosen & (v >= MASK_BELOW) & (v < RANDOM_BELOW)] = RANDOM
    actions[chosen & (v >= RANDOM_BELOW)] = DELETE
    return actions


def _random_id_range(vocab_size: int, random_ids: RandomIds) -> tuple[int, int]:
    """``[low, high)`` of replacement ids: official ``[0, V + 1)``, words ``[4, V)``."""
    if random_ids == "official":
        return 0, vocab_size + 1  # len(vocab) after <mask> was appended
    if vocab_size <= FIRST_WORD_ID:
        raise ValueError(f"random_ids='words' needs a vocabulary with words, got size {vocab_size}")
    return FIRST_WORD_ID, vocab_size


def augment_caption(
    tokens: ArrayT,
    vocab_size: int,
    rng: np.random.Generator,
    *,
    rate: float = AUGMENT_RATE,
    special_tokens: SpecialTokens = "augment",
    random_ids: RandomIds = "official",
) -> ArrayT:
    """Mask / replace / delete caption tokens as CRCL's training loader does (spec 1.7).

    Args:
        tokens: (L,) integer ids ``[<start>, ..., <end>]`` (torch tensor or numpy array), L >= 1.
        vocab_size: V, size of the loaded vocabulary without ``<mask>``; ``<mask>`` is id V.
        rng: seeded numpy generator (L uniforms, then one integer per replaced token).
        rate: fraction of tokens augmented (0.2).
        special_tokens: ``"augment"`` (official: ``<start>``/``<end>`` are drawn for like any
            token) or ``"keep"`` (they are never changed; their uniforms are still drawn, so
            the other tokens see the same stream under both settings).
        random_ids: ``"official"`` (replacement in ``[0, V + 1)``) or ``"words"`` (``[4, V)``).

    Returns:
        (L',) ids of the same kind and dtype as ``tokens``, ``1 <= L' <= L``; never empty (an
        all-deleted caption comes back unchanged).
    """
    _check_choice(special_tokens, ("augment", "keep"), "special_tokens")
    _check_choice(random_ids, ("official", "words"), "random_ids")
    ids = _as_numpy(tokens)
    if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(
            f"`tokens` must be a non-empty 1-D integer sequence, got {ids.shape} {ids.dtype}"
        )
    if vocab_size < 1:
        raise ValueError(f"`vocab_size` must be >= 1, got {vocab_size}")
    low, high = _random_id_range(vocab_size, random_ids)
    actions = caption_actions(ids.size, rng, rate)
    if special_tokens == "keep":
        actions[(ids == START) | (ids == END)] = KEEP
    out = ids.copy()
    out[actions == MASK] = vocab_size
    n_random = int((actions == RANDOM).sum())
    out[actions == RANDOM] = rng.integers(low, high, size=n_random)
    out = out[actions != DELETE]
    if out.size == 0:  # the official code would crash in the GRU packer (spec 7.2)
        out = ids.copy()
    return _like(out, tokens)


def region_drop_mask(
    num_regions: int, rng: np.random.Generator, rate: float = AUGMENT_RATE
) -> np.ndarray:
    """``r ~ U(0, 1)^R``; True where a region is dropped (``r < rate``, as the fill branch tests).

    Args:
        num_regions: R.
        rng: numpy generator (exactly R uniforms are drawn).
        rate: drop probability (0.2).

    Returns:
        (R,) bool array.
    """
    _check_rate(rate)
    return rng.random(num_regions) < rate


def drop_regions(
    features: ArrayT,
    rng: np.random.Generator,
    *,
    rate: float = AUGMENT_RATE,
    mode: RegionDropMode = "fill",
    fill_value: float = REGION_FILL_VALUE,
) -> ArrayT:
    """Drop about ``rate`` of one image's regions (spec 1.7).

    Args:
        features: (R, D) region features of one image (torch tensor or numpy array).
        rng: seeded numpy generator (exactly R uniforms are drawn).
        rate: drop probability (0.2).
        mode: ``"fill"`` (SGR/SAF: overwrite with ``fill_value``, shape kept) or ``"remove"``
            (VSE-inf: keep only the surviving rows; all rows if none survives).
        fill_value: the constant of the fill mode (official 1e-10).

    Returns:
        A new array of the same kind and dtype: (R, D) for ``"fill"``, (R', D) with
        ``1 <= R' <= R`` for ``"remove"``. The input is never modified.
    """
    _check_choice(mode, ("fill", "remove"), "mode")
    array = _as_numpy(features)
    if array.ndim != 2 or array.shape[0] == 0:
        raise ValueError(
            f"`features` must be a non-empty (R, D) array of one image, got {array.shape}"
        )
    dropped = region_drop_mask(array.shape[0], rng, rate)  # (R,)
    if mode == "fill":
        out = array.copy()
        out[dropped] = fill_value
    else:
        # The official VSE-inf branch keeps r > rate; r == rate exactly has probability ~2^-53.
        out = array[~dropped] if (~dropped).any() else array.copy()
    return _like(out, features)


def _as_numpy(x: Tensor | np.ndarray) -> np.ndarray:
    if isinstance(x, Tensor):
        return x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        return x
    raise ValueError(f"expected a torch.Tensor or numpy.ndarray, got {type(x).__name__}")


def _like(out: np.ndarray, template: ArrayT) -> ArrayT:
    """``out`` as the same kind (and device/dtype) as ``template``; always a fresh copy."""
    if isinstance(template, Tensor):
        return torch.from_numpy(np.ascontiguousarray(out)).to(template.device, template.dtype)
    return np.ascontiguousarray(out, dtype=template.dtype)
