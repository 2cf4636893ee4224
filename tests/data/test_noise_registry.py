"""The noise registry (issue 27, ``ncl data noise``): the format-independent pairing digest,
identifying published files (RCL's image-level and L2RM's caption-level F30K files are one
pairing; L2RM's COCO files are presumed to be RCL's COCO pairing, issue 40; BiCro's and PC²'s
F30K files are seeded draws of NCR's shuffling, issue 48), converting between the two formats,
and the registry as data: one JSON file per origin."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ncl.compose import merged
from ncl.data.noise import caption_level_noise, make_noise, resolve_noise_file
from ncl.data.noise_registry import (
    REGISTRY,
    SOURCES_DIR,
    TRAIN_COUNTS,
    caption_to_image,
    convert,
    counts_for_length,
    entries_with_pairing,
    entry,
    identify,
    load_origins,
    pairing_digest,
    pairing_name,
    seeded_pairing_digest,
)
from ncl.errors import DataError
from ncl.io import sha256_file

F30K_SHARED_RATIOS = (0.2, 0.4, 0.6, 0.8)  # the ratios both RCL and L2RM published
L2RM_RATIOS = (0.2, 0.4, 0.6, 0.8)  # L2RM's README: 0.2, 0.4, 0.6 and 0.8 (F30K and COCO)
REPO = Path(__file__).resolve().parents[2]
RCL_RATIOS = (0.2, 0.4, 0.5, 0.6, 0.8)
# A tiny training split: 6 images with 5 captions each.
N_IMG, N_CAP = 6, 30
TINY_PERM = np.array([0, 2, 1, 3, 5, 4], dtype=np.int64)  # images 1,2 and 4,5 swap captions


def _save(path: Path, array: np.ndarray) -> Path:
    """``np.save`` under the exact name (returns the path for chaining)."""
    with open(path, "wb") as handle:
        np.save(handle, array)
    return path


def _rcl_path(shared: Path, dataset: str, ratio: float) -> Path:
    return shared / "noise_index" / "rcl" / dataset / f"noise_inx_{ratio:g}.npy"


def _l2rm_path(shared: Path, ratio: float) -> Path:
    return shared / "noise_index" / "l2rm" / "f30k_precomp" / f"f30k_precomp_{ratio:g}.npy"


# ---------------------------------------------------------------------------- the digest
def test_digest_is_the_sha256_of_the_caption_level_int64_bytes() -> None:
    expected = hashlib.sha256(np.repeat(TINY_PERM, 5).astype("<i8").tobytes()).hexdigest()
    assert pairing_digest(np.repeat(TINY_PERM, 5)) == expected


def test_digest_ignores_dtype_byte_order_and_memory_layout() -> None:
    # A file saved as int32 or big-endian, or a strided view, defines the same pairing.
    cap2img = np.repeat(TINY_PERM, 5)
    digest = pairing_digest(cap2img)
    assert pairing_digest(cap2img.astype(np.int32)) == digest
    assert pairing_digest(cap2img.astype(">i8")) == digest
    assert pairing_digest(np.repeat(cap2img, 2)[::2]) == digest


def test_digest_changes_with_any_caption() -> None:
    cap2img = np.repeat(TINY_PERM, 5)
    swapped = cap2img.copy()
    swapped[[0, 29]] = swapped[[29, 0]]  # the same multiset of images, two captions exchanged
    assert pairing_digest(swapped) != pairing_digest(cap2img)


def test_image_level_file_and_its_repeat_have_one_digest(tmp_path: Path) -> None:
    image_file = _save(tmp_path / "image.npy", TINY_PERM)
    caption_file = _save(tmp_path / "caption.npy", np.repeat(TINY_PERM, 5))
    image_id, caption_id = identify(image_file, N_IMG, N_CAP), identify(caption_file, N_IMG, N_CAP)
    assert (image_id.format, caption_id.format) == ("image", "caption")
    assert image_id.file_sha256 != caption_id.file_sha256
    assert image_id.pairing_sha256 == caption_id.pairing_sha256 == \
        pairing_digest(np.repeat(TINY_PERM, 5))
    assert image_id.noise_rate == caption_id.noise_rate == pytest.approx(4 / 6)


def test_seeded_digest_matches_the_generated_noise() -> None:
    # What an NCR run with a recorded seed would have drawn (spec 2.1), without a file.
    noise = make_noise(N_IMG, N_CAP, "caption", 0.5, seed=3)
    assert seeded_pairing_digest("caption", N_IMG, N_CAP, 0.5, 3) == pairing_digest(noise.cap2img)
    noise = make_noise(N_IMG, N_CAP, "image", 0.5, seed=3)
    assert seeded_pairing_digest("image", N_IMG, N_CAP, 0.5, 3) == pairing_digest(noise.cap2img)


# ------------------------------------------------------------------------------ identify
def test_an_unknown_file_is_new(tmp_path: Path) -> None:
    found = identify(_save(tmp_path / "mine.npy", TINY_PERM), N_IMG, N_CAP)
    assert found.is_new and found.matches == () and found.pairing_name == "new"
    assert found.summary()["pairing_name"] == "new"
    assert pairing_name(found.pairing_sha256) == "new"


def test_an_unknown_full_size_f30k_pairing_is_new(tmp_path: Path) -> None:
    # Same dataset, size and ratio as a published file, but another draw.
    n_images, n_captions = TRAIN_COUNTS["f30k_precomp"]
    noise = make_noise(n_images, n_captions, "image", 0.2, seed=0)
    found = identify(_save(tmp_path / "noise_inx_0.2.npy", noise.array), n_images, n_captions)
    assert found.is_new


def test_identify_refuses_a_file_of_the_wrong_length(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="length 7"):
        identify(_save(tmp_path / "bad.npy", np.arange(7)), N_IMG, N_CAP)


# ------------------------------------------------------------------------------- convert
def test_convert_round_trips(tmp_path: Path) -> None:
    image_file = _save(tmp_path / "image.npy", TINY_PERM)
    caption_file = convert(image_file, tmp_path / "caption.npy", "caption", N_IMG, N_CAP)
    assert np.array_equal(np.load(caption_file), np.repeat(TINY_PERM, 5))
    back = convert(caption_file, tmp_path / "back.npy", "image", N_IMG, N_CAP)
    assert sha256_file(back) == sha256_file(image_file)  # the same bytes, not only the values
    assert identify(back, N_IMG, N_CAP).pairing_sha256 == \
        identify(caption_file, N_IMG, N_CAP).pairing_sha256


def test_a_split_image_refuses_conversion(tmp_path: Path) -> None:
    cap2img = np.repeat(TINY_PERM, 5)
    cap2img[12] = 0  # one caption of image 2 (captions 10-14) moves alone: NCR's kind of noise
    caption_file = _save(tmp_path / "ncr_style.npy", cap2img)
    out = tmp_path / "image.npy"
    with pytest.raises(DataError) as err:
        convert(caption_file, out, "image", N_IMG, N_CAP)
    message = str(err.value)
    assert str(caption_file) in message and "image 2 " in message and "captions 10-14" in message
    assert not out.exists() and list(tmp_path.iterdir()) == [caption_file]  # nothing written


def test_caption_to_image_names_the_first_split_image() -> None:
    cap2img = np.repeat(TINY_PERM, 5)
    cap2img[[27, 8]] = 0  # images 5 and 1 are split; 1 comes first
    with pytest.raises(DataError, match=r"image 1 .*2 image\(s\)"):
        caption_to_image(cap2img, 5)


def test_convert_does_not_overwrite_unless_asked(tmp_path: Path) -> None:
    image_file = _save(tmp_path / "image.npy", TINY_PERM)
    out = _save(tmp_path / "taken.npy", np.arange(3))
    with pytest.raises(DataError, match="exists"):
        convert(image_file, out, "caption", N_IMG, N_CAP)
    assert np.array_equal(np.load(out), np.arange(3))
    convert(image_file, out, "caption", N_IMG, N_CAP, overwrite=True)
    assert len(np.load(out)) == N_CAP


def test_convert_rejects_an_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="to_format"):
        convert(_save(tmp_path / "a.npy", TINY_PERM), tmp_path / "b.npy", "none", N_IMG, N_CAP)


# ---------------------------------------------------------------------- the registry data
def test_registry_entries_are_consistent() -> None:
    names = [e.name for e in REGISTRY]
    assert len(names) == len(set(names)) == 23  # 5 + 5 RCL, 4 + 4 L2RM, 4 BiCro, 1 PC²
    for item in REGISTRY:
        n_images, n_captions = TRAIN_COUNTS[item.dataset]
        assert item.entries == (n_images if item.format == "image" else n_captions)
        assert item.papers and item.source
        assert entry(item.name) is item


@pytest.mark.parametrize("ratio", F30K_SHARED_RATIOS)
def test_l2rm_and_rcl_entries_share_the_pairing(ratio: float) -> None:
    rcl, l2rm = entry(f"rcl/f30k/{ratio:g}"), entry(f"l2rm/f30k/{ratio:g}")
    assert rcl.pairing_sha256 == l2rm.pairing_sha256
    assert rcl.file_sha256 != l2rm.file_sha256
    assert entries_with_pairing(rcl.pairing_sha256) == (rcl, l2rm)
    assert pairing_name(rcl.pairing_sha256) == f"rcl/f30k/{ratio:g} = l2rm/f30k/{ratio:g}"


def test_ratios_give_distinct_pairings() -> None:
    # 5 RCL F30K + 5 RCL COCO (L2RM's repeat them) + 4 BiCro + PC²'s seed-0 file
    assert len({e.pairing_sha256 for e in REGISTRY}) == 15


def test_counts_for_length() -> None:
    assert counts_for_length(29_000) == ("f30k_precomp", 29_000, 145_000)
    assert counts_for_length(566_435) == ("coco_precomp", 113_287, 566_435)
    assert counts_for_length(12) is None


# ------------------------------------------------------------------ the real shared files
@pytest.mark.parametrize("ratio", F30K_SHARED_RATIOS)
def test_real_rcl_and_l2rm_files_are_one_registered_pairing(shared_data: Path, ratio: float) -> None:
    n_images, n_captions = TRAIN_COUNTS["f30k_precomp"]
    rcl = identify(_rcl_path(shared_data, "f30k_precomp", ratio), n_images, n_captions)
    l2rm = identify(_l2rm_path(shared_data, ratio), n_images, n_captions)
    assert (rcl.format, l2rm.format) == ("image", "caption")
    assert rcl.pairing_sha256 == l2rm.pairing_sha256
    assert rcl.pairing_name == l2rm.pairing_name == f"rcl/f30k/{ratio:g} = l2rm/f30k/{ratio:g}"
    assert rcl.file_sha256 == entry(f"rcl/f30k/{ratio:g}").file_sha256
    assert l2rm.file_sha256 == entry(f"l2rm/f30k/{ratio:g}").file_sha256
    assert [m.name for m in rcl.same_file] == [f"rcl/f30k/{ratio:g}"]
    assert rcl.noise_rate == l2rm.noise_rate == pytest.approx(ratio, abs=1e-3)


@pytest.mark.parametrize("dataset", ["f30k_precomp", "coco_precomp"])
@pytest.mark.parametrize("ratio", RCL_RATIOS)
def test_real_rcl_files_match_the_registry(shared_data: Path, dataset: str, ratio: float) -> None:
    n_images, n_captions = TRAIN_COUNTS[dataset]
    found = identify(_rcl_path(shared_data, dataset, ratio), n_images, n_captions)
    name = f"rcl/{dataset.removesuffix('_precomp')}/{ratio:g}"
    assert found.file_sha256 == entry(name).file_sha256
    assert found.pairing_sha256 == entry(name).pairing_sha256
    assert name in found.pairing_name.split(" = ")


def test_converting_a_real_l2rm_file_gives_rcls_bytes(shared_data: Path, tmp_path: Path) -> None:
    # Both releases are int64 np.save files, so a conversion reproduces the other file exactly.
    n_images, n_captions = TRAIN_COUNTS["f30k_precomp"]
    out = convert(_l2rm_path(shared_data, 0.6), tmp_path / "noise_inx_0.6.npy", "image",
                  n_images, n_captions)
    assert sha256_file(out) == entry("rcl/f30k/0.6").file_sha256
    out = convert(_rcl_path(shared_data, "f30k_precomp", 0.6), tmp_path / "f30k_precomp_0.6.npy",
                  "caption", n_images, n_captions)
    assert sha256_file(out) == entry("l2rm/f30k/0.6").file_sha256


def test_the_digest_script_reproduces_the_registry(shared_data: Path) -> None:
    # The stored table is what scripts/noise_registry_digests.py computes from the files.
    script = Path(__file__).resolve().parents[2] / "scripts" / "noise_registry_digests.py"
    spec = importlib.util.spec_from_file_location("noise_registry_digests", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    entries = module.computed(shared_data / "noise_index", load_origins())
    assert entries == list(REGISTRY)
    assert module.declared_problems(entries) == []
    # and it would report a wrong seed or a wrong twin
    broken = [replace(e, generated_by=("caption", 97)) if e.name == "bicro/f30k/0.2" else
              replace(e, same_pairing_as="rcl/f30k/0.4") if e.name == "l2rm/f30k/0.2" else e
              for e in entries]
    assert module.declared_problems(broken) == [
        "l2rm/f30k/0.2: not the pairing of rcl/f30k/0.4",
        "bicro/f30k/0.2: not the caption-level draw with seed 97"]


# ------------------------------------------------- L2RM's COCO files: presumed, not checked
@pytest.mark.parametrize("ratio", L2RM_RATIOS)
def test_l2rm_coco_entries_are_presumed_to_be_rcls_pairing(ratio: float) -> None:
    rcl, l2rm = entry(f"rcl/coco/{ratio:g}"), entry(f"l2rm/coco/{ratio:g}")
    assert (l2rm.dataset, l2rm.format, l2rm.entries) == ("coco_precomp", "caption", 566_435)
    assert l2rm.file_name == f"coco_precomp_{ratio:g}.npy"  # tarin_coco.sh's name
    assert l2rm.presumed and l2rm.presumed_from == rcl.name and not rcl.presumed
    assert l2rm.pairing_sha256 == rcl.pairing_sha256 and l2rm.file_sha256 != rcl.file_sha256
    # the reason is stated, and it says the equality is not checked
    assert "PRESUMED, not checked" in l2rm.source and "tarin_coco.sh" in l2rm.source
    assert f"coco_precomp_{ratio:g}.npy" in l2rm.source and "README" in l2rm.source
    # a pairing name never passes the presumption off as a checked equality
    label = f"rcl/coco/{ratio:g} = l2rm/coco/{ratio:g} (presumed)"
    assert pairing_name(rcl.pairing_sha256) == label


@pytest.mark.parametrize("ratio", F30K_SHARED_RATIOS)
def test_l2rm_f30k_entries_are_checked_not_presumed(ratio: float) -> None:
    l2rm = entry(f"l2rm/f30k/{ratio:g}")
    assert not l2rm.presumed and l2rm.presumed_from is None and l2rm.label == l2rm.name
    assert "PRESUMED" not in l2rm.source


def test_only_the_l2rm_coco_entries_and_pc2s_seed_0_file_are_presumed() -> None:
    assert sorted(e.name for e in REGISTRY if e.presumed) == \
        [f"l2rm/coco/{r:g}" for r in L2RM_RATIOS] + ["pc2/f30k/0.2.np"]


@pytest.mark.parametrize("config", ["l2rm_sgr_coco", "l2rm_saf_coco"])
def test_l2rm_coco_configs_name_l2rms_caption_level_file(config: str, tmp_path: Path) -> None:
    """The config reads L2RM's own file (tarin_coco.sh's name), caption level, at its ratio."""
    data = merged(REPO / "configs" / f"{config}.yaml")["data"]["init_args"]
    assert data["data_name"] == "coco_precomp" and data["noise_type"] == "caption"
    folder = tmp_path / "coco_precomp"
    folder.mkdir()
    target = entry(f"l2rm/coco/{data['noise_ratio']:g}")
    (folder / target.file_name).touch()
    assert resolve_noise_file(data["noise_file"], folder, data["noise_ratio"]) == \
        folder / target.file_name
    assert target.format == "caption"


@pytest.mark.parametrize("ratio", L2RM_RATIOS)
def test_converting_rcls_coco_file_gives_the_presumed_l2rm_file(shared_data: Path, tmp_path: Path,
                                                               ratio: float) -> None:
    """RCL's COCO file in L2RM's per-caption format is ``np.repeat(rcl, 5)``; ncl reads it under
    the configs' name as caption level, with RCL's pairing, and names it as presumed."""
    n_images, n_captions = TRAIN_COUNTS["coco_precomp"]
    rcl_file = _rcl_path(shared_data, "coco_precomp", ratio)
    rcl = np.load(rcl_file)
    folder = tmp_path / "coco_precomp"
    folder.mkdir()
    config = merged(REPO / "configs" / "l2rm_sgr_coco.yaml")["data"]["init_args"]
    out = convert(rcl_file, folder / f"coco_precomp_{ratio:g}.npy", "caption", n_images, n_captions)
    written = np.load(out)
    assert written.dtype == np.int64 and np.array_equal(written, np.repeat(rcl, 5))
    assert resolve_noise_file(config["noise_file"], folder, ratio) == out  # the configs' name
    noise = make_noise(n_images, n_captions, config["noise_type"], ratio, 0, out)
    assert noise.format == "caption" and noise.noise_rate == pytest.approx(ratio, abs=1e-3)
    assert pairing_digest(noise.cap2img) == entry(f"rcl/coco/{ratio:g}").pairing_sha256
    found = identify(out, n_images, n_captions)
    assert found.file_sha256 == entry(f"l2rm/coco/{ratio:g}").file_sha256
    assert found.pairing_name == f"rcl/coco/{ratio:g} = l2rm/coco/{ratio:g} (presumed)"
    assert found.summary()["same_file"] == [f"l2rm/coco/{ratio:g} (presumed)"]
    assert [p.split(":")[0] for p in found.papers] == ["RCL"]  # L2RM's use is not known


# ------------------------------------------- BiCro's and PC²'s F30K files: NCR's seeded draws
BICRO_SEEDS = {0.2: 96, 0.4: 96, 0.5: 34, 0.6: 96}  # 96: the seed of BiCro's scripts


@pytest.mark.parametrize(("ratio", "seed"), sorted(BICRO_SEEDS.items()))
def test_bicro_entries_are_ncrs_draw_with_their_seed(ratio: float, seed: int) -> None:
    item = entry(f"bicro/f30k/{ratio:g}")
    assert item.generated_by == ("caption", seed) and not item.presumed
    n_images, n_captions = TRAIN_COUNTS["f30k_precomp"]
    assert seeded_pairing_digest("caption", n_images, n_captions, ratio, seed) == \
        item.pairing_sha256
    assert [p.split(":")[0] for p in item.papers] == ["BiCro", "PC²"]  # PC²'s are these bytes
    assert pairing_name(item.pairing_sha256) == item.name  # no other file has this pairing


def test_pc2s_seed_0_file_is_presumed_from_its_draw(tmp_path: Path) -> None:
    item = entry("pc2/f30k/0.2.np")
    assert item.presumed_from == "generator" and item.generated_by == ("caption", 0)
    assert item.file_name == "f30k_precomp_0.2.np.npy" and "PRESUMED" in item.source
    # its digests are those of the draw saved as int64 with np.save, as BiCro's files are
    n_images, n_captions = TRAIN_COUNTS["f30k_precomp"]
    draw = caption_level_noise(n_captions, n_captions // n_images, 0.2, 0).astype(np.int64)
    path = _save(tmp_path / item.file_name, draw)
    found = identify(path, n_images, n_captions)
    assert (found.file_sha256, found.pairing_sha256) == (item.file_sha256, item.pairing_sha256)
    assert found.pairing_name == "pc2/f30k/0.2.np (presumed)" and found.papers == ()


@pytest.mark.parametrize("ratio", sorted(BICRO_SEEDS))
def test_real_bicro_files_match_the_registry(shared_data: Path, ratio: float) -> None:
    path = shared_data / "noise_index" / "bicro" / "f30k_precomp" / f"f30k_precomp_{ratio:g}.npy"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    found = identify(path, *TRAIN_COUNTS["f30k_precomp"])
    assert [m.name for m in found.same_file] == [f"bicro/f30k/{ratio:g}"]
    assert found.draws == (f"NCR caption shuffling, seed {BICRO_SEEDS[ratio]}",)


# ------------------------------------------------------------- the registry's data files
def _copy_sources(tmp_path: Path) -> Path:
    folder = tmp_path / "noise_sources"
    shutil.copytree(SOURCES_DIR, folder)
    return folder


def _origin_file(folder: Path, origin: str, order: int, **record: object) -> Path:
    file_record = {"name": f"{origin}/f30k/0.3", "dataset": "f30k_precomp", "ratio": 0.3,
                   "format": "caption", "entries": 145000, "file_name": "x.npy",
                   "file_sha256": "a" * 64, "pairing_sha256": "b" * 64, **record}
    path = folder / f"{origin}.json"
    path.write_text(json.dumps({"origin": origin, "order": order, "folder": None,
                                "papers": ["New: someone, 2026"], "sources": {"*": "s {ratio}"},
                                "files": [file_record]}), encoding="utf-8")
    return path


def test_an_origin_is_registered_by_adding_its_file(tmp_path: Path) -> None:
    folder = _copy_sources(tmp_path)
    _origin_file(folder, "new", 5, generated_by={"algorithm": "image", "seed": 3})
    origins = load_origins(folder)
    assert origins[0].name == "new"  # order 5 comes first
    added = origins[0].entries[0]
    assert added.source == "s 0.3" and added.papers == ("New: someone, 2026",)
    assert added.generated_by == ("image", 3)
    assert [e for o in origins[1:] for e in o.entries] == list(REGISTRY)


@pytest.mark.parametrize(("change", "message"), [
    ({"order": 10}, "share an order"),
    ({"twice": True}, "entries named twice: new/f30k/0.3"),
    ({"record": {"name": "other/f30k/0.3"}}, "is not named new/"),
    ({"record": {"generated_by": {"algorithm": "video", "seed": 1}}}, "generated_by must be"),
    ({"record": {"presumed_from": "generator"}}, "needs generated_by"),
    ({"drop": "pairing_sha256"}, "missing pairing_sha256"),
])
def test_a_bad_origin_file_is_named(tmp_path: Path, change: dict, message: str) -> None:
    folder = _copy_sources(tmp_path)
    path = _origin_file(folder, "new", change.get("order", 5), **change.get("record", {}))
    data = json.loads(path.read_text(encoding="utf-8"))
    if "drop" in change:
        del data["files"][0][change["drop"]]
    if change.get("twice"):
        data["files"].append(data["files"][0])
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match=message) as err:
        load_origins(folder)
    if change.get("order") is None and "named twice" not in message:
        assert "new.json" in str(err.value)


def test_an_origin_file_that_is_not_json_is_named(tmp_path: Path) -> None:
    folder = _copy_sources(tmp_path)
    (folder / "broken.json").write_text("{", encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken\.json: not valid JSON"):
        load_origins(folder)


def test_the_docs_table_lists_every_entry_with_its_digests() -> None:
    """docs/data.md's registry table: one row per entry, its digests' first 12 hex digits."""
    text = (REPO / "docs" / "data.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 10 and cells[0].startswith("`") and "/" in cells[0]:
            rows[cells[0].split("`")[1]] = (cells[6].strip("`"), cells[7].strip("`"))
    assert rows == {e.name: (e.pairing_sha256[:12], e.file_sha256[:12]) for e in REGISTRY}
