"""Helpers for tests: tiny files in the official layout."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_split(data_dir: Path, split: str, n_images: int, per: int = 5, regions: int = 4,
                dim: int = 8, seed: int = 0, captions: list[str] | None = None) -> None:
    """Write ``{split}_ims.npy`` and ``{split}_caps.txt`` with trivial content."""
    rng = np.random.default_rng(seed)
    data_dir.mkdir(parents=True, exist_ok=True)
    np.save(data_dir / f"{split}_ims.npy", rng.standard_normal((n_images, regions, dim)).astype(np.float32))
    if captions is None:
        captions = [f"a dog number {i} runs on the grass" for i in range(n_images * per)]
    (data_dir / f"{split}_caps.txt").write_text("\n".join(captions) + "\n", encoding="utf-8")


def write_vocab(path: Path, words: list[str]) -> None:
    from ncl.data.vocab import SPECIAL_TOKENS, Vocabulary

    Vocabulary((*SPECIAL_TOKENS, *words)).to_json(path)


# CLI overrides that shrink the quickstart backbone to the ``tiny`` synthetic preset's sizes.
TINY_BACKBONE_ARGS = ["--model.backbone.init_args.img_dim=16", "--model.backbone.init_args.num_regions=6",
                      "--model.backbone.init_args.word_dim=8", "--model.backbone.init_args.embed_size=16",
                      "--model.backbone.init_args.sim_dim=8"]


def repeated_captions(words: list[str], n_captions: int, distinct: int = 500, seed: int = 0) -> list[str]:
    """``n_captions`` captions of 6 of ``words``, cycling through ``distinct`` different ones
    (official split sizes without as many different captions to tokenise)."""
    rng = np.random.default_rng(seed)
    pool = [" ".join(rng.choice(words, 6)) for _ in range(distinct)]
    return [pool[i % distinct] for i in range(n_captions)]


def prefill_token_cache(data_dir: Path, vocab_path: Path, splits: tuple[str, ...] = ("train", "dev")) -> None:
    """Put the token ids of ``data_dir``'s splits under ``vocab_path`` into ``$NCL_TOKEN_CACHE``,
    tokenising each distinct caption once: the ids ncl's loader computes (the same tokenizer
    and vocabulary, so the same cache key and content), which it then reads instead of
    tokenising 145,000 captions (40 s or more) itself."""
    from ncl.data.precomp import read_captions
    from ncl.data.token_cache import cached_encode
    from ncl.data.tokenize import tokenize
    from ncl.data.vocab import load_vocabulary

    vocab = load_vocabulary(vocab_path)
    for split in splits:
        captions, _ = read_captions(data_dir, split)
        ids = {caption: vocab.encode(tokenize(caption)) for caption in set(captions)}

        def encode(caps: list[str]) -> tuple[np.ndarray, np.ndarray]:
            offsets = np.zeros(len(caps) + 1, dtype=np.int64)
            np.cumsum([len(ids[c]) for c in caps], out=offsets[1:])
            return np.fromiter((i for c in caps for i in ids[c]), dtype=np.int32,
                               count=int(offsets[-1])), offsets

        cached_encode(captions, vocab.words, encode)
