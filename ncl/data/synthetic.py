"""A synthetic dataset in the official layout, with planted compositional semantics.

Real BUTD features cannot be downloaded here, so this carries the quickstart, the tests and
the robustness evidence. Its design (fixed before any method was compared, see
docs/synthetic.md):

* **Concepts** of three kinds (objects, attributes, scenes/actions), each with a prototype
  direction in feature space and one to three synonym words (pseudo-words).
* **Images** hold a primary object with an attribute, a secondary object with an
  attribute, an action and a scene. An attribute-object pair occupies one or two regions
  whose feature is the *sum* of both prototypes (binding is regional, so word-to-region
  attention matters); the rest are background regions. Concept frequencies are Zipf-like.
* **Hard negatives**: images come in families that share most concepts (siblings differ by
  one or two), so the hardest negative in a batch is often a near-duplicate.
* **Captions** mention a random subset of an image's concepts in varied order with filler
  words, 5 per image (or 1, CC152K-style), about 10-12 tokens; no caption says everything.
* The vocabulary follows the official rule (words seen at least 4 times in train + dev).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import IO, Literal

import numpy as np

from ncl.data.tokenize import tokenize
from ncl.data.vocab import build_vocabulary
from ncl.io import atomic_save_npy, atomic_write, atomic_write_text, new_temporary

Preset = Literal["tiny", "quickstart", "bench"]
FILLERS_DET = ("a", "the", "one", "this")
PREPS = ("near", "with", "beside", "behind", "next to", "and")
SCENE_PREPS = ("in", "at", "on")
SYLLABLES = ("ba", "ko", "mi", "ru", "te", "la", "zo", "ne", "fi", "da", "gu", "so", "pe", "wa",
             "ki", "lo", "ma", "ti", "vo", "xe", "ha", "yu", "ce", "no")


@dataclass(frozen=True)
class SyntheticSpec:
    """Sizes and knobs of a synthetic dataset (deterministic given ``seed``)."""

    n_train: int = 1000
    n_dev: int = 200
    n_test: int = 200
    captions_per_image: int = 5
    num_regions: int = 12
    feature_dim: int = 64
    n_objects: int = 40
    n_attributes: int = 16
    n_scenes: int = 16
    family_size: int = 3
    region_noise: float = 0.8
    background_scale: float = 1.5
    zipf: float = 0.8
    seed: int = 0


PRESETS: dict[str, SyntheticSpec] = {
    "tiny": SyntheticSpec(n_train=60, n_dev=30, n_test=30, num_regions=6, feature_dim=16,
                          n_objects=10, n_attributes=5, n_scenes=5),
    "quickstart": SyntheticSpec(n_train=1200, n_dev=200, n_test=200),
    "bench": SyntheticSpec(n_train=3000, n_dev=500, n_test=500, num_regions=16,
                           feature_dim=96, n_objects=60, n_attributes=20, n_scenes=20),
}


def preset(name: Preset, **overrides: int | float) -> SyntheticSpec:
    """A preset spec with optional field overrides."""
    return replace(PRESETS[name], **overrides)


class _Lexicon:
    """Concept prototypes and their synonym words."""

    def __init__(self, spec: SyntheticSpec, rng: np.random.RandomState) -> None:
        n = spec.n_objects + spec.n_attributes + spec.n_scenes
        protos = rng.randn(n, spec.feature_dim)
        self.protos = protos / np.linalg.norm(protos, axis=1, keepdims=True)
        used: set[str] = set()
        self.words: list[list[str]] = []
        for _ in range(n):
            synonyms = []
            for _ in range(rng.randint(1, 4)):
                word = ""
                while not word or word in used:
                    word = "".join(rng.choice(SYLLABLES, size=rng.randint(2, 4)))
                used.add(word)
                synonyms.append(word)
            self.words.append(synonyms)
        self.objects = np.arange(spec.n_objects)
        self.attributes = spec.n_objects + np.arange(spec.n_attributes)
        self.scenes = spec.n_objects + spec.n_attributes + np.arange(spec.n_scenes)

    def word(self, concept: int, rng: np.random.RandomState) -> str:
        synonyms = self.words[concept]
        # Zipf over synonyms: the first one is the common word.
        weights = 1.0 / np.arange(1, len(synonyms) + 1) ** 1.5
        return synonyms[rng.choice(len(synonyms), p=weights / weights.sum())]


def _zipf_choice(ids: np.ndarray, exponent: float, rng: np.random.RandomState) -> int:
    weights = 1.0 / np.arange(1, len(ids) + 1) ** exponent
    return int(ids[rng.choice(len(ids), p=weights / weights.sum())])


def _sample_concepts(lex: _Lexicon, spec: SyntheticSpec, rng: np.random.RandomState) -> np.ndarray:
    """``[obj1, attr1, obj2, attr2, scene]`` of one image."""
    obj1 = _zipf_choice(lex.objects, spec.zipf, rng)
    obj2 = obj1
    while obj2 == obj1:
        obj2 = _zipf_choice(lex.objects, spec.zipf, rng)
    return np.array([obj1, _zipf_choice(lex.attributes, spec.zipf, rng), obj2,
                     _zipf_choice(lex.attributes, spec.zipf, rng),
                     _zipf_choice(lex.scenes, spec.zipf, rng)])


def _sibling(base: np.ndarray, lex: _Lexicon, spec: SyntheticSpec, rng: np.random.RandomState) -> np.ndarray:
    """A near-duplicate: one or two of the five slots re-drawn."""
    fresh = _sample_concepts(lex, spec, rng)
    out = base.copy()
    for slot in rng.choice(5, size=rng.randint(1, 3), replace=False):
        out[slot] = fresh[slot]
    if out[0] == out[2]:
        out[2] = fresh[2] if fresh[2] != out[0] else base[2]
    return out


def _regions(concepts: np.ndarray, lex: _Lexicon, spec: SyntheticSpec, rng: np.random.RandomState) -> np.ndarray:
    """``(R, D)`` features: bound attribute+object regions, a scene region, background."""
    obj1, attr1, obj2, attr2, scene = concepts
    parts = [lex.protos[obj1] + 0.7 * lex.protos[attr1]] * rng.randint(1, 3)
    parts += [lex.protos[obj2] + 0.7 * lex.protos[attr2]] * rng.randint(1, 3)
    parts += [lex.protos[scene]]
    parts = parts[: spec.num_regions]
    # Norms: a concept region's signal is about 2.4 (object + 0.7 attribute, times 2), its
    # noise about ``region_noise``; a background region's about ``background_scale``.
    scale = 1.0 / np.sqrt(spec.feature_dim)
    feats = spec.background_scale * scale * rng.randn(spec.num_regions, spec.feature_dim)
    slots = rng.permutation(spec.num_regions)[: len(parts)]
    for slot, proto in zip(slots, parts):
        feats[slot] = 2.0 * proto + spec.region_noise * scale * rng.randn(spec.feature_dim)
    return feats.astype(np.float32)


def _caption(concepts: np.ndarray, lex: _Lexicon, rng: np.random.RandomState) -> str:
    """One caption naming a random subset of the concepts, in varied order."""
    obj1, attr1, obj2, attr2, scene = (int(c) for c in concepts)
    first, second = ((obj1, attr1), (obj2, attr2)) if rng.rand() < 0.7 else ((obj2, attr2), (obj1, attr1))

    def phrase(obj: int, attr: int, p_attr: float) -> list[str]:
        words = [str(rng.choice(FILLERS_DET))]
        if rng.rand() < p_attr:
            words.append(lex.word(attr, rng))
        return words + [lex.word(obj, rng)]

    words = phrase(*first, p_attr=0.7)
    if rng.rand() < 0.75:
        words += str(rng.choice(PREPS)).split() + phrase(*second, p_attr=0.5)
    if rng.rand() < 0.6:
        scene_words = str(rng.choice(SCENE_PREPS)).split() + ["the", lex.word(scene, rng)]
        words = scene_words + [","] + words if rng.rand() < 0.3 else words + scene_words
    if rng.rand() < 0.5:
        words.append(".")
    return " ".join(words)


def _fill_split(n: int, lex: _Lexicon, spec: SyntheticSpec, rng: np.random.RandomState,
                feats: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Write ``n`` images into ``feats`` (``(n, R, D)``, in generation order: an array or a
    memory map) and return the shuffling ``order`` and the captions in shuffled order.

    Row ``j`` of the split is ``feats[order[j]]``; its captions are ``captions[cpi j:cpi (j+1)]``.
    """
    captions: list[str] = []
    base = None
    for i in range(n):
        if i % spec.family_size == 0:
            base = _sample_concepts(lex, spec, rng)
            concepts = base
        else:
            concepts = _sibling(base, lex, spec, rng)
        feats[i] = _regions(concepts, lex, spec, rng)
        captions += [_caption(concepts, lex, rng) for _ in range(spec.captions_per_image)]
    # Shuffle images so that families are not always adjacent in a split.
    order = rng.permutation(n)
    cpi = spec.captions_per_image
    return order, [captions[j * cpi + k] for j in order for k in range(cpi)]


def _split(n: int, lex: _Lexicon, spec: SyntheticSpec,
           rng: np.random.RandomState) -> tuple[np.ndarray, list[str]]:
    feats = np.zeros((n, spec.num_regions, spec.feature_dim), dtype=np.float32)
    order, captions = _fill_split(n, lex, spec, rng, feats)
    return feats[order], captions


def _split_to_file(path: Path, n: int, lex: _Lexicon, spec: SyntheticSpec,
                   rng: np.random.RandomState, chunk_images: int) -> list[str]:
    """Like :func:`_split`, but the features go to ``path`` without ever being all in RAM.

    Images are generated into a temporary memory-mapped file, then copied to ``path`` in the
    shuffled order ``chunk_images`` rows at a time (atomically: a temporary file renamed at
    the end). The bytes equal ``np.save(path, _split(...)[0])``: same random stream, same
    ``.npy`` header. Peak memory is one chunk (plus the captions), whatever ``n``.
    """
    shape = (n, spec.num_regions, spec.feature_dim)
    fd, scratch = new_temporary(path.with_name(path.name + ".unshuffled"))
    os.close(fd)
    try:
        raw = np.lib.format.open_memmap(scratch, mode="w+", dtype=np.float32, shape=shape)
        order, captions = _fill_split(n, lex, spec, rng, raw)
        raw.flush()

        def write(handle: IO[bytes]) -> None:
            header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                      "fortran_order": False, "shape": shape}
            np.lib.format.write_array_header_1_0(handle, header)
            for start in range(0, n, chunk_images):
                # Scattered reads of scratch rows (RAM: one chunk), written in the shuffled order.
                rows = order[start:start + chunk_images]
                handle.write(np.ascontiguousarray(raw[rows]).tobytes())

        atomic_write(path, write)
        del raw
    finally:
        Path(scratch).unlink(missing_ok=True)
    return captions


