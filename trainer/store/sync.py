"""A run directory's rows written into its store; `trainer runs sync RUN_DIR`.

    summary = sync_run_dir(Path("runs/demo/train"))   # runs.db (re)built, the run registered

A sync writes the run directory (its runs.db), so it takes the directory's writer lock
(trainer/runfiles/lock.py) for as long as it writes: a run being trained, a pipeline or
an export writing it is another writer, and the sync is refused naming its pid (sync it
once that has finished). Reading commands (`trainer runs ls/show`) take no lock.

The store is derived from the run's files (rundir.py): syncing replaces the run's params,
metrics and artifacts with what the files say now, in one transaction, so a run made
before the store existed, or whose store was deleted, or whose recording stopped half-way
(a locked or full disk during training), is recorded whole. How a run ended (status, stop
reason, end time) comes from training_state.json's end record, which the trainer writes
however a run ends; a run without one (it is still going, was killed, or predates the
record) keeps its stored status, or gets ``finished`` when its last step is its max_steps
and ``unknown`` otherwise.

A store that cannot be trusted (corrupt, another application's, a newer schema, or holding
another run) is refused, never replaced: move it aside and sync again to rebuild it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from trainer.runfiles.lock import writer_lock
from trainer.runfiles.names import METRICS_FILE, RUNS_DB_FILE, TRAINING_STATE_FILE
from trainer.store import db, registry
from trainer.store.rundir import (
    RunDirError,
    RunFiles,
    check_run_dir,
    read_run_dir,
    utf8_dir_problem,
)
from trainer.store.schema import METRIC_COLUMNS, STORE

METRICS_INSERT = (
    f"INSERT OR REPLACE INTO metrics (run_id, step, {', '.join(METRIC_COLUMNS)}, extra) "
    f"VALUES (?, ?, {', '.join('?' for _ in METRIC_COLUMNS)}, ?)"
)
FINAL_STATUS_UNKNOWN = ("running", "ended", "unknown")  # a sync may say "finished" instead


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _mtime(path: Path) -> str | None:
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat(timespec="seconds")
    except OSError:
        return None


def _refuse_other_runs(conn: sqlite3.Connection, run_id: str, run_dir: Path, path: Path) -> None:
    others = [
        row[0] for row in conn.execute("SELECT run_id FROM runs WHERE run_id != ?", (run_id,))
    ]
    if others:
        raise db.StoreError(
            f"{path}: holds run {others[0]}, but {run_dir}/run_manifest.json is run "
            f"{run_id}; a run directory's store holds its own run only - move {path} "
            "aside and sync again to rebuild it"
        )


def check_store_run(path: Path, run_id: str, run_dir: Path) -> None:
    """Refuse a store that cannot be used or holds another run before a writer opens it
    (opening to write switches the journal mode, which touches the file's header)."""
    if not path.is_file() or path.stat().st_size == 0:
        return  # no store yet (or a directory in its place: open_writer names that)
    conn = db.open_reader(path, STORE, allow_new=True)
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] == 0:
            return  # a SQLite file with no schema yet: open_writer creates it
        _refuse_other_runs(conn, run_id, run_dir, path)
    except sqlite3.Error as exc:
        raise db.translate(exc, path) from None
    finally:
        conn.close()


def write_run(
    conn: sqlite3.Connection,
    files: RunFiles,
    path: Path,
    *,
    status: str,
    stop_reason: str | None,
    ended: str | None,
    replace_exports: bool,
) -> None:
    """Replace the run's rows with ``files``'s, in the caller's transaction. Export
    artifacts are kept unless ``replace_exports`` (the trainer does not hash exports)."""
    _refuse_other_runs(conn, files.run_id, files.run_dir, path)
    columns = {**files.run, "status": status, "stop_reason": stop_reason, "ended": ended}
    names = ", ".join(columns)
    updates = ", ".join(f"{k} = excluded.{k}" for k in columns)
    conn.execute(
        f"INSERT INTO runs (run_id, {names}) VALUES (?, {', '.join('?' for _ in columns)}) "
        f"ON CONFLICT (run_id) DO UPDATE SET {updates}",
        (files.run_id, *columns.values()),
    )
    conn.execute("DELETE FROM params WHERE run_id = ?", (files.run_id,))
    conn.executemany(
        "INSERT INTO params (run_id, key, value) VALUES (?, ?, ?)",
        [(files.run_id, k, v) for k, v in files.params],
    )
    conn.execute("DELETE FROM metrics WHERE run_id = ?", (files.run_id,))
    conn.executemany(METRICS_INSERT, [(files.run_id, *row) for row in files.metrics])
    kinds = "" if replace_exports else " AND kind != 'export'"
    conn.execute(f"DELETE FROM artifacts WHERE run_id = ?{kinds}", (files.run_id,))
    conn.executemany(
        "INSERT INTO artifacts (run_id, kind, path, sha256, bytes, step) VALUES (?, ?, ?, ?, ?, ?)",
        [a.row(files.run_id) for a in files.artifacts if replace_exports or a.kind != "export"],
    )


