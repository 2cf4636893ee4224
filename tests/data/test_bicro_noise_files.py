"""BiCro's published F30K noise files (xu5zhao/BiCro noise_index/, copied to
``../shared/data/noise_index/bicro/``) are NCR's caption shuffling (format A) drawn with seed 96
(0.2, 0.4, 0.6: the scripts' --seed 96) or 34 (0.5), which ncl redraws with ``noise_seed``
(configs/bicro_*_f30k.yaml). Skips without the shared data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ncl.data.noise import caption_level_noise

F30K_IMAGES, F30K_CAPTIONS = 29000, 145000


@pytest.mark.parametrize(("ratio", "seed"), [("0.2", 96), ("0.4", 96), ("0.5", 34), ("0.6", 96)])
def test_bicro_files_are_ncr_shuffles(shared_data: Path, ratio: str, seed: int) -> None:
    path = shared_data / "noise_index" / "bicro" / "f30k_precomp" / f"f30k_precomp_{ratio}.npy"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    published = np.load(path)
    assert published.shape == (F30K_CAPTIONS,)
    np.testing.assert_array_equal(published, caption_level_noise(F30K_CAPTIONS, 5, float(ratio), seed))
    # and not another seed's: the draw depends on it
    assert not np.array_equal(published, caption_level_noise(F30K_CAPTIONS, 5, float(ratio), seed + 1))
