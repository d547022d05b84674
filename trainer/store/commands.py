"""`trainer runs ls | show RUN | compare RUN RUN | sync RUN_DIR | forget RUN` - the run store.

    trainer runs ls [--json]                  # registered runs: id, name, status, steps, loss
    trainer runs show 3f2a [--json]           # params, status, metrics summary, artifacts
    trainer runs show runs/demo/train         # a run directory works as well as an id
    trainer runs compare 3f2a 9c1b [--json]   # params that differ, metrics side by side
    trainer runs sync runs/demo/train         # (re)build runs.db from the run's files, register
    trainer runs forget 3f2a                  # unregister a run; its files are kept

RUN is a run id, any unique prefix of one (ls prints 8 characters), or a run directory
(``forget``: an id or prefix only, since the directory may be gone). Runs register
themselves when they start; `sync` records a run made before the store existed, or
rebuilds a store that was deleted or stopped recording (trainer/store/sync.py). `forget`
removes a run from the registry and nothing else: its directory and files stay.

ls, show and compare only read, and take no lock: every store is opened read-only and
never repaired, rewritten or deleted. sync writes the run directory, so it takes its
writer lock (trainer/runfiles/lock.py) and is refused, naming the holder's pid, while a
training run, a pipeline or an export writes it. Exit status: 0 done; 1 a RUN that is
not a run directory or no registered id (an ambiguous prefix lists the candidates), a
store that is missing, corrupt, locked by another writer (named when the system says), of
a newer schema, or not a shipgate store - the file named, left as it is - or a run
directory another process writes (sync). One bad run never hides the others: ls lists
every run, a bad one (its registry row, directory or store unreadable) with status
``error``, and exits 1 after naming each, with the `forget` that unregisters it; a
registered run whose directory is gone is listed as ``missing``, which is not an error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from trainer import exit_codes
from trainer.userfiles import display


def _fail(command: str, message: str) -> int:
    print(f"trainer runs {command}: error: {message}", file=sys.stderr)
    return exit_codes.FINDINGS


def ls_entry(run: Any) -> tuple[dict[str, Any], str | None]:
    """(the ls row of a registered run, why its store could not be read: None when it
    could). A bad run - its registry row, its directory or its store unreadable - is a row
    of status ``error`` with the reason; it never keeps the other runs from being listed."""
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
        "run_dir": display(run.run_dir),
        "error": None,
    }
    try:
        if run.problem is not None:
            raise StoreError(run.problem)
        if not run.run_dir.exists():  # raises what it cannot tell (EACCES): caught below
            return entry, None  # gone: listed as missing, which is no error
        view = load_view(Target(check_run_dir(run.run_dir), run.run_id))
    except (RunDirError, StoreError, OSError) as exc:
        why = (
            f"{display(run.run_dir)}: {exc.strerror or exc}"
            if isinstance(exc, OSError)
            else str(exc)
        )
        entry |= {"status": "error", "error": why}
        return entry, why
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
    for entry, error in listed:
        if error is not None:
            short = entry["run_id"][: render.ID_CHARS]
            print(
                f"trainer runs ls: error: run {short}: {error} (`trainer runs forget {short}` "
                "unregisters it; its files are kept)",
                file=sys.stderr,
            )
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
    from trainer.runfiles.lock import RunDirLockedError  # noqa: PLC0415
    from trainer.store.db import StoreError  # noqa: PLC0415
    from trainer.store.rundir import RunDirError  # noqa: PLC0415
    from trainer.store.sync import sync_run_dir  # noqa: PLC0415

    try:
        done = sync_run_dir(args.run_dir)
    except (RunDirError, StoreError, RunDirLockedError) as exc:
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


def cmd_forget(args: argparse.Namespace) -> int:
    from trainer.store import registry  # noqa: PLC0415
    from trainer.store.db import StoreError  # noqa: PLC0415

    try:
        run = registry.forget(args.ref)
    except (registry.RegistryError, StoreError) as exc:
        return _fail("forget", str(exc))
    print(
        f"forgot run {run.run_id} ({run.name}): removed from {registry.registry_path()}; "
        f"its directory {display(run.run_dir)} is left as it is (`trainer runs sync` "
        "registers it again)"
    )
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
    q = verbs.add_parser(
        "forget", help="unregister a run (the registry entry only; its files are kept)"
    )
    q.add_argument("ref", metavar="RUN", help="a run id or a unique prefix (as ls prints it)")
    q.set_defaults(run=cmd_forget)
