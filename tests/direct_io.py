"""Whether a directory's file system takes direct I/O: the tests of direct writes and reads
skip where it does not (tmpfs, some overlay file systems) rather than pass on the buffered
path they did not mean to test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainer.checkpoint import durable


def needs_direct_writes(directory: Path) -> None:
    """Skip unless ``directory``'s file system takes O_DIRECT (the probe file's descriptor
    closed, and the file removed, either way)."""
    probe = Path(directory) / "direct-io-probe"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        direct = durable.set_direct(fd, on=True)
    finally:
        os.close(fd)
        probe.unlink()
    if not direct:
        pytest.skip(f"{directory}: no direct I/O on this file system")
