"""Recipes: how a gate's artifact is rebuilt, and the content-addressed cache that holds it.

A measurer that is measured on an artifact may say how the project makes it::

    LOOP_RUN = Recipe(
        command=("python", "tools/make_loop_run.py", "--out", "{out}"),
        exclude=("train/runs.db",),
        volatile={"train/metrics.jsonl": ("tokens_per_s", "step_s")},
        reason="wall-clock timings and the run store are not what was trained",
    )

    @measures("GATE-TRAIN-LOOP-012", artifact="loop run", check=is_loop_run, recipe=LOOP_RUN)

``command`` runs from the project root (``python`` is this interpreter) and must write the
artifact at ``{out}``, a path that does not exist yet; ``select`` names the artifact inside
it when it is a part of what the command writes. ``{scratch}`` in ``env`` values is a
temporary directory removed after the build (for state a build must not share with the
user's: a run registry, a home directory).

**Digest.** :func:`digest` is the sha256 over the artifact's files, each file's path
relative to the artifact and its bytes, sorted by path (for a single file, its bytes):
exactly :func:`gates.provenance.evidence.sha256_of` when the recipe excludes nothing. Files
matching an ``exclude`` glob (``fnmatch`` on the ``/``-separated relative path) are left out; a
JSON or JSONL file matching a ``volatile`` glob is parsed, the named keys dropped at any depth, and
what is left re-serialised canonically (sorted keys, no spaces; JSONL line by line) before
hashing. ``bytes`` is the number of bytes hashed. The evidence records the globs, the keys
and ``reason``: why they are not part of what the gate measures.

**Cache.** ``$SHIPGATE_CACHE``, else ``<root>/.cache/shipgate/artifacts``; entry
``<digest>/<name>`` is the artifact itself. A build runs into a temporary directory beside
the entries, is digested, and is renamed into place whole (a reader never sees half an
entry). ``by-recipe/<key>`` maps a recipe (its command, select, digest rules, the sha256 of
its inputs, the Python version) to the digest it last built, so a second ``gates check`` of a
gate with no evidence yet reuses the first one's build. Nothing here imports the project.

**Nothing outside the cache.** The cache is disposable, so whatever in it is not what a build
makes is a cache miss with a logged note, never followed and never a refusal (a rebuild is
the cure, not a user's cleanup): a recorded or indexed digest that is not 64 lowercase hex
digits (it is joined into a path); an index that is not a regular file; an entry that is not
a real directory, or whose artifact is, or holds, a symlink. The rebuild then replaces what
stood there, unlinking a symlink itself (never what it points to) and removing a real
directory with ``shutil.rmtree``, which does not follow the symlinks inside it. A build
whose artifact is a symlink, lies behind one, or holds one is refused: moving it into the
cache could move a file from outside it, and a later hit would read outside it.
"""

from __future__ import annotations

import fnmatch
import hashlib
import importlib.metadata
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from gates.io import atomic, files, jsonfile
from gates.io.files import atomic_write_text, update_digest
from gates.model import project
from gates.provenance import evidence, freshness, trace

CACHE_ENV = "SHIPGATE_CACHE"
#: Relative to the project root (ignored by git: ``.cache/``).
DEFAULT_CACHE = Path(".cache") / "shipgate" / "artifacts"
#: Lines of a failed build's stderr shown in the refusal.
STDERR_TAIL = 20
#: What a digest is, and so the only cache entry name: it is joined into a path.
DIGEST = re.compile(r"[0-9a-f]{64}")
#: Largest JSON/JSONL file parsed for its volatile keys: a run's metrics are megabytes.
MAX_VOLATILE_BYTES = 1024 * 1024 * 1024
#: Under the cache: one file per recipe key, holding the digest that recipe last built.
INDEX_DIR = "by-recipe"
#: Beside a cached artifact: the repository files its build read and the installed
#: distributions it imported, ``{"sources": [...], "distributions": {name: version}}``.
BUILD_RECORD = "build.json"
MAX_BUILD_RECORD_BYTES = 64 * 1024 * 1024
#: Under the cache: one lock file per recipe key, held while that recipe is looked up or built.
LOCK_DIR = ".locks"
#: A build waited for may run its whole timeout; the wait allows this much more.
LOCK_MARGIN_S = 60.0
#: An index file holds one digest and a newline; anything longer is not one.
MAX_INDEX_BYTES = 4096


