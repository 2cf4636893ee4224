"""Compute the noise registry's digests from the published files and print (or write) its table.

``ncl.data.noise_registry`` stores, for every published noise file, the SHA-256 of the file
and the digest of the pairing it gives. Those are data, computed here from the real files
(the layout of ``../shared/data/noise_index``: ``rcl/{f30k,coco}_precomp/noise_inx_<r>.npy``,
``l2rm/f30k_precomp/f30k_precomp_<r>.npy``)::

    python scripts/noise_registry_digests.py                  # print the table rows
    python scripts/noise_registry_digests.py --write          # and replace them in the module
    python scripts/noise_registry_digests.py --noise_index DIR

Every file is checked against its expected length, and files of one dataset and ratio from
different origins are reported when their pairings differ (they should not for RCL/L2RM).

Files whose contents are not available (L2RM's COCO ``coco_precomp_<r>.npy``) are *presumed*
entries: their rows are computed from the file they are presumed to equal, converted to their
format (:data:`PRESUMED`), and carry that file's registry name in their last column.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing it

from ncl.data.noise_registry import TRAIN_COUNTS, convert, identify

MODULE = REPO / "ncl" / "data" / "noise_registry.py"
DEFAULT_INDEX = REPO.parent / "shared" / "data" / "noise_index"
BLOCK = re.compile(r"(    # BEGIN GENERATED[^\n]*\n).*?(    # END GENERATED\n)", re.DOTALL)

#: ``(origin, dataset, file-name pattern, ratios)``: the published files and their names.
PUBLISHED: tuple[tuple[str, str, str, tuple[float, ...]], ...] = (
    ("rcl", "f30k_precomp", "noise_inx_{r}.npy", (0.2, 0.4, 0.5, 0.6, 0.8)),
    ("rcl", "coco_precomp", "noise_inx_{r}.npy", (0.2, 0.4, 0.5, 0.6, 0.8)),
    ("l2rm", "f30k_precomp", "f30k_precomp_{r}.npy", (0.2, 0.4, 0.6, 0.8)),
)

#: ``(origin, dataset, file-name pattern, ratios, format, presumed origin)``: published files
#: whose contents were not available, presumed to be the presumed origin's file of the same
#: dataset and ratio in ``format``. L2RM's tarin_coco.sh reads noise_index/coco_precomp_<r>.npy;
#: its README says it uses RCL's (and DECL's) noise settings at 0.2-0.8, and its F30K files are
#: RCL's repeated per caption (ncl.data.noise_registry.L2RM_COCO_SOURCE).
PRESUMED: tuple[tuple[str, str, str, tuple[float, ...], str, str], ...] = (
    ("l2rm", "coco_precomp", "coco_precomp_{r}.npy", (0.2, 0.4, 0.6, 0.8), "caption", "rcl"),
)


Row = tuple[str, str, float, str, int, str, str, str, "str | None"]


def _name(origin: str, dataset: str, ratio: float) -> str:
    """The registry name ``<origin>/<dataset short name>/<ratio>``."""
    return f"{origin}/{dataset.removesuffix('_precomp')}/{ratio:g}"


def collect(noise_index: Path) -> list[Row]:
    """The registry row of every published file, in :data:`PUBLISHED` order, then the
    presumed ones (:data:`PRESUMED`): name, dataset, ratio, format, entries, file name, file
    SHA-256, pairing digest, and the name of the entry a presumed row is computed from
    (``None`` for a file read itself).

    Raises:
        FileNotFoundError: a published file is missing under ``noise_index``.
    """
    rows = []
    for origin, dataset, pattern, ratios in PUBLISHED:
        n_images, n_captions = TRAIN_COUNTS[dataset]
        for ratio in ratios:
            file_name = pattern.format(r=f"{ratio:g}")
            path = noise_index / origin / dataset / file_name
            if not path.is_file():
                raise FileNotFoundError(f"published noise file missing: {path}")
            found = identify(path, n_images, n_captions)
            rows.append((_name(origin, dataset, ratio), dataset, ratio, found.format,
                         found.length, file_name, found.file_sha256, found.pairing_sha256, None))
    rows.extend(_presumed_rows(noise_index))
    return rows


def _presumed_rows(noise_index: Path) -> list[Row]:
    """The rows of :data:`PRESUMED`: each presumed file written by ``convert`` from the file it
    is presumed to be (in a temporary folder) and identified there."""
    published = {(origin, dataset): pattern for origin, dataset, pattern, _ in PUBLISHED}
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for origin, dataset, pattern, ratios, fmt, source_origin in PRESUMED:
            n_images, n_captions = TRAIN_COUNTS[dataset]
            for ratio in ratios:
                source = (noise_index / source_origin / dataset
                          / published[(source_origin, dataset)].format(r=f"{ratio:g}"))
                if not source.is_file():
                    raise FileNotFoundError(f"published noise file missing: {source}")
                file_name = pattern.format(r=f"{ratio:g}")
                out = convert(source, Path(folder) / file_name, fmt, n_images, n_captions)
                found = identify(out, n_images, n_captions)
                rows.append((_name(origin, dataset, ratio), dataset, ratio, found.format,
                             found.length, file_name, found.file_sha256, found.pairing_sha256,
                             _name(source_origin, dataset, ratio)))
    return rows


def format_row(row: Row) -> str:
    """One row as the Python tuple literal the module's table holds."""
    name, dataset, ratio, fmt, length, file_name, file_sha, pair_sha, presumed_from = row
    source = "None" if presumed_from is None else f'"{presumed_from}"'
    return (f'    ("{name}", "{dataset}", {ratio!r}, "{fmt}", {length}, "{file_name}",\n'
            f'     "{file_sha}",\n'
            f'     "{pair_sha}", {source}),\n')


def pairing_conflicts(rows: list[Row]) -> list[str]:
    """Dataset/ratio pairs whose files from different origins give different pairings (RCL's
    and L2RM's should not: L2RM's files are RCL's repeated per caption)."""
    by_key: dict[tuple[str, float], set[str]] = {}
    for row in rows:
        by_key.setdefault((row[1], row[2]), set()).add(row[7])
    return [f"{dataset} {ratio:g}" for (dataset, ratio), digests in by_key.items()
            if len(digests) > 1]


def main(argv: list[str] | None = None) -> int:
    """Print the table; with ``--write`` replace the generated block of the module."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise_index", type=Path, default=DEFAULT_INDEX,
                        help="folder with rcl/ and l2rm/ (default: ../shared/data/noise_index)")
    parser.add_argument("--write", action="store_true", help=f"rewrite the table in {MODULE}")
    args = parser.parse_args(argv)
    rows = collect(args.noise_index)
    text = "".join(format_row(row) for row in rows)
    print(text, end="")
    for conflict in pairing_conflicts(rows):
        print(f"warning: files for {conflict} give different pairings", file=sys.stderr)
    if args.write:
        source = MODULE.read_text(encoding="utf-8")
        if not BLOCK.search(source):
            print(f"error: no generated block in {MODULE}", file=sys.stderr)
            return 1
        MODULE.write_text(BLOCK.sub(lambda m: m.group(1) + text + m.group(2), source),
                          encoding="utf-8")
        print(f"wrote {len(rows)} entries into {MODULE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
