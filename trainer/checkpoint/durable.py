"""A checkpoint's files, written durably into its staging directory and hashed as written.

The staging directory is published by one rename (trainer/checkpoint/save.py), so a file in
it needs its bytes on disk, not an atomic replace of its own. Atomic replacement of a single
file, fsync of files and directories and sha256 of a file: gates/io/files.py.

    pending = write_tensors(path, tensors, {"format": "pt"})  # written; still being hashed
    entry = pending.entry()                           # {"size", "range_bytes", "range_sha256"}
    entry = write_json(path, obj)                              # the same, fsynced

Tensor files are written here, not by safetensors.torch.save_file: the same bytes (an
8-byte little-endian header length, the JSON header padded with spaces to a multiple of 8,
then every tensor's bytes, widest dtype first and by name within one), but straight from
each tensor's memory in large ``os.write`` calls (no copy of the state), and the digests the
manifest records (each range's sha256: trainer/checkpoint/manifest.py) are computed from
those same chunks while they are written, each range on whichever of HASHERS threads is free
(hashlib releases the GIL), instead of by reading the file back: every byte is hashed once,
on every core, by threads that run behind the writer (a lower priority), so the disk is kept
busy first. The caller fsyncs the
file (save.py: its fsync is a seam of the crash-point tests).

A write returns once its bytes are handed to the kernel; the digests may still be being
computed (``PendingEntry``), so the next file is written while this one's hash finishes and
the hashing runs without a gap across a checkpoint's files (the save asks for every entry
only when it builds the manifest).

A large file is written directly to the device (O_DIRECT, through one aligned buffer:
_DirectWriter) where the file system allows it, buffered otherwise. Why: a checkpoint is
larger than the page cache lets a writer dirty (a 4.5 GB 370M save against a 20 % dirty
ratio), so a buffered writer is throttled to write-back's pace and pays for it in kernel
time; on the development VM (Linux 6.18, ext4) 4.4 GB took 10.6 s buffered and fsynced
(9.4 s of it system time) against 1.4 s direct (0.2 s). The checker reads the files
directly too (verify.py), so nothing is lost by leaving them out of the cache. Buffered
writes are 1 MiB: there, writes of 2 MiB or more into the page cache were erratic, at times
10x slower (0.4 vs 4 GB/s), 1 MiB ones steady.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import mmap
import os
import struct
import sys
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from trainer.checkpoint import manifest
from trainer.checkpoint.manifest import HASHERS, bytes_entry, cut_into_ranges, entry_of, sha256_of

#: Bytes per os.write of a large tensor; smaller tensors are gathered up to it.
CHUNK_BYTES = 1024 * 1024
#: How far below the writer the hashing threads run (nice(1) increment; 19 is the lowest).
HASHER_NICENESS = 10
#: A file at least this large is hashed on HASHERS threads, overlapped with its writes.
THREADED_BYTES = 4 * 1024 * 1024
#: A file at least this large is written directly (O_DIRECT) where the file system allows.
DIRECT_BYTES = 4 * 1024 * 1024
#: Bytes per direct write: the development VM's disk took 4 MiB writes fastest (3.0 GB/s;
#: 1 MiB 2.2, 16 MiB 2.0). A multiple of DIRECT_ALIGN.
DIRECT_WRITE_BYTES = 4 * 1024 * 1024
#: Direct I/O needs offsets, lengths and memory aligned to the device's block; 4 KiB covers
#: the usual 512-byte and 4 KiB ones.
DIRECT_ALIGN = 4096

#: safetensors' dtype names, in the order its writer lays tensors out (widest first; then by
#: name). A dtype not here is written by safetensors itself (save.py falls back).
_DTYPE_ORDER = (
    (torch.uint64, "U64"),
    (torch.int64, "I64"),
    (torch.float64, "F64"),
    (torch.complex64, "C64"),
    (torch.float32, "F32"),
    (torch.uint32, "U32"),
    (torch.int32, "I32"),
    (torch.bfloat16, "BF16"),
    (torch.float16, "F16"),
    (torch.uint16, "U16"),
    (torch.int16, "I16"),
    (torch.int8, "I8"),
    (torch.uint8, "U8"),
    (torch.bool, "BOOL"),
)
DTYPE_NAMES = {dtype: name for dtype, name in _DTYPE_ORDER}
_RANK = {dtype: rank for rank, (dtype, _) in enumerate(_DTYPE_ORDER)}


def writable_here(tensors: dict[str, torch.Tensor]) -> bool:
    """Whether write_tensors lays these out exactly as safetensors does: known dtypes,
    contiguous CPU tensors, a little-endian machine."""
    return sys.byteorder == "little" and all(
        t.dtype in _RANK and t.device.type == "cpu" and t.is_contiguous() for t in tensors.values()
    )


def safetensors_header(
    tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None
) -> tuple[bytes, list[torch.Tensor]]:
    """(length prefix + padded JSON header, the tensors in file order), as
    safetensors.torch.save_file writes them."""
    names = sorted(tensors, key=lambda n: (_RANK[tensors[n].dtype], n))
    header: dict[str, Any] = {"__metadata__": metadata} if metadata is not None else {}
    offset = 0
    for name in names:
        t = tensors[name]
        nbytes = t.numel() * t.element_size()
        header[name] = {
            "dtype": DTYPE_NAMES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, [tensors[n] for n in names]


def tensor_bytes(t: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor, as a view of its memory (no copy)."""
    t = t.detach()
    if t.numel() == 0:
        return memoryview(b"")
    return memoryview(t.reshape(-1).view(torch.uint8).numpy())


