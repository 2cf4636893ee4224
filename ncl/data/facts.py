"""What ncl knows about the official datasets: one declaration per dataset.

Each dataset ncl was written for declares its facts in a JSON file of
``ncl/data/dataset_facts/`` (:data:`FACTS_DIR`), named after the dataset: its official row
counts per split (images, captions), whether its stored pairs are noisy already, the shape of
its region features and, for a layout other than the BUTD precomp one, the function that
checks a folder of it. Nothing else lists the datasets: a new one is a new file. Everything
that needs such a fact reads it from :data:`DATASETS`:

* ``ncl data check`` compares a split's counts and feature shape with the official ones
  (:mod:`ncl.datatools.layout_check`: a difference is a warning only), or hands the folder to
  the dataset's own checker;
* the noise registry recognises a published noise file by its length, which the training
  split's counts fix (:mod:`ncl.data.noise_registry`, ``ncl data noise``);
* a DataModule takes a real-noise dataset's pairs (CC152K's) as real noise unless told
  otherwise (:func:`real_noise_default`).

A dataset that has no file (a synthetic one, your own) has no official counts and is taken
as clean.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

#: The suffix of the precomputed-feature datasets' names (``f30k_precomp``).
PRECOMP_SUFFIX = "_precomp"
#: The declarations: one JSON file per dataset (packaged with ncl, pyproject's package-data).
FACTS_DIR = Path(__file__).with_name("dataset_facts")


@dataclass(frozen=True)
class DatasetFacts:
    """The facts of one official dataset (one file of :data:`FACTS_DIR`).

    Attributes:
        splits: official ``(images, captions)`` per split, the training split first (the
            splits ``ncl data check`` requires).
        real_noise: the stored pairs are noisy already and nobody knows which (CC152K's web
            pairs, about 3-20% mismatched, never annotated), so there is no clean mask.
        feature_shape: ``(regions, dim)`` of the released features (BUTD: 36 x 2048); another
            shape is a warning of ``ncl data check``.
        checker: ``"module:function"`` that checks a folder of this dataset when its layout is
            not the BUTD precomp one (called as :func:`ncl.datatools.layout_check.check_layout`
            is); ``None``: the precomp layout's check.
        about: one line for people (what the dataset is).
    """

    splits: Mapping[str, tuple[int, int]]
    real_noise: bool = False
    feature_shape: tuple[int, int] = (36, 2048)
    checker: str | None = None
    about: str = ""

    @property
    def train_counts(self) -> tuple[int, int]:
        """``(images, captions)`` of the training split."""
        return self.splits["train"]


def read_facts(path: Path) -> tuple[str, int, DatasetFacts]:
    """``(name, order, facts)`` of one declaration file.

    Raises:
        ValueError: a file whose name is not its dataset's, or without a training split (a
            packaging mistake, checked by tests/data/test_dataset_facts.py).
    """
    data = json.loads(path.read_text(encoding="utf-8"))
    name = data["name"]
    if path.stem != name or "train" not in data["splits"]:
        raise ValueError(f"{path}: the file must be named <name>.json and declare a train split")
    splits = {split: (int(n_img), int(n_cap)) for split, (n_img, n_cap) in data["splits"].items()}
    shape = tuple(int(d) for d in data.get("feature_shape", (36, 2048)))
    facts = DatasetFacts(MappingProxyType(splits), bool(data.get("real_noise", False)),
                         (shape[0], shape[1]), data.get("checker"), data.get("about", ""))
    return name, int(data.get("order", 0)), facts


def _declared() -> dict[str, DatasetFacts]:
    """Every declaration of :data:`FACTS_DIR`, in the order they declare (then by name)."""
    found = [read_facts(path) for path in FACTS_DIR.glob("*.json")]
    found.sort(key=lambda item: (item[1], item[0]))
    return {name: facts for name, _, facts in found}


#: The official datasets, from their declarations: F30K, MS-COCO (test split: the 5K
#: ``testall``) and CC152K with BUTD features (spec 1.2), and any dataset declared since.
DATASETS: Mapping[str, DatasetFacts] = MappingProxyType(_declared())

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
