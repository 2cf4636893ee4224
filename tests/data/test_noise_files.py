"""Official noise files by name (issue 11 B): where ``data.noise_file`` is looked up, the
``{noise_ratio}`` placeholder, a missing file, and a file that contradicts ``noise_ratio``."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from ncl.data.datamodule import PrecompDataModule
from ncl.data.noise import make_noise, ratio_mismatch, resolve_noise_file
from ncl.errors import DataError, NclWarning

RCL_RATIOS = (0.2, 0.4, 0.5, 0.6, 0.8)
TEMPLATE = "noise_inx_{noise_ratio}.npy"


def _rcl_files(folder: Path, n_images: int = 20) -> None:
    """RCL-style ``noise_inx_<r>.npy`` files for a ``n_images``-image training split, each
    moving exactly its ratio of the images (a cycle over the first ones: no fixed points,
    which a random draw on 20 images would leave)."""
    folder.mkdir(parents=True, exist_ok=True)
    for ratio in RCL_RATIOS:
        moved = round(ratio * n_images)
        perm = np.arange(n_images)
        perm[:moved] = np.roll(np.arange(moved), 1)
        np.save(folder / f"noise_inx_{ratio:g}.npy", perm)


# --------------------------------------------------------------------- resolve_noise_file
@pytest.mark.parametrize("value", [None, ""])
def test_no_file(tmp_path: Path, value: str | None) -> None:
    assert resolve_noise_file(value, tmp_path, 0.2) is None


def test_bare_name_is_looked_up_in_the_dataset_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _rcl_files(tmp_path / "f30k_precomp")
    monkeypatch.chdir(tmp_path)  # not found relative to the current folder
    assert resolve_noise_file("noise_inx_0.4.npy", tmp_path / "f30k_precomp", 0.2) == \
        tmp_path / "f30k_precomp" / "noise_inx_0.4.npy"


@pytest.mark.parametrize("ratio", RCL_RATIOS)
def test_ratio_placeholder_picks_the_file(tmp_path: Path, ratio: float) -> None:
    _rcl_files(tmp_path)
    assert resolve_noise_file(TEMPLATE, tmp_path, ratio) == tmp_path / f"noise_inx_{ratio:g}.npy"


def test_placeholder_at_ratio_zero_reads_nothing(tmp_path: Path) -> None:
    assert resolve_noise_file(TEMPLATE, tmp_path, 0.0) is None


def test_path_with_a_folder_is_used_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _rcl_files(tmp_path / "elsewhere")
    monkeypatch.chdir(tmp_path)
    assert resolve_noise_file("elsewhere/noise_inx_0.2.npy", tmp_path / "data", 0.2) == \
        Path("elsewhere/noise_inx_0.2.npy")
    assert resolve_noise_file("./elsewhere/noise_inx_{noise_ratio}.npy", tmp_path / "data", 0.6) == \
        Path("elsewhere/noise_inx_0.6.npy")


def test_missing_file_names_the_path_and_where_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        resolve_noise_file(TEMPLATE, tmp_path / "f30k_precomp", 0.6)
    message = str(err.value)
    assert str(tmp_path / "f30k_precomp" / "noise_inx_0.6.npy") in message
    assert "RCL's repository" in message and "noise_file to null" in message
    assert "ncl data noise convert" in message  # how to write L2RM's caption-level files
    assert "\n" not in message


# --------------------------------------------------------------------- ratio_mismatch
def test_ratio_mismatch() -> None:
    assert ratio_mismatch(Path("f.npy"), 0.59993, 0.6) is None
    message = ratio_mismatch(Path("f.npy"), 0.6, 0.2)
    assert message and "f.npy" in message and "60.0%" in message and "0.2" in message


def test_official_files_match_their_ratio(shared_data: Path) -> None:
    """With ``{noise_ratio}`` the ratio in the config is the ratio of the file it reads."""
    for name, n_images in (("f30k_precomp", 29000), ("coco_precomp", 113287)):
        folder = shared_data / "noise_index" / "rcl" / name
        for ratio in RCL_RATIOS:
            path = resolve_noise_file(TEMPLATE, folder, ratio)
            noise = make_noise(n_images, 5 * n_images, "image", ratio, 0, path)
            assert noise.format == "image" and ratio_mismatch(path, noise.noise_rate, ratio) is None


# --------------------------------------------------------------------- through the DataModule
def test_datamodule_reads_the_file_the_ratio_names(tiny_root: Path) -> None:
    _rcl_files(tiny_root / "toy_precomp")
    dm = PrecompDataModule(str(tiny_root), "toy_precomp", batch_size=8, noise_type="image",
                           noise_ratio=0.4, noise_file=TEMPLATE)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NclWarning)  # the file matches the ratio: no warning
        dm.setup("fit")
    expected = np.load(tiny_root / "toy_precomp" / "noise_inx_0.4.npy")
    assert np.array_equal(dm.noise.array, expected)
    assert str(tiny_root / "toy_precomp" / "noise_inx_0.4.npy") in dm.noise.source


def test_datamodule_missing_file_fails_at_construction(tiny_root: Path) -> None:
    with pytest.raises(DataError, match="noise_inx_0.2.npy"):
        PrecompDataModule(str(tiny_root), "toy_precomp", noise_type="image", noise_ratio=0.2,
                          noise_file=TEMPLATE)


def test_datamodule_warns_when_the_file_contradicts_the_ratio(tiny_root: Path) -> None:
    _rcl_files(tiny_root / "toy_precomp")
    dm = PrecompDataModule(str(tiny_root), "toy_precomp", batch_size=8, noise_type="image",
                           noise_ratio=0.2, noise_file="noise_inx_0.6.npy")
    with pytest.warns(NclWarning, match=r"re-pairs 60\.0% .* data\.noise_ratio is 0\.2"):
        dm.setup("fit")
    assert dm.noise.noise_rate == pytest.approx(0.6)  # the file wins, as before
