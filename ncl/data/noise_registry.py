"""Which published noise file gives a pairing: a registry of the known files (issue 27).

Runs record the SHA-256 of their noise *file*, but the same pairing is published in two file
formats (spec 2): L2RM's caption-level ``f30k_precomp_{r}.npy`` is RCL's image-level
``noise_inx_{r}.npy`` repeated for the five captions of every image (checked on the files).
L2RM's COCO ``coco_precomp_{r}.npy`` are *presumed* to be the same for COCO: their contents were
not available, so their entries copy RCL's digests and say so (``RegistryEntry.presumed_from``).
Two runs on "the same noise" are recognised by the *pairing digest* instead, which does not
depend on the format:

    pairing digest = hex SHA-256 of the bytes of ``cap2img``, where ``cap2img`` is the
    caption-level pairing (one image index per training caption, ``cap2img[c]`` = the image
    paired with caption ``c``), as a 1-D int64 array, little-endian, C order, with no header
    (exactly ``cap2img.astype("<i8").tobytes()``; no ``.npy`` header, no shape, no length).

A caption-level file (format A) is its own ``cap2img``; an image-level file (format B) ``pi``
gives ``cap2img = pi[arange(N_cap) // im_div]`` (``np.repeat(pi, im_div)``). The digest
depends on the caption count and captions per image, so a file's pairing is only defined
against a training split (``n_images``, ``n_captions``).

Everything here is a plain function of paths and counts so that a command line
(``ncl data noise identify|convert``) can call it; nothing prints.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ncl.data.facts import TRAIN_COUNTS  # the file lengths are unique, so a length names its split
from ncl.data.noise import (
    NoiseFormat,
    caption_level_noise,
    image_level_noise,
    load_noise_file,
    pairing,
)
from ncl.errors import DataError
from ncl.io import atomic_save_npy, sha256_file


#: How the papers are cited in the registry (a short name, the venue, and the title).
RCL_PAPER = "RCL: Hu et al., Cross-Modal Retrieval with Partially Mismatched Pairs, TPAMI 2023"
L2RM_PAPER = ("L2RM: Han et al., Learning to Rematch Mismatched Pairs for Robust Cross-Modal "
              "Retrieval, CVPR 2024")
RCL_SOURCE = ("RCL's repository github.com/penghu-cs/RCL (commit 1096a24), "
              "data/{dataset}/noise_inx_{ratio}.npy; RCL never seeds numpy, the file is the "
              "reference (spec 2.2)")
L2RM_SOURCE = ("L2RM's released F30K noise indices; equal to np.repeat(RCL noise_inx_{ratio}.npy, "
               "5), the same pairing as rcl/f30k/{ratio} in the other format. L2RM's README says "
               "it uses DECL's and RCL's noise settings")
#: Why the L2RM COCO entries are presumed rather than computed (their digests are RCL's).
L2RM_COCO_SOURCE = (
    "PRESUMED, not checked: L2RM's tarin_coco.sh (commit 537793c) reads "
    "noise_index/coco_precomp_{ratio}.npy, whose contents were not available here. Its README "
    "says it uses DECL's and RCL's noise index settings, and its F30K files are RCL's repeated "
    "per caption (checked, l2rm/f30k/*), so this entry is presumed to be RCL's noise_inx_{ratio}"
    ".npy repeated per caption: the pairing digest is rcl/coco/{ratio}'s, and the file SHA-256 is "
    "that of convert(RCL's file, to_format='caption'), which is how L2RM's F30K files relate to "
    "RCL's byte for byte. A real coco_precomp_{ratio}.npy with another pairing identifies as new")

#: What the ``presumed`` rows of ``ncl data noise list`` are (said once for all of them).
PRESUMED_NOTE = (
    "'presumed' rows: the file's contents were not available here, so its digests are those of "
    "the registered file it is presumed to equal, converted to its format (presumed_from: "
    "l2rm/coco/<r> from rcl/coco/<r>, because L2RM's README says it uses RCL's noise settings "
    "and its F30K files are RCL's repeated per caption); pairing names mark such an entry "
    "'(presumed)', and a real file with another pairing identifies as new.")

#: Seed-generated pairings are not registered (issue 27 asks for NCR's): NCR draws a new
#: pattern per run from ``--seed`` (default ``random.randint(0, 100)``, recorded in its
#: config.json) and its published 20%/50% files inside NCR-data.tar are not available here,
#: so their seeds, and hence their digests, are unknown. :func:`seeded_pairing_digest`
#: recomputes the digest of any seed-generated pairing (spec 2.1/2.2 algorithms, bit-exact).
SEEDED_NOTE = (
    "NCR (format A) and DECL (format B, when its file is missing) generate the noise from a "
    "seed; the pairing is reproducible from (dataset, ratio, seed) with "
    "ncl.data.noise.caption_level_noise / image_level_noise, and its digest from "
    "seeded_pairing_digest. NCR's published 20%/50% files (NCR-data.tar) and DECL's "
    "Google-Drive noise_inx files are not registered: their contents were not available.")


@dataclass(frozen=True)
class RegistryEntry:
    """One published noise file.

    Attributes:
        name: ``<origin>/<dataset short name>/<ratio>``, e.g. ``rcl/f30k/0.2``.
        dataset: the data name of its training split (``f30k_precomp``).
        ratio: the nominal noise ratio in its name.
        format: ``"caption"`` (format A, one entry per caption) or ``"image"`` (format B).
        entries: its length.
        file_name: the name it is published under.
        file_sha256: SHA-256 of the published file's bytes.
        pairing_sha256: its pairing digest (module docstring).
        papers: the papers that released or used this very file.
        source: where it comes from and how it relates to other entries.
        presumed_from: ``None`` when the digests were computed from the published file itself;
            otherwise the name of the registered entry this file is *presumed* to equal (its
            contents were not available): the digests are that entry's, converted to this
            entry's format, and nothing has checked them against the real file.
    """

    name: str
    dataset: str
    ratio: float
    format: NoiseFormat
    entries: int
    file_name: str
    file_sha256: str
    pairing_sha256: str
    papers: tuple[str, ...]
    source: str
    presumed_from: str | None = None

    @property
    def presumed(self) -> bool:
        """The digests are presumed (copied from :attr:`presumed_from`), not computed."""
        return self.presumed_from is not None

    @property
    def label(self) -> str:
        """The name as pairing names show it: ``(presumed)`` after a presumed entry's name."""
        return f"{self.name} (presumed)" if self.presumed else self.name


