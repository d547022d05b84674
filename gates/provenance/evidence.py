"""Evidence files: what a gate measurement records, and how it is read back.

Schema: gates/schemas/evidence.schema.json (docs/evidence.md). One current file per gate at
evidence/<contract-id>/<GATE-ID>.json; history is kept by git.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import platform
import signal
import subprocess
import sysconfig
import tempfile
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from gates.io import jsonfile
from gates.io.files import update_digest
from gates.io.jsonpath import json_path

EVIDENCE_SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "evidence.schema.json"
#: An evidence file is kilobytes (one record, its artifacts' hashes); far more is not evidence.
MAX_EVIDENCE_BYTES = 16 * 1024 * 1024
PACKAGES = ("torch", "numpy", "safetensors", "tokenizers", "jsonschema", "ruamel.yaml", "shipgate")


class EvidenceError(Exception):
    """An evidence file is unreadable, not JSON, or not valid evidence."""


def evidence_path(contract_id: str, gate_id: str) -> str:
    return f"evidence/{contract_id}/{gate_id}.json"


@cache
def validator() -> Draft202012Validator:
    schema = json.loads(EVIDENCE_SCHEMA.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def schema_errors(evidence: Any) -> list[str]:
    out = []
    for e in sorted(validator().iter_errors(evidence), key=lambda e: list(e.path)):
        out.append(f"{json_path(e.path)}: {e.message}")
    return out


def load(path: Path) -> dict:
    """Read and schema-check an evidence file, or raise EvidenceError saying why."""
    try:
        data = jsonfile.read_json(path, MAX_EVIDENCE_BYTES)
    except FileNotFoundError as exc:
        raise EvidenceError(f"{path}: {exc.strerror}") from None
    except jsonfile.JsonFileError as exc:  # a FIFO, too large, not UTF-8, not JSON, too deep
        raise EvidenceError(str(exc)) from None
    errors = schema_errors(data)
    if errors:
        raise EvidenceError(
            f"{path}: {errors[0]}" + (f" (+{len(errors) - 1} more)" if len(errors) > 1 else "")
        )
    return data


@dataclass(frozen=True)
class FileRef:
    path: str
    sha256: str
    bytes: int

    def as_dict(self) -> dict:
        return {"path": self.path, "sha256": self.sha256, "bytes": self.bytes}


def sha256_of(path: Path) -> tuple[str, int]:
    """sha256 and size of a file, or of a directory's files (names and contents, sorted)."""
    h, size = hashlib.sha256(), 0
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        if path.is_dir():
            h.update(str(f.relative_to(path)).encode() + b"\0")
        size += update_digest(h, f)
    return h.hexdigest(), size


#: Where an input outside the project may live, named portably: a corpus of the running
#: Python's standard library is "<stdlib>/json/decoder.py" on every machine, not one
#: machine's /usr/lib/python3.11/json/decoder.py.
_ANCHORS = (("<site-packages>", "purelib"), ("<stdlib>", "stdlib"), ("<platstdlib>", "platstdlib"))


def portable_path(path: Path, root: Path) -> str:
    """``path`` as evidence records it: relative to the interpreter's library directories
    (:data:`_ANCHORS`), to the project root, or to the temporary directory (``<tmp>/…``), else
    ``…/<name>``: never an absolute path (pv's EVIDENCE-ABSOLUTE-PATH)."""
    full = path.resolve()
    paths = sysconfig.get_paths()
    for label, key in _ANCHORS:  # first: a virtualenv may live inside the project
        base = Path(paths[key]).resolve()
        if full.is_relative_to(base):
            return f"{label}/{full.relative_to(base).as_posix()}"
    if full.is_relative_to(root.resolve()):
        return full.relative_to(root.resolve()).as_posix()
    tmp = Path(tempfile.gettempdir()).resolve()
    if full.is_relative_to(tmp):
        return "/".join(["<tmp>", *full.relative_to(tmp).parts])
    return f"…/{full.name}"


def file_ref(path: Path, root: Path) -> FileRef:
    digest, size = sha256_of(path)
    return FileRef(portable_path(path, root), digest, size)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def package_versions(extra_packages: tuple[str, ...] = ()) -> dict[str, str]:
    """Installed version of each of the framework's packages and of those the project lists
    in ``[tool.shipgate] packages``; one not installed is left out."""
    packages = {}
    for name in dict.fromkeys((*PACKAGES, *extra_packages)):
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return packages


def host_info(extra_packages: tuple[str, ...] = ()) -> dict:
    """The machine a measurement ran on: the framework's packages, plus those the project
    lists in ``[tool.shipgate] packages``. torch is only read if already installed."""
    packages = package_versions(extra_packages)
    gpu = None
    try:
        out = (
            subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            )
            .stdout.strip()
            .splitlines()
        )
        if out:
            name, driver = (s.strip() for s in out[0].split(",", 1))
            gpu = {"name": name, "driver": driver, "count": len(out)}
    except (OSError, subprocess.SubprocessError, ValueError):
        gpu = None
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count() or 1,
        "ram_bytes": _ram_bytes(),
        "gpu": gpu,
        "python": platform.python_version(),
        "torch": packages.get("torch"),
        "packages": packages,
    }


#: What never makes a project dirty: what gates itself writes (contracts, evidence, its lock
#: file, its commit journal and that journal's temp file), which a promotion changes and a
#: concurrent command must not count, and byte-code caches.
_DERIVED = (
    ".",
    ":(exclude)contracts",
    ":(exclude)evidence",
    ":(exclude).gates.lock",
    ":(exclude).gates-journal.json",
    ":(exclude,glob)..gates-journal.json.*.tmp",
    ":(exclude,glob)**/__pycache__/**",
)


def git_info(root: Path) -> dict:
    """HEAD commit and whether the project has uncommitted changes.

    The whole project under ``root`` counts (tracked changes and untracked files that git
    does not ignore) but for what gates writes itself: the framework cannot know which of a
    project's files a measurement reads, so any of them may make it unreproducible from the
    recorded commit.
    """

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
    except (OSError, subprocess.SubprocessError):  # no git, not a repository, no commit yet
        return {"commit": "0" * 40, "dirty": True}
    try:
        dirty = bool(git("status", "--porcelain", "--untracked-files=normal", "--", *_DERIVED))
    except subprocess.CalledProcessError as exc:
        # A repository whose status git cannot take (a full disk: it rewrites the index) is
        # an I/O failure to report, not "uncommitted changes".
        why = exc.stderr.strip() or (
            f"killed by {signal.Signals(-exc.returncode).name}"  # SIGXFSZ: past a file-size limit
            if exc.returncode < 0
            else f"exit status {exc.returncode}"
        )
        raise OSError(f"git status in {root} failed: {why}") from None
    except (OSError, subprocess.SubprocessError):
        return {"commit": "0" * 40, "dirty": True}
    return {"commit": commit, "dirty": dirty}


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
