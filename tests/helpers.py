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
