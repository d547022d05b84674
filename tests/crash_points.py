"""Crash-point enumeration: run an operation in a forked child that records every call that
changes the disk (a boundary) and SIGKILLs itself right after the k-th (issue 20).

    status, labels = run_crashing(op, cwd, NEVER)            # the control: count them
    status, passed = run_crashing(op, cwd, k)                # killed right after boundary k
    status, labels = run_crashing(op, cwd, k, scope=(atomic, "commit"))  # only inside commit

A boundary is one call of an ``os`` function in MUTATING (``os.open`` only when it may
create or write), a write of a file opened by ``open``/``io.open`` for writing (the raw
write its buffer makes), or an ``os.sendfile`` (``shutil.copyfile``). Each is labelled by the
call and the file's name (``replace .latest.*.tmp``: a temp file's random part starred, so two
runs of one operation give the same labels). ``scope``: watch only the calls made inside
that function (looked up on the object when the child starts); None watches all of ``op``.
``kill_at`` 0 kills the child as the scope is entered, before its first boundary.

Writes made outside Python (the Rust of safetensors' ``save_file``) are invisible to these
hooks; a test that needs them routes them through ``os`` in the child first
(:func:`safetensors_through_os`).

Used by tests/acceptance/test_gates_crash.py and tests/unit/trainer/test_checkpoint_crash_points.py.
"""

from __future__ import annotations

import builtins
import io
import os
import re
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

#: os functions that change what is on disk; each call is one crash point. os.open counts
#: only when it may create or write.
MUTATING = ("open", "write", "fsync", "replace", "rename", "unlink", "mkdir", "rmdir", "chmod")
MUTATING += ("fchmod", "ftruncate", "truncate", "remove", "link", "symlink", "sendfile")
NEVER = 10**6
_WRITE_MODES = frozenset("wax+")


def label(name: str, args: tuple) -> str:
    """``replace .widget-v1.yaml.*.tmp``: the call and the file's name, a temp file's
    random part starred so two runs of the same operation give the same labels."""
    first = args[0] if args else ""
    if isinstance(first, int):  # a descriptor: name the file it is open on
        try:
            first = os.readlink(f"/proc/self/fd/{first}")
        except OSError:
            first = f"fd {first}"
    base = Path(os.fsdecode(first)).name
    if base.startswith(".") and base.endswith(".tmp"):
        base = re.sub(r"\.[^.]+\.tmp$", ".*.tmp", base)
    return f"{name} {base}"


def is_boundary(name: str, args: tuple) -> bool:
    if name != "open":
        return True
    flags = args[1] if len(args) > 1 else os.O_RDONLY
    return bool(flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR | os.O_TRUNC))


def _recording_open(real_open: Callable, record: Callable[[str, tuple], None]) -> Callable:
    """``io.open`` whose files opened for writing report each raw write (after it is made);
    the file is created through ``os.open`` (hooked), with ``open``'s own 0o666."""

    class RecordingFileIO(io.FileIO):
        def write(self, data):
            count = super().write(data)
            record("write", (self.name,))
            return count

    def hooked(file, mode="r", buffering=-1, encoding=None, errors=None, newline=None,  # noqa: PLR0917 - open's own signature
               closefd=True, opener=None):  # fmt: skip
        if not _WRITE_MODES & set(mode):
            return real_open(file, mode, buffering, encoding, errors, newline, closefd, opener)
        if opener is None and not isinstance(file, int):
            opener = lambda path, flags: os.open(path, flags, 0o666)  # noqa: E731
        raw = RecordingFileIO(file, mode.replace("t", "").replace("b", ""), closefd, opener)
        if buffering == 0:
            return raw
        size = buffering if buffering > 1 else io.DEFAULT_BUFFER_SIZE
        buffered = (io.BufferedRandom if "+" in mode else io.BufferedWriter)(raw, size)
        if "b" in mode:
            return buffered
        return io.TextIOWrapper(
            buffered, io.text_encoding(encoding), errors, newline, line_buffering=buffering == 1
        )

    return hooked


