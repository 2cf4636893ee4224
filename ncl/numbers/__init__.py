"""Numbers as data: what the papers published, what ncl measured, what the authors released.

Three kinds of records live here as package data, each read by a small pure module and never
edited by hand in the docs (the docs' tables are generated from them, and tests keep the pages
equal to what the generator prints):

* ``published/`` - the papers' result rows (six recalls, printed rSum, protocol, noise file);
* ``measured/`` - the reproduction grid's per-cell records of the presets ncl publishes;
* ``checkpoints/`` - the checkpoints the authors released and the config that loads them.

A new method adds files here; it edits no shared list.
"""
