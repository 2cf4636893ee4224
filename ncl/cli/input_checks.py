"""Checks of a user's input that end in one line (issue 29): option typos, an empty fit,
bf16 on a CPU without bf16 units, a short usage line.

Pure functions the parser (:class:`ncl.cli.parser.NclArgumentParser`) calls. The notes about
the data itself live with the data: a batch larger than the training set
(:func:`ncl.data.batch_policy.batch_size_note`) and feature files that are not float32
(:func:`ncl.data.precomp.dtype_note`).
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Sequence
from typing import Any

from ncl.errors import ConfigError

#: How alike a typed name and a valid one must be to be suggested (difflib's ratio).
TYPO_CUTOFF = 0.6


# ---------------------------------------------------------------- option typos
def _nearest(name: str, choices: Sequence[str]) -> str | None:
    """The valid name closest to ``name`` (difflib), or ``None`` when none is alike."""
    found = difflib.get_close_matches(name, list(choices), n=1, cutoff=TYPO_CUTOFF)
    return found[0] if found else None


def _plain(key: str) -> str:
    """An option without its ``init_args`` levels: ``--model.init_args.tau`` -> ``--model.tau``
    (jsonargparse accepts both spellings)."""
    return ".".join(part for part in key.split(".") if part != "init_args")


def _typed_options(args: Sequence[str]) -> list[str]:
    """The option names on a command line (``--key`` of ``--key value`` and ``--key=value``)."""
    return [arg.split("=", 1)[0] for arg in args if arg.startswith("--")]


def class_options(class_path: str) -> list[str]:
    """The options jsonargparse accepts for ``class_path`` (its ``init_args``), or ``[]``."""
    from jsonargparse import ArgumentParser
    from jsonargparse._util import import_object

    try:
        parser = ArgumentParser(exit_on_error=False)
        parser.add_class_arguments(import_object(class_path), "x", fail_untyped=False)
    except Exception:  # noqa: BLE001 - no suggestion is better than a second error
        return []
    names = {action.dest.split(".")[1] for action in parser._actions
             if action.dest.startswith("x.") and not action.dest.endswith(".help")}
    return sorted(names)


def _key_path(value: Any, key: str, prefix: str) -> str | None:
    """The dotted path of ``key`` inside a config mapping (where a config file put a typo)."""
    if not isinstance(value, dict):
        return None
    for name, item in value.items():
        path = f"{prefix}.{name}"
        if name == key:
            return path
        found = _key_path(item, key, path)
        if found:
            return found
    return None


def _rejected(message: str) -> tuple[str, str] | None:
    """``(option, class_path)`` of jsonargparse's "Option 'x' is not accepted" (or a nested
    "unrecognized arguments: --x...") and of the innermost class that rejected it."""
    lines = message.splitlines()
    for i, line in enumerate(lines):
        found = (re.search(r"Option '([^']+)' is not accepted", line)
                 or re.search(r"unrecognized arguments: --([^\s=.]+)", line))
        if found is None or i == 0:
            continue
        # The class is named on the same line (a nested class: "Got value: Namespace(class_path=
        # 'torch.optim.Adam', ...") or on the nearest line above ("Problem with given class_path").
        for text in (line[found.end():], *reversed(lines[:i])):
            owner = re.search(r"class_path[=\s]'([\w.]+)'", text)
            if owner:
                return found.group(1), owner.group(1)
    return None


def _nested_typo(message: str, args: Sequence[str]) -> str | None:
    """The line for an option a class (model, data, a backbone, an optimizer) does not have."""
    group = re.search(r'^Parser key "([\w.]+)"', message)
    rejected = _rejected(message)
    if group is None or rejected is None:
        return None
    bad, class_path = rejected
    nearest = _nearest(bad, class_options(class_path))
    owner = class_path.rsplit(".", 1)[-1]
    nested = re.search(r"NestedArg\(key='([^']+)'", message)
    where = ""
    if nested:  # given on the command line: name it as the user typed it
        wanted = _plain(f"--{group.group(1)}.{nested.group(1)}")
        typed = next((opt for opt in _typed_options(args) if _plain(opt) == wanted), wanted)
    else:  # from a --config file: the path inside the YAML
        given = re.search(r"Given value: (\{.*\})\s*$", message, re.DOTALL)
        try:
            value = ast.literal_eval(given.group(1)) if given else None
        except (ValueError, SyntaxError):
            value = None
        typed = _key_path(value, bad, group.group(1)) or f"{group.group(1)}...{bad}"
        where = " in a --config file"
    parts = typed.split(".")
    index = max((i for i, part in enumerate(parts) if part.lstrip("-") == bad), default=len(parts) - 1)
    line = f"unknown option {typed}{where}: {owner} has no option '{bad}'"
    if nearest is None:
        return f"{line} (its options: {', '.join(class_options(class_path)) or 'none'})"
    suggestion = ".".join([*parts[:index], nearest, *parts[index + 1:]])
    return f"{line}; did you mean {suggestion}?"


def _top_level_typo(message: str, parser: Any) -> str | None:
    """The line for ``unrecognized arguments: --trainer.max_epohcs 3`` (an option of the
    subcommand's own parser, not of a class)."""
    found = re.match(r"unrecognized arguments: (.*)", message)
    if found is None:
        return None
    typed = next((word.split("=", 1)[0] for word in found.group(1).split() if word.startswith("--")),
                 None)
    if typed is None:
        return None
    options = [opt for action in getattr(parser, "_actions", []) for opt in action.option_strings
               if opt.startswith("--") and not opt.endswith(".help")]
    nearest = _nearest(_plain(typed), options)
    if nearest is None and "." in typed:  # a typo in the group: --dat.batch_size
        head, rest = typed.split(".", 1)
        groups = sorted({opt.split(".", 1)[0] for opt in options})
        group = _nearest(head, groups)
        nearest = f"{group}.{rest}" if group else None
    prog = getattr(parser, "prog", "ncl").replace(" [options]", "")
    if nearest is None:
        return f"unknown option {typed} (see {prog} --help)"
    return f"unknown option {typed}; did you mean {nearest}?"


def unknown_option_line(message: str, args: Sequence[str], parser: Any) -> str | None:
    """One line naming a mistyped option and the closest valid one, from jsonargparse's
    (10+ line) parse error ``message``; ``None`` when the error is not about an unknown option.

    Args:
        message: jsonargparse's error message.
        args: the command line that was parsed (to name the option as the user typed it).
        parser: the (sub)command's parser (its own options are the candidates of a top-level
            typo such as ``--trainer.max_epohcs``).
    """
    return _top_level_typo(message, parser) or _nested_typo(message, args)


# ---------------------------------------------------------------- help
def short_usage(prog: str, description: str | None) -> str:
    """One usage line instead of argparse's synopsis, which lists every option that the help
    then lists again (``ncl fit --help`` had 48 synopsis lines, ``--data.help`` 20).

    ``--data.help CLASS`` builds a parser of its own whose description is ``Help for
    --data.help=<class>``: its usage names that group's options.
    """
    nested = re.match(r"Help for --([\w.]+)\.help=", description or "")
    if nested:
        return (f"ncl fit|validate|test|predict [--config FILE ...] [--{nested.group(1)}.KEY "
                f"value ...]")
    return f"{prog.replace(' [options]', '')} [--config FILE ...] [--key value ...]"


# ---------------------------------------------------------------- options that train nothing
def check_trains_something(sub_cfg: Any, subcommand: str | None) -> None:
    """``ncl fit`` with ``trainer.max_epochs`` (or ``max_steps``) 0: one ConfigError, before any
    class is built or a run folder made (Lightning would return at once, exit 0, and leave an
    empty run)."""
    if subcommand != "fit" or sub_cfg is None:
        return
    trainer = sub_cfg.get("trainer") if hasattr(sub_cfg, "get") else None
    for key in ("max_epochs", "max_steps"):
        value = trainer.get(key) if trainer is not None and hasattr(trainer, "get") else None
        if value == 0:
            raise ConfigError(f"trainer.{key} is 0, so ncl fit would train nothing and leave an "
                              f"empty run; set it to 1 or more (ncl validate/test evaluate a "
                              f"checkpoint without training)")


def precision_note(precision: str | None, device_type: str, native_bf16: bool) -> str | None:
    """The warning for ``bf16-mixed``/``bf16-true`` on a CPU without bf16 matrix units, else
    ``None``.

    Without AVX512-BF16/AMX (``torch.ops.mkldnn._is_mkldnn_bf16_supported()`` false) torch
    multiplies bf16 matrices in an emulated path: 0.2-20 GFLOP/s against 45-80 in float32 on an
    AVX2 EPYC, and an SGRAF training step at official dimensions takes 8-14x as long as in
    float32 (docs/benchmarks/precision.md): the "faster" setting is much slower.

    Args:
        precision: ``trainer.precision`` as Lightning normalised it (``"bf16-mixed"``, ...).
        device_type: the root device's type (``"cpu"``, ``"cuda"``).
        native_bf16: whether this CPU has bf16 matrix support.
    """
    if device_type != "cpu" or not str(precision or "").startswith("bf16") or native_bf16:
        return None
    return (f"trainer.precision {precision} on this CPU, which has no bf16 matrix units "
            f"(no AVX512-BF16/AMX): torch emulates bf16 matrix products there (an SGRAF "
            f"training step measured 8-14x slower than in float32, "
            f"docs/benchmarks/precision.md); results are correct, but use 32-true for speed")
