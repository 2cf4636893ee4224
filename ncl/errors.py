"""User-facing errors.

Anything a user can cause with a file, a path or an option raises :class:`NclUserError`
(a ``ValueError``). The command line prints such an error as one clear message and exits
with a non-zero status instead of a traceback (see :mod:`ncl.cli`).
"""

from __future__ import annotations


class NclUserError(ValueError):
    """An error caused by user input (a file, a path or an option), not by a bug."""


class DataError(NclUserError):
    """A dataset file is missing, malformed or inconsistent."""


class ConfigError(NclUserError):
    """An option or a combination of options is invalid."""


class TrainingError(NclUserError):
    """Training or evaluation produced NaN/Inf (a diverged run or a broken checkpoint), or a
    division left nothing to train on (a collapsed co-divide).

    A user provokes it with a learning rate that is too large or with features that hold
    NaN/Inf; it is reported like any other user error rather than as a traceback.
    """


class NclWarning(UserWarning):
    """Something about the user's input worth knowing that does not stop the run.

    The ``ncl`` command prints it as one ``ncl: warning: ...`` line (see :mod:`ncl.console`).
    """
