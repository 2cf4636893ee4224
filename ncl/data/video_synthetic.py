"""Synthetic video-like data in ncl's video layout (:mod:`ncl.data.video`), for tests and demos.

Real MSR-VTT/MSVD features cannot be downloaded here. The generator plants what makes the
video task what it is:

* **Concepts**: objects, attributes, scenes (seen in appearance) and actions (seen in motion),
  each with a random prototype in its expert's space and one to three synonym pseudo-words.
* **Two experts of different sizes**: ``appearance`` (object + 0.7 attribute + 0.8 scene +
  noise, "2D features pooled over frames") and ``motion`` (action + noise, "3D features"), so
  the packed tensor is zero-padded and neither expert alone identifies a clip.
* **Incomplete data**: a fraction of clips has no motion feature (an all-zero row), as in
  Miech et al. 2018.
* **Hard negatives**: clips come in families whose members differ in one of the four slots.
* **Several captions per clip** (MSR-VTT/MSVD style), each naming a random subset of the
  concepts with filler words; the action is named most of the time.

Deterministic given the spec; the vocabulary follows the official rule (words seen at least 4
times in train + dev).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ncl.data.cache import spec_folder
from ncl.data.tokenize import tokenize
from ncl.data.vocab import build_vocabulary
from ncl.io import atomic_save_npy, atomic_write_text

VideoPreset = Literal["tiny", "quickstart"]
NAME = "synthetic_video"
SYLLABLES = ("ba", "ko", "mi", "ru", "te", "la", "zo", "ne", "fi", "da", "gu", "so", "pe", "wa",
             "ki", "lo", "ma", "ti", "vo", "xe", "ha", "yu", "ce", "no")
DETS = ("a", "the", "one", "someone")
SCENE_PREPS = ("in", "at", "inside")
ACTION_LINKS = ("is", "starts", "keeps")


@dataclass(frozen=True)
class VideoSpec:
    """Sizes and knobs of a synthetic video dataset."""

    n_train: int = 1000
    n_dev: int = 200
    n_test: int = 200
    captions_per_clip: int = 10
    appearance_dim: int = 48
    motion_dim: int = 32
    n_objects: int = 30
    n_attributes: int = 10
    n_scenes: int = 12
    n_actions: int = 20
    family_size: int = 3
    feature_noise: float = 0.9
    missing_motion: float = 0.1
    seed: int = 0


PRESETS: dict[str, VideoSpec] = {
    "tiny": VideoSpec(n_train=60, n_dev=20, n_test=20, captions_per_clip=4, appearance_dim=12,
                      motion_dim=8, n_objects=8, n_attributes=4, n_scenes=4, n_actions=6),
    "quickstart": VideoSpec(),
}


def video_preset(name: VideoPreset, **overrides: Any) -> VideoSpec:
    """A preset spec with optional field overrides.

    Raises:
        KeyError: an unknown preset name.
    """
    if name not in PRESETS:
        raise KeyError(f"unknown synthetic video preset {name!r}; expected one of {sorted(PRESETS)}")
    return replace(PRESETS[name], **overrides)


class _Concepts:
    """Prototypes (unit vectors in their expert's space) and synonym words of every concept."""

    def __init__(self, spec: VideoSpec, rng: np.random.RandomState) -> None:
        def protos(n: int, dim: int) -> np.ndarray:
            p = rng.randn(n, dim)
            return p / np.linalg.norm(p, axis=1, keepdims=True)

        self.objects = protos(spec.n_objects, spec.appearance_dim)
        self.attributes = protos(spec.n_attributes, spec.appearance_dim)
        self.scenes = protos(spec.n_scenes, spec.appearance_dim)
        self.actions = protos(spec.n_actions, spec.motion_dim)
        used: set[str] = set()
        self.words: dict[tuple[str, int], list[str]] = {}
        for kind, n in (("object", spec.n_objects), ("attribute", spec.n_attributes),
                        ("scene", spec.n_scenes), ("action", spec.n_actions)):
            for i in range(n):
                self.words[kind, i] = [self._new_word(rng, used) for _ in range(rng.randint(1, 4))]

    @staticmethod
    def _new_word(rng: np.random.RandomState, used: set[str]) -> str:
        word = ""
        while not word or word in used:
            word = "".join(rng.choice(SYLLABLES, size=rng.randint(2, 4)))
        used.add(word)
        return word

    def word(self, kind: str, i: int, rng: np.random.RandomState) -> str:
        synonyms = self.words[kind, i]
        weights = 1.0 / np.arange(1, len(synonyms) + 1) ** 1.5  # the first synonym is common
        return synonyms[rng.choice(len(synonyms), p=weights / weights.sum())]


def _draw(spec: VideoSpec, rng: np.random.RandomState) -> np.ndarray:
    """``[object, attribute, scene, action]`` of one clip."""
    return np.array([rng.randint(spec.n_objects), rng.randint(spec.n_attributes),
                     rng.randint(spec.n_scenes), rng.randint(spec.n_actions)])


def _features(slots: np.ndarray, con: _Concepts, spec: VideoSpec,
              rng: np.random.RandomState) -> tuple[np.ndarray, np.ndarray]:
    """Appearance ``(d_a,)`` and motion ``(d_m,)`` features of one clip (motion may be zero)."""
    obj, attr, scene, action = slots
    appearance = con.objects[obj] + 0.7 * con.attributes[attr] + 0.8 * con.scenes[scene]
    # Noise of norm about feature_noise against signals of norm about 1.5 (appearance) and 1 (motion).
    appearance = appearance + spec.feature_noise * rng.randn(spec.appearance_dim) / np.sqrt(
        spec.appearance_dim)
    motion = con.actions[action] + spec.feature_noise * rng.randn(spec.motion_dim) / np.sqrt(
        spec.motion_dim)
    if rng.rand() < spec.missing_motion:
        motion = np.zeros(spec.motion_dim)  # this clip has no motion feature
    return appearance.astype(np.float32), motion.astype(np.float32)


def _caption(slots: np.ndarray, con: _Concepts, rng: np.random.RandomState) -> str:
    """One caption naming a random subset of the clip's concepts."""
    obj, attr, scene, action = (int(s) for s in slots)
    words = [str(rng.choice(DETS))]
    if rng.rand() < 0.6:
        words.append(con.word("attribute", attr, rng))
    words.append(con.word("object", obj, rng))
    if rng.rand() < 0.85:
        words += [str(rng.choice(ACTION_LINKS)), con.word("action", action, rng)]
    if rng.rand() < 0.6:
        words += [str(rng.choice(SCENE_PREPS)), "the", con.word("scene", scene, rng)]
    return " ".join(words)


def _split(n: int, con: _Concepts, spec: VideoSpec,
           rng: np.random.RandomState) -> tuple[np.ndarray, np.ndarray, list[str]]:
    appearance = np.zeros((n, spec.appearance_dim), dtype=np.float32)
    motion = np.zeros((n, spec.motion_dim), dtype=np.float32)
    captions: list[list[str]] = []
    base = _draw(spec, rng)
    for i in range(n):
        if i % spec.family_size == 0:
            base = slots = _draw(spec, rng)
        else:  # a sibling: one slot re-drawn
            slots = base.copy()
            slot = rng.randint(4)
            slots[slot] = _draw(spec, rng)[slot]
        appearance[i], motion[i] = _features(slots, con, spec, rng)
        captions.append([_caption(slots, con, rng) for _ in range(spec.captions_per_clip)])
    order = rng.permutation(n)  # families are not adjacent in a split
    return appearance[order], motion[order], [c for j in order for c in captions[j]]


def generate_video(out_root: str | Path, spec: VideoSpec, name: str = NAME) -> Path:
    """Write the dataset in ncl's video layout under ``<out_root>/<name>``; skip if identical.

    Returns:
        The dataset folder.
    """
    out_root = Path(out_root)
    data_dir = out_root / name
    marker = data_dir / "spec.json"
    payload = json.dumps(asdict(spec), sort_keys=True)
    if marker.is_file() and marker.read_text() == payload:
        return data_dir
    rng = np.random.RandomState(spec.seed)
    con = _Concepts(spec, rng)
    splits = {s: _split(n, con, spec, rng) for s, n in
              (("train", spec.n_train), ("dev", spec.n_dev), ("test", spec.n_test))}
    vocab = build_vocabulary(tokenize(c) for s in ("train", "dev") for c in splits[s][2])
    marker.unlink(missing_ok=True)  # an interrupted run must not look complete
    manifest = {"experts": [{"name": "appearance", "dim": spec.appearance_dim},
                            {"name": "motion", "dim": spec.motion_dim}],
                "source": "ncl.data.video_synthetic", "captions_per_clip": spec.captions_per_clip}
    atomic_write_text(data_dir / "manifest.json", json.dumps(manifest, indent=2))
    for split, (appearance, motion, captions) in splits.items():
        atomic_save_npy(data_dir / f"{split}_appearance.npy", appearance)
        atomic_save_npy(data_dir / f"{split}_motion.npy", motion)
        atomic_write_text(data_dir / f"{split}_caps.txt", "\n".join(captions) + "\n")
    vocab.to_json(out_root / "vocab" / f"{name}_vocab.json")
    atomic_write_text(marker, payload)  # written last: marks the dataset complete
    return data_dir


def cached_dataset(preset: VideoPreset, cache_dir: str | None = None,
                   **overrides: Any) -> tuple[Path, VideoSpec]:
    """Generate (once) and return ``(data_root, spec)``; the root is keyed by the spec's hash."""
    spec = video_preset(preset, **overrides)
    root = spec_folder(cache_dir, f"video-{preset}", spec)
    generate_video(root, spec)
    return root, spec
