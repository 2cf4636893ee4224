"""``ncl data`` through the real command (issue 27): the noise registry's list, identify and
convert, the hook of ``ncl data check``, one-line user errors, and the pairing a run records."""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import yaml
from cli_helpers import error_lines, main_exit, tiny

import ncl.cli as cli
import ncl.cli.data_cli as data_cli
from ncl.data.noise_registry import TRAIN_COUNTS, pairing_digest

F30K_IMAGES, F30K_CAPTIONS = TRAIN_COUNTS["f30k_precomp"]


def run_ok(capsys: pytest.CaptureFixture, *args: str) -> str:
    """Run ``ncl.cli.main`` expecting success; return stdout (stderr must hold no error)."""
    cli.main(list(args))  # returns normally on exit status 0
    out, err = capsys.readouterr()
    assert not error_lines(err), err
    return out


def one_error(capsys: pytest.CaptureFixture, *args: str) -> str:
    """Run ``ncl.cli.main`` expecting a user error: exit 2, exactly one error line, returned."""
    err = main_exit(capsys, *args)
    assert "Traceback" not in err
    [line] = error_lines(err)
    return line


def save(path: Path, array: np.ndarray) -> Path:
    """``np.save`` under the exact name given."""
    with open(path, "wb") as handle:
        np.save(handle, array)
    return path


def report_line(out: str, key: str) -> str:
    """The value of ``key:`` in ``noise identify``'s output."""
    [line] = [line for line in out.splitlines() if line.startswith(f"{key}:")]
    return line.split(":", 1)[1].strip()


@pytest.fixture
def f30k_noise(shared_data: Path) -> tuple[Path, Path]:
    """RCL's image-level and L2RM's caption-level F30K 0.2 files (skips without shared data)."""
    index = shared_data / "noise_index"
    return (index / "rcl" / "f30k_precomp" / "noise_inx_0.2.npy",
            index / "l2rm" / "f30k_precomp" / "f30k_precomp_0.2.npy")


# ------------------------------------------------------------------------------ noise list
def test_noise_list_shows_the_registry(capsys) -> None:
    out = run_ok(capsys, "data", "noise", "list")
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert rows["name"][:7] == ["name", "dataset", "format", "entries", "ratio", "pairing", "papers"]
    rcl, l2rm = rows["rcl/f30k/0.2"], rows["l2rm/f30k/0.2"]
    assert rcl[1:5] == ["f30k_precomp", "image", "29000", "0.2"]
    assert l2rm[1:5] == ["f30k_precomp", "caption", "145000", "0.2"]
    assert rcl[5] == l2rm[5] and len(rcl[5]) == 12  # one pairing, two formats
    assert rcl[6] == "RCL" and l2rm[6] == "L2RM"
    # L2RM's COCO files are listed with RCL's COCO pairing, marked as presumed (not checked)
    assert rows["name"][7] == "digests" and rcl[7] == l2rm[7] == "file"
    assert rows["l2rm/coco/0.2"][5] == rows["rcl/coco/0.2"][5]
    assert rows["l2rm/coco/0.2"][7] == "presumed" and "'presumed' rows" in out
    # BiCro's files say which seeded draw of NCR's shuffling they are (issue 48)
    assert " ".join(rows["bicro/f30k/0.5"]).endswith("BiCro, PC² file NCR caption shuffling, seed 34")
    assert rows["rcl/f30k/0.2"][8] == "-"


def test_identify_names_bicros_seed(capsys, shared_data: Path) -> None:
    path = shared_data / "noise_index" / "bicro" / "f30k_precomp" / "f30k_precomp_0.4.npy"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    out = run_ok(capsys, "data", "noise", "identify", str(path))
    assert report_line(out, "registry") == "bicro/f30k/0.4"
    assert report_line(out, "same bytes as") == "bicro/f30k/0.4"
    assert report_line(out, "drawn by") == "NCR caption shuffling, seed 96"
    assert "BiCro" in report_line(out, "used by") and "PC²" in report_line(out, "used by")


# -------------------------------------------------------------------------- noise identify
def test_identify_names_rcl_and_l2rm_files_as_one_pairing(capsys, f30k_noise) -> None:
    rcl_file, l2rm_file = f30k_noise
    rcl = run_ok(capsys, "data", "noise", "identify", str(rcl_file))  # split from the length
    l2rm = run_ok(capsys, "data", "noise", "identify", str(l2rm_file), "--dataset", "f30k_precomp")
    assert report_line(rcl, "registry") == report_line(l2rm, "registry") == \
        "rcl/f30k/0.2 = l2rm/f30k/0.2"
    assert report_line(rcl, "pairing digest") == report_line(l2rm, "pairing digest")
    assert report_line(rcl, "file sha256") != report_line(l2rm, "file sha256")
    assert report_line(rcl, "same bytes as") == "rcl/f30k/0.2"
    assert report_line(l2rm, "format").startswith("caption level, 145000")