class RecipeError(Exception):
    """A recipe could not be built or digested; the message says why. Nothing was cached."""


@dataclass(frozen=True)
class Recipe:
    #: argv; ``{out}`` is where the artifact must be written, ``python`` is sys.executable.
    command: tuple[str, ...]
    #: A relative path inside ``{out}`` that is the artifact (None: ``{out}`` itself).
    select: str | None = None
    #: The seed the command uses, if any (recorded, for a reader; the command fixes it).
    seed: int | None = None
    #: Repository paths the artifact depends on, recorded by content hash. Every argument of
    #: ``command`` that names a file under the root (the tool script) is added.
    inputs: tuple[str, ...] = ()
    #: Globs of files left out of the digest.
    exclude: tuple[str, ...] = ()
    #: glob → JSON keys dropped (at any depth) before hashing that JSON/JSONL file.
    volatile: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: Why the excluded files and volatile keys are not what the gate measures.
    reason: str = ""
    #: False where two machines cannot give the same bytes (then say why).
    bitwise_across_machines: bool = True
    why_not_bitwise: str = ""
    #: Extra environment of the build; ``{scratch}`` is a temporary directory.
    env: Mapping[str, str] = field(default_factory=dict)
    #: Name of the cached artifact when there is no ``select`` (else select's last part).
    name: str = "artifact"
    timeout_s: float = 3600

    def __post_init__(self) -> None:
        if not self.command or "{out}" not in " ".join(self.command):
            raise ValueError("a recipe's command must write to {out}")
        if self.select is not None:
            sel = PurePosixPath(self.select)
            if sel.is_absolute() or ".." in sel.parts or not sel.parts:
                raise ValueError(f"select {self.select!r} must be a relative path inside {{out}}")
        if (self.exclude or self.volatile) and not self.reason:
            raise ValueError("a recipe that excludes files or keys from its digest says why")
        if not self.bitwise_across_machines and not self.why_not_bitwise:
            raise ValueError("bitwise_across_machines=False needs why_not_bitwise")

    @property
    def artifact_name(self) -> str:
        return PurePosixPath(self.select).name if self.select else self.name

    def input_paths(self, root: Path) -> list[str]:
        """The recipe's inputs, repository-relative: the declared ones and every command
        argument that is a file under the root."""
        found = [a for a in self.command if "{" not in a and (root / a).is_file()]
        return sorted(dict.fromkeys([*self.inputs, *found]))


# --- digest ------------------------------------------------------------------------------


def _matches(rel: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(rel, p) for p in patterns)


def _drop(obj, keys: frozenset[str]):
    if isinstance(obj, dict):
        return {k: _drop(v, keys) for k, v in obj.items() if k not in keys}
    if isinstance(obj, list):
        return [_drop(v, keys) for v in obj]
    return obj


def _jsonl_line(line: str, path: Path, number: int):
    """One JSONL record; an error is placed at its line of the file."""
    try:
        return jsonfile.loads(line, path)
    except jsonfile.JsonFileError as exc:
        raise jsonfile.JsonFileError(path, exc.problem, number, exc.column) from None


