"""Which process holds a store's write lock, so "locked" can say by whom.

SQLite takes POSIX advisory locks: in WAL mode the write lock is a byte of the ``-shm``
file, in rollback mode the database file itself. Linux lists every such lock, with the
holder's pid, in /proc/locks; this reads it. It names what it can and nothing else: on
another system, or for a holder in another pid namespace, the list is empty and the
message says the holder could not be named.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC_LOCKS = Path("/proc/locks")
_CMDLINE_CHARS = 100


def _device_inode(path: Path) -> tuple[str, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}", st.st_ino


def _command(pid: int) -> str:
    if pid == os.getpid():
        return "this process"
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "command unknown"
    text = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
    return text[:_CMDLINE_CHARS] + ("..." if len(text) > _CMDLINE_CHARS else "")


def write_lock_holders(db_path: Path) -> list[str]:
    """``"pid 123 (trainer apply ...)"`` for each process holding a POSIX write lock on
    ``db_path`` or its ``-shm`` file; empty when none can be named."""
    targets = {
        found
        for p in (Path(db_path), Path(f"{db_path}-shm"))
        if (found := _device_inode(p)) is not None
    }
    try:
        lines = PROC_LOCKS.read_text().splitlines()
    except OSError:
        return []
    pids: list[int] = []
    for line in lines:
        fields = line.split()
        # "1: POSIX  ADVISORY  WRITE 796 fe:00:2165077 120 120" (a "->" marks a waiter)
        if "->" in fields or len(fields) < 6 or fields[3] != "WRITE":
            continue
        device, _, inode = fields[5].rpartition(":")
        if not inode.isdigit() or not fields[4].isdigit():
            continue
        if (device, int(inode)) in targets and int(fields[4]) not in pids:
            pids.append(int(fields[4]))
    return [f"pid {pid} ({_command(pid)})" for pid in pids]