def generate(out_root: str | Path, spec: SyntheticSpec, name: str = "synthetic_precomp",
             chunk_images: int = 0) -> Path:
    """Write ``<out_root>/<name>/{train,dev,test}_ims.npy, _caps.txt`` and
    ``<out_root>/vocab/<name>_vocab.json``; skip if an identical spec was written before.

    Args:
        out_root: Folder that receives the dataset folder and ``vocab/``.
        spec: Sizes and seed.
        name: Dataset folder name (``data_name``).
        chunk_images: 0 builds each split's ``(N, R, D)`` features in RAM (fine for the
            presets). A positive value streams them to disk ``chunk_images`` images at a time
            (see :func:`_split_to_file`), for official-size features (36 x 2048 float32,
            295 KB per image: 4.7 GB for 16,000 images) on a machine with less RAM; the
            files are byte-identical to the in-RAM ones.

    Returns:
        The dataset folder ``<out_root>/<name>``.
    """
    if chunk_images < 0:
        raise ValueError(f"chunk_images must be >= 0, got {chunk_images}")
    out_root = Path(out_root)
    data_dir = out_root / name
    marker = data_dir / "spec.json"
    payload = json.dumps(asdict(spec), sort_keys=True)
    if marker.is_file() and marker.read_text() == payload:
        return data_dir
    rng = np.random.RandomState(spec.seed)
    lex = _Lexicon(spec, rng)
    sizes = (("train", spec.n_train), ("dev", spec.n_dev), ("test", spec.n_test))
    marker.unlink(missing_ok=True)  # an interrupted run must not look complete
    if chunk_images:
        data_dir.mkdir(parents=True, exist_ok=True)
        captions = {s: _split_to_file(data_dir / f"{s}_ims.npy", n, lex, spec, rng, chunk_images)
                    for s, n in sizes}
    else:
        splits = {s: _split(n, lex, spec, rng) for s, n in sizes}
        for split, (feats, _) in splits.items():
            atomic_save_npy(data_dir / f"{split}_ims.npy", feats)
        captions = {s: caps for s, (_, caps) in splits.items()}
    vocab = build_vocabulary(tokenize(c) for s in ("train", "dev") for c in captions[s])
    for split, caps in captions.items():
        atomic_write_text(data_dir / f"{split}_caps.txt", "\n".join(caps) + "\n")
    vocab.to_json(out_root / "vocab" / f"{name}_vocab.json")
    atomic_write_text(marker, payload)  # written last: marks the dataset complete
    return data_dir
