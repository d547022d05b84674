"""The trainer's side of the one rule for a user's file (gates/io/files.py read_regular), and
the checks on a directory the trainer is told to write.

    text = read_user_text(path, limit=CONFIG_LIMIT)   # UserFileError naming path and why
    problem = output_dir_problem(Path("runs/new"))     # None, or why it cannot be written

A file the trainer reads because a user named it (a run config, a data manifest, a
checkpoint's JSON) is read through ``gates.io.files.read_regular``: only a regular file,
symlinks followed, at most ``limit`` bytes; a FIFO, a device, a socket, a directory, a
symlink loop or a dangling symlink is a UserFileError saying which, never a hang, an
endless read or a traceback. The message is ``PATH: WHAT``, the form every trainer error
takes on stderr (``trainer <command>: error: PATH: WHAT``).

A directory the trainer will create files in (``--out``) must be a UTF-8 name (safetensors
and the run store take paths as UTF-8 text; a non-UTF-8 byte in a name would let the run
start and leave checkpoints nothing can read back), must not be, or be under, a file, and
its nearest existing directory must be writable. ``output_dir_problem`` says which,
before anything is written.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from gates.io.files import read_regular

#: A run config or a data set's manifest.json is a few KB; anything past this is not one.
CONFIG_LIMIT = 16 * 1024 * 1024


class UserFileError(ValueError):
    """A user's file that cannot be read as one; the message is ``PATH: WHAT``."""


def display(path: Path | str) -> str:
    """``path`` as a user can read it: bytes that are not UTF-8 as ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _reason(exc: OSError) -> str:
    if exc.errno == errno.EISDIR:
        return "a directory, not a file"
    return exc.strerror or str(exc)


def read_user_bytes(path: Path | str, *, limit: int = CONFIG_LIMIT) -> bytes:
    """The bytes of the user's regular file ``path``; UserFileError otherwise."""
    try:
        return read_regular(path, limit)
    except OSError as exc:
        raise UserFileError(f"{display(path)}: {_reason(exc)}") from None


def read_user_text(path: Path | str, *, limit: int = CONFIG_LIMIT) -> str:
    """The UTF-8 text of the user's regular file ``path``; UserFileError otherwise."""
    data = read_user_bytes(path, limit=limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserFileError(
            f"{display(path)}: not UTF-8 text (byte {exc.start}: {data[exc.start]:#04x})"
        ) from None


def is_utf8_name(path: Path | str) -> bool:
    """Whether ``path`` is UTF-8 (a non-UTF-8 byte decodes to a lone surrogate in a str)."""
    try:
        os.fsencode(path).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def output_dir_problem(out_dir: Path, *, published: bool = False) -> str | None:
    """Why the trainer cannot create files in ``out_dir`` (None: it can, as far as can be
    told without writing). Checked: a UTF-8 name; ``out_dir`` a directory or absent; the
    nearest existing directory at or above it (``published``: above it, where a staging
    directory is made and renamed to ``out_dir``) one this process may create entries in."""
    out_dir = Path(out_dir)
    if not is_utf8_name(out_dir):
        return (
            f"{display(out_dir)}: not a UTF-8 name; checkpoints (safetensors) and the run "
            "store need UTF-8 paths"
        )
    if os.path.lexists(out_dir) and not out_dir.is_dir():
        return f"{out_dir}: exists and is not a directory"
    probe = out_dir.absolute().parent if published else out_dir
    while not os.path.lexists(probe) and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        return f"{out_dir}: {probe} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{out_dir}: {probe} is not writable"
    return None
