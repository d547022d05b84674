"""A stored run read back for `trainer runs`: where it is, and what its store says.

    target = locate("3f2a")                  # an id prefix (registry) or a run directory
    view = load_view(target)                 # run row, params, metrics summary, artifacts

Read-only throughout: stores are opened with mode=ro (db.open_reader), so a command that
reads cannot change, repair or delete a store, whatever state it is in.

A run stored as ``running`` is shown ``crashed`` when no process holds its directory's
writer lock (trainer/runfiles/lock.py writer_active; every writer of a run holds it from
its first file to its end record): a SIGKILL, the out-of-memory killer or a machine going
down ends a run without the end record that any other ending writes.
"""

from __future__ import annotations

import json
import math
import sqlite3
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gates.io.files import read_regular
from trainer.runfiles.lock import writer_active
from trainer.runfiles.names import RUNS_DB_FILE, TRAINING_STATE_FILE
from trainer.store import db, registry
from trainer.store.rundir import JSON_LIMIT, RunDirError, check_run_dir
from trainer.store.schema import STORE

#: Why a run stored as running is shown crashed.
CRASHED = (
    "stored as running, but no process holds its writer lock: it ended without its end "
    "record (killed - SIGKILL, the out-of-memory killer - or its machine went down); its "
    "checkpoints and metrics up to then are kept"
)


@dataclass(frozen=True)
class Target:
    """A run to read: its directory, and its id when it was named by one."""

    run_dir: Path
    run_id: str | None


def _looks_like_path(ref: str) -> bool:
    return "/" in ref or ref.startswith((".", "~")) or Path(ref).exists()


def locate(ref: str, registry_file: Path | None = None) -> Target:
    """A run directory path (it must be one), or a run id or unique prefix of one looked up
    in the registry (whose directory must still exist). RunDirError or RegistryError."""
    if _looks_like_path(ref):
        return Target(check_run_dir(Path(ref).expanduser()), None)
    found = registry.find_run(ref, registry_file)
    if not found.run_dir.is_dir():
        raise RunDirError(
            f"run {found.run_id} ({found.name}): its directory {found.run_dir} is missing"
        )
    return Target(check_run_dir(found.run_dir), found.run_id)


@dataclass(frozen=True)
class MetricsSummary:
    steps: int
    first_step: int | None
    last_step: int | None
    first_loss: float | None
    last_loss: float | None
    best_val_loss: float | None
    best_val_step: int | None
    evaluations: int
    median_tokens_per_s: float | None


@dataclass(frozen=True)
class RunView:
    store: Path
    run: dict[str, Any]  # the runs row
    params: dict[str, Any]  # dotted key -> value (parsed from its JSON)
    metrics: MetricsSummary
    artifacts: list[dict[str, Any]]
    behind: int | None  # training_state.json's last step, when the store has not got it

    def to_json(self) -> dict[str, Any]:
        return {
            "store": str(self.store),
            "run": self.run,
            "status_note": self.status_note(),
            "metrics": asdict(self.metrics),
            "params": self.params,
            "artifacts": self.artifacts,
        }

    def status_note(self) -> str | None:
        if self.behind is None:
            return None
        return (
            f"the store ends at step {self.metrics.last_step}, training_state.json at step "
            f"{self.behind}: run `trainer runs sync {self.run['run_dir']}` to catch it up"
        )


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _summary(conn: sqlite3.Connection, run_id: str) -> MetricsSummary:
    count, first, last = conn.execute(
        "SELECT count(*), min(step), max(step) FROM metrics WHERE run_id = ?", (run_id,)
    ).fetchone()

    def loss_at(step: int | None) -> float | None:
        if step is None:
            return None
        row = conn.execute(
            "SELECT loss FROM metrics WHERE run_id = ? AND step = ?", (run_id, step)
        ).fetchone()
        return row[0]

    best = conn.execute(
        "SELECT val_loss, step FROM metrics WHERE run_id = ? AND val_loss IS NOT NULL "
        "ORDER BY val_loss, step LIMIT 1",
        (run_id,),
    ).fetchone()
    evaluations = conn.execute(
        "SELECT count(*) FROM metrics WHERE run_id = ? AND val_loss IS NOT NULL", (run_id,)
    ).fetchone()[0]
    speeds = [
        row[0]
        for row in conn.execute(
            "SELECT tokens_per_s FROM metrics WHERE run_id = ? AND tokens_per_s IS NOT NULL",
            (run_id,),
        )
        if math.isfinite(row[0])
    ]
    return MetricsSummary(
        steps=count,
        first_step=first,
        last_step=last,
        first_loss=loss_at(first),
        last_loss=loss_at(last),
        best_val_loss=None if best is None else best[0],
        best_val_step=None if best is None else best[1],
        evaluations=evaluations,
        median_tokens_per_s=_finite(statistics.median(speeds)) if speeds else None,
    )