def canonical_json(path: Path, keys: tuple[str, ...]) -> bytes:
    """``path``'s JSON (or JSONL, line by line) without ``keys``, canonically serialised."""
    drop = frozenset(keys)
    try:
        text = jsonfile.decode(files.read_regular(path, MAX_VOLATILE_BYTES), path)
        if path.suffix == ".jsonl":
            lines = [
                files.canonical_bytes(_drop(_jsonl_line(line, path, n), drop), ascii_only=False)
                for n, line in enumerate(text.splitlines(), start=1)
                if line.strip()
            ]
            return b"\n".join(lines)
        return files.canonical_bytes(_drop(jsonfile.loads(text, path), drop), ascii_only=False)
    except jsonfile.JsonFileError as exc:  # not UTF-8, not JSON, nested too deep
        raise RecipeError(f"{exc} (declared volatile, so parsed)") from None
    except OSError as exc:  # a FIFO, a device, larger than any run's JSON
        raise RecipeError(f"{path}: {exc.strerror or exc} (declared volatile)") from None


def digest(path: Path, recipe: Recipe | None = None) -> tuple[str, int]:
    """sha256 and bytes hashed of the artifact at ``path`` under ``recipe``'s digest rules
    (none: :func:`gates.provenance.evidence.sha256_of`'s digest)."""
    exclude = recipe.exclude if recipe else ()
    volatile = recipe.volatile if recipe else {}
    h, size = hashlib.sha256(), 0
    is_dir = path.is_dir()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if is_dir else [path]
    for f in files:
        rel = f.relative_to(path).as_posix() if is_dir else f.name
        if _matches(rel, exclude):
            continue
        if is_dir:
            h.update(str(f.relative_to(path)).encode() + b"\0")
        keys = tuple(
            k for glob, ks in volatile.items() if fnmatch.fnmatchcase(rel, glob) for k in ks
        )
        if keys:
            data = canonical_json(f, keys)
            h.update(data)
            size += len(data)
        else:
            size += update_digest(h, f)
    return h.hexdigest(), size


# --- evidence ----------------------------------------------------------------------------


def _file_sha256(path: Path) -> str:
    from gates.provenance.evidence import sha256_of  # noqa: PLC0415 - evidence imports jsonschema

    return sha256_of(path)[0]


def record(recipe: Recipe, root: Path) -> dict:
    """The recipe as evidence records it: the command as written (no machine path), its
    seed and select, its inputs by sha256, and the digest rules with their reason."""
    out: dict = {"command": list(recipe.command)}
    if recipe.seed is not None:
        out["seed"] = recipe.seed
    if recipe.select:
        out["select"] = recipe.select
    out["inputs"] = [
        {"path": p, "sha256": _file_sha256(root / p)}
        for p in recipe.input_paths(root)
        if (root / p).exists()
    ]
    out["digest"] = {
        "excluded": list(recipe.exclude),
        "volatile": {g: list(k) for g, k in recipe.volatile.items()},
        "reason": recipe.reason or "nothing is left out: every byte of the artifact",
    }
    out["bitwise_across_machines"] = recipe.bitwise_across_machines
    if not recipe.bitwise_across_machines:
        out["why_not_bitwise"] = recipe.why_not_bitwise
    return out


def key(recipe: Recipe, root: Path) -> str:
    """What a build depends on, as far as the framework can see: the recorded recipe (its
    inputs by content), the interpreter's version and the installed versions of the
    framework's and the project's listed packages (torch upgraded: another key, a rebuild).
    The code it runs is checked when an entry is served (its build record's sources)."""
    packages = evidence.package_versions(project.load_config(root).packages)
    data = record(recipe, root) | {
        "python": sys.version,
        "env": dict(recipe.env),
        "packages": packages,
    }
    return files.canonical_sha256(data, ascii_only=False)


# --- cache -------------------------------------------------------------------------------


def cache_dir(root: Path) -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser().resolve() if env else (root / DEFAULT_CACHE).resolve()


Log = Callable[[str], None]


def _symlink_in(path: Path) -> Path | None:
    """The first symlink at or under ``path`` (not followed), or None."""
    if path.is_symlink():
        return path
    if path.is_dir():
        for folder, dirs, names in os.walk(path):  # followlinks=False: links are listed
            for name in sorted(dirs + names):
                if os.path.islink(os.path.join(folder, name)):
                    return Path(folder, name)
    return None


