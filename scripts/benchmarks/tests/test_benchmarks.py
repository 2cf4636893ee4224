"""The benchmarks in scripts/benchmarks/ still run and print what they claim to measure, at toy
sizes.

These are smoke tests, not measurements: every timing printed here is meaningless. They run
each benchmark's real command line (parent, worker children, tables) so that a change to ncl
or to ``scripts/benchmarks/benchlib.py`` cannot silently break the scripts the docs' numbers
come from.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1]
ROOT = BENCHMARKS.parents[1]
sys.path.insert(0, str(BENCHMARKS))

import benchlib  # noqa: E402  (not a package; the scripts import it the same way)
from launch import launch


def run_bench(name: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """``python scripts/benchmarks/NAME.py ARGS`` with one thread, as a user would run it."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = launch([sys.executable, str(BENCHMARKS / f"{name}.py"), *args],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    if check:
        assert done.returncode == 0, done.stderr[-3000:]
    return done


def assert_header(stdout: str, name: str, argv: tuple[str, ...]) -> None:
    """The machine line with a load average, then the exact command."""
    lines = stdout.splitlines()
    assert lines[0].startswith(f"# {name}: ") and "logical cores" in lines[0]
    assert re.search(r"load average \d+\.\d\d, \d+\.\d\d, \d+\.\d\d", lines[0])
    assert lines[1] == f"command: python scripts/benchmarks/{name}.py " + " ".join(argv)


def table_rows(stdout: str, first: str) -> list[list[str]]:
    """The whitespace-split lines whose first field is ``first``."""
    return [line.split() for line in stdout.splitlines() if line.split()[:1] == [first]]


def test_parse_worker_output_names_the_failed_worker_and_keeps_its_stderr() -> None:
    with pytest.raises(RuntimeError, match=r"(?s)worker eval:40 failed \(exit 3\):\n.*boom"):
        benchlib.parse_worker_output("eval:40", 3, "", "Traceback ...\nboom")
    with pytest.raises(RuntimeError, match="worker peak printed nothing"):
        benchlib.parse_worker_output("peak", 0, "\n", "")
    result, rest = benchlib.parse_worker_output("peak", 0, "a table\n{\"gflops\": 2.5}\n", "")
    assert result == {"gflops": 2.5} and rest == "a table"


def test_parse_or_run_worker_runs_the_worker_in_a_child_and_returns_args_in_the_parent() -> None:
    import argparse

    def parse(argv: list[str]) -> argparse.Namespace:
        parser = argparse.ArgumentParser()
        parser.add_argument("--worker", default="")
        return parser.parse_args(argv)

    ran: list[str] = []
    assert benchlib.parse_or_run_worker(["--worker", "x:1"], parse,
                                        lambda a: ran.append(a.worker)) is None
    assert ran == ["x:1"]
    args, argv = benchlib.parse_or_run_worker([], parse, lambda a: ran.append("parent"))
    assert argv == [] and args.worker == "" and ran == ["x:1"]


def test_bench_mmap_then_data_path_on_the_written_dataset(tmp_path: Path) -> None:
    argv = ("--out", str(tmp_path), "--sizes", "24", "--steps", "1", "--batch", "4",
            "--eval-images", "6", "--keep")
    out = run_bench("bench_mmap", *argv).stdout
    assert_header(out, "bench_mmap", argv)
    rows = table_rows(out, "24")
    assert [row[2] for row in rows] == ["train", "eval"]
    feats = tmp_path / "official_24" / "synthetic_precomp" / "train_ims.npy"
    assert np.load(feats, mmap_mode="r").shape == (24, 36, 2048)  # official-size regions

    argv = ("--data", str(tmp_path / "official_24"), "--workers", "0", "1", "--model", "small",
            "--batch", "4", "--steps", "1")
    out = run_bench("bench_data_path", *argv).stdout
    assert_header(out, "bench_data_path", argv)
    assert [row[0] for row in table_rows(out, "0") + table_rows(out, "1")] == ["0", "1"]
    assert "wait share" in out


