"""Token shard files: one flat array of token ids behind a small self-describing header.

Layout (little-endian, HEADER_SIZE = 64 bytes, then ``count`` ids of the header's dtype):

    offset  size  field
         0     8  magic            b"SGTOKENS"
         8     4  format version   u32, FORMAT_VERSION
        12     4  dtype code       u32, 1 = uint16, 2 = uint32
        16     4  vocab_size       u32; every id in the file is < vocab_size
        20     4  reserved         zero
        24     8  token count      u64
        32    32  reserved         zero (room for later fields under a version bump)

The dtype follows from vocab_size alone (uint16 while every id fits), so a reader can
tell a flipped dtype code from a real one. Unlike a bare ``.bin`` of ids, a truncated
copy, trailing garbage or a shard written for another vocabulary is caught on read.

    write_shard(path, tokens, vocab_size)   # atomic: gates/io/files.py replacing()
    tokens = read_shard(path, expected_vocab_size=..., expected_dtype=...)
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from gates.io.files import replacing

MAGIC = b"SGTOKENS"
FORMAT_VERSION = 1
HEADER_SIZE = 64
_HEADER = struct.Struct("<8sIIIIQ32s")  # magic, version, dtype, vocab, reserved, count, reserved
assert _HEADER.size == HEADER_SIZE

#: dtype code -> numpy dtype; explicit little-endian so files match on any host.
DTYPES: dict[int, np.dtype] = {1: np.dtype("<u2"), 2: np.dtype("<u4")}
_CODE_BY_NAME = {dt.name: code for code, dt in DTYPES.items()}
_MAX_VOCAB = 2**32 - 1  # the header's vocab_size is a u32


class ShardError(ValueError):
    """A shard or data directory is malformed, corrupt or inconsistent (names the file)."""


def dtype_for_vocab(vocab_size: int) -> np.dtype:
    """uint16 when every id (0..vocab_size-1) fits in it, else uint32."""
    if not 1 <= vocab_size <= _MAX_VOCAB:
        raise ValueError(f"vocab_size {vocab_size} is outside 1..{_MAX_VOCAB}")
    return DTYPES[1] if vocab_size <= 2**16 else DTYPES[2]


def write_shard(path: Path, tokens: np.ndarray, vocab_size: int) -> None:
    """Write ``tokens`` (1-D integer ids, each < vocab_size) to ``path`` atomically."""
    path = Path(path)
    dtype = dtype_for_vocab(vocab_size)
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or (tokens.size and tokens.dtype.kind not in "iu"):
        raise ValueError(f"shard {path}: tokens must be a 1-D integer array, got {tokens.dtype}")
    if tokens.size and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(
            f"shard {path}: token ids span {int(tokens.min())}..{int(tokens.max())}, "
            f"outside 0..{vocab_size - 1}"
        )
    header = _HEADER.pack(
        MAGIC, FORMAT_VERSION, _CODE_BY_NAME[dtype.name], vocab_size, 0, tokens.size, b""
    )
    with replacing(path) as tmp, open(tmp, "wb") as fh:
        fh.write(header)
        fh.write(tokens.astype(dtype, copy=False).tobytes())


def read_shard(
    path: Path,
    expected_vocab_size: int | None = None,
    expected_dtype: np.dtype | str | None = None,
) -> np.ndarray:
    """The shard's ids as a read-only array (memory-mapped), after checking the header,
    the exact file size and that every id is < vocab_size. Raises ShardError."""
    path = Path(path)
    where = f"shard {path}"
    try:
        with path.open("rb") as fh:
            raw = fh.read(HEADER_SIZE)
        file_size = path.stat().st_size
    except OSError as exc:
        raise ShardError(f"{where}: cannot read: {exc.strerror or exc}") from None
    if len(raw) < HEADER_SIZE:
        raise ShardError(f"{where}: truncated header: {len(raw)} bytes, need {HEADER_SIZE}")
    magic, version, code, vocab_size, reserved, count, reserved_tail = _HEADER.unpack(raw)
    if magic != MAGIC:
        raise ShardError(f"{where}: bad magic {magic!r} (expected {MAGIC!r}): not a token shard")
    if version != FORMAT_VERSION:
        raise ShardError(
            f"{where}: unknown format version {version} (this reader knows {FORMAT_VERSION})"
        )
    if reserved or any(reserved_tail):
        raise ShardError(f"{where}: reserved header bytes are not zero")
    if code not in DTYPES:
        known = ", ".join(f"{c}={dt.name}" for c, dt in DTYPES.items())
        raise ShardError(f"{where}: unknown dtype code {code} (known: {known})")
    dtype = DTYPES[code]
    if vocab_size == 0:
        raise ShardError(f"{where}: vocab_size 0 in the header")
    if dtype != dtype_for_vocab(vocab_size):
        raise ShardError(
            f"{where}: dtype code {code} ({dtype.name}) disagrees with vocab_size "
            f"{vocab_size}, which is stored as {dtype_for_vocab(vocab_size).name}"
        )
    expected_size = HEADER_SIZE + count * dtype.itemsize
    if file_size != expected_size:
        problem = "truncated" if file_size < expected_size else "trailing bytes"
        raise ShardError(
            f"{where}: {problem}: header says {count} tokens ({expected_size} bytes), "
            f"file has {file_size} bytes"
        )
    if expected_vocab_size is not None and vocab_size != expected_vocab_size:
        raise ShardError(
            f"{where}: vocab_size {vocab_size} in the header, expected {expected_vocab_size}"
        )
    if expected_dtype is not None and dtype.name != np.dtype(expected_dtype).name:
        raise ShardError(
            f"{where}: dtype {dtype.name} in the header, expected {np.dtype(expected_dtype).name}"
        )
    if count == 0:
        return np.empty(0, dtype=dtype)  # mmap cannot map zero bytes
    tokens = np.memmap(path, dtype=dtype, mode="r", offset=HEADER_SIZE, shape=(count,))
    if int(tokens.max()) >= vocab_size:
        index = int(np.argmax(tokens >= vocab_size))
        raise ShardError(
            f"{where}: token id {int(tokens[index])} at index {index} is >= vocab_size {vocab_size}"
        )
    return tokens
