"""``ncl data get`` through the real command (issue 27), against a small HTTP server on
127.0.0.1: a checked download and unpack, an interrupted download resumed with ``Range``, a
checksum mismatch, a dead mirror followed by a good one, and an archive escaping its folder."""

from __future__ import annotations

import hashlib
import io
import random
import re
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import ncl.cli as cli
import ncl.datatools.download as download

from cli_helpers import error_lines, main_exit


# ------------------------------------------------------------------------ the server
@dataclass
class Served:
    """What the test server serves, and what it saw (shared with its handler threads)."""

    files: dict[str, bytes] = field(default_factory=dict)
    #: path -> bytes to send before hanging up, applied once (a dropped connection).
    drop_after: dict[str, int] = field(default_factory=dict)
    #: Whether ``Range`` is honoured (206) or ignored (200 with the whole file).
    ranges: bool = True
    #: (path, Range header or None) of every request, in order.
    requests: list[tuple[str, str | None]] = field(default_factory=list)


def _handler(served: Served) -> type[BaseHTTPRequestHandler]:
    """A GET handler over ``served`` that honours ``Range: bytes=N-`` with 206."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            range_header = self.headers.get("Range")
            served.requests.append((self.path, range_header))
            body = served.files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            start = 0
            match = re.fullmatch(r"bytes=(\d+)-", range_header or "") if served.ranges else None
            if match and int(match.group(1)) >= len(body):  # RFC 9110's answer: 416
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if match:
                start = int(match.group(1))
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(len(body) - start))
            self.end_headers()
            # Promise the whole length, send less, hang up: what a dropped mirror does.
            stop = served.drop_after.pop(self.path, len(body))
            self.wfile.write(body[start:max(start, stop)])

        def log_message(self, *args: object) -> None:  # keep test output clean
            pass

    return Handler


@pytest.fixture
def server() -> Iterator[tuple[str, Served]]:
    """``(base URL, Served)`` of a threaded server on a free port of 127.0.0.1."""
    served = Served()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(served))
    # A short poll interval: shutdown() waits for it, once per test.
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", served
    finally:
        httpd.shutdown()
        httpd.server_close()


# ----------------------------------------------------------------------- the archives
def tar_gz(members: dict[str, bytes]) -> bytes:
    """A gzipped tar holding ``members`` (name -> content), names taken verbatim."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


#: A dataset-shaped archive, with incompressible bytes so that "half" is a real split.
ARCHIVE = tar_gz({"f30k_precomp/train_caps.txt": b"a dog runs\n" * 50,
                  "f30k_precomp/train_ims.npy": random.Random(0).randbytes(20_000),
                  "vocab/f30k_precomp_vocab.json": b"{}"})


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def get_ok(capsys: pytest.CaptureFixture, *args: str) -> str:
    """``ncl data get ...`` expecting success; return stdout."""
    cli.main(["data", "get", *args])
    out, err = capsys.readouterr()
    assert not error_lines(err), err
    return out


def get_error(capsys: pytest.CaptureFixture, *args: str) -> str:
    """``ncl data get ...`` expecting exit 2 and exactly one error line; return it."""
    err = main_exit(capsys, "data", "get", *args)
    assert "Traceback" not in err
    [line] = error_lines(err)
    return line


# ------------------------------------------------------------------------------ tests
def test_download_checks_and_unpacks(server, tmp_path: Path, capsys) -> None:
    base, served = server
    served.files["/f30k.tar.gz"] = ARCHIVE
    out = get_ok(capsys, f"{base}/f30k.tar.gz", "--out", str(tmp_path), "--sha256", sha(ARCHIVE),
                 "--size", str(len(ARCHIVE)), "--unpack")
    assert (tmp_path / "f30k.tar.gz").read_bytes() == ARCHIVE
    assert not (tmp_path / "f30k.tar.gz.part").exists()
    assert (tmp_path / "f30k_precomp" / "train_caps.txt").read_bytes() == b"a dog runs\n" * 50
    assert (tmp_path / "vocab" / "f30k_precomp_vocab.json").is_file()
    assert "sha256 checked" in out
    assert f"unpacked {tmp_path / 'f30k_precomp'}" in out and f"{tmp_path / 'vocab'}" in out
    # No staging folder is left behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f30k.tar.gz", "f30k_precomp", "vocab"]


def test_interrupted_download_resumes_with_range(server, tmp_path: Path, capsys) -> None:
    base, served = server
    half = len(ARCHIVE) // 2
    served.files["/f30k.tar.gz"] = ARCHIVE
    served.drop_after["/f30k.tar.gz"] = half
    url = f"{base}/f30k.tar.gz"
    line = get_error(capsys, url, "--out", str(tmp_path), "--retries", "0")
    assert url in line and "connection closed" in line and "resume" in line
    part = tmp_path / "f30k.tar.gz.part"
    assert part.read_bytes() == ARCHIVE[:half]
    assert not (tmp_path / "f30k.tar.gz").exists()  # never a half file under the final name

    get_ok(capsys, url, "--out", str(tmp_path), "--sha256", sha(ARCHIVE))
    assert served.requests[-1] == ("/f30k.tar.gz", f"bytes={half}-")
    assert (tmp_path / "f30k.tar.gz").read_bytes() == ARCHIVE
    assert not part.exists()


