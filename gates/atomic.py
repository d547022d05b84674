"""Crash-safe multi-file updates: a commit journal, its recovery, and a lock.

A promotion changes two files (the evidence JSON and the contract YAML); a demotion changes
one and deletes the other. :func:`commit` does it in five steps, the journal at the project
root (``.gates-journal.json``) saying how far it got:

1. the journal, state ``prepared``: each target, the temp file that will replace it (its name
   fixed now, so recovery knows it), and the directories the commit will create;
2. those directories, then each temp file (created exclusively, written, fsynced), and their
   directories fsynced;
3. the journal again, state ``committed`` — the commit point;
4. each rename over its target (or its unlink), each directory fsynced;
5. the journal removed.

Each journal write is atomic (gates/files.py ``atomic_write_bytes``). A process killed at
any point leaves either no journal (the old files, and perhaps the journal's own temp file),
a prepared journal (the old files plus some temp files), or a committed one.
:func:`recover`, which every `gates` command runs before it reads a contract
(gates/cli/gates.py), rolls a prepared journal back — removes its temp files, the
directories it made and the journal: the old state — and a committed one forward: steps 4
and 5 again, each idempotent: the new state. Paths in the journal are relative to the
project root (absolute only for a target outside it), so any working directory recovers it.

Tests: tests/acceptance/test_gates_crash.py kills a promotion, a re-promotion and a demotion
at every disk-changing call of their commit in turn and recovers each.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gates import files

JOURNAL_NAME = ".gates-journal.json"
PREPARED, COMMITTED = "prepared", "committed"
#: A journal names a handful of paths; anything larger is not one of ours.
MAX_JOURNAL_BYTES = 1024 * 1024


class JournalError(Exception):
    """The journal cannot be read or is not one gates wrote; the message says which file."""


@dataclass(frozen=True)
class Recovery:
    """What :func:`recover` did: rolled a commit forward or back, or nothing."""

    #: "rolled forward", "rolled back", or "" when there was nothing to recover.
    action: str = ""
    #: The files the interrupted commit was changing, relative to the project root.
    targets: tuple[str, ...] = ()
    #: Temp files and directories it had made that were removed.
    removed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.action)

    def describe(self) -> str:
        """One line for the user: what was interrupted and where it stands now."""
        if not self:
            return "nothing to recover"
        changed = ", ".join(self.targets) or "no file"
        if self.action == "rolled forward":
            return (
                f"recovered an interrupted commit: rolled forward, {changed} now hold what it wrote"
            )
        gone = f"; removed {', '.join(self.removed)}" if self.removed else ""
        if not self.targets:
            return f"recovered an interrupted commit: rolled back before it began{gone}"
        return (
            f"recovered an interrupted commit: rolled back before it changed anything, "
            f"{changed} unchanged{gone}"
        )


def _relative(root: Path, path: Path) -> str:
    """``path`` as the journal stores it: relative to the root, absolute outside it."""
    absolute = Path(os.path.abspath(path))
    try:
        return absolute.relative_to(os.path.abspath(root)).as_posix()
    except ValueError:
        return str(absolute)


def _absolute(root: Path, stored: str) -> Path:
    return Path(os.path.abspath(root)) / stored  # an absolute `stored` wins the join


def _missing_dirs(directories: list[Path]) -> list[Path]:
    """Directories that do not exist yet, each after its parent."""
    missing: list[Path] = []
    for directory in directories:
        chain, up = [], directory
        while not up.is_dir():
            chain.append(up)
            up = up.parent
        missing += [d for d in reversed(chain) if d not in missing]
    return missing


def commit(root: Path, writes: dict[Path, bytes | None]) -> None:
    """Replace several files as one step; ``None`` deletes a file. Call with the lock held.

    A failure before the commit point (step 3) rolls back at once and re-raises: nothing
    changed. A failure after it leaves the committed journal for the next :func:`recover`.
    """
    token = secrets.token_hex(4)
    moves = [
        {
            "target": _relative(root, target),
            "tmp": None
            if data is None
            else _relative(root, target.with_name(f".{target.name}.{token}{files.TEMP_SUFFIX}")),
        }
        for target, data in writes.items()
    ]
    created = _missing_dirs([t.parent for t, data in writes.items() if data is not None])
    record = {"state": PREPARED, "dirs": [_relative(root, d) for d in created], "moves": moves}
    journal = root / JOURNAL_NAME
    files.atomic_write_bytes(journal, json.dumps(record, indent=1).encode())  # 1
    try:
        for directory in created:  # 2
            directory.mkdir()
            files.fsync_dir(directory.parent)
        for move, (target, data) in zip(moves, writes.items(), strict=True):
            if data is not None:
                files.write_new(_absolute(root, move["tmp"]), data, like=target)
        for directory in sorted({Path(t).parent for t, d in writes.items() if d is not None}):
            files.fsync_dir(directory)
        record["state"] = COMMITTED
        files.atomic_write_bytes(journal, json.dumps(record, indent=1).encode())  # 3
    except BaseException:
        # A journal left behind (say, the disk failed again) is rolled back by the next
        # command; the first error is the one to report.
        with contextlib.suppress(OSError, JournalError):
            _roll_back(root, _read(journal))
        raise
    _roll_forward(root, record)  # 4, 5


def _read(journal: Path) -> dict:
    try:
        record = json.loads(files.read_regular(journal, MAX_JOURNAL_BYTES).decode("utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8, not JSON
        raise JournalError(f"{journal}: cannot be read as a gates journal: {exc}") from None
    moves = record.get("moves") if isinstance(record, dict) else None
    shaped = (
        record.get("state") in (PREPARED, COMMITTED)
        and isinstance(record.get("dirs"), list)
        and all(isinstance(d, str) for d in record["dirs"])
        and isinstance(moves, list)
        and all(
            isinstance(m, dict)
            and isinstance(m.get("target"), str)
            and (m.get("tmp") is None or isinstance(m.get("tmp"), str))
            for m in moves
        )
        if isinstance(record, dict)
        else False
    )
    if not shaped:
        raise JournalError(
            f"{journal}: not a journal this version of gates writes; finish or undo the "
            "commit it describes by hand, then remove it"
        )
    return record


def _roll_forward(root: Path, record: dict) -> None:
    for move in record["moves"]:
        target = _absolute(root, move["target"])
        if move["tmp"] is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(target)
        else:
            tmp = _absolute(root, move["tmp"])
            if not os.path.lexists(tmp):
                continue  # renamed before the crash
            os.replace(tmp, target)
        files.fsync_dir(target.parent)
    os.unlink(root / JOURNAL_NAME)
    files.fsync_dir(root)


def _roll_back(root: Path, record: dict) -> list[str]:
    """Remove what a prepared commit made, the journal last (so a crash in here leaves it
    to be rolled back again); return what was removed, relative to the root."""
    removed = []
    for move in record["moves"]:
        if move["tmp"] is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(_absolute(root, move["tmp"]))
                removed.append(move["tmp"])
    for stored in reversed(record["dirs"]):
        with contextlib.suppress(OSError):  # missing, or holding what someone else put there
            os.rmdir(_absolute(root, stored))
            removed.append(stored + "/")
    os.unlink(root / JOURNAL_NAME)
    files.fsync_dir(root)
    return removed


def pending(root: Path) -> bool:
    """Whether a crash left something for :func:`recover` under ``root``."""
    return os.path.lexists(root / JOURNAL_NAME) or any(_journal_temps(root))


def _journal_temps(root: Path) -> Iterator[Path]:
    """Temp files of a journal write (atomic_write_bytes) a crash interrupted."""
    return root.glob(f".{JOURNAL_NAME}.*{files.TEMP_SUFFIX}")


def recover(root: Path) -> Recovery:
    """Finish or undo a commit a crash interrupted (see the module docstring). Call with the
    lock held. Raises :class:`JournalError` for a journal it cannot trust."""
    removed = []
    for stale in _journal_temps(root):
        stale.unlink(missing_ok=True)
        removed.append(stale.name)
    journal = root / JOURNAL_NAME
    if not os.path.lexists(journal):
        return Recovery("rolled back" if removed else "", (), tuple(removed))
    record = _read(journal)
    targets = tuple(m["target"] for m in record["moves"])
    if record["state"] == COMMITTED:
        _roll_forward(root, record)
        return Recovery("rolled forward", targets, tuple(removed))
    return Recovery("rolled back", targets, tuple(removed + _roll_back(root, record)))


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