def test_bench_mmap_deletes_its_datasets_without_keep(tmp_path: Path) -> None:
    out = run_bench("bench_mmap", "--out", str(tmp_path), "--sizes", "12", "--steps", "1",
                    "--batch", "4", "--eval-images", "4").stdout
    assert "deleted the datasets" in out and not (tmp_path / "official_12").exists()


def test_bench_data_path_without_a_dataset_is_one_clear_error(tmp_path: Path) -> None:
    done = run_bench("bench_data_path", "--data", str(tmp_path / "missing"), check=False)
    assert done.returncode != 0 and done.stdout == ""
    assert "--data:" in done.stderr and "train_ims.npy not found" in done.stderr


def test_bench_similarity_compares_the_strategies(tmp_path: Path) -> None:
    argv = ("--batch", "4", "--eval-images", "4", "--eval-captions", "20", "--shard", "4",
            "--skip-train")
    out = run_bench("bench_similarity", *argv).stdout
    assert_header(out, "bench_similarity", argv)
    assert re.search(r"auto vs loop: similarity forward [\d.]+x (faster|slower)", out)
    assert {row[0] for row in table_rows(out, "loop") + table_rows(out, "auto")} == {"loop", "auto"}
    assert "EXTRAPOLATED" in out


def test_bench_sharded_eval_two_processes_split_the_pairs_and_agree() -> None:
    argv = ("--images", "12", "--shard-sizes", "6")
    out = run_bench("bench_sharded_eval", *argv).stdout
    assert_header(out, "bench_sharded_eval", argv)
    one, two = table_rows(out, "6")
    assert one[1] == "1" and two[1] == "2"
    assert sum(int(p) for p in two[5].split("/")) == int(one[5]) == 12 * 60  # 12 x 60 pairs
    assert two[-1] == "True"  # the gathered matrix is bit-identical to one process's


def test_bench_train_step_measures_peak_and_step() -> None:
    argv = ("--batch", "4", "--modules", "SGR", "--rounds", "1", "--peak-n", "128",
            "--skip-profile")
    out = run_bench("bench_train_step", *argv).stdout
    assert_header(out, "bench_train_step", argv)
    assert re.search(r"fp32 matmul peak \(128\^3, 1 thread\(s\)\): [\d.]+ GFLOP/s", out)
    (row,) = table_rows(out, "tree")
    assert row[1:3] == ["auto", "1"] and float(row[3]) > 0


def test_bench_token_cache_times_the_three_cases_and_checks_the_ids() -> None:
    done = run_bench("bench_token_cache", "--captions", "300")
    assert_header(done.stdout, "bench_token_cache", ("--captions", "300"))
    out = done.stdout
    for label in ("no cache (baseline):", "empty cache        :", "warm cache         :"):
        assert re.search(re.escape(label) + r"\s+\d+\.\d{3} s", out), label
    assert re.search(r"ratio baseline / warm: \d+x; ids identical in all three: True", out)


