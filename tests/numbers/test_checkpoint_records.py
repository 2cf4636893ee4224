"""The released-checkpoint records (``ncl/numbers/checkpoints/*.json``): the loader's errors
name the file and the field, the shipped records obey the rules and agree with the papers'
arithmetic, and ``docs/checkpoints.md`` is what the generator prints."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from ncl.numbers import checkpoints_page
from ncl.numbers.checkpoints import (
    CHECKPOINTS_DIR,
    CheckpointRecordError,
    load_release,
    load_releases,
)

REPO = Path(__file__).resolve().parents[2]

GOOD: dict[str, Any] = {
    "method": "Toy", "paper": "A toy (Nowhere 2026)", "repository": "someone/toy",
    "page": "https://github.com/someone/toy#models", "checked": "README.md at abc1234",
    "checkpoints": [{
        "name": "f30k_0.2", "dataset": "f30k", "noise": "caption", "noise_ratio": 0.2,
        "url": "https://example.org/toy.pth.tar", "files": ["toy.pth.tar"],
        "format": "official_pair", "backbones": [{"module_name": "SAF", "add_mask_token": True}],
        "config": "configs/eval_official_f30k.yaml", "checksum": None,
        "reported": [{"source": "Toy", "table": "Table 1", "protocol": "1k",
                      "recalls": [70, 90, 95, 50, 80, 85], "rsum": 470.0}]}],
}


def write(tmp_path: Path, record: Any, name: str = "toy.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(record))
    return path


def broken(change: str) -> dict[str, Any]:
    """``GOOD`` with one change: ``key.path=json value`` (``-key.path`` deletes)."""
    record = copy.deepcopy(GOOD)
    delete = change.startswith("-")
    path, _, value = change.lstrip("-").partition("=")
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]
    target = record
    for key in keys[:-1]:
        target = target[key]
    if delete:
        del target[keys[-1]]
    else:
        target[keys[-1]] = json.loads(value)
    return record


def test_a_good_record_reads_with_every_field(tmp_path: Path) -> None:
    release = load_release(write(tmp_path, GOOD))
    (c,) = release.checkpoints
    assert (release.method, c.dataset, c.noise_ratio, c.files) == ("Toy", "f30k", 0.2, ("toy.pth.tar",))
    assert c.backbones[0].module_name == "SAF" and c.backbones[0].add_mask_token is True
    assert c.reported[0].recalls == (70.0, 90.0, 95.0, 50.0, 80.0, 85.0)
    assert c.configs() == ("configs/eval_official_f30k.yaml",)
    assert c.overrides() == (
        "--model.checkpoints", "[checkpoints/toy.pth.tar]", "--model.backbones",
        "[{class_path: ncl.models.SGRAF, init_args: {module_name: SAF, add_mask_token: true}}]")


def test_a_folder_of_unnamed_files_for_an_unstated_dataset(tmp_path: Path) -> None:
    record = broken('checkpoints.0.files=[]')
    record["checkpoints"][0].update(dataset=None, config="configs/eval_official_{dataset}.yaml")
    (c,) = load_release(write(tmp_path, record)).checkpoints
    assert c.paths() == ("checkpoints/FILE.pth.tar",)
    assert c.configs() == tuple(f"configs/eval_official_{d}.yaml" for d in ("f30k", "coco", "cc152k"))


@pytest.mark.parametrize(("change", "field", "says"), [
    ("-method", "method", "missing"),
    ("page=\"github.com/x\"", "page", "does not match"),
    ("repository=\"toy\"", "repository", "does not match"),
    ("colour=\"red\"", "colour", "unknown field"),
    ("checkpoints.0.dataset=\"imagenet\"", "checkpoints[0].dataset", "not one of f30k, coco, cc152k"),
    ("checkpoints.0.format=\"safetensors\"", "checkpoints[0].format", "not one of"),
    ("checkpoints.0.backbones=[]", "checkpoints[0].backbones", "non-empty list"),
    ("checkpoints.0.files=[\"a.pth\", \"b.pth\"]", "checkpoints[0].backbones", "one per file"),
    ("checkpoints.0.files=[\"../etc/passwd\"]", "checkpoints[0].files", "not a file name"),
    ("checkpoints.0.backbones.0.module_name=\"VSE\"", "checkpoints[0].backbones[0].module_name", "not one of SGR, SAF"),
    ("checkpoints.0.backbones.0.add_mask_token=\"no\"", "checkpoints[0].backbones[0].add_mask_token", "true or false"),
    ("checkpoints.0.config=null", "checkpoints[0].config", "name the eval_* config"),
    ("checkpoints.0.config=\"configs/rcl_sgr_f30k.yaml\"", "checkpoints[0].config", "does not match"),
    ("checkpoints.0.config=\"configs/eval_official_{dataset}.yaml\"", "checkpoints[0].config", "exactly when dataset is null"),
    ("checkpoints.0.noise_ratio=null", "checkpoints[0].noise_ratio", "caption noise needs its ratio"),
    ("checkpoints.0.noise_ratio=20", "checkpoints[0].noise_ratio", "number in [0, 1]"),
    ("checkpoints.0.checksum={\"algorithm\": \"md5\", \"value\": \"abc\"}", "checkpoints[0].checksum.value", "does not match"),
    ("checkpoints.0.checksum={\"algorithm\": \"crc32\", \"value\": \"abc\"}", "checkpoints[0].checksum.algorithm", "not one of md5, sha256"),
    ("checkpoints.0.reported.0.recalls=[1, 2, 3]", "checkpoints[0].reported[0].recalls", "six numbers"),
    ("checkpoints.0.reported.0.recalls=[1, 2, 3, 4, 5, 101]", "checkpoints[0].reported[0].recalls", "101 is not a recall"),
    ("checkpoints.0.reported.0.protocol=\"10k\"", "checkpoints[0].reported[0].protocol", "not one of 1k, 5fold1k, 5k"),
    ("checkpoints.0.reported.0.recalls=null", "checkpoints[0].reported[0].rsum", "number in [0, 600]"),
])
def test_a_broken_record_names_its_file_and_field(tmp_path: Path, change: str, field: str, says: str) -> None:
    record = broken(change)
    if change.endswith("recalls=null"):  # no recalls and no rSum: nothing to record
        record["checkpoints"][0]["reported"][0]["rsum"] = "?"
    path = write(tmp_path, record)
    with pytest.raises(CheckpointRecordError) as err:
        load_release(path)
    assert str(err.value).startswith(f"{path}: {field}: "), str(err.value)
    assert says in str(err.value)


def test_no_numbers_is_no_entry(tmp_path: Path) -> None:
    path = write(tmp_path, broken('checkpoints.0.reported.0.recalls=null'))
    path.write_text(path.read_text().replace('"rsum": 470.0', '"rsum": null'))
    with pytest.raises(CheckpointRecordError, match=r"reported\[0\]\.recalls: give the recalls"):
        load_release(path)


def test_not_json_and_twice_the_same_name_or_method(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{method: NCR}")
    with pytest.raises(CheckpointRecordError, match=f"^{bad}: not valid JSON"):
        load_release(bad)
    record = copy.deepcopy(GOOD)
    record["checkpoints"].append(copy.deepcopy(record["checkpoints"][0]))
    with pytest.raises(CheckpointRecordError, match=r"checkpoints\[1\]\.name: 'f30k_0.2' is used twice"):
        load_release(write(tmp_path, record))
    folder = tmp_path / "two"
    folder.mkdir()
    write(folder, GOOD, "a.json")
    write(folder, {**GOOD, "method": "TOY"}, "b.json")
    with pytest.raises(CheckpointRecordError, match=r"b\.json: method: 'TOY' is also recorded in .*a\.json"):
        load_releases(folder)


# ---------------------------------------------------------------------- the shipped records
RELEASES = load_releases()


def test_every_method_asked_about_has_a_record() -> None:
    """Issue 52's list, each answered (released or not), one file each."""
    methods = {r.method for r in RELEASES}
    assert {"NCR", "BiCro", "CREAM", "SPS", "RCL", "CRCL", "DECL", "L2RM", "GSC", "IN2R",
            "MSCN", "PC²"} <= methods
    assert sorted(p.stem for p in CHECKPOINTS_DIR.glob("*.json")) == sorted(r.path.stem for r in RELEASES)