# The digests below are data computed from the real files by
# ``python scripts/noise_registry_digests.py`` (which prints this table); never edit by hand.
# Columns: name, dataset, ratio, format, entries, file name, file SHA-256, pairing digest, and
# the entry a presumed file's digests come from (None: computed from the published file).
_TABLE: tuple[tuple[str, str, float, NoiseFormat, int, str, str, str, str | None], ...] = (
    # BEGIN GENERATED by scripts/noise_registry_digests.py --write
    ("rcl/f30k/0.2", "f30k_precomp", 0.2, "image", 29000, "noise_inx_0.2.npy",
     "c15283bc28e31f81ab9e47f411ff036cb7c177749e8fd5ed7628d4cf6a33af1e",
     "22619804ac02a41bf4ca3f83ee15cf064ea76c076a5994413d69d9acd4c29064", None),
    ("rcl/f30k/0.4", "f30k_precomp", 0.4, "image", 29000, "noise_inx_0.4.npy",
     "fcc76de55d2c2559f89f01d8c43c8b0ac53651a8d44f45578a372853d79c06ef",
     "90c4d0838e885fa94a97ba026e807f01db7d583e261bd6a98ed2d877ab8174f7", None),
    ("rcl/f30k/0.5", "f30k_precomp", 0.5, "image", 29000, "noise_inx_0.5.npy",
     "e7d425e0129c403bef2493652b2316a33b3889625896dc1bb9a6321620c9d0e3",
     "48711f0121d5b954c751c5c2b0bdac55111970b421751050a0884c3aab4a586c", None),
    ("rcl/f30k/0.6", "f30k_precomp", 0.6, "image", 29000, "noise_inx_0.6.npy",
     "bde4026b38d17289910b5ccd0f68b69d803161dadacc36653c561b6ea33c679c",
     "cc107b2f0b3c960a2a2fdeb042e2704c6944b2cb72ea3b41d09f6ea14f0faa89", None),
    ("rcl/f30k/0.8", "f30k_precomp", 0.8, "image", 29000, "noise_inx_0.8.npy",
     "64b39dd587545e0edc18b5db967d65464f3d345311966175f8f49c3432dc0ae8",
     "3b7f7b11f1908dc57857e3f638696c6e399d39e918ffcac6045c6fd215ca8887", None),
    ("rcl/coco/0.2", "coco_precomp", 0.2, "image", 113287, "noise_inx_0.2.npy",
     "890451fe01c96c658a7ae5bd22284c3186ccc20bad83c9036b2a4734f02a460e",
     "af680d08d31225454e33e8f00f728025492595d00c042a083be1614724aa7d01", None),
    ("rcl/coco/0.4", "coco_precomp", 0.4, "image", 113287, "noise_inx_0.4.npy",
     "0be1fc344fb89b6906dd355bed060a1cb59ef497f21ab248d68807b1a4ca3e3e",
     "46d194c3696a5eca18744b1b6c5a1c09e5e50a6a9dc9d3edbb2ff88b7c874706", None),
    ("rcl/coco/0.5", "coco_precomp", 0.5, "image", 113287, "noise_inx_0.5.npy",
     "846956d46826148f2af2df69c39f81cb3c3b267310c0545c872341059044daf9",
     "c302c4480aeee8b50d29ee9dd335c55db44177805cfc3782cfeffdac7379759e", None),
    ("rcl/coco/0.6", "coco_precomp", 0.6, "image", 113287, "noise_inx_0.6.npy",
     "ea5ab664f5defd1b250a32f286794322beb98f1ac4b604dad45280299ac5c6d5",
     "0e77e63b375616a001e597c9235e2fa249099dc65291190bdc77867a44cf9183", None),
    ("rcl/coco/0.8", "coco_precomp", 0.8, "image", 113287, "noise_inx_0.8.npy",
     "5bb1cdd4fb9a86a16cf5ab54409bfb5deb59280c009ab3184a70f1ad66a08050",
     "fcaf81bfb8149dc80f7e671023c7426b7b781ed04b0f40d62bb0a51b9e2f3572", None),
    ("l2rm/f30k/0.2", "f30k_precomp", 0.2, "caption", 145000, "f30k_precomp_0.2.npy",
     "9ef71783b3488770e5c897256a2e42d4a740c699f5d60d17d413176a862a2e0d",
     "22619804ac02a41bf4ca3f83ee15cf064ea76c076a5994413d69d9acd4c29064", None),
    ("l2rm/f30k/0.4", "f30k_precomp", 0.4, "caption", 145000, "f30k_precomp_0.4.npy",
     "fd23fe1b62bcfe01848371771fc0378ccae5846801fa2b9556a1319e88db522d",
     "90c4d0838e885fa94a97ba026e807f01db7d583e261bd6a98ed2d877ab8174f7", None),
    ("l2rm/f30k/0.6", "f30k_precomp", 0.6, "caption", 145000, "f30k_precomp_0.6.npy",
     "5d8b61c1cf3656f1991f28b61d7928abe1d1240652f4ed65aa3c414fb90e5f28",
     "cc107b2f0b3c960a2a2fdeb042e2704c6944b2cb72ea3b41d09f6ea14f0faa89", None),
    ("l2rm/f30k/0.8", "f30k_precomp", 0.8, "caption", 145000, "f30k_precomp_0.8.npy",
     "ad298d3394d4d4b2145bbc24d388394db0ba5e7b0dd917caacb8c7bf3e29e407",
     "3b7f7b11f1908dc57857e3f638696c6e399d39e918ffcac6045c6fd215ca8887", None),
    ("l2rm/coco/0.2", "coco_precomp", 0.2, "caption", 566435, "coco_precomp_0.2.npy",
     "7bdbc474bd1d2e741b30713f32edc2c9db79777811198ef33a7fcd8c3a1bb66e",
     "af680d08d31225454e33e8f00f728025492595d00c042a083be1614724aa7d01", "rcl/coco/0.2"),
    ("l2rm/coco/0.4", "coco_precomp", 0.4, "caption", 566435, "coco_precomp_0.4.npy",
     "285ee976a90e87d34021e47ed7247ecd7f7adc85353487bb41c52791665ecbd2",
     "46d194c3696a5eca18744b1b6c5a1c09e5e50a6a9dc9d3edbb2ff88b7c874706", "rcl/coco/0.4"),
    ("l2rm/coco/0.6", "coco_precomp", 0.6, "caption", 566435, "coco_precomp_0.6.npy",
     "6489b0a1f19e65aa894e7813f5bbde700aac43f8d4c542b15d1aacc6603e27c5",
     "0e77e63b375616a001e597c9235e2fa249099dc65291190bdc77867a44cf9183", "rcl/coco/0.6"),
    ("l2rm/coco/0.8", "coco_precomp", 0.8, "caption", 566435, "coco_precomp_0.8.npy",
     "3a76a8a414a4387108561649f68cbd37889be49902f87e9024f0126be4c17591",
     "fcaf81bfb8149dc80f7e671023c7426b7b781ed04b0f40d62bb0a51b9e2f3572", "rcl/coco/0.8"),
    # END GENERATED
)


