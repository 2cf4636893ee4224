"""CRCL's training-time augmentation of captions and region features (spec 1.7).

Pure functions of one sample; the caller passes a seeded ``numpy.random.Generator``, so the
draws are reproducible, unlike the official Python ``random`` / global numpy streams (spec 7.1).
:class:`CaptionRegionAugment` wraps them as the DataModule's ``data.augment`` hook; the
training set then hands it a generator of its own for every ``(seed, epoch, caption index)``
(:func:`sample_rng`), so neither DataLoader workers nor a resume change what is drawn.

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

from abc import ABC, abstractmethod
from typing import Literal, TypeVar

import numpy as np
import torch
from torch import Tensor

from ncl.data.vocab import END, START
from ncl.errors import ConfigError
from ncl.streams import declare_stream

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


# ---------------------------------------------------------------------------- the data hook
#: Stream identifier of the per-sample augmentation draws (:mod:`ncl.streams`).
AUGMENT_STREAM = declare_stream(14, "augment.per_sample")

TrainItem = dict[str, object]
"""One training pair as :class:`~ncl.data.datasets.PairDataset` returns it::

    image   (R, D) float32 Tensor   region features of the paired image
    tokens  (L,)   int64 Tensor     ``[<start>, ..., <end>]``
    index   int                     the caption's index in the training split
"""


def sample_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The generator of one training sample's augmentation in one epoch.

    A pure function of ``(seed, epoch, index)``: the same whichever DataLoader worker or DDP
    rank reads the sample, and whether or not the run was resumed.

    Args:
        seed: the run's seed (``seed_everything``'s, kept in the checkpoint).
        epoch: the training epoch, 0-based.
        index: the caption's index in the training split.
    """
    return np.random.default_rng([int(seed), int(epoch), int(index), AUGMENT_STREAM])


class Augmentation(ABC):
    """A training-time augmentation of one ``(image, caption)`` pair: the ``data.augment`` hook.

    Configured with ``class_path``/``init_args`` under ``data.init_args.augment``; applied to
    the pairs of the DataModule's default training loader only (never to validation, test or
    the per-sample passes over the training set). Subclasses draw every random number from
    ``rng`` and nothing else, so an item is a pure function of ``(seed, epoch, index)``.
    """

    #: Whether the augmentation can emit the ``<mask>`` id ``V`` (the backbone then needs
    #: ``add_mask_token: true``); the DataModule checks it before training.
    uses_mask_token: bool = False

    @abstractmethod
    def __call__(self, item: TrainItem, rng: np.random.Generator, vocab_size: int) -> TrainItem:
        """Return an augmented copy of ``item`` (the input is not modified).

        Args:
            item: see :data:`TrainItem`.
            rng: the sample's own generator (:func:`sample_rng`).
            vocab_size: V, the loaded vocabulary's size without ``<mask>`` (``<mask>`` is V).

        Returns:
            The same keys; ``image`` may have fewer rows (variable region counts are padded by
            :func:`~ncl.data.datasets.collate`), ``tokens`` may be shorter, never empty.
        """

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({args})"


class CaptionRegionAugment(Augmentation):
    """CRCL's augmentation (spec 1.7): caption tokens masked / replaced / deleted and image
    regions dropped, each at 20 % by default.

    The caption and the regions draw from two independent children of the sample's
    generator, so changing one rate does not change the other's draws.

    Args:
        caption_rate: fraction of tokens augmented (0.2; 0 leaves captions unchanged).
        region_rate: fraction of regions dropped (0.2; 0 leaves images unchanged).
        region_mode: ``"fill"`` (SGR/SAF: dropped regions set to ``fill_value``, R kept) or
            ``"remove"`` (VSE-inf: variable region counts, padded with ``image_lengths``).
        special_tokens: ``"augment"`` (official) or ``"keep"`` (``<start>``/``<end>`` kept).
        random_ids: ``"official"`` (replacements in ``[0, V + 1)``) or ``"words"`` (``[4, V)``).
        fill_value: the constant of the fill mode (official 1e-10).

    Example YAML::

        data:
          init_args:
            augment:
              class_path: ncl.data.augment.CaptionRegionAugment
              init_args: {caption_rate: 0.2, region_rate: 0.2}
    """

    def __init__(self, caption_rate: float = AUGMENT_RATE, region_rate: float = AUGMENT_RATE,
                 region_mode: RegionDropMode = "fill", special_tokens: SpecialTokens = "augment",
                 random_ids: RandomIds = "official", fill_value: float = REGION_FILL_VALUE) -> None:
        for name, rate in (("caption_rate", caption_rate), ("region_rate", region_rate)):
            if not 0.0 <= float(rate) <= 1.0:
                raise ConfigError(f"data.augment.{name} must lie in [0, 1], got {rate}")
        choices = (("region_mode", region_mode, ("fill", "remove")),
                   ("special_tokens", special_tokens, ("augment", "keep")),
                   ("random_ids", random_ids, ("official", "words")))
        for name, value, allowed in choices:
            if value not in allowed:
                raise ConfigError(f"data.augment.{name} must be one of {allowed}, got {value!r}")
        self.caption_rate, self.region_rate = float(caption_rate), float(region_rate)
        self.region_mode, self.special_tokens = region_mode, special_tokens
        self.random_ids, self.fill_value = random_ids, float(fill_value)

    @property
    def uses_mask_token(self) -> bool:  # type: ignore[override]
        return self.caption_rate > 0

    def __call__(self, item: TrainItem, rng: np.random.Generator, vocab_size: int) -> TrainItem:
        caption_rng, region_rng = rng.spawn(2)
        out = dict(item)
        if self.caption_rate > 0 and "tokens" in item:
            out["tokens"] = augment_caption(item["tokens"], vocab_size, caption_rng,
                                            rate=self.caption_rate,
                                            special_tokens=self.special_tokens,
                                            random_ids=self.random_ids)
        if self.region_rate > 0 and "image" in item:
            out["image"] = drop_regions(item["image"], region_rng, rate=self.region_rate,
                                        mode=self.region_mode, fill_value=self.fill_value)
        return out
