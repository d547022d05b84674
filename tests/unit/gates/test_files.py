"""gates/io/files.py: an atomic write leaves the old bytes or the new ones and no temp file, is
durable (the temp file fsynced before the rename, the directory after it), never collides
with another writer's temp file, and sha256_file equals hashlib's digest of the whole file.
read_regular reads only regular files, at most its limit plus one byte, and names anything
else (a FIFO, a device, a socket, a symlink loop, a dangling symlink).

Run: .venv/bin/pytest tests/unit/gates/test_files.py
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from gates.io import files


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


@pytest.fixture
def disk_events(monkeypatch) -> list[tuple]:
    """Every os.fsync (as the path its descriptor names) and os.replace, in order."""
    events: list[tuple] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", Path(os.readlink(f"/proc/self/fd/{fd}"))))
        real_fsync(fd)

    def replace(src, dst) -> None:
        events.append(("replace", Path(src), Path(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


def test_a_write_replaces_the_bytes_and_leaves_no_temp_file(tmp_path):
    target = tmp_path / "state.json"
    target.write_bytes(b"old")
    files.atomic_write_bytes(target, b"new bytes")
    assert target.read_bytes() == b"new bytes"
    files.atomic_write_text(target, "caf\u00e9\n")
    assert target.read_bytes() == "caf\u00e9\n".encode()
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"], "a temp file was left"


def test_the_file_is_fsynced_before_the_rename_and_the_directory_after(tmp_path, disk_events):
    target = tmp_path / "out.json"
    files.atomic_write_bytes(target, b"{}")
    [(kind, tmp), replaced, synced_dir] = disk_events
    assert kind == "fsync" and tmp.parent == tmp_path and tmp.name.startswith(".out.json.")
    assert replaced == ("replace", tmp, target)
    assert synced_dir == ("fsync", tmp_path)


def test_missing_parent_directories_are_created_and_made_durable(tmp_path, disk_events):
    target = tmp_path / "a" / "b" / "out.json"
    files.atomic_write_bytes(target, b"x")
    assert target.read_bytes() == b"x"
    synced = [e[1] for e in disk_events if e[0] == "fsync"]
    # Each new directory's entry in its parent, then the file, then its directory.
    assert synced[:2] == [tmp_path, tmp_path / "a"]
    assert synced[-1] == tmp_path / "a" / "b"


def test_a_failed_write_removes_the_temp_file_and_keeps_the_target(tmp_path, monkeypatch):
    target = tmp_path / "out.json"
    target.write_bytes(b"old")

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        files.atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []


def test_a_failed_rename_keeps_the_target_and_removes_the_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "out.json"
    target.write_bytes(b"old")

    def interrupted(src, dst) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(OSError, match="Input/output error"):
        files.atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []


def test_another_writers_temp_file_is_never_touched(tmp_path):
    # A fixed temp name (".out.json.tmp") would take over and rename this file away.
    target = tmp_path / "out.json"
    theirs = tmp_path / ".out.json.tmp"
    theirs.write_bytes(b"another writer's half-written bytes")
    files.atomic_write_bytes(target, b"ours")
    files.atomic_write_bytes(target, b"ours again")
    assert target.read_bytes() == b"ours again"
    assert theirs.read_bytes() == b"another writer's half-written bytes"
    assert _leftovers(tmp_path) == [".out.json.tmp"]


@pytest.mark.parametrize("umask", [0o022, 0o077], ids=["umask-022", "umask-077"])
def test_a_new_file_gets_opens_mode_and_a_replaced_one_keeps_its_own(tmp_path, umask):
    before = os.umask(umask)
    try:
        files.atomic_write_text(tmp_path / "new.txt", "x")
        with open(tmp_path / "opened.txt", "w") as fh:
            fh.write("x")
    finally:
        os.umask(before)
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE((tmp_path / "opened.txt").stat().st_mode) == 0o666 & ~umask
    private = tmp_path / "private.txt"
    private.write_text("old")
    private.chmod(0o600)
    files.atomic_write_text(private, "new")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600


def test_write_temp_leaves_the_target_alone_until_the_caller_renames(tmp_path, disk_events):
    target = tmp_path / "contract.yaml"
    target.write_bytes(b"old")
    tmp = files.write_temp(target, b"new")
    assert tmp.read_bytes() == b"new" and target.read_bytes() == b"old"
    assert disk_events == [("fsync", tmp)]


def test_replacing_publishes_what_the_caller_wrote(tmp_path, disk_events):
    target = tmp_path / "model.safetensors"
    with files.replacing(target) as tmp:
        assert tmp.parent == tmp_path and not target.exists()
        tmp.write_bytes(b"weights")
    assert target.read_bytes() == b"weights"
    assert disk_events == [("fsync", tmp), ("replace", tmp, target), ("fsync", tmp_path)]
    assert _leftovers(tmp_path) == []


def test_replacing_removes_the_temp_file_when_the_caller_fails(tmp_path):
    target = tmp_path / "model.safetensors"
    target.write_bytes(b"old weights")
    with pytest.raises(ValueError, match="refusing"), files.replacing(target) as tmp:
        tmp.write_bytes(b"half")
        raise ValueError("refusing to write")
    assert target.read_bytes() == b"old weights"
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 3 * 4096 + 123])
def test_sha256_file_equals_hashlib_across_chunk_boundaries(tmp_path, size):
    data = bytes((i * 7 + i // 4096) % 256 for i in range(size))
    path = tmp_path / "data.bin"
    path.write_bytes(data)
    assert files.sha256_file(path, chunk_bytes=4096) == hashlib.sha256(data).hexdigest()
    assert files.sha256_file(path) == hashlib.sha256(data).hexdigest()
    digest = hashlib.sha256(b"prefix")
    assert files.update_digest(digest, path, chunk_bytes=4096) == size
    assert digest.hexdigest() == hashlib.sha256(b"prefix" + data).hexdigest()


def test_sha256_file_raises_what_the_read_raises(tmp_path):
    with pytest.raises(IsADirectoryError):
        files.sha256_file(tmp_path)
    with pytest.raises(FileNotFoundError):
        files.sha256_file(tmp_path / "missing")


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise TimeoutError in the test, not hang it, should a read block (a FIFO's open)."""

    def expire(signum, frame) -> None:
        raise TimeoutError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    here = Path.cwd()
    os.chdir(path.parent)  # sun_path holds 108 bytes; a pytest tmp path may not fit
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(path.name)
    finally:
        os.chdir(here)