def _entry_problem(cache: Path, sha256: str, recipe: Recipe) -> str | None:
    """Why ``cache/<sha256>`` is not an entry a build made (then it is never read), or None
    (including when there is none: a plain miss)."""
    if not DIGEST.fullmatch(sha256):
        return f"{sha256!r} is not a sha256 digest (64 lowercase hex digits)"
    entry = cache / sha256
    try:
        mode = os.lstat(entry).st_mode
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(mode):
        kind = "a symlink" if stat.S_ISLNK(mode) else "not a directory"
        return f"{entry} is {kind}, not a directory a build made"
    link = _symlink_in(entry / recipe.artifact_name)
    if link is not None:
        return f"{link} is a symlink (to {os.readlink(link)}); builds make none"
    return None


@dataclass(frozen=True)
class BuildRecord:
    """What an artifact is a function of: the repository files its build read
    (``[{"path", "sha256"}]``, gates.provenance.trace) and the installed distributions it imported
    (name -> version)."""

    sources: tuple[dict, ...]
    distributions: Mapping[str, str] = field(default_factory=dict)

    def differs(self, root: Path) -> str:
        """Why the artifact would not be built the same now, completing "it was …": "built
        from other code (x changed, y gone)", "built with other installed packages (torch
        2.12.0 -> 2.13.0)"; "" while every source hashes the same under ``root`` and every
        distribution is installed at its version."""
        changed = changed_sources(root, self.sources)
        if changed:
            return f"built from other code ({changed})"
        moved = changed_distributions(self.distributions)
        return f"built with other installed packages ({moved})" if moved else ""


def cached(
    cache: Path, sha256: str, recipe: Recipe, root: Path, log: Log | None = None
) -> tuple[Path, BuildRecord] | None:
    """The cache entry of ``sha256`` and its build record, if the entry is there, a real
    directory with no symlink in its artifact, still digests to it, and was built from the
    code as it is now under ``root`` (every file its build read hashes the same) with the
    distributions installed now (the same versions); otherwise None (``log`` hears why, when
    it is something other than absent)."""

    def unused(why: str) -> None:
        if log is not None:
            log(f"gates: cache entry not used: {why}")

    problem = _entry_problem(cache, sha256, recipe)
    if problem:
        unused(problem)
        return None
    path = cache / sha256 / recipe.artifact_name
    if not path.exists() or digest(path, recipe)[0] != sha256:
        return None
    record = read_build_record(cache / sha256)
    if record is None:
        unused(f"{cache / sha256} records no build (built by an older gates): rebuilt")
        return None
    why = record.differs(root)
    if why:
        unused(f"{cache / sha256} was {why}: rebuilt")
        return None
    return path, record


def read_build_record(entry: Path) -> BuildRecord | None:
    """The build record of a cache entry (``BUILD_RECORD``), or None when it has none or it
    does not read as one (an entry of an older gates has no ``distributions``)."""
    try:
        data = jsonfile.read_json(entry / BUILD_RECORD, MAX_BUILD_RECORD_BYTES)
        sources, installed = data["sources"], data["distributions"]
        if not isinstance(sources, list) or not all(
            isinstance(s, dict) and isinstance(s.get("path"), str) and DIGEST.fullmatch(
                str(s.get("sha256", ""))) for s in sources
        ):  # fmt: skip
            return None
        if not isinstance(installed, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in installed.items()
        ):
            return None
    except (OSError, jsonfile.JsonFileError, KeyError, TypeError):
        return None
    return BuildRecord(
        tuple({"path": s["path"], "sha256": s["sha256"]} for s in sources), dict(installed)
    )


def changed_sources(root: Path, sources: tuple[dict, ...] | list[dict]) -> str:
    """The first few of ``sources`` that no longer hash the same under ``root`` ("x changed",
    "y gone"), or "" when none."""
    changed = [
        f"{src['path']} {why}"
        for src in sources
        if (why := freshness.changed_file(root, src)) is not None
    ]
    return _first_few(changed)


