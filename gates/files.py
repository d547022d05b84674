"""Durable file writes and file hashes: the one implementation pv, gates and the trainer use.

    from gates.files import atomic_write_bytes, atomic_write_text, sha256_file

    atomic_write_text(path, text)          # path holds its old bytes or the new ones, never a part
    with replacing(path) as tmp:           # for writers that need a file name (safetensors)
        save_file(tensors, tmp)
    sha256_file(path)                      # hex digest, read in CHUNK_BYTES pieces

An atomic write survives a crash and a power loss: the bytes go to a temp file with a unique
name (``tempfile.mkstemp``: ``.NAME.XXXXXXXX.tmp``) in the target's own directory, so the
rename cannot cross filesystems; the file is fsynced, given the target's permissions (a new
file: what ``open`` gives, 0o666 less the umask, not mkstemp's 0o600), renamed over the
target with ``os.replace``, and the directory is fsynced, so the new name survives too. Any
failure before the rename removes the temp file and leaves the target untouched. Missing
parent directories are created, each new entry fsynced in its own parent. The multi-file
commit journal (gates/atomic.py) is built on :func:`write_temp` and :func:`fsync_dir`.

Tests: .venv/bin/pytest tests/unit/gates/test_files.py
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

#: Read size of :func:`sha256_file`: 16 MiB keeps the 1.5 GB files of a 370M checkpoint at
#: disk speed (tools/bench_checkpoint.py) and the memory it holds small.
CHUNK_BYTES = 16 * 1024 * 1024
#: Permissions ``open`` asks for when it creates a file; the process umask is taken off.
CREATE_MODE = 0o666
TEMP_SUFFIX = ".tmp"


def fsync_file(path: Path) -> None:
    """Flush ``path``'s data to disk (its bytes, written through any descriptor)."""
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (new names, renames, removals) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_dirs(directory: Path) -> None:
    """``mkdir -p``, each directory it creates made durable in its parent."""
    missing = []
    while not directory.is_dir():
        missing.append(directory)
        directory = directory.parent
    for new in reversed(missing):
        new.mkdir(exist_ok=True)
        fsync_dir(new.parent)


def _new_temp(target: Path) -> Path:
    """An empty temp file with a unique name beside ``target`` (same filesystem)."""
    _make_dirs(target.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TEMP_SUFFIX, dir=target.parent)
    os.close(fd)
    return Path(tmp)


def _umask() -> int:
    """The process umask, read without changing it (Linux: /proc; elsewhere set and reset,
    which another thread creating a file at that instant could see)."""
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _seal(tmp: Path, target: Path) -> None:
    """Give ``tmp`` ``target``'s permissions (or a new file's under the umask), then fsync
    it: one fsync makes both the bytes and the mode durable."""
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = CREATE_MODE & ~_umask()
    os.chmod(tmp, mode)
    fsync_file(tmp)


def _discard(tmp: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)


def write_temp(target: Path, data: bytes) -> Path:
    """Write ``data`` to a new fsynced temp file beside ``target`` and return its path: the
    first half of an atomic write, for callers that rename later (gates/atomic.py's journal).
    A failure removes the temp file."""
    target = Path(target)
    tmp = _new_temp(target)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        _seal(tmp, target)
    except BaseException:
        _discard(tmp)
        raise
    return tmp


def _publish(tmp: Path, target: Path) -> None:
    """Rename the sealed ``tmp`` over ``target`` and make the rename durable."""
    try:
        os.replace(tmp, target)
    except BaseException:
        _discard(tmp)
        raise
    fsync_dir(target.parent)


@contextlib.contextmanager
def replacing(target: Path) -> Iterator[Path]:
    """Yield a temp file's path beside ``target`` for the caller to write; on a clean exit
    it replaces ``target`` as :func:`atomic_write_bytes` does, on an exception it is removed
    and ``target`` keeps its old bytes."""
    target = Path(target)
    tmp = _new_temp(target)
    try:
        yield tmp
        _seal(tmp, target)
    except BaseException:
        _discard(tmp)
        raise
    _publish(tmp, target)


def atomic_write_bytes(target: Path, data: bytes) -> None:
    """Replace ``target`` with ``data``: readers, and the disk after a crash, see the old
    bytes or the new ones, never a part; no temp file outlives a failure."""
    target = Path(target)
    _publish(write_temp(target, data), target)


def atomic_write_text(target: Path, text: str, encoding: str = "utf-8") -> None:
    """:func:`atomic_write_bytes` of ``text`` encoded (no newline translation)."""
    atomic_write_bytes(target, text.encode(encoding))


def update_digest(digest: hashlib._Hash, path: Path, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Feed ``path``'s bytes to ``digest`` in ``chunk_bytes`` pieces; return how many."""
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(chunk_bytes):
            digest.update(chunk)
            size += len(chunk)
    return size


def sha256_file(path: Path, chunk_bytes: int = CHUNK_BYTES) -> str:
    """Hex sha256 of a file's bytes, streamed (never the whole file in memory)."""
    digest = hashlib.sha256()
    update_digest(digest, path, chunk_bytes)
    return digest.hexdigest()