def test_retry_resumes_within_one_command(server, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(download, "RETRY_BACKOFF_S", 0.0)
    base, served = server
    served.files["/f30k.tar.gz"] = ARCHIVE
    served.drop_after["/f30k.tar.gz"] = 5000
    get_ok(capsys, f"{base}/f30k.tar.gz", "--out", str(tmp_path), "--retries", "1")
    assert [r for _, r in served.requests] == [None, "bytes=5000-"]
    assert (tmp_path / "f30k.tar.gz").read_bytes() == ARCHIVE


def test_server_without_range_restarts_from_zero(server, tmp_path: Path, capsys) -> None:
    base, served = server
    served.files["/f30k.tar.gz"] = ARCHIVE
    served.ranges = False
    (tmp_path / "f30k.tar.gz.part").write_bytes(b"junk that must not stay in front")
    get_ok(capsys, f"{base}/f30k.tar.gz", "--out", str(tmp_path), "--sha256", sha(ARCHIVE))
    assert served.requests == [("/f30k.tar.gz", "bytes=32-")]  # asked, got a 200 instead
    assert (tmp_path / "f30k.tar.gz").read_bytes() == ARCHIVE


def test_complete_part_is_finished_after_416(server, tmp_path: Path, capsys) -> None:
    base, served = server
    served.files["/f30k.tar.gz"] = ARCHIVE
    (tmp_path / "f30k.tar.gz.part").write_bytes(ARCHIVE)  # stopped just before the rename
    get_ok(capsys, f"{base}/f30k.tar.gz", "--out", str(tmp_path), "--sha256", sha(ARCHIVE))
    assert (tmp_path / "f30k.tar.gz").read_bytes() == ARCHIVE


def test_checksum_mismatch_leaves_no_final_file(server, tmp_path: Path, capsys) -> None:
    base, served = server
    served.files["/f30k.tar.gz"] = ARCHIVE
    line = get_error(capsys, f"{base}/f30k.tar.gz", "--out", str(tmp_path), "--sha256", "0" * 64)
    assert "checksum mismatch" in line and f"{base}/f30k.tar.gz" in line
    assert not (tmp_path / "f30k.tar.gz").exists()
    assert not (tmp_path / "f30k.tar.gz.part").exists()  # not resumed next time
    assert (tmp_path / "f30k.tar.gz.bad").read_bytes() == ARCHIVE


def test_size_mismatch_keeps_the_part(server, tmp_path: Path, capsys) -> None:
    base, served = server
    served.files["/f30k.tar.gz"] = ARCHIVE
    line = get_error(capsys, f"{base}/f30k.tar.gz", "--out", str(tmp_path), "--size", "7")
    assert "size mismatch" in line
    assert not (tmp_path / "f30k.tar.gz").exists()
    assert (tmp_path / "f30k.tar.gz.part").exists()


def test_second_mirror_after_404(server, tmp_path: Path, capsys) -> None:
    base, served = server
    served.files["/good/f30k.tar.gz"] = ARCHIVE
    get_ok(capsys, f"{base}/gone/f30k.tar.gz", f"{base}/good/f30k.tar.gz", "--out",
           str(tmp_path), "--sha256", sha(ARCHIVE))
    assert [p for p, _ in served.requests] == ["/gone/f30k.tar.gz", "/good/f30k.tar.gz"]
    assert (tmp_path / "f30k.tar.gz").read_bytes() == ARCHIVE


def test_all_mirrors_failing_is_one_line(server, tmp_path: Path, capsys) -> None:
    base, _ = server
    dead = "http://127.0.0.1:9/f30k.tar.gz"  # discard port: nothing listens there
    line = get_error(capsys, f"{base}/f30k.tar.gz", dead, "--out", str(tmp_path),
                     "--retries", "0")
    assert "404" in line and dead in line and "cannot connect" in line


def test_unpack_refuses_member_outside_the_folder(server, tmp_path: Path, capsys) -> None:
    base, served = server
    evil = tar_gz({"data/ok.txt": b"fine", "../evil": b"escaped"})
    served.files["/evil.tar.gz"] = evil
    out_dir = tmp_path / "out"
    line = get_error(capsys, f"{base}/evil.tar.gz", "--out", str(out_dir), "--unpack")
    assert "'../evil'" in line and "refusing" in line
    assert not (tmp_path / "evil").exists()
    assert sorted(p.name for p in out_dir.iterdir()) == ["evil.tar.gz"]  # nothing extracted


def test_bad_sha256_option_is_one_line(tmp_path: Path, capsys) -> None:
    line = get_error(capsys, "http://127.0.0.1:9/x.tar", "--out", str(tmp_path), "--sha256", "zz")
    assert "--sha256" in line