def changed_distributions(recorded: Mapping[str, str]) -> str:
    """The first few recorded distributions installed now at another version, or not at all
    ("torch 2.12.0 -> 2.13.0", "numpy gone"), or "" when none."""
    moved = []
    for name, version in sorted(recorded.items()):
        try:
            now = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            moved.append(f"{name} {version} -> not installed")
            continue
        if now != version:
            moved.append(f"{name} {version} -> {now}")
    return _first_few(moved)


def _first_few(items: list[str]) -> str:
    more = f" and {len(items) - 3} more" if len(items) > 3 else ""
    return ", ".join(items[:3]) + more


@dataclass(frozen=True)
class Built:
    path: Path
    sha256: str
    bytes: int
    #: "cache" (found) or "built" (rebuilt by this call).
    source: str
    #: What the artifact is a function of: the repository files the build read and the
    #: installed distributions it imported. A cache entry is served only while they hold.
    build: BuildRecord = field(default_factory=lambda: BuildRecord(()))


def _stderr(line: str) -> None:
    # See gates.check._log: a bare line on stderr unless the caller configured logging.
    logging.getLogger(__name__).warning(line)


def obtain(root: Path, recipe: Recipe, want: str | None = None, log: Log = _stderr) -> Built:
    """The artifact ``recipe`` makes: the cache entry of ``want`` (a recorded digest), else
    the entry this recipe last built, else a fresh build (cached). The caller compares the
    digest with ``want``."""
    cache = cache_dir(root)
    if want:
        hit = cached(cache, want, recipe, root, log)
        if hit is not None:
            log(f"gates: using cached artifact {hit[0]}")
            size = digest(hit[0], recipe)[1]
            return Built(hit[0], want, size, "cache", hit[1])
    recipe_key = key(recipe, root)
    index = cache / INDEX_DIR / recipe_key
    # One build per recipe at a time: gates checked side by side (gates.runner.checkrun) that need
    # the same artifact share one build; the second finds it through the index.
    cache.mkdir(parents=True, exist_ok=True)
    _replace_unless_directory(cache / LOCK_DIR, log)
    with atomic.locked(
        cache / LOCK_DIR / recipe_key,
        timeout_s=recipe.timeout_s + LOCK_MARGIN_S,
        holder=f"another build of {' '.join(recipe.command)}",
    ):
        last = _read_index(index, log)
        hit = cached(cache, last, recipe, root, log) if last else None
        if hit is not None:
            log(f"gates: using cached artifact {hit[0]} (built earlier from this code)")
            size = digest(hit[0], recipe)[1]
            return Built(hit[0], last, size, "cache", hit[1])
        built = build(root, recipe, cache, log)
        _replace_unless_directory(cache / INDEX_DIR, log)
        atomic_write_text(index, built.sha256 + "\n")
    return built


def _read_index(index: Path, log: Log) -> str | None:
    """The digest ``index`` holds; None when there is none, or (noted) when it is no regular
    file in a real index directory or holds something else."""
    try:
        parent_mode = os.lstat(index.parent).st_mode
        mode = os.lstat(index).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        log(f"gates: cache index not used: {index}: {exc.strerror or exc}")
        return None
    if not stat.S_ISDIR(parent_mode) or not stat.S_ISREG(mode):
        log(f"gates: cache index not used: {index} is not a regular file in a directory")
        return None
    try:
        text = files.read_regular(index, MAX_INDEX_BYTES).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        log(f"gates: cache index not used: {index}: {exc}")
        return None
    if not DIGEST.fullmatch(text):
        log(f"gates: cache index not used: {index} holds {text[:80]!r}, not a sha256 digest")
        return None
    return text


