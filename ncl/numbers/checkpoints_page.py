"""``docs/checkpoints.md``'s tables, generated from the checkpoint records.

``python -m ncl.numbers.checkpoints_page`` prints the generated part; ``--write`` puts it
between the page's ``<!-- generated ... -->`` and ``<!-- end generated -->`` markers (the rest
of the page is written by hand). ``tests/numbers/test_checkpoints_page.py`` keeps the page equal
to what this prints, so a record is changed in ``ncl/numbers/checkpoints/*.json``, never in the
page.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from ncl.errors import NclUserError
from ncl.numbers.checkpoints import FORMATS, Checkpoint, Release, Reported, load_releases

#: The page the tables are written into (in a checkout; not package data).
PAGE = Path(__file__).resolve().parents[2] / "docs" / "checkpoints.md"
COMMAND = "python -m ncl.numbers.checkpoints_page --write"
BEGIN = f"<!-- generated: {COMMAND} (edit ncl/numbers/checkpoints/*.json, not this part) -->"
END = "<!-- end generated -->"
DATASET_NAMES = {"f30k": "Flickr30K", "coco": "MS-COCO", "cc152k": "CC152K", None: "not stated"}
PROTOCOL_NAMES = {"1k": "1K", "5fold1k": "5-fold 1K", "5k": "5K"}


def render(releases: Sequence[Release]) -> str:
    """The generated part of the page (between the markers, markers excluded)."""
    released = [r for r in releases if r.checkpoints]
    lines = ["## Released checkpoints", ""]
    for release in released:
        lines += _release_section(release)
    formats = sorted({c.format for r in released for c in r.checkpoints})
    lines += ["### Formats", ""]
    lines += [f"- `{key}`: {FORMATS[key][0]}." for key in formats]
    lines += ["", "## Methods without released checkpoints", "",
              "| method | page | what was read | what it offers |", "|---|---|---|---|"]
    for release in (r for r in releases if not r.checkpoints):
        lines.append(f"| {release.method} | [{release.repository}]({release.page}) | "
                     f"{release.checked} | {_cell(release.note)} |")
    return "\n".join(lines) + "\n"


def _release_section(release: Release) -> list[str]:
    lines = [f"### {release.method}", "",
             f"*{release.paper}.* Published on [{release.repository}]({release.page}) "
             f"(read: {release.checked}).", ""]
    if release.note:
        lines += [release.note, ""]
    lines += ["| checkpoint | data | noise | files | format | numbers a paper prints for the setting |",
              "|---|---|---|---|---|---|"]
    for c in release.checkpoints:
        files = ", ".join(f"`{f}`" for f in c.files) or "not named on the page"
        lines.append(f"| [{c.name}]({c.url}) | {DATASET_NAMES[c.dataset]} | {_noise(c)} | "
                     f"{files} | `{c.format}` | {_reported(c.reported)} |")
    notes = [f"- {c.name}: {c.note}" for c in release.checkpoints if c.note]
    if notes:
        lines += [""] + _unique(notes)
    lines += ["", "```bash"]
    for c in release.checkpoints:
        lines += _commands(c)
    return lines + ["```", ""]


def _commands(c: Checkpoint) -> list[str]:
    """Download (``ncl data get`` for a file link; a folder is the user's browser) and test."""
    if c.files:
        fetch = [f"ncl data get --out checkpoints {shlex.quote(c.url)}"]
    else:
        fetch = [f"# {c.name}: download the file(s) of {c.url} into checkpoints/, then set "
                 "their names in place of FILE.pth.tar"]
    tests = [shlex.join(["ncl", "test", "--config", config, *c.overrides()]) for config in c.configs()]
    return fetch + tests


def _noise(c: Checkpoint) -> str:
    if c.noise is None:
        return "not stated"
    if c.noise_ratio is None:
        return c.noise
    return f"{c.noise} {c.noise_ratio:g}"


def _reported(reported: Sequence[Reported]) -> str:
    if not reported:
        return "none available here"
    parts = []
    for r in reported:
        kind = "" if r.rsum is not None else "Σ"
        parts.append(f"{kind}{r.total:.1f} ({PROTOCOL_NAMES[r.protocol]}; {r.source}, {r.table})")
    return "<br>".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _unique(lines: list[str]) -> list[str]:
    """Notes shared by several checkpoints, said once (``a, b: note``)."""
    by_note: dict[str, list[str]] = {}
    for line in lines:
        name, note = line[2:].split(": ", 1)
        by_note.setdefault(note, []).append(name)
    return [f"- {', '.join(names)}: {note}" for note, names in by_note.items()]


# ---------------------------------------------------------------------- the page
def page_with(text: str, generated: str, page: Path) -> str:
    """``text`` with the part between :data:`BEGIN` and :data:`END` replaced by ``generated``.

    Raises:
        NclUserError: the markers are missing or out of order.
    """
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise NclUserError(f"{page}: needs the lines {BEGIN!r} and then {END!r}")
    return text[:start + len(BEGIN)] + "\n\n" + generated + "\n" + text[end:]


def generated_part(text: str, page: Path) -> str:
    """What the page holds between the markers now (as :func:`render` writes it)."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise NclUserError(f"{page}: needs the lines {BEGIN!r} and then {END!r}")
    return text[start + len(BEGIN):end].removeprefix("\n\n").removesuffix("\n")


def main(argv: list[str] | None = None) -> int:
    """Print the generated tables, or write them into the page (``--write``)."""
    parser = argparse.ArgumentParser(prog="python -m ncl.numbers.checkpoints_page",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help=f"write them into {PAGE.name}")
    parser.add_argument("--page", type=Path, default=PAGE, help="the page (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        generated = render(load_releases())
        if not args.write:
            sys.stdout.write(generated)
            return 0
        args.page.write_text(page_with(args.page.read_text(), generated, args.page))
    except NclUserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {args.page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
