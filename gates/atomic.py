"""Crash-safe multi-file updates: a commit journal, and a lock.

A promotion changes two files (the evidence JSON and the contract YAML). Each is written
to a temp file and fsynced (gates/files.py ``write_temp``); a journal naming both renames is
written (atomically, ``atomic_write_bytes``) before either rename happens, and removed after
both. A process killed at any point leaves either the old pair, or a journal that
:func:`recover` rolls forward to the new pair. One file alone: gates/files.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

from gates import files

JOURNAL_NAME = ".gates-journal.json"


def commit(root: Path, writes: dict[Path, bytes | None]) -> None:
    """Replace several files as one step; ``None`` deletes a file.

    All data is on disk (temp files, fsynced) before the journal exists, so rolling the
    journal forward after a crash never needs anything that might have been lost.
    """
    moves: list[tuple[str, str | None, str]] = []
    try:
        for target, data in writes.items():
            tmp = files.write_temp(target, data) if data is not None else None
            moves.append((str(target), str(tmp) if tmp else None, "write" if tmp else "delete"))
    except BaseException:
        for _, tmp, _ in moves:
            if tmp:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
        raise
    journal = root / JOURNAL_NAME
    files.atomic_write_bytes(journal, json.dumps({"moves": moves}).encode())
    _roll_forward(journal)


def _roll_forward(journal: Path) -> None:
    moves = json.loads(journal.read_text())["moves"]
    for target, tmp, action in moves:
        if action == "write" and tmp and Path(tmp).exists():
            os.replace(tmp, target)
            files.fsync_dir(Path(target).parent)
        elif action == "delete":
            with contextlib.suppress(FileNotFoundError):
                os.unlink(target)
            files.fsync_dir(Path(target).parent)
    os.unlink(journal)
    files.fsync_dir(journal.parent)


def recover(root: Path, swept: tuple[str, ...] = ("contracts", "evidence")) -> bool:
    """Finish a commit a crash interrupted, then remove temp files a crash left behind
    (a kill before the journal existed). Call with the lock held. True if a commit was
    rolled forward."""
    journal = root / JOURNAL_NAME
    rolled = journal.exists()
    if rolled:
        _roll_forward(journal)
    for stale in root.glob(f".{JOURNAL_NAME}.*{files.TEMP_SUFFIX}"):
        stale.unlink(missing_ok=True)
    for name in swept:
        if (root / name).is_dir():
            for stale in (root / name).rglob(f".*{files.TEMP_SUFFIX}"):
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
