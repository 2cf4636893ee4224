"""Every released-checkpoint record's command resolves through the real CLI: ``ncl test
--config <eval_* config> --model.checkpoints [...] --model.backbones [...] --print_config``
(in this process; ``--print_config`` builds nothing, so the files need not exist), and the
resolved config holds the record's files, backbones and dataset. The commands on
``docs/checkpoints.md`` are the same ones."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from ncl.cli import main
from ncl.numbers import checkpoints_page
from ncl.numbers.checkpoints import Checkpoint, load_releases

REPO = Path(__file__).resolve().parents[2]
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
                         ids=[f"{m}-{c.name}-{Path(cfg).stem}" for m, c, cfg in CASES])
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


#: The first command of each distinct (format, backbones): what an end-to-end load has to show.
FIRST: dict[tuple, tuple[Checkpoint, str]] = {}
for _, _checkpoint, _config in CASES:
    FIRST.setdefault((_checkpoint.format, _checkpoint.backbones), (_checkpoint, _config))
FORMS = list(FIRST.values())


@pytest.mark.parametrize(("checkpoint", "config"), FORMS, ids=[c.format for c, _ in FORMS])
def test_a_file_of_the_recorded_format_is_evaluated_by_the_recorded_command(
        checkpoint: Checkpoint, config: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        synthetic_cache: Path) -> None:
    """A file written here in the record's format (NCR's layout: ``model_A``/``model_B``, three
    state dicts each, no ``<mask>`` row, ``opt`` a Namespace), at the path the command names,
    is tested by the command; only the data and the backbones' sizes are swapped for tiny ones
    (a second ``--config``, as tests/cli/test_configs.py does). The rows are the two networks
    and their mean, named after the file."""
    from config_override import TINY_BACKBONE, tiny_override
    from helpers_official import official_checkpoint

    from ncl.data.datamodule import SyntheticDataModule
    from ncl.models import SGRAF

    assert checkpoint.format == "official_pair" and len(checkpoint.backbones) == 1
    monkeypatch.chdir(tmp_path)
    vocab = SyntheticDataModule(preset="tiny", cache_dir=str(synthetic_cache)).vocab_size
    backbone = checkpoint.backbones[0]
    nets = [SGRAF(vocab, module_name=backbone.module_name, add_mask_token=backbone.add_mask_token,
                  **TINY_BACKBONE) for _ in range(2)]
    # both networks hold the same weights: if the command scores the file's weights, the rows
    # A, B and their mean agree exactly; an unloaded network (a fresh draw) would not
    nets[1].load_state_dict(nets[0].state_dict())
    (path,) = checkpoint.paths()
    Path(path).parent.mkdir(parents=True)
    official_checkpoint(Path(path), nets)
    override = tiny_override(tmp_path, synthetic_cache, REPO / config)
    extra = yaml.safe_load(override.read_text())
    extra["model"] = {"init_args": {"backbones": [{"class_path": "ncl.models.SGRAF", "init_args": {
        "module_name": backbone.module_name, "add_mask_token": backbone.add_mask_token, **TINY_BACKBONE}}]}}
    override.write_text(yaml.safe_dump(extra))
    main(["test", "--config", str(REPO / config), *checkpoint.overrides(), "--config", str(override)])
    results = json.loads(next(tmp_path.rglob("test_results.json")).read_text())
    stem = Path(path).name.split(".")[0]
    assert list(results) == [f"{stem}_A", f"{stem}_B", stem]
    assert all(0 <= m["rsum"] <= 600 for by_protocol in results.values() for m in by_protocol.values())
    a, b, mean = (results[name] for name in (f"{stem}_A", f"{stem}_B", stem))
    assert a == b == mean, (a, b, mean)
