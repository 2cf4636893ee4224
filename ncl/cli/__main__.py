"""``python -m ncl.cli``: the ``ncl`` command without its console script (a checkout that is
not installed, a subprocess started with a given interpreter)."""

from ncl.cli import main

main()
