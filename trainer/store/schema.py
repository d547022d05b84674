"""The two SQLite schemas: a run directory's store (runs.db) and the user's registry.

Each file says what it is and which version of its schema it holds, in its header:
``PRAGMA application_id`` (a shipgate run store, or a shipgate registry, not some other
SQLite file that happens to be called runs.db) and ``PRAGMA user_version`` (the schema
version). A file of a newer version than this code knows is refused, never "upgraded" or
read half-understood (db.py).

runs.db (one run per file: the run of its directory):

- ``runs``: one row per run: its id (identity.py), name, directory, first start and this
  launch, end, status and stop reason, git commit, config sha256, seed, world size, device.
- ``params``: the resolved config flattened to dotted keys (``optimizer.lr``), each value
  as JSON text (``0.003``, ``"adamw"``, ``true``, ``[0.9, 0.95]``).
- ``metrics``: one row per step, PRIMARY KEY (run, step), so a step is there once. SQLite
  has no NaN: a NaN value is NULL (the loop refuses non-finite losses anyway); keys of a
  metrics record beyond the columns are kept in ``extra`` as JSON.
- ``artifacts``: files of the run with their sha256 and size: ``checkpoint`` (from each
  checkpoint's manifest.json, never re-hashed: a format 3 file's is the sha256 of its range
  digests, trainer.checkpoint.manifest.content_digest), ``export`` (hashed by `trainer runs sync`)
  and ``file`` (run_manifest.json). Paths are relative to the run directory.
"""

from __future__ import annotations

from dataclasses import dataclass

REGISTRY_DB = "registry.db"


@dataclass(frozen=True)
class Schema:
    """One kind of store file: what it is called in messages, its header values, its DDL,
    and its journal mode at work (``wal`` or ``delete``)."""

    what: str
    application_id: int
    version: int
    ddl: tuple[str, ...]
    journal_mode: str


STORE = Schema(
    what="run store",
    application_id=0x53475253,  # "SGRS": shipgate run store
    version=1,
    ddl=(
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            run_dir TEXT NOT NULL,
            started TEXT,
            launched TEXT,
            ended TEXT,
            status TEXT NOT NULL,
            stop_reason TEXT,
            git_commit TEXT,
            git_dirty INTEGER,
            config_sha256 TEXT,
            data_manifest_sha256 TEXT,
            seed INTEGER,
            world_size INTEGER,
            device TEXT,
            host TEXT,
            trainer_version TEXT,
            max_steps INTEGER
        )""",
        """CREATE TABLE params (
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            PRIMARY KEY (run_id, key)
        ) WITHOUT ROWID""",
        """CREATE TABLE metrics (
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            step INTEGER NOT NULL,
            epoch INTEGER,
            loss REAL,
            lr REAL,
            grad_norm REAL,
            tokens INTEGER,
            tokens_per_s REAL,
            step_s REAL,
            val_loss REAL,
            mfu REAL,
            extra TEXT,
            PRIMARY KEY (run_id, step)
        ) WITHOUT ROWID""",
        """CREATE TABLE artifacts (
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            kind TEXT NOT NULL CHECK (kind IN ('checkpoint', 'export', 'file')),
            path TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            bytes INTEGER NOT NULL,
            step INTEGER,
            PRIMARY KEY (run_id, path)
        ) WITHOUT ROWID""",
    ),
    journal_mode="wal",
)

#: Metric columns in table order after (run_id, step); rundir.metric_row fills them.
METRIC_COLUMNS = (
    "epoch",
    "loss",
    "lr",
    "grad_norm",
    "tokens",
    "tokens_per_s",
    "step_s",
    "val_loss",
    "mfu",
)
INTEGER_METRICS = frozenset({"epoch", "tokens"})

# The registry is written once per run start and read by `trainer runs ls`: rollback
# journal mode, since home directories are often on network filesystems, where WAL's
# shared-memory index does not work.
REGISTRY = Schema(
    what="run registry",
    application_id=0x53475247,  # "SGRG": shipgate registry
    version=1,
    ddl=(
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            run_dir TEXT NOT NULL,
            name TEXT NOT NULL,
            started TEXT,
            registered TEXT NOT NULL
        )""",
    ),
    journal_mode="delete",
)