SPECIAL = {
    "fifo": (_fifo, "a FIFO (named pipe)"),
    "dev-zero": (lambda p: p.symlink_to("/dev/zero"), "a character device"),
    "socket": (_socket, "a socket"),
    "symlink-loop": (lambda p: p.symlink_to(p.name), "a symlink loop"),
    "dangling-symlink": (lambda p: p.symlink_to("gone"), "a dangling symlink (to gone)"),
}


@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_read_regular_names_what_a_special_path_is_and_reads_nothing(tmp_path, kind):
    make, words = SPECIAL[kind]
    path = tmp_path / "contract.yaml"
    make(path)
    with deadline(10), pytest.raises(files.NotRegularFileError) as err:
        files.read_regular(path, 1024)
    assert err.value.strerror == f"{words}, not a regular file"
    assert err.value.filename == str(path)
    with deadline(10), pytest.raises(files.NotRegularFileError):
        files.sha256_file(path)  # hashing an artifact follows the same rule


def test_read_regular_reads_at_most_its_limit_plus_one_byte(tmp_path, monkeypatch):
    path = tmp_path / "big.yaml"
    path.write_bytes(b"x" * (1 << 20))
    asked = []
    real_read = os.read

    def read(fd: int, n: int) -> bytes:
        asked.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", read)
    with pytest.raises(files.FileTooLargeError) as err:
        files.read_regular(path, 1000)
    assert sum(asked) == 1001
    assert (err.value.size, err.value.limit) == (1 << 20, 1000)
    assert files.read_regular(path, 1 << 20) == b"x" * (1 << 20)  # exactly the limit is fine


def test_read_regular_raises_what_open_raises_for_a_directory_or_nothing(tmp_path):
    with pytest.raises(IsADirectoryError):
        files.read_regular(tmp_path, 1024)
    with pytest.raises(FileNotFoundError):
        files.read_regular(tmp_path / "missing.yaml", 1024)
    (tmp_path / "link.yaml").symlink_to("real.yaml")
    (tmp_path / "real.yaml").write_bytes(b"a: 1\n")
    assert files.read_regular(tmp_path / "link.yaml", 1024) == b"a: 1\n"  # a symlink is followed


def test_write_new_never_replaces_an_existing_file(tmp_path):
    path = tmp_path / ".contract.yaml.abcd.tmp"
    path.write_bytes(b"someone else's")
    with pytest.raises(FileExistsError):
        files.write_new(path, b"ours", like=tmp_path / "contract.yaml")
    assert path.read_bytes() == b"someone else's"
    files.write_new(tmp_path / "fresh.tmp", b"ours", like=tmp_path / "contract.yaml")
    assert (tmp_path / "fresh.tmp").read_bytes() == b"ours"


# Canonical JSON: both forms are recorded in files that outlive a release (checkpoints'
# config_hash, pipeline stage keys, run ids; the digests of JSON artifacts in evidence), so
# their bytes are pinned here, non-ASCII included, as the code before files.canonical_bytes
# wrote them.
CANONICAL_INPUT = {"b": "é", "a": [1, 2.5, None], "c": {"z": True, "y": "x"}}


def test_canonical_json_escapes_non_ascii_by_default_as_the_trainer_recorded_it():
    assert (
        files.canonical_bytes(CANONICAL_INPUT)
        == b'{"a":[1,2.5,null],"b":"\\u00e9","c":{"y":"x","z":true}}'
    )
    assert files.canonical_sha256(CANONICAL_INPUT) == (
        "956a7a699ee572225ed9d9ea5c59eca2157a36e6be9667ba6d59814662d1dbfc"
    )


def test_canonical_json_of_artifacts_keeps_non_ascii_as_gates_recipes_recorded_it():
    expected = '{"a":[1,2.5,null],"b":"é","c":{"y":"x","z":true}}'.encode()
    assert files.canonical_bytes(CANONICAL_INPUT, ascii_only=False) == expected
    assert files.canonical_sha256(CANONICAL_INPUT, ascii_only=False) == (
        "c630d82314f4eb8324cdf26fa42d3db665dd4ef23420d1a6961ecdf250968590"
    )


def test_canonical_json_is_one_value_one_form_and_refuses_what_json_cannot_hold():
    reordered = {"c": {"y": "x", "z": True}, "a": [1, 2.5, None], "b": "é"}
    assert files.canonical_bytes(reordered) == files.canonical_bytes(CANONICAL_INPUT)
    assert files.canonical_bytes({"a": [1, 2]}) != files.canonical_bytes({"a": [2, 1]})
    with pytest.raises(TypeError):
        files.canonical_bytes({"when": object()})
    assert files.canonical_bytes({"p": Path("x")}, default=str) == b'{"p":"x"}'
