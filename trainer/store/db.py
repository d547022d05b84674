"""Opening a store file - to write or only to read - and the errors that name it.

    conn = open_writer(run_dir / "runs.db", STORE)    # created with its schema if absent
    with transaction(conn): ...
    close_writer(conn, STORE)
    conn = open_reader(run_dir / "runs.db", STORE)    # read-only: never changes the file

A writer gets WAL mode (the run store: readers are never blocked by the training run's
per-step commits), ``synchronous=NORMAL`` (a commit does not wait for the disk; a power
cut may lose the last steps, never corrupt the file - and the store is rebuilt from
metrics.jsonl anyway), a busy timeout and foreign keys. On close the run store goes back
to rollback-journal mode when it can (no other connection open): at rest it is one file,
with no ``-wal``/``-shm`` companions for a read-only command to create in a run directory
or to need on read-only media.

Every file is checked before use, and refused with a StoreError naming it: not a SQLite
file or failing ``PRAGMA quick_check`` (StoreCorruptError), another application's file, a
schema newer than this code (StoreVersionError), held by another writer for longer than
the busy timeout (StoreLockedError, naming the holder when the system says). A refused file is
never rewritten, repaired or deleted.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

from gates.io.files import NotRegularFileError, open_regular
from trainer.store.locks import write_lock_holders
from trainer.store.schema import Schema

BUSY_TIMEOUT_S = 5.0  # how long a writer waits for another writer before "locked"
_SQLITE_HEADER = b"SQLite format 3\x00"
_CORRUPT_MARKERS = ("not a database", "malformed", "corrupt")


class StoreError(Exception):
    """A store file that cannot be used; the message names the file and what is wrong."""


class StoreCorruptError(StoreError):
    """Not a SQLite database, or one that fails its integrity check."""


class StoreLockedError(StoreError):
    """Another connection holds the write lock for longer than the busy timeout."""


class StoreVersionError(StoreError):
    """A schema version this code does not know (written by a newer shipgate)."""


def busy_timeout(timeout: float | None) -> float:
    """``timeout``, or BUSY_TIMEOUT_S (read when called, so a test can shorten it)."""
    return BUSY_TIMEOUT_S if timeout is None else timeout


def _locked_message(path: Path, timeout: float) -> str:
    holders = write_lock_holders(path)
    who = ", ".join(holders) if holders else "a process this system does not name"
    return (
        f"{path}: locked by another writer ({who}) for more than {timeout:g} s; "
        "try again when it has finished"
    )


def translate(exc: sqlite3.Error, path: Path, timeout: float | None = None) -> StoreError:
    """A sqlite3 error as the StoreError that names ``path`` and says what it means."""
    text = str(exc)
    if "locked" in text or "busy" in text:
        return StoreLockedError(_locked_message(path, busy_timeout(timeout)))
    if any(marker in text for marker in _CORRUPT_MARKERS):
        return StoreCorruptError(f"{path}: corrupt ({text}); it was left as it is")
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name == "SQLITE_FULL" or name.startswith("SQLITE_IOERR"):
        # ENOSPC and EFBIG reach SQLite as a failed write: the transaction is rolled back.
        return StoreError(
            f"{path}: cannot be written ({text}, {name}): the disk is full or a file-size "
            "limit was reached; the write was rolled back, nothing of it is recorded"
        )
    return StoreError(f"{path}: {text}")


def _check_file(path: Path, schema: Schema, *, must_exist: bool) -> None:
    """Refuse a path that is no file, or a file that is not SQLite, before SQLite opens it."""
    if not path.exists() and not path.is_symlink():
        if must_exist:
            raise StoreError(f"{path}: no such file")
        return
    try:  # the one read rule: a FIFO or a device is named, never opened to wait on
        fd = open_regular(path)
    except IsADirectoryError:
        raise StoreError(f"{path}: not a file (a directory), so not a {schema.what}") from None
    except NotRegularFileError as exc:
        raise StoreError(f"{path}: {exc.strerror}, so not a {schema.what}") from None
    except OSError as exc:
        raise StoreError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        head = os.read(fd, len(_SQLITE_HEADER))
    except OSError as exc:
        raise StoreError(f"{path}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if head == b"" and not must_exist:
        return  # an empty file is an empty database: nothing in it to lose
    if head != _SQLITE_HEADER:
        raise StoreCorruptError(
            f"{path}: not a SQLite database (its first bytes are {head[:16]!r}), so not a "
            f"{schema.what}; it was left as it is"
        )


def _check_header(conn: sqlite3.Connection, path: Path, schema: Schema) -> bool:
    """True when the file already holds this schema; False when it is new and empty.
    StoreError for another application's file, StoreVersionError for a newer schema."""
    app = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]
    if app == 0 and version == 0 and tables == 0:
        return False
    if app != schema.application_id:
        raise StoreError(
            f"{path}: a SQLite file that is not a shipgate {schema.what} (application_id "
            f"{app:#x}, expected {schema.application_id:#x}); it was left as it is"
        )
    if version > schema.version:
        raise StoreVersionError(
            f"{path}: {schema.what} schema version {version}, newer than this shipgate's "
            f"({schema.version}); written by a newer shipgate - upgrade to read it"
        )
    if version < schema.version:
        raise StoreVersionError(
            f"{path}: {schema.what} schema version {version}; this shipgate reads version "
            f"{schema.version} and has no migration from it"
        )
    return True


