"""Every released-checkpoint record's command resolves through the real CLI: ``ncl test
--config <eval_* config> --model.checkpoints [...] --model.backbones [...] --print_config``
(in this process; ``--print_config`` builds nothing, so the files need not exist), and the
resolved config holds the record's files, backbones and dataset. The commands on
``docs/checkpoints.md`` are the same ones."""

from __future__ import annotations

import contextlib
import io
import shlex
from typing import Any

import pytest
import yaml

from ncl.cli import main
from ncl.numbers import checkpoints_page
from ncl.numbers.checkpoints import Checkpoint, load_releases

RELEASES = load_releases()
#: (method, checkpoint, config) for every command a record gives.
CASES = [(r.method, c, config) for r in RELEASES for c in r.checkpoints for config in c.configs()]


def resolve(args: list[str]) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([*args, "--print_config"])
    assert out.getvalue().strip(), f"ncl {' '.join(args)} --print_config printed nothing"
    return yaml.safe_load(out.getvalue())


@pytest.mark.parametrize(("method", "checkpoint", "config"), CASES,
                         ids=[f"{m}-{c.name}-{cfg.rsplit('_', 1)[-1]}" for m, c, cfg in CASES])
def test_the_record_resolves_in_ncl_test(method: str, checkpoint: Checkpoint, config: str) -> None:
    resolved = resolve(["test", "--config", config, *checkpoint.overrides()])
    model = resolved["model"]
    assert model["class_path"] == "ncl.methods.pretrained.Pretrained"
    assert model["init_args"]["checkpoints"] == list(checkpoint.paths())
    nets = [(b["class_path"], b["init_args"]["module_name"], b["init_args"]["add_mask_token"])
            for b in model["init_args"]["backbones"]]
    assert nets == [("ncl.models.SGRAF", b.module_name, b.add_mask_token) for b in checkpoint.backbones]
    dataset = config.removeprefix("configs/eval_official_").removesuffix(".yaml")
    assert checkpoint.dataset in (None, dataset)
    assert resolved["data"]["init_args"]["data_name"] == f"{dataset}_precomp"


def test_the_page_gives_these_commands() -> None:
    commands = {tuple(shlex.split(line)) for line in checkpoints_page.render(RELEASES).splitlines()
                if line.startswith("ncl test ")}
    expected = {("ncl", "test", "--config", config, *c.overrides()) for _, c, config in CASES}
    assert commands == expected
