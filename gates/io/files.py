"""Durable file writes and file hashes: the one implementation pv, gates and the trainer use.

    from gates.io.files import atomic_write_bytes, atomic_write_text, sha256_file

    atomic_write_text(path, text)          # path holds its old bytes or the new ones, never a part
    with replacing(path) as tmp:           # for writers that need a file name (safetensors)
        save_file(tensors, tmp)
    sha256_file(path)                      # hex digest, read in CHUNK_BYTES pieces
    read_regular(path, limit)              # a user's file: regular files only, bounded

An atomic write survives a crash and a power loss: the bytes go to a temp file with a unique
name (``tempfile.mkstemp``: ``.NAME.XXXXXXXX.tmp``) in the target's own directory, so the
rename cannot cross filesystems; the file is fsynced, given the target's permissions (a new
file: what ``open`` gives, 0o666 less the umask, not mkstemp's 0o600), renamed over the
target with ``os.replace``, and the directory is fsynced, so the new name survives too. Any
failure before the rename removes the temp file and leaves the target untouched. Missing
parent directories are created, each new entry fsynced in its own parent. The multi-file
commit journal (gates/io/atomic.py) is built on :func:`write_new` and :func:`fsync_dir`.

A read of a user's file (a contract, evidence, a pyproject, a module of mutants) goes through
:func:`open_regular`: only a regular file is opened (a FIFO would block the open, and a read
of /dev/zero never ends), the opened descriptor is checked again (the path may have changed
in between), and :func:`read_regular` reads at most its limit plus one byte, never trusting
``st_size``, which is 0 for devices and pipes. Anything else raises
:class:`NotRegularFileError` naming what the path is: a FIFO, a device, a socket, a symlink
loop or a dangling symlink (a directory: ``IsADirectoryError``, as ``open`` says).

A child process of gates that cannot write a file its parent reads (the seam check's report,
the test run's failures) prints :func:`child_write_failure` on stderr and fails; the parent
calls :func:`raise_child_write_failure` first, which raises the child's OSError, naming the
file, instead of reading a file that is cut short or missing (issue 31: a truncated report
parsed anyway was "internal error: JSONDecodeError" on a full disk).

Tests: .venv/bin/pytest tests/unit/gates/test_files.py
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: Read size of :func:`sha256_file`: 16 MiB keeps the 1.5 GB files of a 370M checkpoint at
#: disk speed (tools/bench_checkpoint.py) and the memory it holds small.
CHUNK_BYTES = 16 * 1024 * 1024
#: Permissions ``open`` asks for when it creates a file; the process umask is taken off.
CREATE_MODE = 0o666
TEMP_SUFFIX = ".tmp"


class NotRegularFileError(OSError):
    """The path names a FIFO, a device, a socket, a symlink loop or a dangling symlink:
    nothing to read as a file. ``strerror`` says which; ``filename`` is the path."""

    def __init__(self, path: Path | str, kind: str, code: int = errno.EINVAL) -> None:
        super().__init__(code, f"{kind}, not a regular file", str(path))
        self.kind = kind


class FileTooLargeError(OSError):
    """A regular file holds more bytes than its reader's limit (``size`` is at least limit+1)."""

    def __init__(self, path: Path | str, size: int, limit: int) -> None:
        super().__init__(errno.EFBIG, f"{size} bytes exceeds the {limit}-byte limit", str(path))
        self.size, self.limit = size, limit


#: What a non-regular st_mode is, in words a user knows.
_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _require_regular(path: Path | str, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
    kind = next((words for test, words in _KINDS if test(mode)), "a special file")
    raise NotRegularFileError(path, kind)


def _unreachable(path: Path | str, exc: OSError) -> OSError:
    """What an ELOOP or ENOENT from ``path`` means: a symlink loop, a dangling symlink, or
    (nothing there at all) the error itself."""
    if exc.errno == errno.ELOOP:
        return NotRegularFileError(path, "a symlink loop", errno.ELOOP)
    if exc.errno == errno.ENOENT and os.path.islink(path):
        return NotRegularFileError(
            path, f"a dangling symlink (to {os.readlink(path)})", errno.ENOENT
        )
    return exc


def open_regular(path: Path | str) -> int:
    """A read-only descriptor of the regular file at ``path`` (symlinks followed); anything
    else raises :class:`NotRegularFileError` (or ``IsADirectoryError``) before a byte is read.

    The stat comes first so a device is never opened (opening some has effects); O_NONBLOCK
    keeps the open from blocking should a FIFO take the path's place after the stat; the
    fstat checks the file that was opened. The caller closes the descriptor.
    """
    try:
        _require_regular(path, os.stat(path).st_mode)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except (NotRegularFileError, IsADirectoryError):
        raise
    except OSError as exc:
        raise _unreachable(path, exc) from None
    try:
        _require_regular(path, os.fstat(fd).st_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path | str, limit: int) -> bytes:
    """The bytes of the regular file at ``path`` (see :func:`open_regular`); more than
    ``limit`` of them raises :class:`FileTooLargeError`. At most limit+1 bytes are read."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        chunks, got = [], 0
        while got <= limit:
            chunk = os.read(fd, min(CHUNK_BYTES, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    finally:
        os.close(fd)
    if got > limit:
        raise FileTooLargeError(path, max(size, got), limit)
    return b"".join(chunks)


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


def _new_temp(target: Path) -> tuple[int, Path]:
    """An empty temp file with a unique name beside ``target`` (same filesystem): its
    descriptor, open for writing, and its path."""
    _make_dirs(target.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TEMP_SUFFIX, dir=target.parent)
    return fd, Path(tmp)


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


def _mode_for(target: Path) -> int:
    """The permissions a replacement of ``target`` gets: its own, or a new file's."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        return CREATE_MODE & ~_umask()


def _seal(tmp: Path, target: Path) -> None:
    """Give ``tmp`` ``target``'s permissions (or a new file's under the umask), then fsync
    it: one fsync makes both the bytes and the mode durable."""
    os.chmod(tmp, _mode_for(target))
    fsync_file(tmp)


def _fill(fd: int, data: bytes, target: Path) -> None:
    """Write all of ``data`` to ``fd``, give it ``target``'s permissions, fsync it. Plain
    os calls, so a test that counts a write's disk operations sees every one."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, _mode_for(target))
        os.fsync(fd)
    except OSError as exc:  # a descriptor's error names no file: name the one being written
        raise OSError(exc.errno, exc.strerror, str(target)) from None


def _discard(tmp: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)


def write_temp(target: Path, data: bytes) -> Path:
    """Write ``data`` to a new fsynced temp file beside ``target`` and return its path: the
    first half of an atomic write, for callers that rename later.
    A failure removes the temp file."""
    target = Path(target)
    fd, tmp = _new_temp(target)
    try:
        try:
            _fill(fd, data, target)
        finally:
            os.close(fd)
    except BaseException:
        _discard(tmp)
        raise
    return tmp


def write_new(path: Path, data: bytes, like: Path) -> None:
    """Create ``path``, which must not exist (O_EXCL), holding ``data`` with ``like``'s
    permissions (or a new file's), fsynced: a temp file whose name the caller chose and
    recorded first (gates/io/atomic.py's journal). Its directory must exist, and is not
    fsynced here. A failure after the create removes the file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        try:
            _fill(fd, data, Path(like))
        finally:
            os.close(fd)
    except BaseException:
        _discard(Path(path))
        raise


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
    fd, tmp = _new_temp(target)
    os.close(fd)
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
    """Feed ``path``'s bytes to ``digest`` in ``chunk_bytes`` pieces; return how many.
    Only a regular file is read (:func:`open_regular`): a FIFO or a device would never end."""
    size = 0
    with os.fdopen(open_regular(path), "rb") as fh:
        while chunk := fh.read(chunk_bytes):
            digest.update(chunk)
            size += len(chunk)
    return size


#: The line of :func:`child_write_failure`; its errno and file come back as an OSError.
_CHILD_WRITE_FAILED = re.compile(
    r"^shipgate: cannot write (?P<path>.*): \[Errno (?P<errno>\d+)\] .*$", re.MULTILINE
)


def child_write_failure(exc: OSError) -> str:
    """The line a child process prints (stderr) when it cannot write ``exc.filename``."""
    return f"shipgate: cannot write {exc.filename}: [Errno {exc.errno or errno.EIO}] {exc.strerror}"


def raise_child_write_failure(output: str, what: str) -> None:
    """If a child's ``output`` holds a :func:`child_write_failure` line, raise its OSError:
    the same errno and file, ``what`` the file is for in the message."""
    found = list(_CHILD_WRITE_FAILED.finditer(output))
    if found:
        code = int(found[-1]["errno"])
        raise OSError(code, f"{os.strerror(code)} ({what})", found[-1]["path"])


def canonical_bytes(
    obj: Any, *, ascii_only: bool = True, default: Callable[[Any], Any] | None = None
) -> bytes:
    """``obj`` as canonical JSON: sorted keys, no spaces, UTF-8; equal values, equal bytes.
    ``ascii_only`` (json's own default) writes non-ASCII characters as ``\\u`` escapes: the
    trainer's config hashes, stage keys and run ids were recorded so. gates.provenance.recipes'
    digests of JSON artifacts keep them as themselves (``ascii_only=False``). Both are recorded in
    files that outlive a release: neither form may change."""
    text = json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=ascii_only, default=default
    )
    return text.encode("utf-8")


def canonical_sha256(
    obj: Any, *, ascii_only: bool = True, default: Callable[[Any], Any] | None = None
) -> str:
    """The sha256 of :func:`canonical_bytes` (hex)."""
    return hashlib.sha256(canonical_bytes(obj, ascii_only=ascii_only, default=default)).hexdigest()


def sha256_file(path: Path, chunk_bytes: int = CHUNK_BYTES) -> str:
    """Hex sha256 of a file's bytes, streamed (never the whole file in memory)."""
    digest = hashlib.sha256()
    update_digest(digest, path, chunk_bytes)
    return digest.hexdigest()
