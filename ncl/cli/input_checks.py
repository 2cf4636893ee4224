"""Checks of a user's input that end in one line (issues 29 and 41): option typos, unknown
keys in config files, values of the wrong type or not among the choices, numbers out of their
range (and a learning rate of 0, a warning), an empty fit, bf16 on a CPU without bf16 units, a
short usage line.

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
    for key in ("max_epochs", "max_steps", "limit_train_batches"):
        value = trainer.get(key) if trainer is not None and hasattr(trainer, "get") else None
        if value == 0 and not isinstance(value, bool):
            more = "a fraction of the batches or 1 or more" if key == "limit_train_batches" else "1 or more"
            raise ConfigError(f"trainer.{key} is 0, so ncl fit would train nothing and leave an "
                              f"empty run; set it to {more} (ncl validate/test evaluate a "
                              f"checkpoint without training)")


# ---------------------------------------------------------------- trainer values Lightning checks late
#: What ``trainer.devices`` accepts, for the error line.
DEVICES_RULE = ("a number of devices (1 or more), -1 (all), auto, or device ids "
                "(a list such as [0, 1] or a string such as '0,1')")
#: ``trainer.max_time`` as a string: days:hours:minutes:seconds.
_DURATION = re.compile(r"^\s*\d+:\d+:\d+:\d+\s*$")


def _devices_error(value: Any) -> str | None:
    """Why ``trainer.devices`` cannot be used, or ``None`` (Lightning names the accelerator,
    not the option, when it is 0)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (list, tuple)):
        ok = bool(value) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    elif isinstance(value, int):
        ok = value == -1 or value >= 1
    else:
        text = str(value).strip()
        ids = [part.strip() for part in text.split(",") if part.strip()]
        ok = (text == "auto" or text == "-1" or (text.isdigit() and int(text) >= 1)
              or ("," in text and bool(ids) and all(part.isdigit() for part in ids)))
    return None if ok else f"trainer.devices is {value!r}, but it must be {DEVICES_RULE}"


def _accelerator_error(value: Any) -> str | None:
    """Why ``trainer.accelerator`` names hardware this machine lacks, or ``None`` (Lightning
    says "No supported gpu backend found!" or asks to install torch_xla, naming no option)."""
    if not isinstance(value, str):
        return None
    from lightning.pytorch.accelerators import CUDAAccelerator, MPSAccelerator, XLAAccelerator

    present = {"cuda": CUDAAccelerator.is_available(), "mps": MPSAccelerator.is_available(),
               "tpu": XLAAccelerator.is_available()}
    present["gpu"] = present["cuda"] or present["mps"]
    name = value.strip().lower()
    if name not in present or present[name]:
        return None
    available = " or ".join(["cpu", *(k for k in ("cuda", "mps", "tpu") if present[k]), "auto"])
    return (f"trainer.accelerator is {value!r}, but this machine has no {name.upper()} that "
            f"torch can use; use {available}")


def check_groups(sub_cfg: Any) -> None:
    """Raise ConfigError when a config file gives ``trainer`` a value that is not a mapping of
    its options (``trainer: 5`` parsed, then failed with a traceback when the logger was set)."""
    trainer = sub_cfg.get("trainer", None) if hasattr(sub_cfg, "get") else None
    if trainer is not None and not hasattr(trainer, "get"):
        raise ConfigError(f"trainer is {trainer!r}, but it must be a mapping of trainer options "
                          f"(such as trainer: {{max_epochs: 6}})")


def check_trainer_values(sub_cfg: Any) -> None:
    """Raise ConfigError for trainer values Lightning refuses only while building, without
    naming the option (``devices 0``, ``accelerator gpu`` on a CPU machine, a ``max_time``
    that is not ``DD:HH:MM:SS``)."""
    check_groups(sub_cfg)
    trainer = sub_cfg.get("trainer") if hasattr(sub_cfg, "get") else None
    if trainer is None:
        return
    line = _devices_error(trainer.get("devices")) or _accelerator_error(trainer.get("accelerator"))
    max_time = trainer.get("max_time")
    if line is None and isinstance(max_time, str) and not _DURATION.match(max_time):
        line = (f"trainer.max_time is {max_time!r}, but it must be days:hours:minutes:seconds "
                f"(e.g. 00:12:00:00 for 12 hours)")
    if line is not None:
        raise ConfigError(line)


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


