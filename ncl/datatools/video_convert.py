"""``python -m ncl.datatools.video_convert``: video features and captions into ncl's video layout.

A sketch (docs/video.md, "Converter sketch").

There is no single official release of MSR-VTT / MSVD / LSMDC / YouCook2 features. This
converter takes the common ingredients of the releases and of your own extraction, and writes
the layout :class:`ncl.data.video.VideoDataModule` reads::

    <out>/<name>/manifest.json, {split}_{expert}.npy, {split}_caps.txt
    <out>/vocab/<name>_vocab.json

Inputs:

* ``--expert NAME=FILE`` (repeatable, in packing order): a ``.npz`` archive or a pickled dict
  mapping clip id -> features, either ``(d,)`` (already pooled) or ``(T, d)`` per-frame /
  per-segment features, pooled over time with ``--pool`` (``max``, as Miech et al. 2019 pool
  their 2D/3D features over time, or ``mean``). A clip absent from an expert gets an all-zero
  row (a missing expert).
* ``--captions FILE`` with ``--captions-format``: ``tsv`` (``clip_id<TAB>caption`` per line),
  ``msvd`` (``clip_id caption`` per line, as MSVD's ``AllVideoDescriptions.txt``; ``#`` lines
  skipped) or ``msrvtt`` (MSR-VTT's ``*_videodatainfo.json``: ``sentences`` with ``video_id``
  and ``caption``).
* ``--split NAME=FILE`` (``train``, ``dev``, ``test``): clip ids, one per line (the split the
  paper uses, e.g. MSR-VTT's 6,513 / 497 / 2,990 or the 1k-A test set; MSVD's 1,200 / 100 / 670).
* ``--captions-per-clip K``: the layout needs the same caption count for every clip of a split.
  Clips with more keep their first K; clips with fewer repeat theirs in order until K (so a
  repeated caption is a duplicate query in evaluation; docs/video.md). Without it, every clip
  must already have the same count (MSR-VTT: 20; LSMDC, YouCook2: 1).

The vocabulary follows the official rule: words seen at least 4 times in train + dev.

Example (MSR-VTT, official split, two experts)::

    python -m ncl.datatools.video_convert --out data --name msrvtt \\
        --expert appearance=feats/resnet152.npz --expert motion=feats/resnext101.npz \\
        --captions MSRVTT/train_val_videodatainfo.json --captions-format msrvtt \\
        --split train=splits/train.txt --split dev=splits/val.txt --split test=splits/test.txt
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from ncl.data.tokenize import tokenize
from ncl.data.vocab import build_vocabulary
from ncl.io import atomic_save_npy, atomic_write_text

SPLITS = ("train", "dev", "test")


def fail(message: str) -> None:
    """Stop with one clear message (no traceback)."""
    sys.exit(f"ncl.datatools.video_convert: error: {message}")


def named_paths(values: list[str], option: str) -> dict[str, Path]:
    """``["a=x", "b=y"]`` -> ``{"a": Path("x"), "b": Path("y")}``, in order."""
    out: dict[str, Path] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            fail(f"{option} expects NAME=FILE, got {value!r}")
        if not Path(path).is_file():
            fail(f"{option} {name}: file not found: {path}")
        out[name] = Path(path)
    return out


def load_features(path: Path, pool: str) -> dict[str, np.ndarray]:
    """Clip id -> ``(d,)`` float32, pooled over time when the stored array is ``(T, d)``."""
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as archive:
            raw = {key: archive[key] for key in archive.files}
    else:
        with open(path, "rb") as handle:  # only open pickles you trust
            raw = pickle.load(handle)
    out = {}
    for clip, arr in raw.items():
        arr = np.asarray(arr, dtype=np.float32)
        if arr.ndim == 2:
            arr = arr.max(axis=0) if pool == "max" else arr.mean(axis=0)
        if arr.ndim != 1:
            fail(f"{path}: clip {clip!r} has features of shape {arr.shape}; expected (d,) or (T, d)")
        out[str(clip)] = arr
    dims = {a.shape[0] for a in out.values()}
    if len(dims) != 1:
        fail(f"{path}: clips have different feature sizes {sorted(dims)}")
    return out


def load_captions(path: Path, fmt: str) -> dict[str, list[str]]:
    """Clip id -> its captions, in file order."""
    captions: dict[str, list[str]] = defaultdict(list)
    if fmt == "msrvtt":
        for entry in json.loads(path.read_text(encoding="utf-8"))["sentences"]:
            captions[str(entry["video_id"])].append(entry["caption"].strip())
        return captions
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or (fmt == "msvd" and line.startswith("#")):
            continue
        clip, sep, text = line.partition("\t" if fmt == "tsv" else " ")
        if not sep:
            fail(f"{path}, line {lineno}: expected 'clip_id{'<TAB>' if fmt == 'tsv' else ' '}caption'")
        captions[clip.strip()].append(text.strip())
    return captions


def fixed_count(caps: list[str], k: int | None) -> list[str]:
    """Exactly ``k`` captions: the first ``k``, or the clip's own repeated in order."""
    if k is None:
        return caps
    return [caps[i % len(caps)] for i in range(k)]


