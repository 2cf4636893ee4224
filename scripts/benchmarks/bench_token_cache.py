"""Token-id cache: tokenising a split with nltk versus reading its cached ids (one process).

    python scripts/benchmarks/bench_token_cache.py [--captions 20000]

Captions: the 1,000 real CC152K test captions from ``../shared/data/cc152k`` (each repeated
with a distinct number appended, so that every caption is new to the tokenizer), or generated
sentences when ``../shared`` is absent. Prints the time of ``encode_all`` without the cache
(the baseline: every caption through nltk), with an empty cache (tokenise + write) and with a
warm one (read), and the ratio baseline / warm. Each is timed once; run it twice to see the
machine's spread.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchlib import ROOT, print_header

sys.path.insert(0, str(ROOT))
from ncl.data.precomp import encode_all  # noqa: E402
from ncl.data.vocab import SPECIAL_TOKENS, Vocabulary  # noqa: E402

SHARED = ROOT.parent / "shared" / "data" / "cc152k" / "test_caps_img_urls.csv"


def captions(n: int) -> tuple[list[str], str]:
    """``n`` distinct captions and where they come from."""
    if SHARED.is_file():
        with open(SHARED, newline="") as handle:
            base = [row[1] for row in csv.reader(handle, delimiter="\t") if len(row) > 1]  # id, caption, url
        source = f"{len(base)} CC152K test captions"
    else:
        base = [f"a {w} sits on the {v}, next to a dog's ball." for w in ("man", "cat", "child")
                for v in ("bench", "grass", "sofa")]
        source = f"{len(base)} generated sentences"
    return [f"{base[i % len(base)]} {i}" for i in range(n)], source


def timed(call: object) -> tuple[float, tuple[np.ndarray, np.ndarray]]:
    start = time.perf_counter()
    out = call()  # type: ignore[operator]
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--captions", type=int, default=20000)
    args = parser.parse_args()
    caps, source = captions(args.captions)
    print_header("bench_token_cache", sys.argv[1:], f"{len(caps)} captions from {source}")
    vocab = Vocabulary((*SPECIAL_TOKENS, *sorted({w for c in caps[:500] for w in c.lower().split()})))
    with tempfile.TemporaryDirectory() as cache:
        os.environ["NCL_TOKEN_CACHE"] = "off"
        encode_all(caps[:10], vocab)  # builds nltk's tokenizers (lazy, once) outside the timings
        base_s, base = timed(lambda: encode_all(caps, vocab))
        os.environ["NCL_TOKEN_CACHE"] = cache
        miss_s, miss = timed(lambda: encode_all(caps, vocab))
        hit_s, hit = timed(lambda: encode_all(caps, vocab))
        size = sum(p.stat().st_size for p in Path(cache).iterdir())
    same = all(np.array_equal(a, b) and np.array_equal(a, c) for a, b, c in zip(base, miss, hit))
    print(f"no cache (baseline): {base_s:8.3f} s  ({len(caps) / base_s:,.0f} captions/s)")
    print(f"empty cache        : {miss_s:8.3f} s  (tokenise + write {size / 1e6:.1f} MB)")
    print(f"warm cache         : {hit_s:8.3f} s")
    print(f"ratio baseline / warm: {base_s / hit_s:.0f}x; ids identical in all three: {same}")


if __name__ == "__main__":
    main()