def _papers_and_source(name: str, dataset: str, ratio: float) -> tuple[tuple[str, ...], str]:
    """Citation and source note of an entry, from its origin (the first part of its name)."""
    origin = name.split("/")[0]
    if origin == "rcl":
        return (RCL_PAPER,), RCL_SOURCE.format(dataset=dataset, ratio=f"{ratio:g}")
    if origin == "l2rm" and dataset == "coco_precomp":
        return (L2RM_PAPER,), L2RM_COCO_SOURCE.format(ratio=f"{ratio:g}")
    if origin == "l2rm":
        return (L2RM_PAPER,), L2RM_SOURCE.format(ratio=f"{ratio:g}")
    raise ValueError(f"registry entry {name!r} has an unknown origin {origin!r}")


def _build_registry() -> tuple[RegistryEntry, ...]:
    """The registry entries from :data:`_TABLE`, with their papers and sources."""
    entries = []
    for name, dataset, ratio, fmt, length, file_name, file_sha, pair_sha, presumed_from in _TABLE:
        papers, source = _papers_and_source(name, dataset, ratio)
        entries.append(RegistryEntry(name, dataset, ratio, fmt, length, file_name, file_sha,
                                     pair_sha, papers, source, presumed_from))
    return tuple(entries)


#: Every registered published file.
REGISTRY: tuple[RegistryEntry, ...] = _build_registry()


