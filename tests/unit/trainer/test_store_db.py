"""The store file itself (trainer/store/db.py): schema and header, WAL while written and a
single file at rest, readers never blocked by a writer's transaction, and every file that
cannot be used refused with its name - locked (by whom), corrupt, newer, another
application's - and left byte for byte as it was."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from trainer.store import db, registry
from trainer.store.schema import REGISTRY, STORE


def _open(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def test_a_new_store_has_the_schema_its_version_and_wal_while_written(tmp_path):
    path = tmp_path / "runs.db"
    conn = db.open_writer(path, STORE)
    try:
        pragma = {
            name: conn.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("journal_mode", "foreign_keys", "busy_timeout", "synchronous")
        }
        assert pragma == {
            "journal_mode": "wal",
            "foreign_keys": 1,
            "busy_timeout": int(db.BUSY_TIMEOUT_S * 1000),
            "synchronous": 1,  # NORMAL
        }
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type='table'")}
        assert tables == {"runs", "params", "metrics", "artifacts"}
        assert conn.execute("PRAGMA user_version").fetchone()[0] == STORE.version == 1
        assert conn.execute("PRAGMA application_id").fetchone()[0] == STORE.application_id
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            conn.execute("INSERT INTO metrics (run_id, step) VALUES ('nobody', 1)")
    finally:
        db.close_writer(conn, STORE)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"], "one file at rest"
    reader = db.open_reader(path, STORE)
    assert reader.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    reader.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"], "a reader created files"


def test_a_reader_reads_the_committed_rows_while_a_writer_holds_a_transaction(tmp_path):
    path = tmp_path / "runs.db"
    writer = db.open_writer(path, STORE)
    writer.execute("INSERT INTO runs (run_id, name, run_dir, status) VALUES ('a', 'x', '/', 'ok')")
    # EXCLUSIVE: the lock a rollback-journal writer holds while it commits, which would shut
    # readers out; under WAL it is a write lock like any other and readers go on.
    writer.execute("BEGIN EXCLUSIVE")
    writer.execute("INSERT INTO runs (run_id, name, run_dir, status) VALUES ('b', 'y', '/', 'ok')")
    try:
        reader = db.open_reader(path, STORE, timeout=0.2)
        assert reader.execute("SELECT run_id FROM runs").fetchall() == [("a",)]
        reader.close()
    finally:
        writer.execute("COMMIT")
        db.close_writer(writer, STORE)


def test_a_second_writer_is_refused_as_locked_naming_the_file(tmp_path):
    path = tmp_path / "registry.db"
    registry.register("a" * 32, tmp_path, "first", None, path=path)
    holder = db.open_writer(path, REGISTRY)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(db.StoreLockedError) as refused:
            registry.register("b" * 32, tmp_path, "second", None, path=path, timeout=0.1)
    finally:
        holder.execute("ROLLBACK")
        db.close_writer(holder, REGISTRY)
    assert str(refused.value).startswith(f"{path}: locked by another writer (")
    assert "for more than 0.1 s" in str(refused.value)
    assert [r.name for r in registry.registered_runs(path)] == ["first"]


def test_the_lock_message_names_the_holding_process(tmp_path):
    path = tmp_path / "runs.db"
    holder = db.open_writer(path, STORE)
    holder.execute("BEGIN IMMEDIATE")
    try:
        message = str(db.translate(sqlite3.OperationalError("database is locked"), path, 0.1))
    finally:
        holder.execute("ROLLBACK")
        db.close_writer(holder, STORE)
    if not Path("/proc/locks").is_file():
        pytest.skip("no /proc/locks on this system: the holder cannot be named")
    assert f"pid {os.getpid()} (this process)" in message, message


def test_a_reader_of_a_store_held_exclusively_is_refused_as_locked(tmp_path):
    path = tmp_path / "runs.db"
    db.close_writer(db.open_writer(path, STORE), STORE)
    holder = _open(path)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(db.StoreLockedError, match=f"{path}: locked by another writer"):
            db.open_reader(path, STORE, timeout=0.1)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def _store_with_rows(path: Path) -> None:
    conn = db.open_writer(path, STORE)
    conn.execute("INSERT INTO runs (run_id, name, run_dir, status) VALUES ('a', 'x', '/', 'ok')")
    conn.executemany(
        "INSERT INTO metrics (run_id, step, loss, extra) VALUES ('a', ?, 1.0, ?)",
        [(i, "x" * 200) for i in range(1, 400)],
    )
    db.close_writer(conn, STORE)


def _damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "not sqlite":
        data = bytearray(b"this is not a database at all\n" * 100)
    elif how == "garbled pages":  # the header intact, the b-tree pages behind it garbage
        data[4096 * 2 : 4096 * 5] = bytes((i * 7 + 3) % 251 for i in range(4096 * 3))
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["not sqlite", "garbled pages"])
@pytest.mark.parametrize("opener", ["writer", "reader"])
def test_a_corrupt_store_is_refused_naming_it_and_left_byte_for_byte(tmp_path, how, opener):
    path = tmp_path / "runs.db"
    _store_with_rows(path)
    _damage(path, how)
    before = path.read_bytes()

    with pytest.raises(db.StoreCorruptError) as refused:
        if opener == "writer":
            db.open_writer(path, STORE)
        else:
            db.open_reader(path, STORE)

    assert str(refused.value).startswith(f"{path}: ") and "left as it is" in str(refused.value)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"]


@pytest.mark.parametrize("opener", [db.open_writer, db.open_reader])
def test_a_store_of_a_newer_schema_version_is_refused_unchanged(tmp_path, opener):
    path = tmp_path / "runs.db"
    _store_with_rows(path)
    conn = _open(path)
    conn.execute(f"PRAGMA user_version = {STORE.version + 1}")
    conn.close()
    before = path.read_bytes()

    with pytest.raises(db.StoreVersionError, match="newer than this shipgate's"):
        opener(path, STORE)
    assert path.read_bytes() == before


def test_another_applications_sqlite_file_is_not_taken_for_a_store(tmp_path):
    path = tmp_path / "runs.db"
    conn = _open(path)
    conn.execute("CREATE TABLE notes (text)")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(db.StoreError, match="not a shipgate run store"):
        db.open_writer(path, STORE)
    with pytest.raises(db.StoreError, match="not a shipgate run registry"):
        db.open_reader(path, REGISTRY)
    assert path.read_bytes() == before


def test_a_directory_in_the_stores_place_is_refused(tmp_path):
    (tmp_path / "runs.db").mkdir()
    with pytest.raises(db.StoreError, match=r"runs\.db: not a file"):
        db.open_writer(tmp_path / "runs.db", STORE)


def test_a_sqlite_file_without_a_schema_is_taken_as_a_new_store(tmp_path):
    path = tmp_path / "runs.db"
    conn = _open(path)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("DROP TABLE t")  # a SQLite header, no tables
    conn.close()
    db.close_writer(db.open_writer(path, STORE), STORE)
    reader = db.open_reader(path, STORE)
    assert reader.execute("PRAGMA user_version").fetchone()[0] == STORE.version
    reader.close()
