"""Crash-safe file updates: atomic writes, a multi-file commit journal, and a lock.

A promotion changes two files (the evidence JSON and the contract YAML). Each is written
to a temp file and fsynced; a journal naming both renames is written (atomically) before
either rename happens, and removed after both. A process killed at any point leaves
either the old pair, or a journal that :func:`recover` rolls forward to the new pair.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

JOURNAL_NAME = ".gates-journal.json"


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_temp(target: Path, data: bytes) -> Path:
    """Write ``data`` to a fsynced temp file beside ``target`` (same filesystem)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o777)
        else:
            os.chmod(tmp, 0o644)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return Path(tmp)


def atomic_write(target: Path, data: bytes) -> None:
    """``target`` holds its old bytes or ``data``, never a part; no temp file outlives a failure."""
    tmp = write_temp(target, data)
    try:
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(target.parent)


def commit(root: Path, writes: dict[Path, bytes | None]) -> None:
    """Replace several files as one step; ``None`` deletes a file.

    All data is on disk (temp files, fsynced) before the journal exists, so rolling the
    journal forward after a crash never needs anything that might have been lost.
    """
    moves: list[tuple[str, str | None, str]] = []
    try:
        for target, data in writes.items():
            tmp = write_temp(target, data) if data is not None else None
            moves.append((str(target), str(tmp) if tmp else None, "write" if tmp else "delete"))
    except BaseException:
        for _, tmp, _ in moves:
            if tmp:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
        raise
    journal = root / JOURNAL_NAME
    atomic_write(journal, json.dumps({"moves": moves}).encode())
    _roll_forward(journal)


def _roll_forward(journal: Path) -> None:
    moves = json.loads(journal.read_text())["moves"]
    for target, tmp, action in moves:
        if action == "write" and tmp and Path(tmp).exists():
            os.replace(tmp, target)
            _fsync_dir(Path(target).parent)
        elif action == "delete":
            with contextlib.suppress(FileNotFoundError):
                os.unlink(target)
    os.unlink(journal)
    _fsync_dir(journal.parent)


def recover(root: Path, swept: tuple[str, ...] = ("contracts", "evidence")) -> bool:
    """Finish a commit a crash interrupted, then remove temp files a crash left behind
    (a kill before the journal existed). Call with the lock held. True if a commit was
    rolled forward."""
    journal = root / JOURNAL_NAME
    rolled = journal.exists()
    if rolled:
        _roll_forward(journal)
    for stale in root.glob(f".{JOURNAL_NAME}.*.tmp"):
        stale.unlink(missing_ok=True)
    for name in swept:
        if (root / name).is_dir():
            for stale in (root / name).rglob(".*.tmp"):
                stale.unlink(missing_ok=True)
    return rolled


@contextlib.contextmanager
def locked(lock_path: Path, timeout_s: float = 120.0) -> Iterator[None]:
    """Exclusive advisory lock (flock): released by the kernel even if we are killed."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{lock_path} is held by another gates command") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock
