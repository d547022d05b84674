"""The user's registry of runs: which run ids exist and in which directory.

    path = register(run_id, run_dir, name, started)   # idempotent: one row per run id
    runs = registered_runs()                           # [] when nothing was registered yet
    run = find_run("3f2a")                             # a unique id prefix; RegistryError else
    run = forget("3f2a")                               # the row removed, the files kept

One SQLite file, ``$SHIPGATE_HOME/registry.db``, by default
``${XDG_DATA_HOME:-~/.local/share}/shipgate/registry.db``: one row per run (id, absolute
run directory, name, first start, when first registered). A run registers itself when it
starts (trainer/store/recorder.py) and `trainer runs sync` registers an older one.
Registering a run id again updates its directory and name (a moved run directory, synced
from its new place) and nothing else; ``forget`` (`trainer runs forget RUN`) removes a
run's row and nothing else. The registry is only an index: each run's facts are in its
own directory's runs.db. Rows are read one by one, so a row that cannot be decoded (its
text not UTF-8) is listed with its problem instead of failing the whole listing.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from trainer.store import db
from trainer.store.schema import REGISTRY, REGISTRY_DB

HOME_ENV = "SHIPGATE_HOME"


class RegistryError(LookupError):
    """A run reference the registry cannot resolve (unknown, ambiguous); says which."""


@dataclass(frozen=True)
class RegisteredRun:
    run_id: str
    run_dir: Path
    name: str
    started: str | None
    #: Why the registry's row cannot be trusted (None: it can): its text is not UTF-8
    #: (written by something else). ls lists it with this reason; `forget` removes it.
    problem: str | None = None
    #: The id as the registry stores it (its bytes): what `forget` deletes by.
    key: bytes = field(default=b"", repr=False, compare=False)


def registry_path() -> Path:
    """$SHIPGATE_HOME/registry.db, else the XDG data directory's shipgate/registry.db (a
    relative XDG_DATA_HOME is ignored, as the XDG spec says)."""
    home = os.environ.get(HOME_ENV)
    if home:
        return Path(home) / REGISTRY_DB
    xdg = os.environ.get("XDG_DATA_HOME", "")
    data = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return data / "shipgate" / REGISTRY_DB


def _is_utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8: a path of non-UTF-8 bytes decodes (Python's
    surrogateescape) to a str with lone surrogates, which SQLite's TEXT cannot hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def register(
    run_id: str,
    run_dir: Path,
    name: str,
    started: str | None,
    *,
    path: Path | None = None,
    timeout: float | None = None,
) -> Path:
    """Record (or update) the run in the registry; returns the registry's path. StoreError
    naming the registry when it cannot be written."""
    path = registry_path() if path is None else Path(path)
    where = str(Path(run_dir).resolve())
    if not _is_utf8(where):
        raise db.StoreError(
            f"{path}: the run directory {where!r} is not a UTF-8 name, and the registry "
            "records run directories as UTF-8 text"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise db.StoreError(f"{path}: cannot create its directory: {exc}") from None
    conn = db.open_writer(path, REGISTRY, timeout=timeout)
    try:
        with db.transaction(conn):
            conn.execute(
                "INSERT INTO runs (run_id, run_dir, name, started, registered) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET "
                "run_dir = excluded.run_dir, name = excluded.name, started = excluded.started",
                (
                    run_id,
                    where,
                    name,
                    started,
                    datetime.now(UTC).isoformat(timespec="seconds"),
                ),
            )
    except sqlite3.Error as exc:
        raise db.translate(exc, path, timeout) from None
    finally:
        db.close_writer(conn, REGISTRY)
    return path


def registered_runs(path: Path | None = None) -> list[RegisteredRun]:
    """Every registered run, oldest start first; [] when there is no registry yet.
    StoreError naming the registry when it cannot be read."""
    path = registry_path() if path is None else Path(path)
    if not path.exists():
        return []
    conn = db.open_reader(path, REGISTRY)
    conn.text_factory = bytes  # each row decoded on its own: one bad row spoils no other
    try:
        rows = conn.execute(
            "SELECT run_id, run_dir, name, started FROM runs ORDER BY started, registered, run_id"
        ).fetchall()
    except sqlite3.Error as exc:
        raise db.translate(exc, path) from None
    finally:
        conn.close()
    return [_row(row, path) for row in rows]


def _text(value: object) -> tuple[str | None, bool]:
    """(a column's text, whether it was UTF-8): bytes that are not are shown as ``\\xNN``."""
    if not isinstance(value, bytes):
        return (None if value is None else str(value)), True
    try:
        return value.decode("utf-8"), True
    except UnicodeDecodeError:
        return value.decode("utf-8", "backslashreplace"), False


def _row(row: tuple, path: Path) -> RegisteredRun:
    """A registry row (read as bytes) as a RegisteredRun; text that is not UTF-8 (the
    registry written by something else) is shown escaped and named in ``problem``."""
    decoded = [_text(value) for value in row]
    columns = ("run_id", "run_dir", "name", "started")
    bad = [c for c, (_, ok) in zip(columns, decoded, strict=True) if not ok]
    run_id, run_dir, name, started = (text for text, _ in decoded)
    problem = None
    if bad:
        problem = (
            f"{path}: the row of run {run_id} holds text that is not UTF-8 "
            f"({', '.join(bad)}); not written by shipgate"
        )
    key = row[0] if isinstance(row[0], bytes) else str(row[0]).encode()
    return RegisteredRun(run_id or "", Path(run_dir or ""), name or "", started, problem, key)


def forget(prefix: str, path: Path | None = None, *, timeout: float | None = None) -> RegisteredRun:
    """Remove the registered run ``prefix`` names (as find_run resolves it) from the
    registry, and nothing else: its run directory and every file in it are left as they
    are (`trainer runs sync RUN_DIR` registers it again). The run removed; RegistryError
    when no run or several match, StoreError when the registry cannot be written."""
    path = registry_path() if path is None else Path(path)
    run = find_run(prefix, path)
    conn = db.open_writer(path, REGISTRY, timeout=timeout)
    try:
        with db.transaction(conn):
            # By the id's stored bytes: a row whose id is not UTF-8 goes by its shown id too.
            gone = conn.execute(
                "DELETE FROM runs WHERE CAST(run_id AS BLOB) = ?", (run.key,)
            ).rowcount
    except sqlite3.Error as exc:
        raise db.translate(exc, path, timeout) from None
    finally:
        db.close_writer(conn, REGISTRY)
    if gone != 1:
        raise RegistryError(f"run {run.run_id} is no longer in the registry {path}")
    return run


def find_run(prefix: str, path: Path | None = None) -> RegisteredRun:
    """The registered run whose id is ``prefix`` or starts with it; RegistryError when
    none does, or several do (listing them)."""
    path = registry_path() if path is None else Path(path)
    matches = [r for r in registered_runs(path) if r.run_id.startswith(prefix.lower())]
    if not prefix or not matches:
        raise RegistryError(f"no registered run has the id {prefix!r} (registry {path})")
    exact = [r for r in matches if r.run_id == prefix.lower()]
    if len(exact) == 1:
        return exact[0]
    if len(matches) > 1:
        listed = "; ".join(f"{r.run_id} {r.name} ({r.run_dir})" for r in matches)
        raise RegistryError(f"the id prefix {prefix!r} is ambiguous: {listed}")
    return matches[0]
