"""Compute the noise registry's digests from the published files and check what it declares.

The registry (``ncl.data.noise_registry``) is one JSON file per origin in
``ncl/data/noise_sources/``. Each names its published files and where they lie under a
``noise_index`` folder (``folder``, e.g. ``rcl/{dataset}``: the layout of
``../shared/data/noise_index``), and stores every file's SHA-256 and pairing digest. Those
digests are data computed here::

    python scripts/noise_registry_digests.py                  # print every entry's digests
    python scripts/noise_registry_digests.py --write          # and store them in the JSON files
    python scripts/noise_registry_digests.py --noise_index DIR

Where the digests come from, per entry:

* a file read from ``<noise_index>/<folder>/<file_name>`` (its length checked against the
  split);
* ``presumed_from: <entry name>``: that entry's file converted to this entry's format (L2RM's
  COCO files, presumed to be RCL's repeated per caption);
* ``presumed_from: "generator"``: the ``generated_by`` draw saved as int64 with ``np.save``
  (PC²'s seed-0 file, whose contents are not here).

And what is checked (reported, and the exit status is 1): an entry's ``generated_by`` draw gives
its pairing; an entry's ``same_pairing_as`` entry has its pairing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing it

from ncl.data.noise import caption_level_noise, image_level_noise
from ncl.data.noise_registry import (
    FROM_GENERATOR,
    SOURCES_DIR,
    TRAIN_COUNTS,
    Origin,
    RegistryEntry,
    convert,
    identify,
    load_origins,
    seeded_pairing_digest,
)
from ncl.io import atomic_save_npy

DEFAULT_INDEX = REPO.parent / "shared" / "data" / "noise_index"


def _published_path(noise_index: Path, origin: Origin, item: RegistryEntry) -> Path:
    """Where ``item``'s published file lies under ``noise_index``."""
    if origin.folder is None:
        raise FileNotFoundError(f"{item.name}: origin {origin.name} has no folder (none of its "
                                "files is available) and the entry is not presumed")
    path = noise_index / origin.folder.format(dataset=item.dataset) / item.file_name
    if not path.is_file():
        raise FileNotFoundError(f"published noise file missing: {path}")
    return path


def _draw(item: RegistryEntry, out: Path) -> Path:
    """``item``'s ``generated_by`` draw written as int64 with ``np.save`` to ``out``."""
    assert item.generated_by is not None
    algorithm, seed = item.generated_by
    n_images, n_captions = TRAIN_COUNTS[item.dataset]
    if algorithm == "caption":
        arr = caption_level_noise(n_captions, n_captions // n_images, item.ratio, seed)
    else:
        arr = image_level_noise(n_images, item.ratio, seed)
    return atomic_save_npy(out, np.ascontiguousarray(arr, dtype=np.int64))


def computed(noise_index: Path, origins: tuple[Origin, ...]) -> list[RegistryEntry]:
    """Every entry with its digests recomputed (everything else as declared), in registry order.

    Raises:
        FileNotFoundError: a file the registry reads is missing under ``noise_index``.
    """
    by_name = {item.name: (origin, item) for origin in origins for item in origin.entries}
    result = []
    with tempfile.TemporaryDirectory() as folder:
        for origin in origins:
            for item in origin.entries:
                n_images, n_captions = TRAIN_COUNTS[item.dataset]
                out = Path(folder) / f"{len(result)}_{item.file_name}"
                if item.presumed_from == FROM_GENERATOR:
                    path = _draw(item, out)
                elif item.presumed_from is not None:
                    source_origin, source = by_name[item.presumed_from]
                    path = convert(_published_path(noise_index, source_origin, source), out,
                                   item.format, n_images, n_captions)
                else:
                    path = _published_path(noise_index, origin, item)
                found = identify(path, n_images, n_captions)
                if found.format != item.format or found.length != item.entries:
                    raise ValueError(f"{item.name}: {path} is {found.format} level with "
                                     f"{found.length} entries, the registry says {item.format} "
                                     f"with {item.entries}")
                result.append(replace(item, file_sha256=found.file_sha256,
                                      pairing_sha256=found.pairing_sha256))
    return result


def declared_problems(entries: list[RegistryEntry]) -> list[str]:
    """What the entries declare and their digests contradict: a ``generated_by`` draw with
    another pairing, or a ``same_pairing_as`` entry with another pairing."""
    by_name = {item.name: item for item in entries}
    problems = []
    for item in entries:
        if item.generated_by is not None:
            n_images, n_captions = TRAIN_COUNTS[item.dataset]
            algorithm, seed = item.generated_by
            if seeded_pairing_digest(algorithm, n_images, n_captions, item.ratio,
                                     seed) != item.pairing_sha256:
                problems.append(f"{item.name}: not the {algorithm}-level draw with seed {seed}")
        twin = item.same_pairing_as
        if twin is not None and (twin not in by_name
                                 or by_name[twin].pairing_sha256 != item.pairing_sha256):
            problems.append(f"{item.name}: not the pairing of {twin}")
    return problems


def write(origins: tuple[Origin, ...], entries: list[RegistryEntry], folder: Path) -> None:
    """Store the digests of ``entries`` in their origin files under ``folder`` (the rest of
    each file is kept as it is)."""
    digests = {item.name: (item.file_sha256, item.pairing_sha256) for item in entries}
    for origin in origins:
        path = folder / f"{origin.name}.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        for record in data["files"]:
            record["file_sha256"], record["pairing_sha256"] = digests[record["name"]]
        text = json.dumps(data, indent=1, ensure_ascii=False) + "\n"
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    """Print every entry's digests; with ``--write`` store them; exit 1 on a declared problem."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise_index", type=Path, default=DEFAULT_INDEX,
                        help="folder with the origins' files, e.g. rcl/ and l2rm/ "
                             "(default: ../shared/data/noise_index)")
    parser.add_argument("--write", action="store_true",
                        help=f"store the digests in the JSON files of {SOURCES_DIR}")
    args = parser.parse_args(argv)
    origins = load_origins(SOURCES_DIR)
    entries = computed(args.noise_index, origins)
    for item in entries:
        print(f"{item.name:24s} {item.file_sha256} {item.pairing_sha256}")
    problems = declared_problems(entries)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if args.write and not problems:
        write(origins, entries, SOURCES_DIR)
        print(f"wrote the digests of {len(entries)} entries into {SOURCES_DIR}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
