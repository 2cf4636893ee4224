"""Resumable, checked downloads and safe unpacking for ``ncl data get`` (issue 27).

The datasets ncl trains on are archives of several gigabytes served by mirrors that drop
connections. :func:`download` therefore writes to ``<name>.part``, resumes it with an HTTP
``Range`` request, checks the size and SHA-256 once the last byte is in, and only then
renames it to ``<name>``: a file under its final name is always a whole, checked file.
:func:`unpack` extracts a ``.tar``/``.tar.gz``/``.zip`` so that no member can land outside
the target folder and nothing appears there half-extracted.

Only the standard library is used (urllib, tarfile, zipfile, hashlib): a download tool must
work in the leanest environment ncl installs into.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import BinaryIO

from ncl.errors import NclUserError

#: Bytes read from the socket per write; large enough for speed, small enough for a smooth bar.
CHUNK_BYTES = 1 << 16
#: Seconds a silent connection may stall before the attempt counts as failed (then resumed).
SOCKET_TIMEOUT_S = 30.0
#: Seconds before the first retry of a mirror; doubled for each further retry (capped at 30).
RETRY_BACKOFF_S = 1.0
#: Suffix of a download in progress: resumable, never mistaken for the finished file.
PART_SUFFIX = ".part"
#: Suffix of a finished download whose checksum was wrong: kept for inspection, never resumed.
BAD_SUFFIX = ".bad"

#: ``Progress(done_bytes, total_bytes_or_None)``, called after every chunk.
Progress = Callable[[int, "int | None"], None]


class _Transient(Exception):
    """A failure worth retrying on the same mirror (dropped connection, timeout, 5xx)."""


class _MirrorFailed(Exception):
    """A failure that retrying this mirror will not fix (404, 403, ...): try the next one."""


class _RangeNotSatisfiable(Exception):
    """HTTP 416 to a resume: the part already reaches (or passes) the file's end."""

    def __init__(self, total: int | None) -> None:
        super().__init__(f"416 Range Not Satisfiable (file length {total})")
        self.total = total


@dataclass(frozen=True)
class _Response:
    """What one request gives: the open body, where it starts and the whole file's size."""

    body: BinaryIO
    start: int
    total: int | None