def stored_end(conn: sqlite3.Connection, run_id: str) -> tuple[str, str | None, str | None] | None:
    """(status, stop reason, ended) of the run as stored, or None when it is not."""
    return conn.execute(
        "SELECT status, stop_reason, ended FROM runs WHERE run_id = ?", (run_id,)
    ).fetchone()


def _end_of(
    stored: tuple[str, str | None, str | None] | None, files: RunFiles
) -> tuple[str, str | None, str | None]:
    """How the run ended: as training_state.json says; without its end record (a run made
    before the trainer wrote one, or one that is going or was killed), as stored, unless
    the files show what the store did not know."""
    if files.end is not None:
        return files.end.status, files.end.reason, files.end.ended
    reached = files.last_step is not None and files.last_step == files.run.get("max_steps")
    if stored is not None and not (reached and stored[0] in FINAL_STATUS_UNKNOWN):
        return stored
    if reached:
        return "finished", "last_step", _mtime(files.run_dir / TRAINING_STATE_FILE)
    return "unknown", None, None


@dataclass(frozen=True)
class SyncSummary:
    run_id: str
    name: str
    store: Path
    steps: int
    artifacts: int
    status: str
    skipped: list[str]
    registry: Path | None  # None: not registered (registry_error says why)
    registry_error: str | None


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def sync_run_dir(run_dir: Path, *, timeout: float | None = None) -> SyncSummary:
    """Rebuild ``run_dir``'s runs.db from its files and register the run. RunDirError when
    it is no run directory, or holds text the store cannot (nothing created); StoreError
    when its store cannot be used (left as it is); RunDirLockedError, naming the holder's
    pid, when another process writes ``run_dir`` (a training run, a pipeline: its writer
    lock, trainer/runfiles/lock.py, is taken for the sync). A registry that cannot be
    written is reported in the summary: the store was still synced."""
    run_dir = check_run_dir(run_dir)
    unusable = utf8_dir_problem(run_dir)
    if unusable:  # before the lock file is made in it
        raise RunDirError(unusable)
    with writer_lock(run_dir, "trainer runs sync"):
        return _sync(run_dir, timeout)


def _sync(run_dir: Path, timeout: float | None) -> SyncSummary:
    files = read_run_dir(run_dir, exports=True)  # bad input is refused before any write
    seen = _stat(run_dir / METRICS_FILE)
    path = run_dir / RUNS_DB_FILE
    check_store_run(path, files.run_id, run_dir)
    created = not os.path.lexists(path)
    try:
        files, status = _write_store(path, files, seen, timeout)
    except BaseException:
        if created:  # a store this sync began (a full disk): none is left, not an empty one
            _remove_store(path)
        raise
    reg_path, reg_error = None, None
    try:
        reg_path = registry.register(
            files.run_id, run_dir, files.run["name"], files.run["started"], timeout=timeout
        )
    except (db.StoreError, OSError) as exc:
        reg_error = str(exc)
    return SyncSummary(
        run_id=files.run_id,
        name=files.run["name"],
        store=path,
        steps=len(files.metrics),
        artifacts=len(files.artifacts),
        status=status,
        skipped=files.skipped,
        registry=reg_path,
        registry_error=reg_error,
    )


def _write_store(
    path: Path, files: RunFiles, seen: tuple[int, int] | None, timeout: float | None
) -> tuple[RunFiles, str]:
    """Replace the run's rows in the store at ``path`` with ``files``'s (read when
    metrics.jsonl's size and mtime were ``seen``), in one transaction; (the files written,
    the status recorded)."""
    conn = db.open_writer(path, STORE, timeout=timeout)
    try:
        with db.transaction(conn):
            # A run of a trainer without the writer lock may have written a step meanwhile.
            if _stat(files.run_dir / METRICS_FILE) != seen:
                files = read_run_dir(files.run_dir, exports=True)
            status, reason, ended = _end_of(stored_end(conn, files.run_id), files)
            write_run(
                conn,
                files,
                path,
                status=status,
                stop_reason=reason,
                ended=ended,
                replace_exports=True,
            )
    except sqlite3.Error as exc:
        raise db.translate(exc, path, timeout) from None
    finally:
        db.close_writer(conn, STORE)
    return files, status


def _remove_store(path: Path) -> None:
    """Remove the store file at ``path`` and SQLite's companions of it (journal, WAL)."""
    for name in (path.name, *(path.name + suffix for suffix in ("-journal", "-wal", "-shm"))):
        with contextlib.suppress(FileNotFoundError):
            (path.parent / name).unlink()
