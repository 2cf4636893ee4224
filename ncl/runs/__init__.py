"""Run bookkeeping: where run folders live and what they record.

* :mod:`ncl.runs.folders`: the run folders, ``--ckpt_path last/best``, resuming in place;
* :mod:`ncl.runs.record`: a run's record (its config, the resumes appended to it);
* :mod:`ncl.runs.checkpoints`: writing and reading checkpoints (atomically, checked against
  the run);
* :mod:`ncl.runs.loggers`: the CSV and W&B loggers that keep one run across resumes.
"""