# ----------------------------------------------------------------------------- names
def file_name(url: str) -> str:
    """The last path segment of ``url`` (percent-decoded): the name the download gets.

    Raises:
        NclUserError: the URL names no file (``http://host/``) or is not http(s)/file.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https", "file"):
        raise NclUserError(f"{url}: only http://, https:// and file:// URLs can be downloaded")
    name = urllib.parse.unquote(PurePosixPath(parts.path).name)
    # A name with a separator or ".." could write outside the output folder.
    if not name or name in (".", "..") or "/" in name or "\\" in name:
        raise NclUserError(f"{url}: the URL does not end in a file name")
    return name


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file, read in chunks (archives are larger than memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --------------------------------------------------------------------------- progress
def terminal_progress(label: str) -> Progress | None:
    """A one-line ``\\r`` bar on stderr when it is a terminal; ``None`` (silence) otherwise.

    Log files and tests get no carriage-return noise; a plain bar needs no extra dependency.
    """
    isatty = getattr(sys.stderr, "isatty", None)
    if not (isatty and isatty()):
        return None

    def show(done: int, total: int | None) -> None:
        if total:
            filled = int(30 * done / total)
            line = f"{label} [{'#' * filled}{'.' * (30 - filled)}] {done / total:6.1%} " \
                   f"{done / 2**20:.1f}/{total / 2**20:.1f} MiB"
        else:
            line = f"{label} {done / 2**20:.1f} MiB"
        end = "\n" if total and done >= total else ""
        print(f"\r{line}", end=end, file=sys.stderr, flush=True)

    return show


# ---------------------------------------------------------------------------- request
def _content_range(header: str | None) -> tuple[int, int | None]:
    """``(start, total)`` of a ``Content-Range: bytes START-END/TOTAL`` header."""
    match = re.fullmatch(r"bytes (\d+)-\d+/(\d+|\*)", (header or "").strip())
    if match is None:
        raise _Transient(f"unreadable Content-Range header {header!r}")
    total = match.group(2)
    return int(match.group(1)), None if total == "*" else int(total)


def _open(url: str, offset: int) -> _Response:
    """Request ``url`` from byte ``offset`` on; say where the body really starts.

    A server that ignores ``Range`` answers 200 with the whole file: the caller then starts
    from zero instead of appending the file's beginning to the part already held.
    """
    request = urllib.request.Request(url, headers={"User-Agent": "ncl-data-get"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        response = urllib.request.urlopen(request, timeout=SOCKET_TIMEOUT_S)
    except urllib.error.HTTPError as err:
        err.close()
        if err.code == 416 and offset:  # the part is as long as (or longer than) the file
            # RFC 9110: a 416 names the file's length as "Content-Range: bytes */LENGTH".
            match = re.fullmatch(r"bytes \*/(\d+)", (err.headers.get("Content-Range") or ""))
            raise _RangeNotSatisfiable(int(match.group(1)) if match else None) from None
        message = f"HTTP {err.code} {err.reason}"
        raise (_Transient if err.code >= 500 else _MirrorFailed)(message) from None
    except urllib.error.URLError as err:
        raise _Transient(f"cannot connect ({err.reason})") from None
    except (OSError, http.client.HTTPException) as err:
        raise _Transient(f"cannot connect ({err})") from None
    status = getattr(response, "status", None) or 200
    if status == 206:
        start, total = _content_range(response.headers.get("Content-Range"))
        return _Response(response, start, total)
    length = response.headers.get("Content-Length")
    return _Response(response, 0, int(length) if length and length.isdigit() else None)


def _fetch(url: str, part: Path, progress: Progress | None) -> None:
    """One attempt: bring ``part`` up to the whole file from ``url``, resuming it.

    Raises:
        _Transient: the connection failed or ended early (the part keeps what arrived).
        _MirrorFailed: the mirror refuses the file.
    """
    offset = part.stat().st_size if part.exists() else 0
    try:
        response = _open(url, offset)
    except _RangeNotSatisfiable as err:
        if err.total == offset:  # an earlier run got every byte but stopped before renaming
            return
        part.unlink()  # longer than the file: it cannot be resumed, so start over now
        response = _open(url, 0)
    with response.body as body:
        if response.start != offset:  # 200 (no Range support) or a different start
            offset = response.start
        with open(part, "r+b" if part.exists() else "wb") as out:
            out.seek(offset)
            out.truncate()
            done = offset
            try:
                for chunk in iter(lambda: body.read(CHUNK_BYTES), b""):
                    out.write(chunk)
                    done += len(chunk)
                    if progress is not None:
                        progress(done, response.total)
            except (OSError, http.client.HTTPException) as err:
                raise _Transient(f"connection lost after {done} bytes ({err})") from None
    if response.total is not None and done < response.total:
        raise _Transient(f"connection closed after {done} of {response.total} bytes")


def _from_mirror(url: str, part: Path, retries: int, progress: Progress | None) -> str | None:
    """Try ``url`` up to ``1 + retries`` times; ``None`` on success, else why it failed."""
    reason = "no attempt made"
    for attempt in range(retries + 1):
        try:
            _fetch(url, part, progress)
            return None
        except _MirrorFailed as err:
            return str(err)
        except _Transient as err:
            reason = str(err)
            if attempt < retries:
                time.sleep(min(RETRY_BACKOFF_S * 2.0 ** attempt, 30.0))  # back off: a busy server recovers
    return reason


# --------------------------------------------------------------------------- download
def _check(path: Path, sha256: str | None, size: int | None) -> str | None:
    """What is wrong with a finished file (size, then checksum), or ``None``."""
    actual = path.stat().st_size
    if size is not None and actual != size:
        return f"size mismatch: {actual} bytes, expected {size}"
    if sha256 is not None:
        digest = sha256_of(path)
        if digest != sha256.lower():
            return f"checksum mismatch: sha256 {digest}, expected {sha256.lower()}"
    return None


def download(urls: Sequence[str], out_dir: Path, sha256: str | None = None,
             size: int | None = None, retries: int = 3,
             progress: Progress | None = None) -> Path:
    """Download one file from the first of ``urls`` (mirrors, in order) that serves it.

    Args:
        urls: mirrors of the same file; the first URL's last segment names it.
        out_dir: the folder receiving ``<name>`` (created when missing).
        sha256: expected hex digest, checked before the file gets its final name.
        size: expected size in bytes, checked likewise.
        retries: extra attempts per mirror after a dropped connection or timeout.
        progress: called with ``(bytes held, total or None)`` after each chunk.

    Returns:
        The finished file ``out_dir / name``; an existing one is checked and kept.

    Raises:
        NclUserError: no mirror served the file, or it failed its checks. The ``.part``
            file stays for a later resume, except on a checksum mismatch, where it becomes
            ``<name>.bad`` (resuming a wrong file could never make it right).
    """
    name = file_name(urls[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / name
    if final.exists():  # a finished file is only ever there whole: just check it again
        problem = _check(final, sha256, size)
        if problem:
            raise NclUserError(f"{final} already exists and fails its check ({problem}); "
                               "remove it to download again")
        return final
    part = final.with_name(name + PART_SUFFIX)
    failures = []
    for url in urls:
        reason = _from_mirror(url, part, retries, progress)
        if reason is None:
            break
        failures.append(f"{url}: {reason}")
    else:
        kept = f"; {part} is kept, run the same command to resume" if part.exists() else ""
        raise NclUserError(f"cannot download {name}: {'; '.join(failures)}{kept}")
    problem = _check(part, sha256, size)
    if problem and problem.startswith("checksum"):
        bad = final.with_name(name + BAD_SUFFIX)
        os.replace(part, bad)
        raise NclUserError(f"{urls[0]}: {problem}; the download was moved to {bad}")
    if problem:
        raise NclUserError(f"{urls[0]}: {problem} (kept as {part})")
    os.replace(part, final)  # atomic on one filesystem: the final name appears whole
    return final


# ----------------------------------------------------------------------------- unpack
def _unsafe_name(name: str) -> bool:
    """A member name that could land outside the target: absolute, drive or ``..``."""
    posix, windows = PurePosixPath(name), PureWindowsPath(name)
    return (posix.is_absolute() or windows.is_absolute() or bool(windows.drive)
            or ".." in posix.parts or ".." in windows.parts)


def _tar_problem(member: tarfile.TarInfo) -> str | None:
    """Why a tar member may not be extracted, or ``None``."""
    if _unsafe_name(member.name):
        return f"member {member.name!r} would be written outside the folder"
    if member.issym() or member.islnk():
        if _unsafe_name(member.linkname):
            return f"link {member.name!r} points outside the folder ({member.linkname!r})"
    elif not (member.isfile() or member.isdir()):
        return f"member {member.name!r} is a device, fifo or other special file"
    return None


def _extract(archive: Path, into: Path) -> None:
    """Extract ``archive`` into ``into`` after checking every member name first."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zipped:
            for name in zipped.namelist():
                if _unsafe_name(name):
                    raise NclUserError(f"{archive}: refusing to unpack, member {name!r} "
                                       "would be written outside the folder")
            zipped.extractall(into)
        return
    try:
        opened = tarfile.open(archive)  # "r:*": plain, gzip, bzip2 or xz
    except tarfile.TarError:
        raise NclUserError(f"{archive}: not a .tar, .tar.gz or .zip archive") from None
    with opened as tar:
        members = tar.getmembers()
        for member in members:
            problem = _tar_problem(member)
            if problem:
                raise NclUserError(f"{archive}: refusing to unpack, {problem}")
        # The "data" filter repeats these checks inside tarfile where Python has it.
        extra = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(into, members=members, **extra)


def unpack(archive: Path, out_dir: Path) -> list[Path]:
    """Extract ``archive`` into ``out_dir``; return the top-level entries it produced.

    Extraction happens in a hidden temporary folder inside ``out_dir`` (same filesystem),
    and each top-level entry is renamed into place only when all of it is there, so an
    interrupted unpack leaves no half-filled dataset folder under its real name.

    Raises:
        NclUserError: the archive is unreadable, holds an unsafe member, or would replace
            something already in ``out_dir``.
    """
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=out_dir))
    try:
        try:
            _extract(archive, staging)
        except (tarfile.TarError, zipfile.BadZipFile, EOFError) as err:
            raise NclUserError(f"{archive}: cannot unpack ({err})") from None
        entries = sorted(staging.iterdir())
        taken = [out_dir / e.name for e in entries if (out_dir / e.name).exists()]
        if taken:
            raise NclUserError(f"{archive}: refusing to unpack over existing "
                               f"{', '.join(str(t) for t in taken)}")
        produced = []
        for entry in entries:
            target = out_dir / entry.name
            os.replace(entry, target)
            produced.append(target)
        return produced
    finally:
        shutil.rmtree(staging, ignore_errors=True)