def _chunks(pieces: Iterable[memoryview | bytes], size: int) -> Iterator[memoryview]:
    """``pieces`` as write-sized chunks: the first piece (a header) alone, large pieces
    sliced in place, small ones gathered into a fresh buffer (never reused: the hashing
    thread may still be reading a chunk handed out earlier)."""
    pending = bytearray()
    for index, raw in enumerate(pieces):
        piece = memoryview(raw).cast("B")
        if index == 0:
            yield piece
            continue
        if len(piece) < size:
            pending += piece
            if len(pending) >= size:
                yield memoryview(pending)
                pending = bytearray()
            continue
        if pending:
            yield memoryview(pending)
            pending = bytearray()
        for start in range(0, len(piece), size):
            yield piece[start : start + size]
    if pending:
        yield memoryview(pending)


def _write_all(fd: int, chunk: memoryview) -> None:
    while chunk:
        chunk = chunk[os.write(fd, chunk) :]


class _BufferedWriter:
    """Chunks written as they come, through the page cache."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def write(self, chunk: memoryview) -> None:
        _write_all(self._fd, chunk)

    def finish(self) -> None:
        """Nothing is held back."""

    def close(self) -> None:
        """Nothing to release."""


class _DirectWriter:
    """Chunks gathered into one page-aligned buffer of DIRECT_WRITE_BYTES, written directly
    to the device each time it fills; the tail is written padded to a block and the file
    cut back to its size. A file system that refuses a direct write (EINVAL) gets the rest
    buffered: the same bytes either way."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._area = mmap.mmap(-1, DIRECT_WRITE_BYTES)  # anonymous: page-aligned, zeroed
        self._buffer = memoryview(self._area)
        self._filled = 0
        self._size = 0

    def write(self, chunk: memoryview) -> None:
        while chunk:
            take = min(len(chunk), DIRECT_WRITE_BYTES - self._filled)
            self._buffer[self._filled : self._filled + take] = chunk[:take]
            self._filled += take
            chunk = chunk[take:]
            if self._filled == DIRECT_WRITE_BYTES:
                self._flush(DIRECT_WRITE_BYTES)

    def finish(self) -> None:
        """Write what is buffered (padded to a block, then the file cut to its size)."""
        if self._filled:
            tail = self._filled
            padded = -(-tail // DIRECT_ALIGN) * DIRECT_ALIGN
            self._buffer[tail:padded] = bytes(padded - tail)
            self._flush(padded)
            os.ftruncate(self._fd, self._size - padded + tail)

    def _flush(self, length: int) -> None:
        done = 0  # no view of the buffer named here: a failed write's traceback keeps none
        while done < length:
            try:
                done += os.write(self._fd, self._buffer[done:length])
            except OSError as exc:
                if exc.errno != errno.EINVAL or not is_direct(self._fd):
                    raise
                set_direct(self._fd, on=False)  # refused: the rest through the page cache
        self._size += length
        self._filled = 0

    def close(self) -> None:
        self._buffer.release()
        # A view may outlive a failed write (held by its traceback, or by a wrapper of
        # os.write): the buffer is then unmapped when that goes, never a BufferError here
        # in place of the write's own error (ENOSPC, EIO).
        with contextlib.suppress(BufferError):
            self._area.close()


def is_direct(fd: int) -> bool:
    """Whether ``fd`` is open for direct I/O (O_DIRECT)."""
    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)