def write_split(out_dir: Path, split: str, clips: list[str], experts: dict[str, dict[str, np.ndarray]],
                captions: dict[str, list[str]], k: int | None) -> list[str]:
    """Write one split's expert arrays and caption file; returns its captions."""
    lines: list[str] = []
    counts = set()
    for clip in clips:
        if not captions.get(clip):
            fail(f"split {split}: clip {clip!r} has no caption")
        own = fixed_count(captions[clip], k)
        counts.add(len(own))
        lines += own
    if len(counts) != 1:
        fail(f"split {split}: clips have {sorted(counts)} captions; pass --captions-per-clip K")
    for name, feats in experts.items():
        dim = next(iter(feats.values())).shape[0]
        arr = np.zeros((len(clips), dim), dtype=np.float32)  # absent clip: all-zero row
        missing = 0
        for row, clip in enumerate(clips):
            if clip in feats:
                arr[row] = feats[clip]
            else:
                missing += 1
        if missing:
            print(f"split {split}: {missing} of {len(clips)} clips have no {name} features "
                  f"(all-zero rows: a missing expert)", file=sys.stderr)
        atomic_save_npy(out_dir / f"{split}_{name}.npy", arr)
    atomic_write_text(out_dir / f"{split}_caps.txt", "\n".join(c.replace("\n", " ") for c in lines) + "\n")
    return lines


def main(argv: list[str] | None = None) -> None:
    """Convert one release (the command line: see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m ncl.datatools.video_convert", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="data_root to write into")
    parser.add_argument("--name", required=True, help="data_name, e.g. msrvtt or msvd")
    parser.add_argument("--expert", action="append", default=[], required=True)
    parser.add_argument("--captions", type=Path, required=True)
    parser.add_argument("--captions-format", choices=["tsv", "msvd", "msrvtt"], default="tsv")
    parser.add_argument("--split", action="append", default=[], required=True)
    parser.add_argument("--captions-per-clip", type=int, default=None)
    parser.add_argument("--pool", choices=["max", "mean"], default="max")
    args = parser.parse_args(argv)
    if args.captions_per_clip is not None and args.captions_per_clip < 1:
        fail(f"--captions-per-clip must be >= 1, got {args.captions_per_clip}")
    if not args.captions.is_file():
        fail(f"--captions: file not found: {args.captions}")
    expert_paths = named_paths(args.expert, "--expert")
    split_paths = named_paths(args.split, "--split")
    unknown = set(split_paths) - set(SPLITS)
    if unknown:
        fail(f"--split names must be among {', '.join(SPLITS)}, got {sorted(unknown)}")
    experts = {name: load_features(path, args.pool) for name, path in expert_paths.items()}
    captions = load_captions(args.captions, args.captions_format)
    out_dir = args.out / args.name
    written = {}
    for split, path in split_paths.items():
        clips = [line.strip() for line in path.read_text().splitlines() if line.strip()]
        written[split] = write_split(out_dir, split, clips, experts, captions, args.captions_per_clip)
    manifest = {"experts": [{"name": n, "dim": int(next(iter(f.values())).shape[0])}
                            for n, f in experts.items()],
                "source": "ncl.datatools.video_convert", "pool": args.pool}
    atomic_write_text(out_dir / "manifest.json", json.dumps(manifest, indent=2))
    vocab = build_vocabulary(tokenize(c) for s in ("train", "dev") for c in written.get(s, []))
    vocab.to_json(args.out / "vocab" / f"{args.name}_vocab.json")
    print(f"wrote {out_dir} ({', '.join(f'{s}: {len(c)} captions' for s, c in written.items())}; "
          f"vocabulary {len(vocab)} words)")


if __name__ == "__main__":
    main()