def test_bench_precision_compares_float32_and_bf16_peak_step_pass_and_evaluation() -> None:
    argv = ("--toy", "--modules", "SGR", "--batches", "4", "--rounds", "1", "--threads", "1",
            "--peak-n", "64", "--pass-batches", "1", "--pass-batch", "4", "--eval-images", "4",
            "--eval-shard", "4")
    out = run_bench("bench_precision", *argv).stdout
    assert_header(out, "bench_precision", argv)
    first = out.splitlines()[0]
    assert re.search(r"torch\.backends\.cpu\.get_cpu_capability\(\) \w+", first)
    assert re.search(r"torch\.ops\.mkldnn\._is_mkldnn_bf16_supported\(\) (True|False)", first)
    assert [row[1] for row in table_rows(out, "peak")] == ["fp32", "bf16"]
    assert re.search(r"matmul peak ratio fp32/bf16 = [\d.]+", out)
    steps = table_rows(out, "step")
    assert [row[1:5] for row in steps] == [["SGR", "4", "fp32", "1"], ["SGR", "4", "bf16", "1"]]
    assert all(row[9].endswith("%") for row in steps)  # share of its own dtype's peak
    assert re.search(r"SGR batch 4: step time ratio fp32/bf16 = [\d.]+ \(bf16 (faster|slower)", out)
    assert [row[2] for row in table_rows(out, "pass")] == ["fp32", "bf16"]
    assert re.search(r"SGR per-sample pass: time ratio fp32/bf16 = [\d.]+", out)
    evals = {row[2]: row for row in table_rows(out, "eval")}
    assert list(evals) == ["fp32", "bf16", "bf16-encode"]
    assert evals["fp32"][6:9] == ["0.00e+00", "100.0%", "100.0%"]  # the reference against itself
    assert re.search(r"SGR evaluation: time ratio fp32/bf16 = [\d.]+; R@1 change i2t [+-]", out)


def test_gpu_check_without_cuda_refuses_in_one_line(tmp_path: Path) -> None:
    summary = tmp_path / "gpu.md"
    done = run_bench("gpu_check", "--out", str(summary), check=False)
    if "no CUDA device" not in done.stderr:
        pytest.skip("this machine has CUDA: gpu_check runs instead of refusing")
    assert done.returncode == 2 and done.stdout == "" and not summary.exists()
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("gpu_check: ")


def test_gpu_check_allow_cpu_toy_writes_the_markdown_summary(tmp_path: Path) -> None:
    summary = tmp_path / "gpu.md"
    run_bench("gpu_check", "--allow-cpu", "--toy", "--modules", "SGR", "--out", str(summary))
    text = summary.read_text()
    assert text.startswith("# ncl GPU check\n") and "- device: **" in text

    def cells(first: str) -> list[list[str]]:
        return [[cell.strip() for cell in line.split("|")[1:-1]] for line in text.splitlines()
                if line.startswith(f"| {first} |")]

    assert [row[1] for row in cells("SGR")] == ["fp32", "bf16", "fp16", "loop"]
    assert [row[2] for row in cells("SGR")] == ["chunked 2", "chunked 2", "chunked 2", "loop"]
    assert [cells(v)[0][0] for v in ("fp32", "bf16", "bf16-encode")] == ["fp32", "bf16",
                                                                          "bf16-encode"]
    assert "--trainer.precision bf16-mixed" in text and "- exit status: 0" in text
    assert re.search(r"- last validation rSum: \d+\.\d", text)


def test_bench_eval_autocast_tests_a_checkpoint_in_float32_and_with_the_option_off_and_on(
        tmp_path: Path) -> None:
    from launch import ncl_here
    from tiny_runs import METHODS, method_config

    config = method_config(tmp_path / "rcl", tmp_path / "cache", METHODS["rcl"], max_epochs=1, steps=1)
    fitted = ncl_here("fit", "--config", str(config), cwd=tmp_path)
    assert fitted.returncode == 0, fitted.stderr[-3000:]
    (ckpt,) = (tmp_path / "rcl").rglob("last.ckpt")
    argv = ("--ckpt", str(ckpt), "--config", str(config), "--rounds", "1")
    out = run_bench("bench_eval_autocast", *argv).stdout
    assert_header(out, "bench_eval_autocast", argv)
    assert re.search(r"torch\.ops\.mkldnn\._is_mkldnn_bf16_supported\(\) (True|False)", out)
    rows = table_rows(out, "eval")
    assert [row[1:3] for row in rows] == [["fp32", "1"], ["off", "1"], ["on", "1"]]
    assert rows[0][6:10] == ["0.00e+00", "100.0%", "100.0%", "100.0%"]  # the reference itself
    assert re.search(r"time ratio off/on \(best of 1\): test [\d.]+, similarity [\d.]+", out)
    assert re.search(r"on against off: max \|diff\| \S+, top-1 same i2t [\d.]+%", out)