def pairing_digest(cap2img: np.ndarray) -> str:
    """The pairing digest of a caption-level pairing (definition in the module docstring).

    Args:
        cap2img: ``(N_cap,)`` integer array, the image index of every training caption.
    """
    cap2img = np.asarray(cap2img)
    if cap2img.ndim != 1 or not np.issubdtype(cap2img.dtype, np.integer):
        raise ValueError(f"a pairing is a 1-D integer array, got shape {cap2img.shape} and "
                         f"dtype {cap2img.dtype}")
    # "<i8" fixes width and byte order whatever the input dtype or the machine's endianness.
    canonical = np.ascontiguousarray(cap2img, dtype="<i8")
    return hashlib.sha256(canonical.tobytes()).hexdigest()


def noise_array_digest(arr: np.ndarray, fmt: NoiseFormat, n_captions: int, im_div: int) -> str:
    """The pairing digest of a noise array in format ``fmt`` (``"caption"`` or ``"image"``)."""
    return pairing_digest(pairing(arr, fmt, n_captions, im_div))


def seeded_pairing_digest(fmt: NoiseFormat, n_images: int, n_captions: int, ratio: float,
                          seed: int) -> str:
    """The digest of a seed-generated pairing (NCR's format A or RCL/DECL's format B algorithm).

    Lets a seed recorded in an NCR/DECL ``config.json`` be checked against a file without
    registering guessed seeds.
    """
    im_div = _im_div(n_images, n_captions)
    if fmt == "caption":
        arr = caption_level_noise(n_captions, im_div, ratio, seed)
    elif fmt == "image":
        arr = image_level_noise(n_images, ratio, seed)
    else:
        raise ValueError(f"fmt must be 'caption' or 'image', got {fmt!r}")
    return noise_array_digest(arr, fmt, n_captions, im_div)


def entries_with_pairing(digest: str) -> tuple[RegistryEntry, ...]:
    """The registered files whose pairing has this digest (several when formats differ)."""
    return tuple(entry for entry in REGISTRY if entry.pairing_sha256 == digest)


#: The label of the identity pairing (every caption with its own image: no noise added).
CLEAN = "clean"


def pairing_name(digest: str, noise_rate: float | None = None) -> str:
    """What a run records next to its noise SHA-256: the registry names of its pairing joined
    by ``" = "`` (``"rcl/f30k/0.2 = l2rm/f30k/0.2"``; an entry presumed to have the pairing
    reads ``"l2rm/coco/0.2 (presumed)"``), ``"clean"`` when no caption is moved
    (``noise_rate`` 0: no synthetic noise, whatever the dataset's own), or ``"new"`` when no
    registered file gives it."""
    if noise_rate == 0:
        return CLEAN
    return _label(entries_with_pairing(digest))


def _label(entries: tuple[RegistryEntry, ...]) -> str:
    """Names joined by ``" = "`` (they all give one pairing; a presumed entry's name is
    followed by ``(presumed)``), or ``"new"`` for none."""
    return " = ".join(e.label for e in entries) if entries else "new"


def entry(name: str) -> RegistryEntry:
    """The registry entry called ``name``; :class:`KeyError` listing the names otherwise."""
    for candidate in REGISTRY:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no registered noise file {name!r}; known: "
                   + ", ".join(e.name for e in REGISTRY))


def counts_for_length(length: int) -> tuple[str, int, int] | None:
    """``(dataset, n_images, n_captions)`` of the known training split a noise file of this
    length belongs to (either format), or ``None``: lets a CLI default the counts."""
    for dataset, (n_images, n_captions) in TRAIN_COUNTS.items():
        if length in (n_images, n_captions):
            return dataset, n_images, n_captions
    return None


@dataclass(frozen=True)
class Identification:
    """What :func:`identify` found out about a noise file.

    Attributes:
        path: the file.
        file_sha256: SHA-256 of its bytes (what a run records as ``noise_sha256`` when the
            file is int64 saved with ``np.save``, as all published ones are).
        format: ``"caption"`` (A) or ``"image"`` (B), from its length.
        length: its number of entries.
        noise_rate: fraction of training captions not paired with their own image.
        pairing_sha256: its pairing digest.
        matches: the registry entries with the same pairing (any format).
    """

    path: str
    file_sha256: str
    format: NoiseFormat
    length: int
    noise_rate: float
    pairing_sha256: str
    matches: tuple[RegistryEntry, ...]

    @property
    def is_new(self) -> bool:
        """No registered file gives this pairing."""
        return not self.matches

    @property
    def pairing_name(self) -> str:
        """The registry names of the pairing (``" = "``-joined), ``"clean"`` when the file
        moves no caption, or ``"new"``."""
        return CLEAN if self.noise_rate == 0 and not self.matches else _label(self.matches)

    @property
    def same_file(self) -> tuple[RegistryEntry, ...]:
        """The matches that are this very file (same bytes), not only the same pairing; for a
        presumed entry, the bytes it is presumed to have."""
        return tuple(m for m in self.matches if m.file_sha256 == self.file_sha256)

    @property
    def papers(self) -> tuple[str, ...]:
        """Every paper known to have used this pairing, in registry order, without repeats
        (a presumed entry's paper is left out: that it used this pairing is not known)."""
        return tuple(dict.fromkeys(p for m in self.matches if not m.presumed for p in m.papers))

    def summary(self) -> dict[str, object]:
        """JSON-able form for a command line or a run record."""
        return {"path": self.path, "file_sha256": self.file_sha256, "format": self.format,
                "length": self.length, "noise_rate": self.noise_rate,
                "pairing_sha256": self.pairing_sha256, "pairing_name": self.pairing_name,
                "same_file": [m.label for m in self.same_file], "papers": list(self.papers),
                "matches": [asdict(m) for m in self.matches]}