def _quick_check(conn: sqlite3.Connection, path: Path) -> None:
    rows = [row[0] for row in conn.execute("PRAGMA quick_check")]
    if rows != ["ok"]:
        raise StoreCorruptError(
            f"{path}: corrupt (PRAGMA quick_check: {'; '.join(rows[:3])}); it was left as it is"
        )


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE ... COMMIT (the write lock taken up front, so a transaction never
    fails half-way for want of it); ROLLBACK on any exception."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _create(conn: sqlite3.Connection, path: Path, schema: Schema) -> None:
    with transaction(conn):
        if _check_header(conn, path, schema):
            return  # another writer created it while this one waited for the lock
        for statement in schema.ddl:
            conn.execute(statement)
        conn.execute(f"PRAGMA application_id = {schema.application_id}")
        conn.execute(f"PRAGMA user_version = {schema.version}")


def _connect(
    path: Path,
    timeout: float,
    target: Path | str,
    setup: Callable[[sqlite3.Connection], None],
) -> sqlite3.Connection:
    """A connection to ``target`` (a path, or a URI) that ``setup`` checked and prepared;
    closed again when that fails, the sqlite3 error translated into a StoreError."""
    conn = None
    try:
        conn = sqlite3.connect(
            target, uri=isinstance(target, str), timeout=timeout, isolation_level=None
        )
        setup(conn)
    except BaseException as exc:
        if conn is not None:
            conn.close()
        if isinstance(exc, sqlite3.Error):
            raise translate(exc, path, timeout) from None
        raise
    return conn


def open_writer(path: Path, schema: Schema, *, timeout: float | None = None) -> sqlite3.Connection:
    """``path`` open to write, in ``schema.journal_mode``, created with its schema when it
    does not exist (or is empty). StoreError (naming ``path``) when it cannot be used."""
    path, timeout = Path(path), busy_timeout(timeout)
    _check_file(path, schema, must_exist=False)

    def setup(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA foreign_keys = ON")
        existing = _check_header(conn, path, schema)
        if existing:
            _quick_check(conn, path)
        mode = conn.execute(f"PRAGMA journal_mode = {schema.journal_mode}").fetchone()[0]
        if mode != schema.journal_mode:
            raise StoreError(
                f"{path}: journal mode {schema.journal_mode} refused (it stays {mode}); "
                "WAL needs a local filesystem"
            )
        conn.execute("PRAGMA synchronous = NORMAL")
        if not existing:
            _create(conn, path, schema)

    return _connect(path, timeout, path, setup)


def close_writer(conn: sqlite3.Connection, schema: Schema) -> None:
    """Close, leaving a WAL store in rollback mode when no other connection has it open
    (one file at rest). Busy (a reader is open): it stays in WAL mode, which is as valid."""
    try:
        if schema.journal_mode == "wal" and not conn.in_transaction:
            conn.execute("PRAGMA busy_timeout = 0")
            with contextlib.suppress(sqlite3.OperationalError):  # busy: stays WAL
                conn.execute("PRAGMA journal_mode = DELETE")
    finally:
        conn.close()


def open_reader(
    path: Path, schema: Schema, *, timeout: float | None = None, allow_new: bool = False
) -> sqlite3.Connection:
    """``path`` open read-only (SQLite cannot write it through this connection); checked
    as open_writer checks it. StoreError naming ``path`` when it cannot be read.
    ``allow_new``: a SQLite file without a schema yet (which open_writer would fill) is
    returned too, not refused."""
    path, timeout = Path(path), busy_timeout(timeout)
    _check_file(path, schema, must_exist=True)
    if path.stat().st_size == 0:
        raise StoreError(f"{path}: an empty file, not a {schema.what}")

    def setup(conn: sqlite3.Connection) -> None:
        if _check_header(conn, path, schema):
            _quick_check(conn, path)
        elif not allow_new:
            raise StoreError(f"{path}: an empty SQLite file, not a {schema.what}")

    return _connect(path, timeout, f"{path.resolve().as_uri()}?mode=ro", setup)
