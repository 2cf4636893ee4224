"""Model options and checkpoints under LightningCLI: which options a checkpoint's stored
hyperparameters replace (one warning naming them), options a checkpoint no longer knows, and
the rule that ``ncl test``/``validate`` score trained weights only."""

from __future__ import annotations

import warnings
from typing import Any

from ncl.errors import ConfigError, NclWarning


def _flat(node: Any, prefix: str = "model") -> dict[str, Any]:
    """A config node as ``{"model.init_args.x": value}`` (Namespaces and dicts alike)."""
    if node is None:
        return {}
    items = node.items() if isinstance(node, dict) else vars(node).items()
    out: dict[str, Any] = {}
    for key, value in items:
        if isinstance(value, dict) or type(value).__name__ == "Namespace":
            out.update(_flat(value, f"{prefix}.{key}"))
        else:
            out[f"{prefix}.{key}"] = value
    return out


def _extra_kwargs(cfg: Any) -> dict[str, Any]:
    """The model's ``dict_kwargs``: options jsonargparse could not map to a parameter."""
    model = cfg.get("model") if cfg is not None else None
    extra = model.get("dict_kwargs") if model is not None and hasattr(model, "get") else None
    return extra if isinstance(extra, dict) else {}


def check_trained_weights(cfg: Any, subcommand: str) -> None:
    """``ncl test``/``validate``/``predict`` score trained weights: a ``--ckpt_path``, or a model that
    names its checkpoints (``model.checkpoints``: the ``eval_*`` configs); otherwise one
    ConfigError, unless ``--allow_untrained`` (the initial weights, to check the evaluation).
    Without this a forgotten ``--ckpt_path`` wrote an untrained model's scores as a result."""
    if cfg.get("ckpt_path") or cfg.get("allow_untrained"):
        return
    model = cfg.get("model")
    init_args = model.get("init_args") if model is not None and hasattr(model, "get") else None
    if init_args is not None and hasattr(init_args, "get") and init_args.get("checkpoints"):
        return
    raise ConfigError(f"ncl {subcommand}: no --ckpt_path, so this would score the model's untrained "
                      f"initial weights; pass --ckpt_path best (this config's newest run), last or a "
                      f"checkpoint file (or --allow_untrained true to check the evaluation itself)")


def drop_removed_options(cfg: Any, own: set[str], ckpt_path: str) -> None:
    """Drop, with one warning, the options a checkpoint stores that the method no longer has.

    LightningCLI passes a checkpoint's stored hyperparameters as keyword arguments; one that an
    older ncl had and this one removed (NCR's ``loss_figure``, issue 23) would end in a
    traceback when the method is built. The method's behaviour never depended on them.
    """
    extra = _extra_kwargs(cfg)
    removed = sorted(key for key in extra if key not in own)
    for key in removed:
        del extra[key]
    if removed:
        warnings.warn(f"{ckpt_path}: the checkpoint stores model options this version of ncl no "
                      f"longer has, ignored: {', '.join(removed)}", NclWarning, stacklevel=2)


def warn_replaced_model_options(before: dict[str, Any], after: dict[str, Any],
                                ckpt_path: str) -> None:
    """One warning naming every model option whose value the checkpoint replaced.

    LightningCLI re-applies the hyperparameters stored in ``--ckpt_path`` over the config
    and the command line (so a resumed run keeps the model it was started with); an option
    the user set to another value is therefore silently ignored without this.
    """
    # An unset (None) value is not the user's choice: vocab_size, for one, is linked from
    # the data only after parsing, and the checkpoint fills it in.
    changed = [f"{key} {before[key]!r} -> {after[key]!r}" for key in sorted(before)
               if before[key] is not None and key in after and before[key] != after[key]]
    if changed:
        warnings.warn(f"{ckpt_path}: the model options stored in the checkpoint replace the "
                      f"config's: {'; '.join(changed)}", NclWarning, stacklevel=2)

