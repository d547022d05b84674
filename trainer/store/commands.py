"""`trainer runs ls | show RUN | compare RUN RUN | sync RUN_DIR` - the run store.

    trainer runs ls [--json]                  # registered runs: id, name, status, steps, loss
    trainer runs show 3f2a [--json]           # params, status, metrics summary, artifacts
    trainer runs show runs/demo/train         # a run directory works as well as an id
    trainer runs compare 3f2a 9c1b [--json]   # params that differ, metrics side by side
    trainer runs sync runs/demo/train         # (re)build runs.db from the run's files, register

RUN is a run id, any unique prefix of one (ls prints 8 characters), or a run directory.
Runs register themselves when they start; `sync` records a run made before the store
existed, or rebuilds a store that was deleted or stopped recording (trainer/store/sync.py).

ls, show and compare only read: every store is opened read-only and never repaired,
rewritten or deleted. Exit status: 0 done; 1 a RUN that is not a run directory or no
registered id (an ambiguous prefix lists the candidates), a store that is missing,
corrupt, locked by another writer (named when the system says), of a newer schema, or not
a shipgate store - the file named, left as it is. ls lists every run even then, and exits
1 after naming each store it could not read; a registered run whose directory is gone is
listed as ``missing``, which is not an error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from trainer import exit_codes


def _fail(command: str, message: str) -> int:
    print(f"trainer runs {command}: error: {message}", file=sys.stderr)
    return exit_codes.FINDINGS


def ls_entry(run: Any) -> tuple[dict[str, Any], str | None]:
    """(the ls row of a registered run, the error that kept its store from being read)."""
    from trainer.store.db import StoreError  # noqa: PLC0415
    from trainer.store.query import Target, load_view  # noqa: PLC0415
    from trainer.store.rundir import RunDirError, check_run_dir  # noqa: PLC0415

    entry: dict[str, Any] = {
        "run_id": run.run_id,
        "name": run.name,
        "status": "missing",
        "stop_reason": None,
        "last_step": None,
        "max_steps": None,
        "last_loss": None,
        "best_val_loss": None,
        "best_val_step": None,
        "started": run.started,
        "run_dir": str(run.run_dir),
        "error": None,
    }
    if not run.run_dir.exists():
        return entry, None
    try:
        view = load_view(Target(check_run_dir(run.run_dir), run.run_id))
    except (RunDirError, StoreError) as exc:
        entry |= {"status": "error", "error": str(exc)}
        return entry, str(exc)
    m = view.metrics
    entry |= {
        "name": view.run["name"],
        "status": view.run["status"],
        "stop_reason": view.run["stop_reason"],
        "last_step": m.last_step,
        "max_steps": view.run["max_steps"],
        "last_loss": m.last_loss,
        "best_val_loss": m.best_val_loss,
        "best_val_step": m.best_val_step,
        "note": view.status_note(),
    }
    return entry, None


def cmd_ls(args: argparse.Namespace) -> int:
    from trainer.store import registry, render  # noqa: PLC0415
    from trainer.store.db import StoreError  # noqa: PLC0415

    path = registry.registry_path()
    try:
        runs = registry.registered_runs(path)
    except StoreError as exc:
        return _fail("ls", str(exc))
    listed = [ls_entry(run) for run in runs]
    entries = [entry for entry, _ in listed]
    errors = [error for _, error in listed if error is not None]
    if args.json:
        print(json.dumps({"registry": str(path), "runs": entries}, indent=2))
    elif entries:
        print(render.ls_table(entries))
    else:
        print(f"no runs registered in {path}")
    for error in errors:
        print(f"trainer runs ls: error: {error}", file=sys.stderr)
    return exit_codes.FINDINGS if errors else exit_codes.OK


def _views(command: str, refs: list[str]) -> list[Any] | int:
    """The stored runs ``refs`` name, or the exit status of the error that stopped it."""
    from trainer.store.db import StoreError  # noqa: PLC0415
    from trainer.store.query import load_view, locate  # noqa: PLC0415
    from trainer.store.registry import RegistryError  # noqa: PLC0415
    from trainer.store.rundir import RunDirError  # noqa: PLC0415

    try:
        return [load_view(locate(ref)) for ref in refs]
    except (RunDirError, StoreError, RegistryError) as exc:
        return _fail(command, str(exc))


def cmd_show(args: argparse.Namespace) -> int:
    from trainer.store import render  # noqa: PLC0415

    views = _views("show", [args.ref])
    if isinstance(views, int):
        return views
    print(json.dumps(views[0].to_json(), indent=2) if args.json else render.show(views[0]))
    return exit_codes.OK


def cmd_compare(args: argparse.Namespace) -> int:
    from trainer.store import render  # noqa: PLC0415
    from trainer.store.compare import comparison  # noqa: PLC0415

    views = _views("compare", args.refs)
    if isinstance(views, int):
        return views
    result = comparison(*views)
    print(json.dumps(result, indent=2) if args.json else render.compare(result))
    return exit_codes.OK


def cmd_sync(args: argparse.Namespace) -> int:
    from trainer.store.db import StoreError  # noqa: PLC0415
    from trainer.store.rundir import RunDirError  # noqa: PLC0415
    from trainer.store.sync import sync_run_dir  # noqa: PLC0415

    try:
        done = sync_run_dir(args.run_dir)
    except (RunDirError, StoreError) as exc:
        return _fail("sync", str(exc))
    for why in done.skipped:
        print(f"trainer runs sync: not a whole checkpoint, left out: {why}", file=sys.stderr)
    print(
        f"run {done.run_id} ({done.name}): {done.steps} steps, {done.artifacts} artifacts, "
        f"status {done.status}; recorded in {done.store}"
    )
    if done.registry_error is not None:
        return _fail(
            "sync", f"the store is synced, but the run is not registered: {done.registry_error}"
        )
    print(f"registered in {done.registry}")
    return exit_codes.OK


def add_runs_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "runs",
        help="the run store: list, show, compare and sync recorded training runs",
        description=__doc__.splitlines()[0],
    )
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    q = verbs.add_parser("ls", help="registered runs: id, name, status, steps, loss, directory")
    q.add_argument("--json", action="store_true")
    q.set_defaults(run=cmd_ls)
    q = verbs.add_parser("show", help="one run: params, status, metrics summary, artifacts")
    q.add_argument("ref", metavar="RUN", help="a run id (or unique prefix) or a run directory")
    q.add_argument("--json", action="store_true")
    q.set_defaults(run=cmd_show)
    q = verbs.add_parser("compare", help="two runs: params that differ, metrics side by side")
    q.add_argument("refs", nargs=2, metavar="RUN")
    q.add_argument("--json", action="store_true")
    q.set_defaults(run=cmd_compare)
    q = verbs.add_parser("sync", help="(re)build a run directory's runs.db and register it")
    q.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    q.set_defaults(run=cmd_sync)