def safetensors_through_os() -> None:
    """In a child: ``safetensors.torch.save_file`` (Rust, unseen by the hooks) replaced, in
    safetensors and in every loaded trainer module that imported it, by one writing the same
    bytes (``safetensors.torch.save``) through ``os``: create, then two writes (the first
    half, the rest), so a kill can leave it empty or torn as a kill inside Rust's writes can."""
    import safetensors.torch  # noqa: PLC0415 - only in the child

    real = safetensors.torch.save_file

    def save_file(tensors, filename, metadata=None) -> None:
        data = memoryview(safetensors.torch.save(tensors, metadata=metadata))
        fd = os.open(filename, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        try:
            for half in (data[: len(data) // 2], data[len(data) // 2 :]):
                left = half
                while left:
                    left = left[os.write(fd, left) :]
        finally:
            os.close(fd)

    safetensors.torch.save_file = save_file
    for name, module in list(sys.modules.items()):
        if name.startswith("trainer") and getattr(module, "save_file", None) is real:
            module.save_file = save_file


def run_crashing(
    op: Callable[[], object],
    cwd: Path,
    kill_at: int,
    *,
    scope: tuple[object, str] | None = None,
    setup: Callable[[], None] | None = None,
) -> tuple[int, list[str]]:
    """Run ``op`` in a forked child in ``cwd`` (after ``setup``, unwatched); the child
    SIGKILLs itself right after the ``kill_at``-th boundary inside ``scope`` (0: as the
    scope is entered). Return the child's wait status and the boundaries it passed, as
    labels. A child that raises fails the caller's test with the child's traceback."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        real_write = os.write
        try:
            os.close(read_end)
            os.chdir(cwd)
            if "torch" in sys.modules:  # no intra-op thread pool after a fork
                sys.modules["torch"].set_num_threads(1)
            if setup is not None:
                setup()
            passed = [0]
            inside = [False]

            def record(name: str, args: tuple) -> None:
                if not inside[0]:
                    return
                real_write(write_end, (label(name, args) + "\n").encode())
                passed[0] += 1
                if passed[0] == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)

            def hooked(name: str, real: Callable) -> Callable:
                def call(*args, **kwargs):
                    result = real(*args, **kwargs)
                    if is_boundary(name, args):
                        record(name, args)
                    return result

                return call

            for name in MUTATING:
                setattr(os, name, hooked(name, getattr(os, name)))
            builtins.open = io.open = _recording_open(io.open, record)

            def watched(real: Callable) -> Callable:
                def call(*args, **kwargs):
                    if kill_at == 0:
                        os.kill(os.getpid(), signal.SIGKILL)
                    inside[0] = True
                    try:
                        return real(*args, **kwargs)
                    finally:
                        inside[0] = False

                return call

            if scope is None:
                watched(op)()
            else:
                owner, attr = scope
                setattr(owner, attr, watched(getattr(owner, attr)))
                op()
        except BaseException:
            real_write(write_end, ("!" + traceback.format_exc().replace("\n", "|")).encode())
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        out = fh.read().decode()
    _, status = os.waitpid(pid, 0)
    labels = out.splitlines()
    assert not any(line.startswith("!") for line in labels), out.replace("|", "\n")
    return status, labels


def durability_problems(labels: list[str]) -> list[str]:
    """What a power loss (not a kill: the page cache survives a killed process) could lose
    in this boundary sequence: a file written, then renamed, or its directory renamed,
    before an fsync of it after its last write. By file name, as the labels give it."""
    problems = []
    unsynced: dict[str, int] = {}  # file name -> index of its last unsynced write
    for i, entry in enumerate(labels):
        call, _, name = entry.partition(" ")
        if call in ("write", "sendfile", "truncate", "ftruncate"):
            unsynced[name] = i
        elif call == "fsync":
            unsynced.pop(name, None)
        elif call in ("rename", "replace") and unsynced:
            problems += [
                f"{entry} (boundary {i + 1}) with {file} unsynced since boundary {at + 1}"
                for file, at in sorted(unsynced.items(), key=lambda kv: kv[1])
            ]
            unsynced.clear()
    return problems
