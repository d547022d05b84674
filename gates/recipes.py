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
exactly :func:`gates.evidence.sha256_of` when the recipe excludes nothing. Files matching an
``exclude`` glob (``fnmatch`` on the ``/``-separated relative path) are left out; a JSON or
JSONL file matching a ``volatile`` glob is parsed, the named keys dropped at any depth, and
what is left re-serialised canonically (sorted keys, no spaces; JSONL line by line) before
hashing. ``bytes`` is the number of bytes hashed. The evidence records the globs, the keys
and ``reason``: why they are not part of what the gate measures.

**Cache.** ``$SHIPGATE_CACHE``, else ``<root>/.cache/shipgate/artifacts``; entry
``<digest>/<name>`` is the artifact itself. A build runs into a temporary directory beside
the entries, is digested, and is renamed into place whole (a reader never sees half an
entry). ``by-recipe/<key>`` maps a recipe (its command, select, digest rules, the sha256 of
its inputs, the Python version) to the digest it last built, so a second ``gates check`` of a
gate with no evidence yet reuses the first one's build. Nothing here imports the project.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from gates.files import atomic_write_text, update_digest

CACHE_ENV = "SHIPGATE_CACHE"
#: Relative to the project root (ignored by git: ``.cache/``).
DEFAULT_CACHE = Path(".cache") / "shipgate" / "artifacts"
#: Lines of a failed build's stderr shown in the refusal.
STDERR_TAIL = 20


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


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def canonical_json(path: Path, keys: tuple[str, ...]) -> bytes:
    """``path``'s JSON (or JSONL, line by line) without ``keys``, canonically serialised."""
    drop = frozenset(keys)
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".jsonl":
            lines = [_canonical(_drop(json.loads(x), drop)) for x in text.splitlines() if x.strip()]
            return b"\n".join(lines)
        return _canonical(_drop(json.loads(text), drop))
    except json.JSONDecodeError as exc:
        raise RecipeError(f"{path}: declared volatile but not JSON ({exc.msg})") from None


def digest(path: Path, recipe: Recipe | None = None) -> tuple[str, int]:
    """sha256 and bytes hashed of the artifact at ``path`` under ``recipe``'s digest rules
    (none: :func:`gates.evidence.sha256_of`'s digest)."""
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
    from gates.evidence import sha256_of  # noqa: PLC0415 - evidence imports jsonschema

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
    inputs by content) and the interpreter's version."""
    data = record(recipe, root) | {"python": sys.version, "env": dict(recipe.env)}
    return hashlib.sha256(_canonical(data)).hexdigest()


# --- cache -------------------------------------------------------------------------------


def cache_dir(root: Path) -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser().resolve() if env else (root / DEFAULT_CACHE).resolve()


def cached(cache: Path, sha256: str, recipe: Recipe) -> Path | None:
    """The cache entry of ``sha256`` if it is there and still digests to it."""
    path = cache / sha256 / recipe.artifact_name
    if path.exists() and digest(path, recipe)[0] == sha256:
        return path
    return None


@dataclass(frozen=True)
class Built:
    path: Path
    sha256: str
    bytes: int
    #: "cache" (found) or "built" (rebuilt by this call).
    source: str


Log = Callable[[str], None]


def _stderr(line: str) -> None:
    # See gates.promotion._log: a bare line on stderr unless the caller configured logging.
    logging.getLogger(__name__).warning(line)


def obtain(root: Path, recipe: Recipe, want: str | None = None, log: Log = _stderr) -> Built:
    """The artifact ``recipe`` makes: the cache entry of ``want`` (a recorded digest), else
    the entry this recipe last built, else a fresh build (cached). The caller compares the
    digest with ``want``."""
    cache = cache_dir(root)
    if want:
        hit = cached(cache, want, recipe)
        if hit is not None:
            log(f"gates: using cached artifact {hit}")
            return Built(hit, want, digest(hit, recipe)[1], "cache")
    index = cache / "by-recipe" / key(recipe, root)
    if index.is_file():
        last = index.read_text(encoding="utf-8").strip()
        hit = cached(cache, last, recipe) if len(last) == 64 else None
        if hit is not None:
            log(f"gates: using cached artifact {hit} (built earlier from this recipe)")
            return Built(hit, last, digest(hit, recipe)[1], "cache")
    built = build(root, recipe, cache, log)
    atomic_write_text(index, built.sha256 + "\n")
    return built


def _argv(recipe: Recipe, out: Path) -> list[str]:
    argv = [a.replace("{out}", str(out)) for a in recipe.command]
    if argv[0] == "python":
        argv[0] = sys.executable
    return argv


def build(root: Path, recipe: Recipe, cache: Path, log: Log = _stderr) -> Built:
    """Run the recipe into a temporary directory in ``cache``, digest the artifact and
    rename it to ``cache/<digest>/<name>``; refuse (nothing cached) when the command fails
    or does not write the artifact."""
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
        try:
            done = subprocess.run(
                _argv(recipe, out),
                cwd=root,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=recipe.timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise RecipeError(f"{shown}: no result within {recipe.timeout_s:g} s") from None
        except OSError as exc:
            raise RecipeError(f"{shown}: cannot run it: {exc}") from None
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-STDERR_TAIL:])
            raise RecipeError(f"{shown} exited with {done.returncode}:\n{tail}")
        artifact = out / recipe.select if recipe.select else out
        if not artifact.exists():
            raise RecipeError(f"{shown} exited 0 but wrote no {artifact.relative_to(work)}")
        sha256, size = digest(artifact, recipe)
        entry = work / "entry"
        entry.mkdir()
        artifact.rename(entry / recipe.artifact_name)
        target = cache / sha256
        try:
            entry.rename(target)
        except OSError:
            if cached(cache, sha256, recipe) is None:  # a broken entry: replace it
                shutil.rmtree(target, ignore_errors=True)
                entry.rename(target)
        path = target / recipe.artifact_name
        log(f"gates: built {path} (sha256 {sha256[:16]}…, {size} bytes)")
        return Built(path, sha256, size, "built")
    finally:
        shutil.rmtree(work, ignore_errors=True)
