"""The video layout, its loader and DataModules, and the synthetic video generator."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ncl.data.contracts import RetrievalData
from ncl.data.video import VideoDataModule, VideoSyntheticDataModule, load_video_split, pack_experts
from ncl.data.video_synthetic import generate_video, video_preset
from ncl.data.vocab import SPECIAL_TOKENS, Vocabulary
from ncl.errors import DataError

WORDS = ["a", "man", "cooks", "dog", "runs"]


def write_layout(root: Path, clips: dict[str, int], per: int = 2, dims: tuple[int, int] = (3, 5),
                 name: str = "toyvid") -> Path:
    """A hand-written dataset in the video layout: experts 'rgb' and 'flow'."""
    data_dir = root / name
    data_dir.mkdir(parents=True)
    (data_dir / "manifest.json").write_text(json.dumps(
        {"experts": [{"name": "rgb", "dim": dims[0]}, {"name": "flow", "dim": dims[1]}]}))
    rng = np.random.default_rng(0)
    for split, n in clips.items():
        for expert, dim in zip(("rgb", "flow"), dims):
            np.save(data_dir / f"{split}_{expert}.npy", rng.standard_normal((n, dim)).astype(np.float32))
        lines = [f"a man cooks {c} {k}" for c in range(n) for k in range(per)]
        (data_dir / f"{split}_caps.txt").write_text("\n".join(lines) + "\n")
    (root / "vocab").mkdir(exist_ok=True)
    Vocabulary((*SPECIAL_TOKENS, *WORDS)).to_json(root / "vocab" / f"{name}_vocab.json")
    return data_dir


def test_pack_experts_zero_pads_each_expert_to_the_widest() -> None:
    a, b = np.ones((2, 3)), 2 * np.ones((2, 5))
    packed = pack_experts([a, b])
    assert packed.shape == (2, 2, 5) and packed.dtype == np.float32
    assert (packed[:, 0, :3] == 1).all() and (packed[:, 0, 3:] == 0).all()
    assert (packed[:, 1] == 2).all()


def test_load_split_packs_the_expert_files_and_groups_captions_by_clip(tmp_path: Path) -> None:
    data_dir = write_layout(tmp_path, {"train": 4})
    vocab = Vocabulary((*SPECIAL_TOKENS, *WORDS))
    split = load_video_split(data_dir, "train", vocab)
    rgb, flow = np.load(data_dir / "train_rgb.npy"), np.load(data_dir / "train_flow.npy")
    assert split.features.shape == (4, 2, 5)
    assert np.array_equal(split.features[2, 0, :3], rgb[2]) and np.array_equal(split.features[2, 1], flow[2])
    assert split.im_div == 2 and split.n_captions == 8
    assert split.captions[5] == "a man cooks 2 1"  # caption 5 belongs to clip 5 // 2
    truncated = load_video_split(data_dir, "train", vocab, max_clips=3)
    assert truncated.n_images == 3 and truncated.n_captions == 6


@pytest.mark.parametrize("breakage, message", [
    ("no_manifest", "manifest not found"),
    ("wrong_dim", "as the manifest says"),
    ("clip_count", "disagree on the number of clips"),
    ("caption_count", "not a whole multiple"),
    ("nan", "NaN or Inf"),
])
def test_broken_layouts_raise_one_clear_error(tmp_path: Path, breakage: str, message: str) -> None:
    data_dir = write_layout(tmp_path, {"train": 4})
    if breakage == "no_manifest":
        (data_dir / "manifest.json").unlink()
    elif breakage == "wrong_dim":
        np.save(data_dir / "train_rgb.npy", np.zeros((4, 7), dtype=np.float32))
    elif breakage == "clip_count":
        np.save(data_dir / "train_flow.npy", np.zeros((5, 5), dtype=np.float32))
    elif breakage == "caption_count":
        (data_dir / "train_caps.txt").write_text("one\ntwo\nthree\n")
    else:
        bad = np.load(data_dir / "train_rgb.npy")
        bad[1, 0] = np.nan
        np.save(data_dir / "train_rgb.npy", bad)
    with pytest.raises(DataError, match=message):
        load_video_split(data_dir, "train", Vocabulary((*SPECIAL_TOKENS, *WORDS)))


def test_datamodule_meets_the_contract_and_batches_carry_packed_clips(tmp_path: Path) -> None:
    write_layout(tmp_path, {"train": 10, "dev": 4, "test": 4}, per=3)
    dm = VideoDataModule(str(tmp_path), "toyvid", batch_size=4, noise_type="caption",
                         noise_ratio=0.5, noise_seed=0)
    assert isinstance(dm, RetrievalData)
    assert dm.feature_shape() == (2, 5)  # K experts x padded dim, before setup("fit")
    dm.setup("fit")
    assert 0.2 < 1 - dm.clean_mask.mean() <= 0.5  # shuffled captions may land on their own clip
    batch = next(iter(dm.train_dataloader()))
    assert batch["images"].shape == (4, 2, 5) and "image_lengths" not in batch
    assert batch["tokens"].dtype == torch.long and batch["index"].shape == (4,)
    assert dm.val_data.im_div == 3


def test_clip_level_noise_moves_all_captions_of_a_clip_together(tmp_path: Path) -> None:
    write_layout(tmp_path, {"train": 20, "dev": 4, "test": 4}, per=3)
    dm = VideoDataModule(str(tmp_path), "toyvid", batch_size=4, noise_type="image",
                         noise_ratio=0.5, noise_seed=1)
    dm.setup("fit")
    clean = dm.clean_mask.reshape(20, 3)
    assert (clean.all(axis=1) | ~clean.any(axis=1)).all()  # per clip: all clean or all moved
    assert (~clean.any(axis=1)).sum() > 0
    paired = dm.noise.cap2img.reshape(20, 3)
    assert (paired == paired[:, :1]).all()


def test_missing_dataset_folder_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="video dataset folder not found: .*nowhere"):
        VideoDataModule(str(tmp_path), "nowhere")


def test_synthetic_video_is_deterministic_and_has_incomplete_clips(tmp_path: Path) -> None:
    spec = video_preset("tiny", missing_motion=0.3)
    first = generate_video(tmp_path / "a", spec)
    second = generate_video(tmp_path / "b", spec)
    for name in ("train_appearance.npy", "train_motion.npy", "train_caps.txt"):
        assert (first / name).read_bytes() == (second / name).read_bytes()
    motion = np.load(first / "train_motion.npy")
    missing = (np.abs(motion).max(axis=1) == 0).mean()
    assert 0.1 < missing < 0.6  # about missing_motion of the clips have no motion row
    lines = (first / "train_caps.txt").read_text().splitlines()
    assert len(lines) == spec.n_train * spec.captions_per_clip


def test_synthetic_datamodule_caches_and_reports_expert_shape(tmp_path: Path) -> None:
    dm = VideoSyntheticDataModule(preset="tiny", cache_dir=str(tmp_path), batch_size=8)
    spec = dm.spec
    assert dm.feature_shape() == (2, max(spec.appearance_dim, spec.motion_dim))
    assert [e.name for e in dm.experts] == ["appearance", "motion"]
    again = VideoSyntheticDataModule(preset="tiny", cache_dir=str(tmp_path), batch_size=8)
    assert again.data_dir == dm.data_dir


def test_missing_vocabulary_names_the_file(tmp_path: Path) -> None:
    write_layout(tmp_path, {"train": 4})
    (tmp_path / "vocab" / "toyvid_vocab.json").unlink()
    with pytest.raises(DataError, match="toyvid_vocab.json"):
        VideoDataModule(str(tmp_path), "toyvid")
