"""``python -m ncl.datatools.video_convert`` writes a layout that VideoDataModule reads back."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from ncl.data.video import VideoDataModule
from ncl.datatools import video_convert
from launch import launch


def release(tmp_path: Path) -> list[str]:
    """An MSVD-like release: per-frame 2D features, pooled 3D features (one clip lacks
    them), 'clip caption' lines with varying counts per clip, three split files."""
    rng = np.random.default_rng(0)
    clips = [f"vid{i}" for i in range(8)]
    np.savez(tmp_path / "rgb.npz", **{c: rng.standard_normal((3, 4)) for c in clips})
    np.savez(tmp_path / "flow.npz", **{c: rng.standard_normal(6) for c in clips if c != "vid5"})
    lines = ["# MSVD-style descriptions"]
    for i, clip in enumerate(clips):
        lines += [f"{clip} a man cooks food number {k}" for k in range(2 + i % 3)]
    (tmp_path / "caps.txt").write_text("\n".join(lines) + "\n")
    for split, ids in (("train", clips[:4]), ("dev", clips[4:6]), ("test", clips[6:])):
        (tmp_path / f"{split}.txt").write_text("\n".join(ids) + "\n")
    return ["--out", str(tmp_path / "data"), "--name", "toymsvd",
            "--expert", f"appearance={tmp_path / 'rgb.npz'}", "--expert", f"motion={tmp_path / 'flow.npz'}",
            "--captions", str(tmp_path / "caps.txt"), "--captions-format", "msvd",
            *[a for s in ("train", "dev", "test") for a in ("--split", f"{s}={tmp_path / f'{s}.txt'}")]]


def test_converted_release_loads_with_pooling_padding_and_fixed_counts(tmp_path: Path) -> None:
    args = release(tmp_path)
    video_convert.main([*args, "--captions-per-clip", "3"])
    dm = VideoDataModule(str(tmp_path / "data"), "toymsvd", batch_size=2)
    assert dm.feature_shape() == (2, 6)  # experts appearance (4-d, padded) and motion (6-d)
    dm.setup("fit")
    split = dm.train_split
    frames = np.load(tmp_path / "rgb.npz")["vid1"]
    assert np.allclose(split.features[1, 0, :4], frames.max(axis=0))  # --pool max (default)
    assert split.im_div == 3
    # vid0 had 2 captions: repeated in order to reach 3; vid2 had 4: the first 3 kept.
    assert split.captions[:3] == ["a man cooks food number 0", "a man cooks food number 1",
                                  "a man cooks food number 0"]
    assert split.captions[6:9] == [f"a man cooks food number {k}" for k in range(3)]
    dev = dm._load("dev")
    assert not dev.features[1, 1].any()  # vid5 has no motion: an all-zero (missing) row


def test_varying_counts_without_captions_per_clip_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--captions-per-clip"):
        video_convert.main(release(tmp_path))


def test_the_module_runs_with_python_dash_m(tmp_path: Path) -> None:
    done = launch([sys.executable, "-m", "ncl.datatools.video_convert", *release(tmp_path),
                           "--captions-per-clip", "3"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "wrote" in done.stdout and (tmp_path / "data" / "toymsvd" / "manifest.json").is_file()