def test_identify_of_an_unregistered_file_says_new(capsys, tmp_path: Path) -> None:
    perm = np.arange(6, dtype=np.int64)
    perm[[1, 2]] = perm[[2, 1]]  # images 1 and 2 swap their captions
    noise = save(tmp_path / "mine.npy", perm)
    out = run_ok(capsys, "data", "noise", "identify", str(noise), "--n_images", "6",
                 "--n_captions", "30")
    assert report_line(out, "registry") == "new"
    assert report_line(out, "pairing digest") == pairing_digest(np.repeat(perm, 5))
    assert float(report_line(out, "noise rate")) == pytest.approx(10 / 30)
    assert "same bytes as" not in out and "used by" not in out


def test_identify_json_is_the_registry_summary(capsys, tmp_path: Path) -> None:
    noise = save(tmp_path / "f30k.npy", np.arange(F30K_IMAGES, dtype=np.int64))  # clean pairing
    out = run_ok(capsys, "data", "noise", "identify", str(noise), "--json")
    summary = yaml.safe_load(out)  # JSON is YAML
    assert summary["format"] == "image" and summary["length"] == F30K_IMAGES
    assert summary["noise_rate"] == 0 and summary["pairing_name"] == "clean"


# --------------------------------------------------------------------------- noise convert
def test_convert_round_trip_keeps_the_pairing(capsys, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    image_level = rng.permutation(F30K_IMAGES).astype(np.int64)
    source = save(tmp_path / "image.npy", image_level)
    caption_file, back = tmp_path / "caption.npy", tmp_path / "back.npy"
    out = run_ok(capsys, "data", "noise", "convert", str(source), str(caption_file), "--to", "caption")
    assert f"wrote {caption_file}: caption level, {F30K_CAPTIONS} entries" in out
    np.testing.assert_array_equal(np.load(caption_file), np.repeat(image_level, 5))
    run_ok(capsys, "data", "noise", "convert", str(caption_file), str(back), "--to", "image",
           "--dataset", "f30k_precomp")
    assert back.read_bytes() == source.read_bytes()


def test_convert_refuses_to_replace_a_file_without_overwrite(capsys, tmp_path: Path) -> None:
    source = save(tmp_path / "image.npy", np.arange(F30K_IMAGES, dtype=np.int64))
    out = save(tmp_path / "out.npy", np.zeros(3, dtype=np.int64))
    line = one_error(capsys, "data", "noise", "convert", str(source), str(out), "--to", "caption")
    assert str(out) in line and "exists" in line
    assert len(np.load(out)) == 3  # untouched
    run_ok(capsys, "data", "noise", "convert", str(source), str(out), "--to", "caption",
           "--overwrite")
    assert len(np.load(out)) == F30K_CAPTIONS


def test_a_caption_pairing_that_splits_images_cannot_become_image_level(capsys,
                                                                       tmp_path: Path) -> None:
    cap2img = np.repeat(np.arange(6, dtype=np.int64), 5)
    cap2img[[0, 29]] = cap2img[[29, 0]]  # image 0's captions now point to images 0 and 5
    source = save(tmp_path / "caption.npy", cap2img)
    out = tmp_path / "image.npy"
    line = one_error(capsys, "data", "noise", "convert", str(source), str(out), "--to", "image",
                     "--n_images", "6", "--n_captions", "30")
    assert "cannot be written in image-level format" in line
    assert not out.exists() and list(tmp_path.iterdir()) == [source]  # nothing written


# ------------------------------------------------------------------------ one-line errors
@pytest.mark.parametrize("content, expected", [
    (b"not a numpy file", "is not a readable .npy array"),
    (None, "has 7 entries, which is no known training split"),
    ("npz", "is an .npz archive, not a .npy array"),
])
def test_a_bad_noise_file_is_one_error_line(capsys, tmp_path: Path, content: bytes | str | None,
                                           expected: str) -> None:
    bad = tmp_path / "bad.npy"
    if content is None:
        save(bad, np.arange(7, dtype=np.int64))
    elif content == "npz":
        with open(bad, "wb") as handle:
            np.savez(handle, noise=np.arange(F30K_IMAGES))
    else:
        bad.write_bytes(content)
    assert expected in one_error(capsys, "data", "noise", "identify", str(bad))
    assert expected in one_error(capsys, "data", "noise", "convert", str(bad),
                                 str(tmp_path / "out.npy"), "--to", "image")
    assert not (tmp_path / "out.npy").exists()


def test_a_file_of_the_wrong_split_is_one_error_line(capsys, tmp_path: Path) -> None:
    noise = save(tmp_path / "f30k.npy", np.arange(F30K_IMAGES, dtype=np.int64))
    line = one_error(capsys, "data", "noise", "identify", str(noise), "--dataset", "coco_precomp")
    assert "has length 29000" in line


@pytest.mark.parametrize("args, expected", [
    (("data",), "ncl data: the following arguments are required"),
    (("data", "noise"), "ncl data noise: the following arguments are required"),
    (("data", "noise", "identify"), "the following arguments are required: FILE"),
    (("data", "noise", "list", "--bogus"), "unrecognized arguments: --bogus"),
    (("data", "noise", "identify", "x.npy", "--dataset", "f30k"), "invalid choice: 'f30k'"),
    (("data", "noise", "identify", "x.npy", "--n_images", "6"), "--n_images and --n_captions go"),
    (("data", "noise", "identify", "missing.npy"), "noise file not found: missing.npy"),
    (("data", "noise", "identify", "missing.npy", "--n_images", "4", "--n_captions", "10"),
     "expected positive counts with a whole number of captions per image"),
    (("data", "check", "--dataset", "f30k_precomp"), "required: --data_root"),
])
def test_usage_mistakes_are_one_error_line(capsys, tmp_path: Path, monkeypatch, args,
                                           expected: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert expected in one_error(capsys, *args)


def test_help_works_at_every_level(capsys) -> None:
    for args in (("data", "--help"), ("data", "noise", "--help"),
                 ("data", "noise", "convert", "--help"), ("data", "check", "--help")):
        run_ok(capsys, *args)  # --help exits 0
    assert "--to {caption,image}" in run_ok(capsys, "data", "noise", "convert", "-h")
    assert "--full" in run_ok(capsys, "data", "check", "-h")


# ------------------------------------------------------------------- the data check hook
@dataclass
class FakeReport:
    """What ``ncl.datatools.layout_check.check_layout`` returns, as the hook uses it."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    noise_files: list[str] = field(default_factory=list)

    def table(self) -> str:
        return "split  images\ntrain  29000"


def fake_layout_check(monkeypatch, report: FakeReport) -> list[tuple]:
    """Install a stand-in layout-check module; returns the list its calls are recorded in."""
    calls: list[tuple] = []

    def check_layout(data_root: Path, dataset: str, full_scan: bool = False,
                     configs: list[Path] = ()) -> FakeReport:
        calls.append((data_root, dataset, full_scan))
        return report

    module = types.ModuleType(data_cli.LAYOUT_CHECK_MODULE)
    module.check_layout = check_layout
    monkeypatch.setitem(sys.modules, data_cli.LAYOUT_CHECK_MODULE, module)
    return calls


def test_check_prints_the_table_and_warnings_and_exits_0(capsys, monkeypatch,
                                                         tmp_path: Path) -> None:
    calls = fake_layout_check(monkeypatch, FakeReport(warnings=["train_caps.txt has 7 rows"]))
    cli.main(["data", "check", "--data_root", str(tmp_path), "--dataset", "f30k_precomp", "--full"])
    out, err = capsys.readouterr()
    assert calls == [(tmp_path, "f30k_precomp", True)]
    assert out.startswith("split  images") and not error_lines(err)
    assert err.splitlines() == ["ncl: warning: train_caps.txt has 7 rows"]


def test_check_reports_each_problem_on_its_line_and_exits_2(capsys, monkeypatch,
                                                            tmp_path: Path) -> None:
    fake_layout_check(monkeypatch, FakeReport(problems=["dev_ims.npy missing", "bad dtype"]))
    err = main_exit(capsys, "data", "check", "--data_root", str(tmp_path), "--dataset", "x")
    assert error_lines(err) == ["ncl: error: dev_ims.npy missing", "ncl: error: bad dtype"]


def test_check_without_its_module_is_one_error_line(capsys, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(data_cli, "LAYOUT_CHECK_MODULE", "ncl.data._no_such_layout_check")
    line = one_error(capsys, "data", "check", "--data_root", str(tmp_path), "--dataset", "x")
    assert "'ncl data check' is not available" in line


# --------------------------------------------------------------- a run records its pairing
def test_a_run_records_its_pairing_in_hparams_noise_json_and_test_results(
        capsys, monkeypatch, tmp_path: Path) -> None:
    """hparams.yaml (what the CSV logger and W&B receive), the run folder's noise.json and the
    test_results.json of ``ncl test`` of its checkpoint name one pairing."""
    monkeypatch.chdir(tmp_path)
    cli.main(["fit", *tiny(tmp_path / "cache", "--trainer.max_epochs=1",
                           "--trainer.limit_train_batches=1")])
    [hparams] = list(tmp_path.rglob("hparams.yaml"))
    logged = yaml.safe_load(hparams.read_text())
    noise = np.load(hparams.parent / "noise_index.npy")
    im_div = 5 if logged["noise_format"] == "image" else 1
    cap2img = np.repeat(noise, im_div) if logged["noise_format"] == "image" else noise
    assert logged["noise_pairing_digest"] == pairing_digest(cap2img)
    assert logged["noise_pairing"] == "new"  # a seed-drawn tiny pairing is no published file
    assert {"noise_sha256", "noise_rate", "noise_format", "noise_source"} <= set(logged)
    record = json.loads((hparams.parent / "noise.json").read_text())  # the run folder's record
    assert record["pairing_digest"] == logged["noise_pairing_digest"]
    assert record["pairing"] == "new"
    [ckpt] = list(hparams.parent.rglob("last.ckpt"))
    cli.main(["test", *tiny(tmp_path / "cache", f"--ckpt_path={ckpt}",
                            f"--trainer.default_root_dir={tmp_path / 'test'}")])
    results = json.loads(next((tmp_path / "test").rglob("test_results.json")).read_text())
    trained = results["training_noise"]  # restored from the checkpoint, not from the config
    assert trained["noise_pairing_digest"] == logged["noise_pairing_digest"]
    assert trained["noise_sha256"] == logged["noise_sha256"]
    assert trained["noise_pairing"] == "new"


def test_a_run_without_noise_is_labelled_clean(capsys, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    cli.main(["fit", *tiny(tmp_path / "cache", "--trainer.max_epochs=1", "--data.noise_ratio=0",
                           "--trainer.limit_train_batches=1", "--trainer.limit_val_batches=0")])
    [hparams] = list(tmp_path.rglob("hparams.yaml"))
    assert yaml.safe_load(hparams.read_text())["noise_pairing"] == "clean"


# ---------------------------------------------------------------- check, on real layouts
def test_check_of_a_real_layout_through_the_cli(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    """The real ``check_layout`` behind ``ncl data check``: a good synthetic layout is exit 0
    with one row per split; with a split's captions removed it is one error line naming the
    file, exit 2."""
    from ncl.data.synthetic import generate, preset

    generate(tmp_path, preset("tiny"), name="synthetic_precomp")
    out = run_ok(capsys, "data", "check", "--data_root", str(tmp_path),
                 "--dataset", "synthetic_precomp")
    assert all(split in out for split in ("train", "dev", "test"))
    (tmp_path / "synthetic_precomp" / "dev_caps.txt").unlink()
    err = main_exit(capsys, "data", "check", "--data_root", str(tmp_path),
                    "--dataset", "synthetic_precomp")
    lines = error_lines(err)
    assert len(lines) == 1 and "dev_caps.txt" in lines[0], err


def test_check_validates_and_names_the_noise_files(capsys: pytest.CaptureFixture,
                                                    tmp_path: Path) -> None:
    """Noise files read by a config and those named as published files in the dataset folder:
    a valid one is a line with its pairing; a config's missing file and a truncated file in the
    folder are one error line each (exit 2)."""
    from ncl.data.synthetic import generate, preset

    generate(tmp_path, preset("tiny"), name="synthetic_precomp")
    folder = tmp_path / "synthetic_precomp"
    n_images = len(np.load(folder / "train_ims.npy", mmap_mode="r"))
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"data": {"init_args": {
        "data_name": "synthetic_precomp", "noise_file": "noise_inx_{noise_ratio}.npy",
        "noise_ratio": 0.2}}}))
    check = ["data", "check", "--data_root", str(tmp_path), "--dataset", "synthetic_precomp"]
    err = main_exit(capsys, *check, "--config", str(config))
    [line] = error_lines(err)
    assert str(config) in line and "noise_inx_0.2.npy" in line and "not found" in line
    save(folder / "noise_inx_0.2.npy", np.roll(np.arange(n_images), 1))  # every image moved
    save(folder / "noise_inx_0.0.npy", np.arange(n_images))
    out = run_ok(capsys, *check, "--config", str(config))
    [read] = [line for line in out.splitlines() if "noise_inx_0.2.npy" in line]
    assert "image-level" in read and "noise rate 1.0000" in read and "pairing new" in read
    assert str(config) in read
    assert "pairing clean" in next(line for line in out.splitlines() if "noise_inx_0.0" in line)
    save(folder / "noise_inx_0.5.npy", np.arange(n_images - 1))  # neither count: truncated
    err = main_exit(capsys, *check)
    [line] = error_lines(err)
    assert "noise_inx_0.5.npy" in line and "length" in line


def test_identify_of_a_file_that_moves_nothing_says_clean(capsys, tmp_path: Path) -> None:
    path = save(tmp_path / "none.npy", np.arange(F30K_IMAGES))
    out = run_ok(capsys, "data", "noise", "identify", str(path))
    assert report_line(out, "registry") == "clean"
