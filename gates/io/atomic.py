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

Each journal write is atomic (gates/io/files.py ``atomic_write_bytes``). A process killed at
any point leaves either no journal (the old files, and perhaps the journal's own temp file),
a prepared journal (the old files plus some temp files), or a committed one.
:func:`recover`, which every `gates` command runs before it reads a contract
(gates/cli/gates.py), rolls a prepared journal back — removes its temp files, the
directories it made and the journal: the old state — and a committed one forward: steps 4
and 5 again, each idempotent: the new state. Paths in the journal are relative to the
project root, so any working directory recovers it.

Nothing outside the project. A journal is a file in the checkout, so one committed or dropped
there must not make the next command move or remove someone else's files. :func:`commit`
refuses a target outside the root (:class:`OutsideProjectError`, before anything is
written), and every journal is checked before recovery acts on it (:func:`_journal_problem`):
each path is root-relative POSIX with no empty, ``.``, ``..`` or ``.git`` component, no
backslash or NUL, and its parent, symlinks resolved, inside the resolved root; each temp
file is exactly the name commit gives its target (``.<name>.<8 hex><TEMP_SUFFIX>`` beside
it, one token per commit), so a rollback removes only what commit would have created; each
directory is one above a written target. A journal that fails is a :class:`JournalError`
naming it and the path, and nothing is moved or removed, the journal included.

Tests: tests/acceptance/test_gates_crash.py kills a promotion, a re-promotion and a demotion
at every disk-changing call of their commit in turn and recovers each;
tests/unit/gates/test_atomic.py refuses journals that name paths outside the project.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gates.io import files, jsonfile

JOURNAL_NAME = ".gates-journal.json"
PREPARED, COMMITTED = "prepared", "committed"
#: A journal names a handful of paths; anything larger is not one of ours.
MAX_JOURNAL_BYTES = 1024 * 1024


class JournalError(Exception):
    """The journal cannot be read or is not one gates wrote; the message says which file."""


class OutsideProjectError(Exception):
    """:func:`commit` was asked to write a path that is not a plain path inside the project
    root (outside it, through a symlink leading out, or in .git); nothing was written."""


#: The temp file commit gives ``name``: ``.<name>.<token><TEMP_SUFFIX>``, token 8 hex digits.
_TEMP_NAME = re.compile(r"\.(?P<name>.+)\.(?P<token>[0-9a-f]{8})" + re.escape(files.TEMP_SUFFIX))


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


def _inside(path: str, base: str) -> bool:
    return os.path.commonpath([path, base]) == base


def _relative(root: Path, path: Path) -> str:
    """``path`` as the journal stores it: relative to the root, POSIX. A path outside the
    root (also when only the real paths show it inside: a root given through a symlink) and
    any path :func:`_path_problem` refuses raise :class:`OutsideProjectError`."""
    absolute, base = os.path.abspath(path), os.path.abspath(root)
    if not _inside(absolute, base):
        # The root or the path may be named through a symlink: compare the real parents.
        parent, real_root = os.path.realpath(os.path.dirname(absolute)), os.path.realpath(root)
        if not _inside(parent, real_root):
            raise OutsideProjectError(
                f"{path} lies outside the project root {root}: gates writes only inside the "
                "project; give a contract under the root (or the root that holds it: --root)"
            )
        absolute, base = os.path.join(parent, os.path.basename(absolute)), real_root
    stored = Path(os.path.relpath(absolute, base)).as_posix()
    problem = _path_problem(root, stored)
    if problem:
        raise OutsideProjectError(f"{path}: {problem}: gates writes only plain project files")
    return stored


def _path_problem(root: Path, stored: str) -> str | None:
    """Why ``stored`` is not a path a journal may name under ``root``, or None: it must be a
    relative POSIX path, no empty, ``.``, ``..`` or ``.git`` component, no backslash or NUL,
    whose parent directory, symlinks resolved, lies inside the resolved root. Its own last
    component is not followed: a rename or unlink acts on the link, not where it points."""
    if "\0" in stored:
        return "a path with a NUL byte"
    if "\\" in stored:
        return "a path with a backslash (journal paths are '/'-separated)"
    if stored.startswith("/"):
        return "an absolute path"
    parts = stored.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "a path with an empty, '.' or '..' component"
    if ".git" in parts:
        return "a path inside .git"
    real_root = os.path.realpath(root)
    parent = os.path.realpath(os.path.join(real_root, *parts[:-1]))
    if not _inside(parent, real_root):
        return f"a path through a symlink leading out of the project (to {parent})"
    return None


def require_inside(root: Path, *paths: Path) -> None:
    """Raise :class:`OutsideProjectError` unless each of ``paths`` is one :func:`commit` may
    write under ``root``: for callers that refuse before doing long work."""
    for path in paths:
        _relative(root, path)


def _absolute(root: Path, stored: str) -> Path:
    return Path(os.path.abspath(root)) / stored  # `stored` is relative: _path_problem


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

    A target outside the project raises :class:`OutsideProjectError` before anything is
    written. A failure before the commit point (step 3) rolls back at once and re-raises:
    nothing changed. A failure after it leaves the committed journal for the next
    :func:`recover`.
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
    problem = _journal_problem(root, record)
    if problem:  # what recover would refuse, commit must never write
        raise OutsideProjectError(f"{root / JOURNAL_NAME} would name {problem}")
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
            _roll_back(root, _read(root, journal))
        raise
    _roll_forward(root, record)  # 4, 5


def _read(root: Path, journal: Path) -> dict:
    """The journal's record, checked (shape, then every path: :func:`_journal_problem`), or
    :class:`JournalError` naming the journal."""
    try:
        record = jsonfile.read_json(journal, MAX_JOURNAL_BYTES)
    except jsonfile.JsonFileError as exc:  # a FIFO, too large, not UTF-8, not JSON, too deep
        raise JournalError(f"{exc} (so it cannot be read as a gates journal)") from None
    except OSError as exc:  # gone since pending() saw it
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
    problem = _journal_problem(root, record)
    if problem:
        raise JournalError(
            f"{journal}: names {problem}; nothing was moved or removed. gates never writes "
            "such a journal: find out where it came from, then remove it by hand"
        )
    return record


def _journal_problem(root: Path, record: dict) -> str | None:
    """What in a well-shaped journal record gates would never have written, or None. A
    rollback removes each ``tmp`` and ``dirs`` entry, a roll-forward renames each ``tmp``
    over its ``target`` or unlinks the target: each must be a file or directory commit
    itself makes, inside the project."""
    written: list[str] = []
    tokens: set[str] = set()
    for move in record["moves"]:
        target, tmp = move["target"], move["tmp"]
        problem = _path_problem(root, target)
        if problem:
            return f"target {target!r}: {problem}"
        if tmp is None:
            continue
        problem = _path_problem(root, tmp)
        if problem:
            return f"temp file {tmp!r}: {problem}"
        folder, _, name = target.rpartition("/")
        tmp_folder, _, tmp_name = tmp.rpartition("/")
        match = _TEMP_NAME.fullmatch(tmp_name)
        if tmp_folder != folder or match is None or match["name"] != name:
            return (
                f"temp file {tmp!r}, not the temp name commit gives {target!r} "
                f"(.{name}.<8 hex digits>{files.TEMP_SUFFIX} beside it)"
            )
        tokens.add(match["token"])
        written.append(target)
    if len(tokens) > 1:
        return f"temp files of {len(tokens)} commits ({', '.join(sorted(tokens))}), not one"
    above = {"/".join(t.split("/")[:n]) for t in written for n in range(1, t.count("/") + 1)}
    for directory in record["dirs"]:
        problem = _path_problem(root, directory)
        if problem:
            return f"directory {directory!r}: {problem}"
        if directory not in above:
            return f"directory {directory!r}, which holds no file the commit writes"
    return None


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
    lock held. Raises :class:`JournalError` for a journal it cannot trust, before anything
    is removed (the journal's own temp files included)."""
    journal = root / JOURNAL_NAME
    record = _read(root, journal) if os.path.lexists(journal) else None
    removed = []
    for stale in _journal_temps(root):
        stale.unlink(missing_ok=True)
        removed.append(stale.name)
    if record is None:
        return Recovery("rolled back" if removed else "", (), tuple(removed))
    targets = tuple(m["target"] for m in record["moves"])
    if record["state"] == COMMITTED:
        _roll_forward(root, record)
        return Recovery("rolled forward", targets, tuple(removed))
    return Recovery("rolled back", targets, tuple(removed + _roll_back(root, record)))


#: The project's lock file (at its root), held by every promotion, re-promotion and demotion.
LOCK_NAME = ".gates.lock"


@contextlib.contextmanager
def locked(
    lock_path: Path,
    timeout_s: float = 120.0,
    *,
    holder: str = "another gates command (a promotion, demotion or recovery in this project)",
) -> Iterator[None]:
    """Exclusive advisory lock (flock): released by the kernel even if we are killed.
    ``holder`` names who else takes it, for the message when ``timeout_s`` runs out."""
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
                    raise TimeoutError(
                        f"{lock_path} is held by {holder}; waited {timeout_s:g} s for it: "
                        "let it finish, then run this command again"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock
