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

The registry is data: one JSON file per origin in ``ncl/data/noise_sources/`` (who published
the files, where ``scripts/noise_registry_digests.py`` finds them, and every file's digests as
that script computed them). A file that is a seeded draw of NCR's or RCL's generator says so
(``generated_by``: BiCro's F30K files are NCR's caption shuffling with seed 96 or 34), and a
file whose contents were not available here is *presumed* (``presumed_from``). Registering an
origin is adding its file there and running the script with ``--write``.

Everything here is a plain function of paths and counts so that a command line
(``ncl data noise identify|convert``) can call it; nothing prints.
"""

from __future__ import annotations

import hashlib
import json
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


#: What the ``presumed`` rows of ``ncl data noise list`` are (said once for all of them).
PRESUMED_NOTE = (
    "'presumed' rows: the file's contents were not available here, so its digests are computed "
    "from what it is presumed to be (presumed_from): another registered file converted to its "
    "format (l2rm/coco/<r> from rcl/coco/<r>: L2RM's README says it uses RCL's noise settings "
    "and its F30K files are RCL's repeated per caption), or the seeded draw it was found to be "
    "(pc2/f30k/0.2.np: NCR's caption shuffling, seed 0); pairing names mark such an entry "
    "'(presumed)', and a real file with another pairing identifies as new.")

#: Pairings drawn per run are not registered (issue 27 asks for NCR's; a *published* file
#: that is a seeded draw is, with its ``generated_by``): NCR draws a new pattern per run from ``--seed`` (default ``random.randint(0, 100)``, recorded in its
#: config.json) and its published 20%/50% files inside NCR-data.tar are not available here,
#: so their seeds, and hence their digests, are unknown. :func:`seeded_pairing_digest`
#: recomputes the digest of any seed-generated pairing (spec 2.1/2.2 algorithms, bit-exact).
SEEDED_NOTE = (
    "NCR (format A) and DECL (format B, when its file is missing) generate the noise from a "
    "seed; the pairing is reproducible from (dataset, ratio, seed) with "
    "ncl.data.noise.caption_level_noise / image_level_noise, and its digest from "
    "seeded_pairing_digest. NCR's published 20%/50% files (NCR-data.tar) and DECL's "
    "Google-Drive noise_inx files are not registered: their contents were not available.")


#: Where the registry's data lives: one JSON file per origin (the paper or release that
#: published the files). Adding an origin is adding a file here; nothing else lists them.
SOURCES_DIR = Path(__file__).with_name("noise_sources")

#: The generator algorithms a ``generated_by`` may name (the ``fmt`` of
#: :func:`seeded_pairing_digest`): NCR's caption shuffling and RCL/DECL's image permutation.
GENERATORS: tuple[NoiseFormat, ...] = ("caption", "image")

#: ``presumed_from`` of a file whose digests were computed by regenerating it from its
#: ``generated_by`` (its contents are not here) rather than from another registered file.
FROM_GENERATOR = "generator"


@dataclass(frozen=True)
class RegistryEntry:
    """One published noise file.

    Attributes:
        name: ``<origin>/<dataset short name>/<ratio>``, e.g. ``rcl/f30k/0.2`` (a suffix tells
            two files of one origin, dataset and ratio apart: ``pc2/f30k/0.2.np``).
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
            otherwise what they were computed from, because the file's contents were not
            available: the name of the registered entry it is presumed to equal (that entry's
            file converted to this entry's format), or :data:`FROM_GENERATOR` (the draw of
            :attr:`generated_by`, saved as int64 with ``np.save``). Nothing has checked them
            against the real file.
        generated_by: ``(algorithm, seed)`` when the file is a seeded draw of ncl's
            reimplementation of a published generator (``"caption"``: NCR's caption shuffling,
            ``"image"``: RCL/DECL's image permutation; :func:`seeded_pairing_digest`), so a run
            can redraw it with ``noise_seed``; ``None`` when no seed is known to give it.
        same_pairing_as: the registered entry this file is known to give the same pairing as
            (in another format), checked by ``scripts/noise_registry_digests.py``.
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
    generated_by: tuple[NoiseFormat, int] | None = None
    same_pairing_as: str | None = None

    @property
    def presumed(self) -> bool:
        """The digests are presumed (computed from something other than the file), not read."""
        return self.presumed_from is not None

    @property
    def label(self) -> str:
        """The name as pairing names show it: ``(presumed)`` after a presumed entry's name."""
        return f"{self.name} (presumed)" if self.presumed else self.name

    @property
    def origin(self) -> str:
        """The origin part of the name (``rcl`` of ``rcl/f30k/0.2``)."""
        return self.name.split("/", 1)[0]


@dataclass(frozen=True)
class Origin:
    """One origin file of :data:`SOURCES_DIR`: who published a set of files and where ncl's
    digest script finds them.

    Attributes:
        name: the origin (the first part of its entries' names); the file is ``<name>.json``.
        order: where its entries come in the registry (and in pairing names: ``rcl/f30k/0.2 =
            l2rm/f30k/0.2``); unique.
        folder: where its published files lie under a ``noise_index`` folder
            (``{dataset}`` is replaced), or ``None`` when none of them is available here.
        entries: its files.
    """

    name: str
    order: int
    folder: str | None
    entries: tuple[RegistryEntry, ...]


#: The keys an origin file and each of its ``files`` must have (the rest are optional).
_ORIGIN_KEYS = ("origin", "order", "folder", "papers", "sources", "files")
_FILE_KEYS = ("name", "dataset", "ratio", "format", "entries", "file_name", "file_sha256",
              "pairing_sha256")


def _require(mapping: dict, keys: tuple[str, ...], where: str) -> None:
    """:class:`ValueError` naming ``where`` and the missing keys, if any."""
    missing = [key for key in keys if key not in mapping]
    if missing:
        raise ValueError(f"{where}: missing {', '.join(missing)}")


def _generated_by(value: dict | None, where: str) -> tuple[NoiseFormat, int] | None:
    """``generated_by`` of a file record as ``(algorithm, seed)``."""
    if value is None:
        return None
    if value.get("algorithm") not in GENERATORS or not isinstance(value.get("seed"), int):
        raise ValueError(f"{where}: generated_by must be {{\"algorithm\": one of "
                         f"{list(GENERATORS)}, \"seed\": an integer}}, got {value!r}")
    return value["algorithm"], value["seed"]


def _entry(record: dict, papers: list[str], sources: dict[str, str], where: str) -> RegistryEntry:
    """One file record of an origin file as an entry; its source text is the record's own
    ``source`` or the origin's template for its dataset (``"*"`` otherwise), formatted with
    ``{dataset}``, ``{ratio}`` and ``{seed}``."""
    _require(record, _FILE_KEYS, where)
    generated = _generated_by(record.get("generated_by"), where)
    template = record.get("source") or sources.get(record["dataset"]) or sources.get("*")
    if not template:
        raise ValueError(f"{where}: no source text (neither the file's nor its origin's)")
    source = template.format(dataset=record["dataset"], ratio=f"{record['ratio']:g}",
                             seed=generated[1] if generated else "")
    if record.get("presumed_from") == FROM_GENERATOR and generated is None:
        raise ValueError(f"{where}: presumed_from {FROM_GENERATOR!r} needs generated_by")
    return RegistryEntry(
        record["name"], record["dataset"], float(record["ratio"]), record["format"],
        int(record["entries"]), record["file_name"], record["file_sha256"],
        record["pairing_sha256"], tuple(record.get("papers", papers)), source,
        record.get("presumed_from"), generated, record.get("same_pairing_as"))


def load_origin(path: Path) -> Origin:
    """The origin file ``path`` (JSON; :class:`Origin`, ``ncl/data/noise_sources/*.json``).

    Raises:
        ValueError: the file is not valid JSON or lacks a key; the message names the file.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    _require(data, _ORIGIN_KEYS, str(path))
    if data["origin"] != path.stem:
        raise ValueError(f"{path}: origin {data['origin']!r} differs from the file name")
    entries = tuple(_entry(record, data["papers"], data["sources"], f"{path} file {i}")
                    for i, record in enumerate(data["files"]))
    for item in entries:
        if item.origin != data["origin"]:
            raise ValueError(f"{path}: entry {item.name!r} is not named {data['origin']}/...")
    return Origin(data["origin"], int(data["order"]), data["folder"], entries)


def load_origins(folder: Path = SOURCES_DIR) -> tuple[Origin, ...]:
    """Every origin file of ``folder``, in their ``order``.

    Raises:
        ValueError: an origin file is invalid, two share an ``order``, or two entries a name.
    """
    origins = sorted((load_origin(path) for path in sorted(folder.glob("*.json"))),
                     key=lambda origin: origin.order)
    orders = [origin.order for origin in origins]
    if len(set(orders)) != len(orders):
        raise ValueError(f"{folder}: two origin files share an order: {orders}")
    names = [item.name for origin in origins for item in origin.entries]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"{folder}: entries named twice: {', '.join(repeated)}")
    return tuple(origins)


#: Every registered published file, origin by origin.
REGISTRY: tuple[RegistryEntry, ...] = tuple(
    item for origin in load_origins() for item in origin.entries)


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
    def draws(self) -> tuple[str, ...]:
        """The seeded draws known to give this pairing, from the matches' ``generated_by``
        (``"caption-level draw, seed 96"``: NCR's caption shuffling; ``image-level``: RCL's
        permutation), without repeats."""
        return tuple(dict.fromkeys(describe_draw(m.generated_by) for m in self.matches
                                   if m.generated_by is not None))

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
                "draws": list(self.draws),
                "matches": [asdict(m) for m in self.matches]}


def describe_draw(generated_by: tuple[NoiseFormat, int]) -> str:
    """``generated_by`` in words: ``"NCR caption shuffling, seed 96"``."""
    algorithm, seed = generated_by
    name = "NCR caption shuffling" if algorithm == "caption" else "RCL image permutation"
    return f"{name}, seed {seed}"


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