def test_what_was_found_released() -> None:
    released = {r.method: len(r.checkpoints) for r in RELEASES if r.checkpoints}
    assert released == {"NCR": 7, "BiCro": 3, "CREAM": 3, "SPS": 1}
    ncr = next(r for r in RELEASES if r.method == "NCR")
    for c in ncr.checkpoints:  # the README's direct links: the URL ends with the file's name
        assert c.url == f"https://ncr-paper.cdn.bcebos.com/models/{c.files[0]}"
    assert all(c.checksum is None for r in RELEASES for c in r.checkpoints)  # none published


@pytest.mark.parametrize("reported", [rep for r in RELEASES for c in r.checkpoints for rep in c.reported
                                      if rep.rsum is not None and rep.recalls is not None],
                         ids=lambda rep: f"{rep.source}-{rep.table}-{rep.rsum}")
def test_a_printed_rsum_is_the_sum_of_its_recalls(reported: Any) -> None:
    assert abs(sum(reported.recalls) - reported.rsum) < 0.15


def test_sums_computed_here_match_docs_paper_rows() -> None:
    """Σ values that docs/paper_rows.md also computes from the same tables (NCR rows)."""
    ncr = {c.name: c for r in RELEASES if r.method == "NCR" for c in r.checkpoints}
    totals = {(name, rep.protocol): rep.total for name, c in ncr.items() for rep in c.reported}
    assert totals[("f30k_0.2", "1k")] == 496.7 and totals[("coco_0.5", "5k")] == 404.6
    assert totals[("cc152k", "1k")] == 355.6 and totals[("coco_0", "5fold1k")] == 522.5
    rows = (REPO / "docs" / "paper_rows.md").read_text()
    assert "Σ502.7 · Σ496.7 · Σ482.8" in rows and "Σ427.9 · Σ422.0 · Σ404.6" in rows


# ---------------------------------------------------------------------- the page
def test_the_page_is_what_the_generator_prints() -> None:
    page = checkpoints_page.PAGE
    now = checkpoints_page.generated_part(page.read_text(), page)
    assert now == checkpoints_page.render(RELEASES), (
        f"docs/checkpoints.md is not what the records give: run `{checkpoints_page.COMMAND}`")


def test_write_replaces_only_the_generated_part(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"# Title\n\nhand-written\n\n{checkpoints_page.BEGIN}\nstale\n{checkpoints_page.END}\n\nafter\n")
    assert checkpoints_page.main(["--write", "--page", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# Title\n\nhand-written\n\n") and text.endswith(f"{checkpoints_page.END}\n\nafter\n")
    assert "stale" not in text and "| NCR |" not in text and "### NCR" in text
    assert checkpoints_page.main(["--write", "--page", str(page)]) == 0  # idempotent
    assert page.read_text() == text
    page.write_text("no markers\n")
    assert checkpoints_page.main(["--write", "--page", str(page)]) == 2
    assert "needs the lines" in capsys.readouterr().err