def _replace_unless_directory(path: Path, log: Log) -> None:
    """Make ``path`` (inside the cache) a real directory: a symlink or file standing there is
    unlinked (the link itself, never what it points to), a real directory kept."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISDIR(mode):
        log(f"gates: replacing {path}: a symlink or file where the cache keeps a directory")
        os.unlink(path)
    path.mkdir(exist_ok=True)


def _argv(recipe: Recipe, out: Path) -> list[str]:
    argv = [a.replace("{out}", str(out)) for a in recipe.command]
    if argv[0] == "python":
        argv[0] = sys.executable
    return argv


def _require_real(artifact: Path, work: Path, shown: str) -> None:
    """Refuse an artifact that is a symlink, lies behind one (``select`` through a link the
    command made) or holds one: the cache keeps real files, inside it."""
    real_work = os.path.realpath(work)
    if os.path.commonpath([os.path.realpath(artifact.parent), real_work]) != real_work:
        raise RecipeError(
            f"{shown}: {artifact.relative_to(work)} lies behind a symlink leading out of the "
            "build directory; write the artifact itself at {out}"
        )
    link = _symlink_in(artifact)
    if link is not None:
        raise RecipeError(
            f"{shown}: {link.relative_to(work)} is a symlink (to {os.readlink(link)}); the "
            "cache keeps real files only: copy what it points to"
        )


def _remove_entry(target: Path) -> None:
    """Remove what stands at ``target`` (in the cache): a symlink or file is unlinked (never
    what it points to), a directory removed with rmtree (which does not follow links)."""
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(target)
    else:
        os.unlink(target)


def _run_build(
    recipe: Recipe, out: Path, root: Path, env: dict[str, str]
) -> subprocess.CompletedProcess:
    return subprocess.run(
        _argv(recipe, out),
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=recipe.timeout_s,
        check=False,
    )


def build(root: Path, recipe: Recipe, cache: Path, log: Log = _stderr) -> Built:
    """Run the recipe into a temporary directory in ``cache``, traced (gates.provenance.trace: the
    repository files it reads, and the recipe's declared inputs, are its build sources),
    digest the artifact and rename it with its build record to ``cache/<digest>/``; refuse
    (nothing cached) when the command fails or does not write the artifact."""
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=cache))
    try:
        out = work / recipe.name
        scratch = work / "scratch"
        scratch.mkdir()
        env = os.environ | {"PYTHONHASHSEED": "0"}
        env |= {k: v.replace("{scratch}", str(scratch)) for k, v in recipe.env.items()}
        shown = " ".join(recipe.command)
        log(f"gates: building the artifact: {shown}  (in {root}, output {out})")
        traced = trace.recording(root, detached=True, installed=True)
        try:
            with traced:
                done = _run_build(recipe, out, root, env | traced.env)
        except subprocess.TimeoutExpired:
            raise RecipeError(f"{shown}: no result within {recipe.timeout_s:g} s") from None
        except OSError as exc:
            raise RecipeError(f"{shown}: cannot run it: {exc}") from None
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-STDERR_TAIL:])
            raise RecipeError(f"{shown} exited with {done.returncode}:\n{tail}")
        artifact = out / recipe.select if recipe.select else out
        if not os.path.lexists(artifact):
            raise RecipeError(f"{shown} exited 0 but wrote no {artifact.relative_to(work)}")
        _require_real(artifact, work, shown)
        for declared in recipe.input_paths(root):
            traced.add(root / declared)
        build_sources = tuple(traced.sources())
        installed = traced.distributions()
        sha256, size = digest(artifact, recipe)
        entry = work / "entry"
        entry.mkdir()
        artifact.rename(entry / recipe.artifact_name)
        record = {"sources": list(build_sources), "distributions": installed}
        record_text = json.dumps(record, indent=1) + "\n"
        (entry / BUILD_RECORD).write_text(record_text, encoding="utf-8")
        target = cache / sha256  # sha256 is our own hex digest: directly inside the cache
        try:
            entry.rename(target)
        except OSError:  # there already: a broken entry, or one built from other code
            _remove_entry(target)
            entry.rename(target)
        path = target / recipe.artifact_name
        log(f"gates: built {path} (sha256 {sha256[:16]}…, {size} bytes)")
        return Built(path, sha256, size, "built", BuildRecord(build_sources, installed))
    finally:
        shutil.rmtree(work, ignore_errors=True)