def set_direct(fd: int, *, on: bool) -> bool:
    """Switch direct I/O on or off for ``fd``; whether the file system took it."""
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, (flags | os.O_DIRECT) if on else (flags & ~os.O_DIRECT))
    except OSError:  # EINVAL: no direct I/O on this file system (the flag is unchanged)
        return False
    return True


def file_writer(fd: int, total: int) -> _BufferedWriter | _DirectWriter:
    """How a new file of ``total`` bytes is written to ``fd``: ``write(chunk)`` in order,
    then ``finish()``, ``close()`` always. Directly for DIRECT_BYTES or more where the file
    system takes O_DIRECT, else buffered. tools/bench_checkpoint.py's raw writes use it too
    (no layout, hashing or manifest: the disk's bandwidth through the same I/O)."""
    if total >= DIRECT_BYTES and hasattr(os, "O_DIRECT") and set_direct(fd, on=True):
        return _DirectWriter(fd)
    return _BufferedWriter(fd)


class PendingEntry:
    """A written file's manifest entry, its range digests perhaps still being computed from
    the chunks that were written; ``entry()`` waits for them."""

    def __init__(self, size: int, range_bytes: int, digests: list[Future[str]]) -> None:
        self._size, self._range_bytes, self._digests = size, range_bytes, digests

    def entry(self) -> dict[str, Any]:
        return entry_of(self._size, self._range_bytes, [d.result() for d in self._digests])


def write_hashed(path: Path, pieces: list[memoryview | bytes]) -> PendingEntry:
    """Create ``path`` holding ``pieces`` one after another; its manifest entry (the sha256
    of each range, trainer/checkpoint/manifest.py) of the very chunks written, pending while
    the digests finish. A large file's ranges are hashed on HASHERS threads, every core at
    once, overlapped with the writes (the pieces must not change until entry() returns).
    Not fsynced."""
    total = sum(memoryview(p).nbytes for p in pieces)
    range_bytes = manifest.RANGE_BYTES  # looked up now: tests set it smaller
    threaded = total >= THREADED_BYTES
    hashers = (
        ThreadPoolExecutor(HASHERS, "checkpoint-sha256", initializer=_behind_the_writer)
        if threaded
        else None
    )
    digests: list[Future[str]] = []
    size = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    writer = file_writer(fd, total)
    try:
        for chunk, done in cut_into_ranges(_chunks(pieces, CHUNK_BYTES), range_bytes):
            digests += [_submit(hashers, range_pieces) for range_pieces in done]
            writer.write(chunk)
            size += chunk.nbytes
        writer.finish()
        on_disk = os.fstat(fd).st_size
    except BaseException:
        if hashers is not None:  # a failed write's digests are never asked for
            hashers.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        writer.close()
        os.close(fd)
    if hashers is not None:
        hashers.shutdown(wait=False)  # its threads end after the last range
    if on_disk != size or size != total:
        raise OSError(f"{path}: {on_disk} bytes on disk after writing {size} of {total}")
    return PendingEntry(size, range_bytes, digests)


def _behind_the_writer() -> None:
    """Lower this hashing thread's scheduling priority (Linux: a thread's own nice value), so
    the thread writing the file, and the kernel's write-back behind it, run first and the
    hashing takes the CPU they leave. With as many hashers as cores at equal priority, a
    370M save on two cores took 4.2 s against 3.5 s (median of 3; writes alone 3.3-3.7 s):
    the writer waited for a core. Elsewhere a no-op: only the order of work changes."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):  # a hint: the digests are the same either way
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), HASHER_NICENESS)


def _submit(hashers: ThreadPoolExecutor | None, pieces: list[memoryview]) -> Future[str]:
    """The sha256 of ``pieces``: on ``hashers``, or now (a small file)."""
    if hashers is not None:
        return hashers.submit(sha256_of, pieces)
    done: Future[str] = Future()
    done.set_result(sha256_of(pieces))
    return done


def write_tensors(
    path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None
) -> PendingEntry:
    """Write ``tensors`` (writable_here) as the safetensors file save_file would write;
    its manifest entry, hashed while writing (pending: write_hashed). Not fsynced."""
    header, ordered = safetensors_header(tensors, metadata)
    return write_hashed(path, [header, *(tensor_bytes(t) for t in ordered)])


def write_json(path: Path, obj: Any) -> dict[str, Any]:
    """Write ``obj`` as JSON and fsync it; its manifest entry. NaN/inf are refused: they
    are not JSON."""
    data = (json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    return bytes_entry(data)
