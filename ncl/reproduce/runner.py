"""Running cells: one at a time per slot (a CPU share or a GPU), each record written atomically."""

from __future__ import annotations

import json
import queue
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncl.io import atomic_write_text
from ncl.reproduce.cells import CellError, cell_env, cli_command, fit_then_test
from ncl.reproduce.grid import Cell, Preset, Setting, cell_args
from ncl.reproduce.records import summarise


@dataclass
class Runner:
    """Runs cells into ``out`` with ``threads`` CPU threads each (GPU ids as slots if ``setting.gpu``)."""

    preset: Preset
    out: Path
    threads: int
    setting: Setting

    def paths(self, cell: Cell) -> tuple[Path, Path, Path]:
        """The cell's record, run folder and log."""
        return (self.out / "cells" / f"{cell.id}.json", self.out / "runs" / cell.id,
                self.out / "logs" / f"{cell.id}.log")

    def commands(self, cell: Cell) -> list[list[str]]:
        """The cell's fit and test command lines (test: the best checkpoint of the run)."""
        _, run_root, _ = self.paths(cell)
        common, fit_only = cell_args(cell, self.preset, run_root, self.setting)
        return [cli_command("fit", [*common, *fit_only, "--ckpt_path=last", "--fresh_if_missing=true"]),
                cli_command("test", [*common, "--ckpt_path=best"])]

    def run(self, cell: Cell, slot: str) -> dict[str, Any]:
        """Fit (resuming a killed attempt) and test one cell; write its record atomically."""
        result, run_root, log = self.paths(cell)
        if not any(run_root.rglob("last.ckpt")):
            shutil.rmtree(run_root, ignore_errors=True)  # a killed attempt before its first epoch
        run_root.mkdir(parents=True, exist_ok=True)
        log.parent.mkdir(parents=True, exist_ok=True)
        common, fit_only = cell_args(cell, self.preset, run_root, self.setting)
        env = cell_env(threads=self.threads, cuda_devices=slot if self.setting.gpu else None)
        started = time.time()
        done = fit_then_test(common, fit_only, run_root, env, resume=True, log=log)
        record = summarise(cell, done, slot, started)
        result.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(result, json.dumps(record, indent=1) + "\n")
        return record


def run_all(runner: Runner, cells: list[Cell], slots: list[str]) -> list[str]:
    """Run ``cells`` over ``slots`` (one cell per slot at a time); the ids of the failed ones."""
    free: queue.Queue[str] = queue.Queue()
    for s in slots:
        free.put(s)
    failed: list[str] = []

    def one(cell: Cell) -> None:
        slot = free.get()
        try:
            record = runner.run(cell, slot)
            print(f"done {cell.id}: test rSum {record['test']['rsum']:.1f}, {record['wall_seconds']:.0f} s"
                  f"{' (resumed)' if record['resumed'] else ''}", flush=True)
        except Exception as err:  # noqa: BLE001 - one broken cell must not stop the others
            failed.append(cell.id)
            kind = "" if isinstance(err, CellError) else f"{type(err).__name__}: "
            print(f"FAILED {cell.id} (log: {runner.paths(cell)[2]}): {kind}{str(err)[-600:]}", flush=True)
        finally:
            free.put(slot)

    with ThreadPoolExecutor(max_workers=len(slots)) as pool:
        list(pool.map(one, cells))
    return failed
