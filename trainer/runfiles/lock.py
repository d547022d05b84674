"""A run directory has one writer: the advisory lock every command that writes into one
takes, and the message a second writer gets.

    with writer_lock(Path("runs/demo"), "trainer pipeline"):   # RunDirLockedError if held
        ...                                                     # write into runs/demo

Who takes it: the training loop (its out_dir, for the whole run: so `trainer apply` and
a library call alike), `trainer apply` (its --out), `trainer pipeline` (its run
directory), `trainer export` (the run directory it writes into), `trainer runs sync` (the
run store beside the files it derives from). A writer also takes the lock of every run directory
enclosing its own (one holding a lock file, a run manifest or a pipeline record): a
pipeline's run directory encloses its ``train/``, so a pipeline and a `trainer apply` on
that ``train/`` exclude each other. Who never does: the readers (`trainer monitor`,
`trainer inspect`, `trainer runs ls/show`), which read files that are always whole
(written atomically or appended a line at a time) and so never wait. `trainer runs ls/show`
ask writer_active whether a run stored as running still has a writer: a probe that takes a
shared lock without waiting and drops it at once, never a lock held; a writer that tries in
that instant tries again for a few milliseconds (_RETRY_SECONDS), so a probe never refuses it.

How: ``flock(LOCK_EX | LOCK_NB)`` on ``.writer.lock`` in the directory (WRITER_LOCK_FILE).
The kernel releases it when the holder's descriptor closes, however the process ends
(SIGKILL and power loss included), so a lock file left by a dead process is no obstacle:
the next writer's flock succeeds. The holder writes its pid, command and start time into
the file, which is how a refusal names it; the file is never deleted (deleting a lock file
another process is about to flock is the classic race that lets two writers in).

Within one process the lock is re-entrant: the pipeline holds its run directory for its
whole run and calls `trainer apply`'s library function, which takes that lock again (as
the enclosing one) with its ``train/``'s. A flock on a second descriptor of the same file
would refuse the process itself, so each process keeps one descriptor per locked
directory and counts its holders.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from trainer.runfiles.names import (
    PIPELINE_STATE_FILE,
    RUN_MANIFEST_FILE,
    WRITER_LOCK_FILE,
)

#: Holder records are a line of JSON; anything longer is not one of ours.
_MAX_HOLDER_BYTES = 4096
#: How long a writer retries a refused flock before it refuses: a probe (writer_active)
#: holds its shared lock for microseconds; a real holder holds it for the whole write.
_RETRY_SECONDS = 0.05


class RunDirLockedError(RuntimeError):
    """Another process is writing the run directory; the message names it and what to do."""


_held: dict[str, tuple[int, int]] = {}  # realpath of the directory -> (fd, holders)
_guard = threading.Lock()


def _key(directory: Path) -> str:
    return os.path.realpath(directory)


def holder(directory: Path) -> str:
    """Who holds (or last held) ``directory``'s lock, as recorded in the lock file:
    ``pid 123 (trainer apply, since 2026-11-27T10:00:00Z)``; ``unknown`` when unreadable."""
    path = Path(directory) / WRITER_LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return "a process that could not be named"
    try:
        data = os.read(fd, _MAX_HOLDER_BYTES)
    except OSError:
        data = b""
    finally:
        os.close(fd)
    try:
        record = json.loads(data.decode("utf-8"))
        return f"pid {int(record['pid'])} ({record['command']}, since {record['since']})"
    except (ValueError, KeyError, TypeError):
        return "a process that could not be named"


def writer_active(directory: Path) -> bool | None:
    """Whether a process holds ``directory``'s writer lock now (this one included): False
    when none does or there is no lock file, None when it cannot be told (the lock file
    unreadable or not a regular file). Read-only: the file is never created or written; the
    probe is a shared flock taken without waiting and dropped at once."""
    try:
        fd = os.open(
            Path(directory) / WRITER_LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
        )
    except FileNotFoundError:
        return False
    except OSError:
        return None
    try:
        if not _is_regular(fd):
            return None
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # drops the probe's shared lock
    return False


def owning_run_dir(path: Path) -> Path | None:
    """The nearest run directory at or above ``path`` (one holding a writer lock file, a
    run manifest or a pipeline record): the directory a command writing ``path`` must lock.
    None when ``path`` is in no run directory."""
    for candidate in (Path(path).absolute(), *Path(path).absolute().parents):
        if _is_run_dir(candidate):
            return candidate
    return None


def _open_lock_file(directory: Path) -> int:
    """The lock file's descriptor: a regular file, never followed through a symlink (a
    planted link could point the lock's writes at another file)."""
    path = directory / WRITER_LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        raise RunDirLockedError(
            f"{path}: cannot open the run directory's writer lock ({exc.strerror or exc})"
        ) from None
    if not _is_regular(fd):
        os.close(fd)
        raise RunDirLockedError(f"{path}: not a regular file; a run directory's lock file is")
    return fd


def _is_regular(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


def _record_holder(fd: int, command: str) -> None:
    record = {
        "pid": os.getpid(),
        "command": command,
        "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "argv": " ".join(sys.argv)[:200],
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(record) + "\n").encode("utf-8"), 0)


@contextlib.contextmanager
def writer_lock(directory: Path, command: str) -> Iterator[None]:
    """Hold the writer lock of ``directory`` (creating it when missing) and of every run
    directory that encloses it, outermost first, for the block: a `trainer apply --out
    RUN/train` is refused while a pipeline writes RUN, and a pipeline on RUN while that
    apply runs. RunDirLockedError, before anything is written, when another process holds
    one of them (those already taken are released)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    enclosing = [d for d in Path(directory).absolute().parents if _is_run_dir(d)]
    with contextlib.ExitStack() as stack:
        for each in [*reversed(enclosing), directory]:
            stack.enter_context(_one_lock(each, command))
        yield


def _lock_exclusive(fd: int) -> None:
    """flock(LOCK_EX | LOCK_NB), tried again for up to _RETRY_SECONDS while refused (a
    reader's probe passes in microseconds); BlockingIOError when the lock is still held."""
    deadline = time.monotonic() + _RETRY_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.005)


def _is_run_dir(directory: Path) -> bool:
    markers = (WRITER_LOCK_FILE, RUN_MANIFEST_FILE, PIPELINE_STATE_FILE)
    return any(os.path.lexists(directory / name) for name in markers)


@contextlib.contextmanager
def _one_lock(directory: Path, command: str) -> Iterator[None]:
    key = _key(directory)
    with _guard:
        if key in _held:
            fd, holders = _held[key]
            _held[key] = (fd, holders + 1)
        else:
            fd = _open_lock_file(directory)
            try:
                _lock_exclusive(fd)
            except BlockingIOError:
                os.close(fd)
                raise RunDirLockedError(
                    f"{directory}: another process is writing this run directory: "
                    f"{holder(directory)}. Wait for it to end (`trainer monitor` shows a "
                    "run's progress), or choose another directory"
                ) from None
            except OSError as exc:
                os.close(fd)
                raise RunDirLockedError(
                    f"{directory / WRITER_LOCK_FILE}: cannot lock ({exc.strerror or exc})"
                ) from None
            with contextlib.suppress(OSError):  # a full disk: locked all the same, unnamed
                _record_holder(fd, command)
            _held[key] = (fd, 1)
    try:
        yield
    finally:
        with _guard:
            fd, holders = _held[key]
            if holders > 1:
                _held[key] = (fd, holders - 1)
            else:
                del _held[key]
                os.close(fd)  # releases the flock