# ---------------------------------------------------------------- numbers out of range
#: Lightning Trainer options that are numbers, with their lowest allowed value and why
#: (Lightning checks some of them only while building, with a traceback; others never:
#: ``limit_train_batches -5`` trained nothing without a word).
TRAINER_BOUNDS: dict[str, tuple[float, bool, str]] = {
    # option: (bound, strict, rule)
    "max_epochs": (-1, False, "-1 (no limit) or more"),
    "max_steps": (-1, False, "-1 (no limit) or more"),
    "min_epochs": (0, False, "0 or more"),
    "min_steps": (0, False, "0 or more"),
    "limit_train_batches": (0, False, "0 or more (a fraction up to 1.0, or a number of batches)"),
    "limit_val_batches": (0, False, "0 or more (a fraction up to 1.0, or a number of batches)"),
    "limit_test_batches": (0, False, "0 or more (a fraction up to 1.0, or a number of batches)"),
    "limit_predict_batches": (0, False, "0 or more (a fraction up to 1.0, or a number of batches)"),
    "overfit_batches": (0, False, "0 or more"),
    "val_check_interval": (0, True, "more than 0"),
    "check_val_every_n_epoch": (0, True, "1 or more"),
    "num_sanity_val_steps": (-1, False, "-1 (all) or more"),
    "log_every_n_steps": (0, False, "0 or more"),
    "accumulate_grad_batches": (0, True, "1 or more"),
    "gradient_clip_val": (0, False, "0 or more"),
    "num_nodes": (0, True, "1 or more"),
    "reload_dataloaders_every_n_epochs": (0, False, "0 or more"),
}

#: The largest seed numpy's and Lightning's generators accept.
SEED_MAX = 2**32 - 1

#: ncl's own options (of a method, a backbone, an optimizer, a DataModule, ``ncl predict``),
#: recognised by their name wherever they are in the config.
NAME_BOUNDS: dict[str, tuple[float, bool, str]] = {
    "batch_size": (0, True, "a positive integer (1 or more)"),
    "num_workers": (0, False, "0 (load in the main process) or more"),
    "lr": (0, False, "0 or more"),
    "weight_decay": (0, False, "0 or more"),
    "embed_size": (0, True, "a positive integer (1 or more)"),
    "num_regions": (0, True, "a positive integer (1 or more)"),
    "warmup_epochs": (0, False, "0 or more"),
    "grad_clip": (0, False, "0 (no clipping) or more"),
    # DataModules: sizes of the generated data and of the checked samples (null: the default)
    "n_train": (0, True, "a positive integer (1 or more), or null for the preset's"),
    "n_dev": (0, True, "a positive integer (1 or more), or null for the preset's"),
    "n_test": (0, True, "a positive integer (1 or more), or null for the preset's"),
    "captions_per_image": (0, True, "a positive integer (1 or more), or null for the preset's"),
    "dev_max_images": (0, True, "a positive integer (1 or more), or null for every dev image"),
    "nan_check_samples": (0, False, "0 (no NaN check) or more"),
    # seeds: numpy and Lightning accept 0 .. 2**32 - 1 (numpy raised a traceback)
    "seed_everything": (0, False, f"an integer from 0 to {SEED_MAX}, or true/false"),
    "noise_seed": (0, False, f"an integer from 0 to {SEED_MAX}"),
    "synthetic_seed": (0, False, f"an integer from 0 to {SEED_MAX}"),
}
#: Options with a highest allowed value too (their rule above says so).
UPPER_BOUNDS: dict[str, float] = {"seed_everything": SEED_MAX, "noise_seed": SEED_MAX,
                                  "synthetic_seed": SEED_MAX}
#: Name endings with the same meaning: sizes and dimensions are at least 1.
SUFFIX_BOUNDS: dict[str, tuple[float, bool, str]] = {
    "_batch_size": NAME_BOUNDS["batch_size"],
    "_dim": (0, True, "a positive integer (1 or more)"),
    "_shard_size": (0, True, "a positive integer (1 or more)"),
    "chunk_size": (0, True, "a positive integer (1 or more)"),
}


def _bound_of(section: str, name: str) -> tuple[float, bool, str] | None:
    if section == "trainer":
        return TRAINER_BOUNDS.get(name)
    if name in NAME_BOUNDS:
        return NAME_BOUNDS[name]
    return next((bound for end, bound in SUFFIX_BOUNDS.items() if name.endswith(end)), None)


def _leaves(node: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted key, value)`` of every leaf of a config (Namespaces and dicts; not lists)."""
    items = vars(node).items() if hasattr(node, "__dict__") and not isinstance(node, type) else (
        node.items() if isinstance(node, dict) else ())
    found: list[tuple[str, Any]] = []
    for key, value in items:
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) or type(value).__name__ == "Namespace":
            found.extend(_leaves(value, path))
        else:
            found.append((path, value))
    return found


def check_numbers(sub_cfg: Any) -> list[str]:
    """Refuse a number outside its range with one ConfigError naming the option, the value
    and the rule, before anything is built (Lightning and torch would raise a traceback while
    building, or silently train nothing); return the warnings for allowed but useless values
    (a learning rate of 0 trains nothing).

    Covers the trainer options of :data:`TRAINER_BOUNDS` under ``trainer`` and ncl's options
    of :data:`NAME_BOUNDS` / :data:`SUFFIX_BOUNDS` anywhere else (``model``, ``data``, an
    optimizer's ``init_args``, ``ncl predict``'s ``--batch_size``).
    """
    notes: list[str] = []
    for key, value in _leaves(sub_cfg):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        parts = key.split(".")
        bound = _bound_of(parts[0] if len(parts) > 1 else "", parts[-1])
        if bound is None or (parts[0] == "trainer" and len(parts) != 2):
            continue
        low, strict, rule = bound
        high = UPPER_BOUNDS.get(parts[-1]) if parts[0] != "trainer" else None
        if value < low or (strict and value == low) or (high is not None and value > high):
            name = _plain(key) if len(parts) > 1 else f"--{key}"  # a subcommand's own option
            raise ConfigError(f"{name} is {value}, but it must be {rule}")
        if parts[-1] == "lr" and value == 0:
            notes.append(f"{_plain(key)} is 0: the optimizer will not change the weights, so "
                         f"training learns nothing")
    return notes


def check_optimizer(sub_cfg: Any) -> None:
    """Build ``model.optimizer`` once on a one-number parameter, so that a value its class
    refuses (Adam's ``betas [1.5, 0.9]``) is one ConfigError line now, not a traceback when
    training starts (methods build their optimizers in ``configure_optimizers``)."""
    import torch
    from jsonargparse._util import import_object

    model = sub_cfg.get("model") if hasattr(sub_cfg, "get") else None
    init = getattr(model, "init_args", None)
    optimizer = getattr(init, "optimizer", None)
    class_path = getattr(optimizer, "class_path", None)
    if not isinstance(class_path, str):
        return
    options = dict(vars(getattr(optimizer, "init_args", None) or {}))
    try:
        import_object(class_path)([torch.nn.Parameter(torch.zeros(1))], **options)
    except ValueError as err:  # torch.optim's own checks of its arguments
        message = " ".join(str(err).split())
        named = [key for key in options if re.search(rf"\b{re.escape(key)}\b", message)
                 or re.search(rf"\b{re.escape(key.rstrip('s'))}\b", message)]
        where = f"model.optimizer.{named[0]}={options[named[0]]}" if named else f"model.optimizer {class_path}"
        raise ConfigError(f"{where}: {message}") from None


# ---------------------------------------------------------------- wrong types and choices
_TYPE_NAMES = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false",
               "pathlib.Path": "a path", "list": "a list", "dict": "a mapping"}
#: A class path a user may give for an option, by the option's last name (for the error line).
_CLASS_EXAMPLES = {"optimizer": "torch.optim.Adam", "backbone": "ncl.models.SGRAF",
                   "callbacks": "lightning.pytorch.callbacks.ModelCheckpoint",
                   "logger": "lightning.pytorch.loggers.CSVLogger"}


def _allowed(text: str) -> str:
    """What jsonargparse's message says the option accepts: the choices of its ``Literal``
    types, else its types in words (``NoneType`` left out: null is never the fix)."""
    choices: list[str] = []
    for found in re.finditer(r"Literal\[([^\]]*)\]", text):
        for item in found.group(1).split(","):
            item = item.strip().strip("'\"")
            if item and item not in choices:
                choices.append(item)
    types = []
    for found in re.finditer(r"Expected a <class '([\w.]+)'>", text):
        name = _TYPE_NAMES.get(found.group(1), found.group(1))
        if found.group(1) != "NoneType" and name not in types:
            types.append(name)
    if choices:  # a bool beside the choices is two more choices (deterministic: true/false/warn)
        if _TYPE_NAMES["bool"] in types:
            types.remove(_TYPE_NAMES["bool"])
            choices = ["true", "false", *choices]
        return " or ".join(["one of " + ", ".join(choices), *types])
    return " or ".join(types) if types else ""


def _not_importable(key: str, value: str, message: str) -> str | None:
    """The line for a class path (an optimizer, a backbone) that cannot be imported."""
    if not re.search(r"either not accessible or invalid|expects a function or a callable class"
                     r"|Expected a dot import path string", message):
        return None
    reason = re.search(r"(module '[\w.]+' has no attribute '\w+'|No module named '[\w.]+')", message)
    why = f" ({reason.group(1)})" if reason else ""
    example = _CLASS_EXAMPLES.get(_plain(key).rsplit(".", 1)[-1])
    such = f" (such as {example})" if example else ""
    return f"{_plain(key)} {value!r} is not valid: it must be an importable class path{such}{why}"


def subclasses(base: type) -> set[type]:
    """Every subclass of ``base``, at any depth."""
    found: set[type] = set()
    for sub in base.__subclasses__():
        found |= {sub} | subclasses(sub)
    return found


def shipped(base: type, package: str) -> list[type]:
    """The public subclasses of ``base`` that ``package`` defines, by module then name."""
    return sorted((c for c in subclasses(base)
                   if c.__module__.startswith(f"{package}.") and not c.__name__.startswith("_")),
                  key=lambda c: (c.__module__, c.__name__))


def _class_names(group: str) -> list[str]:
    """The class names ``--model``/``--data`` accept by name (:func:`ncl.cli.parser.catalogue`)."""
    import lightning as L

    from ncl.methods.base import RetrievalMethod

    base, package = ((RetrievalMethod, "ncl.methods") if group == "model"
                     else (L.LightningDataModule, "ncl.data"))
    return [cls.__name__ for cls in shipped(base, package)]


def value_error_line(message: str) -> str | None:
    """One line for jsonargparse's (10+ line) error about a value of the wrong type, a choice
    that is not offered or a class that does not exist: the option, the value, what is
    allowed. ``None`` when ``message`` is not such an error."""
    outer = re.match(r'Parser key "([\w.]+)":', message)
    if outer is None:
        return None
    key = outer.group(1)
    inner = re.search(r'Parser key "([\w.]+)":\s*\n\s*(Expected .*?)\. Got value: (.*?)'
                      r'(?:\. Got value: .*)?$', message, re.MULTILINE)
    nested = re.search(r"NestedArg\(key='([^']+)', val='([^']*)'\)", message)
    given = re.search(r"Given value: (.*)\s*$", message)
    if inner is not None:  # a class's own option (data.batch_size in a config file)
        inner_key = inner.group(1)
        if nested is not None and nested.group(1).rsplit(".", 1)[-1] == inner_key.rsplit(".", 1)[-1]:
            key = f"{key}.{nested.group(1)}"  # deeper than the class: model.backbone.module_name
        elif not (inner_key == key or inner_key.startswith(f"{key}.")):
            key = f"{key}.{inner_key}"
        else:
            key = inner_key
        value, text = inner.group(3).strip(), inner.group(2)
    elif nested is not None:
        line = _not_importable(f"{key}.{nested.group(1)}", nested.group(2), message)
        if line is not None:
            return line
        key, value, text = f"{key}.{nested.group(1)}", nested.group(2), message
    elif given is not None:
        value, text = given.group(1).strip(), message
    else:
        return None
    if "Expected a dot import path string" in message and key in ("model", "data"):
        names = _class_names(key)
        nearest = _nearest(value, names)
        hint = f"; did you mean {nearest}?" if nearest else ""
        return (f"--{key} {value}: no such class; ncl's are {', '.join(names)} (or a full "
                f"class_path){hint}")
    path = re.search(r"Expected a path but (\S+) either not accessible or invalid", message)
    if path is not None and inner is None and nested is None:  # --trainer.callbacks+=NoSuch
        return _not_importable(key, path.group(1), message)
    allowed = _allowed(text)
    if not allowed:
        return None
    return f"{_plain(key)} {value!r} is not valid: it must be {allowed}"


def unknown_key_line(message: str, parser: Any) -> str | None:
    """One line for an unknown top-level key in a ``--config`` file (``modle:``), naming the
    closest valid one; jsonargparse says ``Subcommand 'fit' does not accept option 'modle'``
    or ``Unexpected config: modle:`` on several lines."""
    found = (re.search(r"does not accept option '([\w.]+)'", message)
             or re.search(r"Unexpected config: (\w+)", message))
    if found is None:
        return None
    key = found.group(1)
    head = key.split(".", 1)[0]
    dests = [action.dest for action in getattr(parser, "_actions", [])
             if not action.dest.endswith("help")]
    groups = sorted({dest.split(".", 1)[0] for dest in dests})
    line = f"unknown option {key} in a --config file"
    if head in groups:  # a known group, an unknown option in it (trainer.max_epohcs)
        nearest = _nearest(key, [dest for dest in dests if dest.startswith(f"{head}.")])
        return f"{line}; did you mean {nearest}?" if nearest else f"{line} (see --help)"
    nearest = _nearest(head, groups)
    if nearest is None:
        return f"{line} (its top-level keys: {', '.join(groups)})"
    return f"{line}; did you mean {nearest}{key[len(head):]}?"