def _im_div(n_images: int, n_captions: int) -> int:
    """Captions per image; the spec's layouts always have a whole number (1 or 5)."""
    if n_images <= 0 or n_captions % n_images:
        raise ValueError(f"{n_captions} captions are not a whole number of captions per image "
                         f"for {n_images} images")
    return n_captions // n_images


def identify(path: str | Path, n_images: int, n_captions: int) -> Identification:
    """Which published pairing the noise file ``path`` gives, for this training split.

    Raises:
        DataError: the file is missing, unreadable or invalid for the split
            (:func:`ncl.data.noise.load_noise_file`).
    """
    im_div = _im_div(n_images, n_captions)
    arr, fmt = load_noise_file(path, n_images, n_captions)
    cap2img = pairing(arr, fmt, n_captions, im_div)
    own_image = np.arange(n_captions, dtype=np.int64) // im_div
    rate = float(np.mean(cap2img != own_image)) if n_captions else 0.0
    digest = pairing_digest(cap2img)
    return Identification(str(path), sha256_file(path), fmt, len(arr), rate, digest,
                          entries_with_pairing(digest))


def caption_to_image(cap2img: np.ndarray, im_div: int, source: str = "the pairing") -> np.ndarray:
    """The image-level array of a caption-level pairing whose captions move per image.

    Raises:
        DataError: some image's captions point to different images; names ``source``, the
            first such image and where its captions point.
    """
    groups = np.asarray(cap2img, dtype=np.int64).reshape(-1, im_div)
    # An image's captions agree iff every caption equals the group's first one.
    split = np.flatnonzero((groups != groups[:, :1]).any(axis=1))
    if len(split):
        k = int(split[0])
        raise DataError(
            f"{source} cannot be written in image-level format: the captions of image {k} "
            f"(captions {k * im_div}-{(k + 1) * im_div - 1}) point to different images "
            f"{groups[k].tolist()}; {len(split)} image(s) have split captions. Only a pairing "
            "that moves all captions of an image together (RCL's kind) has an image-level form")
    return np.ascontiguousarray(groups[:, 0])


def convert(path: str | Path, out: str | Path, to_format: NoiseFormat, n_images: int,
            n_captions: int, overwrite: bool = False) -> Path:
    """Write the noise file ``path`` in ``to_format`` to ``out`` (int64, ``np.save``).

    Caption-level to image-level only works when all captions of each image point to the
    same image; image-level to caption-level always works (``np.repeat``). Converting to the
    format the file already has writes it back as int64. The pairing is unchanged, so the
    output has the input's pairing digest; converting a published file gives the other
    format's published bytes exactly (L2RM's from RCL's, and back).

    The output is written to a hidden temporary file beside ``out`` and renamed, so nothing
    half-written ever has the final name.

    Raises:
        DataError: the input is invalid for the split, is not image-consistent (for
            ``to_format="image"``), or ``out`` exists and ``overwrite`` is false.
        ValueError: ``to_format`` is neither ``"caption"`` nor ``"image"``.
    """
    if to_format not in ("caption", "image"):
        raise ValueError(f"to_format must be 'caption' or 'image', got {to_format!r}")
    out = Path(out)
    if out.exists() and not overwrite:
        raise DataError(f"{out} exists; choose another name or allow overwriting")
    im_div = _im_div(n_images, n_captions)
    arr, fmt = load_noise_file(path, n_images, n_captions)
    cap2img = pairing(arr, fmt, n_captions, im_div)
    if to_format == "caption":
        result = cap2img
    else:
        result = caption_to_image(cap2img, im_div, source=f"noise file {path}")
    return atomic_save_npy(out, np.ascontiguousarray(result, dtype=np.int64))
