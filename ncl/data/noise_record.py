"""The record of a run's noise: what a DataModule writes into its run folder and keeps in
its checkpoints, so that every later reader can say which noise a model was trained on.

* the run folder holds ``noise_index.npy`` and ``noise.json`` (SHA-256, rate, format, the
  pairing's digest and registry name) as the run started; other noise (a resume with
  ``--override_run``) goes beside them (:func:`save_noise_record`), never over them;
* the logged hyperparameters name the noise (:meth:`NoiseRecord.noise_hparams`, added to
  ``hparams_initial`` once the noise is known);
* a checkpoint keeps :data:`TRAINING_NOISE_KEYS` of it, which ``ncl test`` writes into
  ``test_results.json`` (:meth:`NoiseRecord.training_noise`).

:class:`NoiseRecord` is a part of :class:`ncl.data.datamodule.PrecompDataModule`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ncl.data.noise import Noise
from ncl.data.noise_registry import pairing_digest, pairing_name
from ncl.io import atomic_save_npy, atomic_write_text

#: What a checkpoint keeps of its training noise (``state_dict``) for ``ncl test`` to report.
TRAINING_NOISE_KEYS = ("noise_sha256", "noise_rate", "noise_format", "noise_pairing_digest",
                       "noise_pairing")


def noise_record(out: Path, sha256: str) -> str:
    """The file of ``out`` that describes the noise of SHA-256 ``sha256``: ``noise.json`` when it
    is the run's recorded noise (or none is recorded yet), else ``noise.<sha[:12]>.json``."""
    info = out / "noise.json"
    if not info.is_file():
        return info.name
    try:
        recorded = json.loads(info.read_text()).get("sha256")
    except (OSError, ValueError):
        recorded = None
    return info.name if recorded == sha256 else f"noise.{sha256[:12]}.json"


def save_noise_record(out: Path, array: np.ndarray, summary: dict[str, Any]) -> Path:
    """Write the noise indices and their summary into a run folder, never over another
    noise record: the first noise of a folder is ``noise_index.npy``/``noise.json``; the same
    noise again writes nothing; other noise (a resume with ``--override_run``) goes beside
    them as ``noise.<sha[:12]>.json``/``noise_index.<sha[:12]>.npy``. Returns the summary file."""
    name = noise_record(out, str(summary.get("sha256")))
    info = out / name
    if name == "noise.json" and info.is_file():
        return info  # the recorded noise: the files stay as written
    index = out / ("noise_index.npy" if name == "noise.json" else f"noise_index.{name[6:-5]}.npy")
    atomic_save_npy(index, array)
    atomic_write_text(info, json.dumps(summary, indent=2))
    return info


class NoiseRecord:
    """The noise record of a DataModule (a mixin of
    :class:`~ncl.data.datamodule.PrecompDataModule`, which sets the attributes below)."""

    noise: Noise | None
    #: ``(noise, its record)``: :meth:`noise_hparams`' cache, valid while ``noise`` is that noise.
    _noise_record: tuple[Noise, dict[str, object]] | None
    #: The noise of the run a restored checkpoint was trained on (``load_state_dict``).
    trained_noise: dict[str, Any]
    augment: Any

    def noise_hparams(self) -> dict[str, object]:
        """The noise actually used (after ``setup("fit")``): SHA-256, rate, format, file, and
        the pairing it gives (issue 27).

        ``noise_sha256`` names the *file*, which differs between two formats of one pairing
        (RCL's image-level and L2RM's caption-level F30K files); ``noise_pairing_digest``
        does not, so two runs on the same noise can be recognised, and ``noise_pairing`` is
        its registry name (``"rcl/f30k/0.2 = l2rm/f30k/0.2"``), ``"clean"`` when no caption is
        moved, or ``"new"``. Computed once (the noise is fixed after ``setup``).
        """
        if self.noise is None:
            return {}
        if self._noise_record is None or self._noise_record[0] is not self.noise:
            digest = pairing_digest(self.noise.cap2img)
            record = {"noise_sha256": self.noise.sha256,
                      "noise_rate": round(self.noise.noise_rate, 6),
                      "noise_format": self.noise.format, "noise_source": str(self.noise.source),
                      "noise_pairing_digest": digest,
                      "noise_pairing": pairing_name(digest, self.noise.noise_rate)}
            self._noise_record = (self.noise, record)
        return dict(self._noise_record[1])

    @property
    def hparams_initial(self) -> dict[str, Any]:  # Lightning's AttributeDict
        """The constructor arguments plus, once known, the noise provenance.

        Lightning sends ``hparams_initial`` to every logger (CSV ``hparams.yaml``, W&B config)
        *after* ``setup``, but ``save_hyperparameters`` froze it in ``__init__``, before the
        noise was drawn or read; adding the noise here is what makes the logged
        hyperparameters name the exact noise pattern of the run.
        """
        initial = super().hparams_initial  # type: ignore[misc]  # LightningDataModule's
        initial.update(self.noise_hparams())
        initial["augment"] = self._augment_hparam()
        return initial

    def _augment_hparam(self) -> str | None:
        """The augmentation as logged: its repr (an object would need unpickling)."""
        return None if self.augment is None else repr(self.augment)

    def run_dir(self) -> Path | None:
        """The trainer's log directory (where the config is saved), if attached."""
        trainer = getattr(self, "trainer", None)
        if trainer is None:
            return None
        return Path(trainer.log_dir or trainer.default_root_dir)

    def _save_noise(self) -> None:
        """Write the noise indices, their SHA-256 and their pairing (digest and registry name)
        into the run directory (rank 0), never over the noise record a run started with
        (:func:`save_noise_record`)."""
        out, trainer = self.run_dir(), getattr(self, "trainer", None)
        if out is None or self.noise is None or not trainer.is_global_zero:
            return
        hparams = self.noise_hparams()  # the pairing too: noise.json names the published file
        summary = {**self.noise.summary(), "pairing_digest": hparams["noise_pairing_digest"],
                   "pairing": hparams["noise_pairing"]}
        save_noise_record(out, self.noise.array, summary)

    def training_noise(self) -> dict[str, Any]:
        """:data:`TRAINING_NOISE_KEYS` of the noise this run trains on (after ``setup("fit")``)
        or of the run whose checkpoint was restored; empty when neither is known."""
        noise = self.noise_hparams() or self.trained_noise
        return {k: noise[k] for k in TRAINING_NOISE_KEYS if k in noise}
