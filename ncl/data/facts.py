"""What ncl knows about the official datasets, in one table.

Each dataset ncl was written for has its official row counts per split (images, captions)
and whether its stored pairs are noisy already. Everything that needs such a fact reads it
from :data:`DATASETS`:

* ``ncl data check`` compares a split's counts with the official ones
  (:mod:`ncl.datatools.layout_check`: a different count is a warning only);
* the noise registry recognises a published noise file by its length, which the training
  split's counts fix (:mod:`ncl.data.noise_registry`, ``ncl data noise``);
* a DataModule takes CC152K's pairs as real noise unless told otherwise
  (:func:`real_noise_default`).

A dataset that is not in the table (a synthetic one, your own) has no official counts and
is taken as clean.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

#: The suffix of the precomputed-feature datasets' names (``f30k_precomp``).
PRECOMP_SUFFIX = "_precomp"


@dataclass(frozen=True)
class DatasetFacts:
    """The facts of one official dataset.

    Attributes:
        splits: official ``(images, captions)`` per split, the training split first (the
            splits ``ncl data check`` requires).
        real_noise: the stored pairs are noisy already and nobody knows which (CC152K's web
            pairs, about 3-20% mismatched, never annotated), so there is no clean mask.
    """

    splits: Mapping[str, tuple[int, int]]
    real_noise: bool = False

    @property
    def train_counts(self) -> tuple[int, int]:
        """``(images, captions)`` of the training split."""
        return self.splits["train"]


def _facts(splits: dict[str, tuple[int, int]], real_noise: bool = False) -> DatasetFacts:
    """A :class:`DatasetFacts` whose split table cannot be changed by a reader."""
    return DatasetFacts(MappingProxyType(splits), real_noise)


#: The official datasets (spec 1.2): BUTD features of Flickr30K and MS-COCO (COCO's test
#: split is the 5K ``testall``) and CC152K's web pairs.
DATASETS: Mapping[str, DatasetFacts] = MappingProxyType({
    "f30k_precomp": _facts({"train": (29_000, 145_000), "dev": (1_014, 5_070),
                            "test": (1_000, 5_000)}),
    "coco_precomp": _facts({"train": (113_287, 566_435), "dev": (5_000, 25_000),
                            "testall": (5_000, 25_000)}),
    "cc152k_precomp": _facts({"train": (150_000, 150_000), "dev": (1_000, 1_000),
                              "test": (1_000, 1_000)}, real_noise=True),
})

# Views of the table in the shapes their readers use.
#: ``{dataset: {split: (images, captions)}}``.
SPLIT_COUNTS: Mapping[str, Mapping[str, tuple[int, int]]] = MappingProxyType(
    {name: facts.splits for name, facts in DATASETS.items()})
#: ``{dataset: (images, captions)}`` of the training splits.
TRAIN_COUNTS: Mapping[str, tuple[int, int]] = MappingProxyType(
    {name: facts.train_counts for name, facts in DATASETS.items()})
#: Name stems whose data holds real noise (``cc152k``): any data name starting with one, in
#: any case, is taken as real noise, so that a renamed copy (``CC152K_precomp``) is too.
REAL_NOISE_PREFIXES: tuple[str, ...] = tuple(
    name.removesuffix(PRECOMP_SUFFIX) for name, facts in DATASETS.items() if facts.real_noise)


def real_noise_default(data_name: str) -> bool:
    """Whether ``data_name`` holds real (unknown) noise: CC152K's web pairs; F30K, COCO and
    the synthetic benchmark are taken as clean."""
    return data_name.lower().startswith(REAL_NOISE_PREFIXES)