def _state_last_step(run_dir: Path) -> int | None:
    """training_state.json's last step; None when it cannot say (then no note is made)."""
    try:  # under the one read rule: a FIFO there is no state, never a wait
        state = json.loads(read_regular(run_dir / TRAINING_STATE_FILE, JSON_LIMIT))
        step = state["last"]["step"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _run_row(conn: sqlite3.Connection, target: Target, path: Path) -> dict[str, Any]:
    """The one run of a run directory's store (the registered one, when named by id)."""
    conn.row_factory = sqlite3.Row
    rows = [dict(r) for r in conn.execute("SELECT * FROM runs ORDER BY run_id")]
    conn.row_factory = None
    if not rows:
        raise db.StoreError(
            f"{path}: holds no run; run `trainer runs sync {target.run_dir}` to record it"
        )
    if len(rows) > 1:
        raise db.StoreError(f"{path}: holds {len(rows)} runs; a run store holds one")
    if target.run_id is not None and rows[0]["run_id"] != target.run_id:
        raise db.StoreError(
            f"{path}: holds run {rows[0]['run_id']}, not the registered run "
            f"{target.run_id}; run `trainer runs sync {target.run_dir}` to register it"
        )
    run = rows[0]
    run["git_dirty"] = None if run["git_dirty"] is None else bool(run["git_dirty"])
    return run


def _params(conn: sqlite3.Connection, run_id: str, path: Path) -> dict[str, Any]:
    """The run's params, each value parsed from its JSON; StoreCorruptError naming the
    store and the key for one that does not parse (the store writes JSON only)."""
    params = {}
    for key, value in conn.execute(
        "SELECT key, value FROM params WHERE run_id = ? ORDER BY key", (run_id,)
    ):
        try:
            params[key] = json.loads(value)
        except (TypeError, ValueError):
            raise db.StoreCorruptError(
                f"{path}: param {key!r} holds {str(value)[:40]!r}, not JSON; rebuild the "
                f"store with `trainer runs sync` (move {path.name} aside first)"
            ) from None
    return params


def load_view(target: Target) -> RunView:
    """What ``target``'s store says about its run. StoreError naming runs.db when there is
    none or it cannot be read (locked, corrupt, newer, not ours)."""
    path = target.run_dir / RUNS_DB_FILE
    if not path.exists():
        raise db.StoreError(
            f"{path}: no such file: the run has no store yet; run "
            f"`trainer runs sync {target.run_dir}` to record it"
        )
    conn = db.open_reader(path, STORE)
    try:
        run = _run_row(conn, target, path)
        run_id = run["run_id"]
        params = _params(conn, run_id, path)
        metrics = _summary(conn, run_id)
        artifacts = [
            {"kind": k, "path": p, "sha256": s, "bytes": b, "step": st}
            for k, p, s, b, st in conn.execute(
                "SELECT kind, path, sha256, bytes, step FROM artifacts WHERE run_id = ? "
                "ORDER BY kind, step, path",
                (run_id,),
            )
        ]
    except sqlite3.Error as exc:
        raise db.translate(exc, path) from None
    finally:
        conn.close()
    if run["status"] == "running" and writer_active(target.run_dir) is False:
        run = {**run, "status": "crashed", "stop_reason": CRASHED}
    state_step = _state_last_step(target.run_dir)
    last = metrics.last_step or 0
    behind = state_step if state_step is not None and state_step > last else None
    return RunView(path, run, params, metrics, artifacts, behind)
