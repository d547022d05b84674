"""What a training run records in its store as it goes: RunRecorder.

    recorder = RunRecorder(out_dir)
    recorder.start()                          # after run_manifest.json (and a resume's rewind)
    recorder.step(line, last_step=1000)       # per step: one row, one commit
    recorder.checkpoint(15, checkpoint_dir)   # after a successful save (and its pruning)
    recorder.finish("finished", "last_step", ended=t)  # how the run ended (metrics.finish)
    recorder.close()

``start`` registers the run and makes the store say what the run directory's files say
(sync.write_run, in one transaction): on a fresh run that is the manifest's params; on a
resume, metrics.jsonl has already been rewound to the checkpoint's step (metrics.rewind),
so the store's rows of the steps taken again go with it, and each step is stored once,
equal to its line. A store that missed steps (it was locked during an earlier launch) is
made whole again the same way.

``step`` inserts one row and commits: WAL with ``synchronous=NORMAL`` makes that an append
to the WAL file without an fsync (tens of microseconds; tests/unit/trainer/
test_store_recorder.py measures it). ``checkpoint`` re-reads the checkpoints' manifests
(sha256s from the save, never re-hashed), so checkpoints pruned by retention leave the
store too. ``finish`` records the status and stop reason; ``close`` without a finish
records ``finished`` when the last step was max_steps, and ``ended`` (the process closed
the store without saying why) otherwise.

Failure policy: the store must never stop a training run, nor fail quietly. The first
error (locked past the busy timeout, disk full, a corrupt or foreign runs.db, a directory
in its place) rolls back the transaction in progress, logs ONE warning naming runs.db and
the error (``trainer: WARNING: run store ...`` on the terminal, trainer/terminal.py), and
the recorder writes nothing more for the rest of the run.
metrics.jsonl is complete regardless; `trainer runs sync RUN_DIR` rebuilds the store. The
registry is written at start under the same rule, with its own warning.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path

from trainer.checkpoint.layout import CheckpointError
from trainer.runfiles.metrics_file import MetricsFileError
from trainer.runfiles.names import RUNS_DB_FILE
from trainer.store import db, registry, sync
from trainer.store.identity import IdentityError
from trainer.store.rundir import (
    RunDirError,
    checkpoint_artifacts,
    metric_row,
    read_run_dir,
    read_run_manifest,
    run_columns,
)
from trainer.store.schema import STORE
from trainer.userfiles import display

log = logging.getLogger(__name__)

#: What a store or registry failure can raise; anything else is a bug and propagates.
FAILURES = (
    sqlite3.Error,
    OSError,
    db.StoreError,
    RunDirError,
    MetricsFileError,
    CheckpointError,
    IdentityError,
    UnicodeEncodeError,  # a path of non-UTF-8 bytes, which SQLite's TEXT cannot hold
)


class RunRecorder:
    """The live writer of one run directory's runs.db (rank 0 only: the one writer)."""

    def __init__(self, run_dir: Path, *, timeout: float | None = None) -> None:
        self.run_dir = Path(run_dir).resolve()
        self.path = self.run_dir / RUNS_DB_FILE
        self.timeout = db.busy_timeout(timeout)
        self.run_id: str | None = None
        self.failure: str | None = None  # the warning logged, once the store is given up
        self.registry_failure: str | None = None
        self._conn: sqlite3.Connection | None = None
        self._max_steps: int | None = None
        self._last_step: int | None = None
        self._finished = False

    # ------------------------------------------------------------ failure policy
    def _give_up(self, exc: BaseException) -> None:
        if isinstance(exc, sqlite3.Error):
            exc = db.translate(exc, self.path, self.timeout)
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # the connection is closed next; SQLite rolls back what is open
            finally:
                conn.close()
        self.failure = (
            f"WARNING: run store {self.path} is no longer recorded: {exc}. Training "
            f"continues and metrics.jsonl stays complete; rebuild the store afterwards with "
            f"`trainer runs sync {self.run_dir}`"
        )
        log.warning("%s", self.failure)

    def _guarded(self, action: Callable[[sqlite3.Connection], None]) -> None:
        """Run ``action`` in one transaction; on a store failure, give the store up."""
        if self._conn is None:
            return
        try:
            with db.transaction(self._conn):
                action(self._conn)
        except FAILURES as exc:
            self._give_up(exc)

    # ------------------------------------------------------------ the run
    def start(self) -> None:
        """Register the run, open runs.db (created if absent), make it the files' record,
        status ``running``. Never raises for a store or registry failure (warned)."""
        self._register()
        try:
            _, run_id, _ = read_run_manifest(self.run_dir)
            sync.check_store_run(self.path, run_id, self.run_dir)
            self._conn = db.open_writer(self.path, STORE, timeout=self.timeout)
        except FAILURES as exc:
            self._give_up(exc)
            return

        def record(conn: sqlite3.Connection) -> None:
            files = read_run_dir(self.run_dir)
            self.run_id = files.run_id
            self._max_steps = files.run["max_steps"]
            self._last_step = files.last_step
            sync.write_run(
                conn,
                files,
                self.path,
                status="running",
                stop_reason=None,
                ended=None,
                replace_exports=False,
            )

        self._guarded(record)

    def _register(self) -> None:
        try:
            manifest, run_id, started = read_run_manifest(self.run_dir)
            name = run_columns(self.run_dir, manifest, started)["name"]
            registry.register(run_id, self.run_dir, name, started, timeout=self.timeout)
        except FAILURES as exc:
            self.registry_failure = (
                f"WARNING: this run was not registered in {registry.registry_path()}: "
                f"{exc}. Training continues; register it afterwards with "
                f"`trainer runs sync {display(self.run_dir)}`"  # never a lone surrogate
            )
            log.warning("%s", self.registry_failure)

    def step(self, record: dict, *, last_step: int) -> None:
        """Store one step's metrics record (as written to metrics.jsonl) and commit;
        ``last_step``: the step the run ends at (runs.max_steps)."""
        if self._conn is None:
            return

        def insert(conn: sqlite3.Connection) -> None:
            row = metric_row(record, f"{self.path}: step {record.get('step')!r}")
            conn.execute(sync.METRICS_INSERT, (self.run_id, *row))
            if last_step != self._max_steps:
                conn.execute(
                    "UPDATE runs SET max_steps = ? WHERE run_id = ?", (last_step, self.run_id)
                )
            self._last_step = row[0]

        self._guarded(insert)
        self._max_steps = last_step

    def checkpoint(self, step: int, checkpoint_dir: Path) -> None:
        """After a successful save of ``step`` into ``checkpoint_dir`` (and the pruning that
        follows it): the checkpoint artifacts become those of the checkpoints on disk."""
        if self._conn is None:
            return

        def replace(conn: sqlite3.Connection) -> None:
            found, _ = checkpoint_artifacts(self.run_dir, Path(checkpoint_dir).parent)
            conn.execute(
                "DELETE FROM artifacts WHERE run_id = ? AND kind = 'checkpoint'", (self.run_id,)
            )
            conn.executemany(
                "INSERT INTO artifacts (run_id, kind, path, sha256, bytes, step) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [a.row(self.run_id) for a in found],
            )

        self._guarded(replace)

    def finish(self, status: str, reason: str | None, *, ended: str | None = None) -> None:
        """Record how the run ended (``finished``, ``early_stopping``, ``signal``, ...);
        ``ended``: the time training_state.json says (default: now)."""
        if not status:
            raise ValueError("a run's status is a non-empty string")
        self._finished = True
        when = sync.now() if ended is None else ended

        def update(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE runs SET status = ?, stop_reason = ?, ended = ? WHERE run_id = ?",
                (status, reason, when, self.run_id),
            )

        self._guarded(update)

    def close(self) -> None:
        """Finish (when nobody did: ``finished`` at max_steps, else ``ended``), then close
        the store. Idempotent."""
        if self._conn is not None and not self._finished:
            if self._last_step is not None and self._last_step == self._max_steps:
                self.finish("finished", "last_step")
            else:
                self.finish("ended", None)
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                db.close_writer(conn, STORE)
            except sqlite3.Error as exc:  # the data is committed; only the close failed
                log.warning("WARNING: closing %s: %s", self.path, exc)
