"""The reproduction tool: ``python -m ncl.reproduce``.

Runs grids of methods x backbone x noise kind x noise ratio x seeds through the real CLI
(``ncl fit``, then ``ncl test``), resumably, and writes the tables and the plot
(:mod:`ncl.reproduce.cli` documents the presets and the outputs).
``python -m ncl.reproduce slurm --out DIR`` writes the multi-node templates
(:mod:`ncl.reproduce.slurm`).

Modules: :mod:`~ncl.reproduce.cells` (one cell through the CLI, the benchmark's method rows),
:mod:`~ncl.reproduce.grid` (cells, presets, a cell's overrides), :mod:`~ncl.reproduce.records`
(a finished cell's record), :mod:`~ncl.reproduce.runner` (running cells),
:mod:`~ncl.reproduce.tables` (``results.md``, ``cells.csv``, the plot).
"""
