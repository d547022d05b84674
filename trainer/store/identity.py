"""A run's id and first start: minted once, kept in run_manifest.json for the run's life.

    manifest.update(launch_identity(path_of_old_manifest_or_None, created=now))
    run_id, started = identity_of(manifest, path)

A run id is a uuid4 hex (32 characters), minted when a run first starts, not derived from
the run's directory or config: two runs of one config in one place are two runs, and a run
directory that is moved or copied keeps its id. It lives in run_manifest.json (key
``run_id``, with ``run_started``, the first launch's time), because the manifest is the
run's own record: the store, derived from the run's files, can be deleted and rebuilt
(`trainer runs sync`) without the run changing its name. A resume rewrites the manifest
and carries both keys over (trainer/train/manifest.py).

A run made before run ids existed has none in its manifest; its id is derived from the
manifest's creation time, host, seed and config (the same id every time it is synced,
and the id a resume then carries over).
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from pathlib import Path
from typing import Any

from gates.io.files import canonical_sha256, read_regular

RUN_ID_KEY = "run_id"
STARTED_KEY = "run_started"
_RUN_ID = re.compile(r"^[0-9a-f]{32}$")
#: A run manifest is a few KB (the resolved config, host, versions); far more is not one.
MANIFEST_LIMIT = 16 * 1024 * 1024

log = logging.getLogger(__name__)


class IdentityError(ValueError):
    """A manifest whose run id is malformed; names the file."""


def new_run_id() -> str:
    return uuid.uuid4().hex


def _derived_id(manifest: dict[str, Any]) -> str:
    """The id of a run whose manifest predates run ids: a hash of what made it that run."""
    host = manifest.get("host")
    basis = {
        "created": manifest.get("created"),
        "host": host.get("name") if isinstance(host, dict) else None,
        "seed": manifest.get("seed"),
        "config": manifest.get("config"),
    }
    return canonical_sha256(basis, default=str)[:32]


def identity_of(manifest: dict[str, Any], path: Path) -> tuple[str, str | None]:
    """(run id, first start) of a parsed run manifest read from ``path``."""
    run_id = manifest.get(RUN_ID_KEY)
    if run_id is None:
        return _derived_id(manifest), manifest.get("created")
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise IdentityError(f"{path}: run_id {run_id!r} is not 32 lowercase hex digits")
    return run_id, manifest.get(STARTED_KEY, manifest.get("created"))


def launch_identity(previous: Path | None, *, created: str) -> dict[str, Any]:
    """The ``run_id`` and ``run_started`` keys of a manifest about to be written: carried
    over from ``previous`` (the manifest a resume replaces) or, for a new run, minted. A
    previous manifest that cannot be read gives a new id, with a warning logged."""
    if previous is not None and Path(previous).is_file():
        try:
            old = json.loads(read_regular(previous, MANIFEST_LIMIT))  # a FIFO: refused
            if not isinstance(old, dict):
                raise IdentityError(f"{previous}: not a JSON object")
            run_id, started = identity_of(old, Path(previous))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            log.warning("%s cannot be read (%s): this launch gets a new run id", previous, exc)
        else:
            return {RUN_ID_KEY: run_id, STARTED_KEY: started}
    return {RUN_ID_KEY: new_run_id(), STARTED_KEY: created}
