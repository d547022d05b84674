"""Which repository files a measurement and its bound tests actually read: collected, not
hand-listed, so that evidence can say what it rests on (``sources``, docs/evidence.md).

    with (traced := trace.recording(root)):
        outcome = testrun.run_node(root, node)   # a child process: traced through its env
        result = measurer.fn(ctx)                # this process, and any python it starts
    with traced:                                 # again: adds to what it saw
        ...
    traced.sources(measurer.fn)  # [{"path": "widget.py", "sha256": "…"}, …] sorted by path

Mechanism. A Python audit hook (``sys.addaudithook``) sees every ``open`` audit event: the
``open()`` builtin, ``os.open``, and ``io.open_code``, which the import system uses, so a
module imported counts as read. An import served from a valid byte-code cache opens only the
``__pycache__/*.pyc``; it is mapped back to its ``.py``. Paths are made absolute when the event
fires (the process may change directory later). The hook costs one string comparison per
audit event, and nothing per line executed: no ``sys.settrace``/``setprofile``, which would
slow the workloads that perf gates time.

Child processes. While recording, a generated directory holding a small ``sitecustomize.py``
is put first on ``PYTHONPATH`` and ``$SHIPGATE_TRACE_DIR`` names where children report; both
are set in ``os.environ`` for the duration (restored after), so the pytest run of a bound test
(gates.runner.testrun.run_node copies os.environ) and any ``python`` a measurement starts
(``trainer apply``, tools/bench_bpe.py, torchrun workers…) inherit them. The sitecustomize
installs the same hook and appends each newly seen path under the project at once to
``$SHIPGATE_TRACE_DIR/<pid>.paths`` (not at exit, so a killed or ``os._exit`` child still
counts); a forked child of this process does the same. A process that cannot write its
report (a full disk) leaves ``<pid>.failed-<errno>`` (an empty file) and reports no more; the
recording then raises that OSError naming the report, as for a last line cut short: sources
silently missing would make stale evidence look fresh.

Limits (an under-approximation there; docs/evidence.md):

- ``python -I``, ``-E`` (ignores PYTHONPATH) and ``-S`` (no site) children are not traced,
  nor are children started with an environment that drops ``PYTHONPATH`` or
  ``$SHIPGATE_TRACE_DIR``, nor non-Python children (a shell's ``cat``);
- files opened by native code (C/C++/Rust: safetensors, tokenizers, torch's C++ loaders)
  raise no audit event; artifacts are recorded separately, by content hash;
- a project's own ``sitecustomize`` is shadowed by ours; ours runs the next one found on
  ``sys.path`` after itself, so it still takes effect.

And an over-approximation: whatever else this process opens while recording (its
pyproject.toml). The in-process hook starts before the module that measures the gate is
imported (``measure.load``), so that module and every project module it imports count; the
other measurement modules, which ``measure.locate`` reads beforehand to find it, do not.
Modules this process had imported before recording began are not opened again: `gates promote
--stale` therefore runs each gate in a fresh process. The measurement function's own file is
always added (:meth:`Recording.add`).

What counts: files under the project root that are regular files tracked by git (``git
ls-files``; when the root is no git work tree, regular files under it outside hidden
directories and ``__pycache__``), except what gates writes itself (:data:`EXCLUDED`).
"""

from __future__ import annotations

import contextlib
import errno
import importlib.metadata
import importlib.util
import inspect
import os
import shutil
import site
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath

from gates.io import files
from gates.io.files import sha256_file

#: Where a traced child reports: one ``<pid>.paths`` file per process, a path a line.
DIR_VAR = "SHIPGATE_TRACE_DIR"
#: The project root (absolute, and its real path), os.pathsep-separated: a child reports
#: only paths under these, so the interpreter's own imports cost no write.
ROOTS_VAR = "SHIPGATE_TRACE_ROOTS"

#: What gates writes itself, so never a source: a promotion rewrites the contract and the
#: evidence, and takes the lock. What of the contract matters to a measurement (threshold,
#: bound tests, version) is compared with the evidence by pv's EVIDENCE-MISMATCH rules
#: already; counting the file would make every promotion stale the evidence it just wrote.
EXCLUDED = ("contracts/", "evidence/", ".gates.lock")

#: The program a traced child runs at start-up (gates/provenance/trace_hook.py), copied into a
#: temporary directory as ``sitecustomize.py``. Read now, not while recording: this process
#: would count its own read of the file as a source of every measurement.
SITECUSTOMIZE = (Path(__file__).parent / "trace_hook.py").read_text(encoding="utf-8")


class Recording:
    """The files seen while this recording ran (absolute paths). A context manager that may
    be entered again (not nested in itself): each time adds to what it saw, so a caller can
    leave out a stretch it does not want counted."""

    def __init__(self, root: Path, *, detached: bool = False, installed: bool = False) -> None:
        self.root = root
        self.detached = detached
        #: Children also report what they open from site-packages (see distributions()).
        self.installed = installed
        self.seen: set[str] = set()
        self.trace_dir: Path | None = None
        #: While entered: the variables a traced child needs (PYTHONPATH, $SHIPGATE_TRACE_DIR,
        #: $SHIPGATE_TRACE_ROOTS); a detached recording puts them only here.
        self.env: dict[str, str] = {}
        self._tmp: Path | None = None
        self._saved: dict[str, str | None] = {}

    def add(self, path: str | os.PathLike) -> None:
        """Count ``path`` as read (e.g. the measurement function's own module)."""
        self.seen.add(os.path.abspath(path))

    def sources(self, *functions: Callable) -> list[dict]:
        """``[{"path", "sha256"}]`` of the project files seen, sorted by path (see module doc),
        counting the files that define ``functions`` too (the measurement: its module may
        have been imported before the recording began)."""
        seen = set(self.seen)
        for fn in functions:
            code = getattr(fn, "__code__", None)
            path = inspect.getsourcefile(fn) or (code.co_filename if code else None)
            if path:
                seen.add(os.path.abspath(path))
        return sources(self.root, seen)

    def distributions(self) -> dict[str, str]:
        """The installed distributions whose files were opened, each with its version now
        (a recording made with ``installed=True`` sees its children's too)."""
        return distributions(self.seen)

    def __enter__(self) -> Recording:
        if self in _stack:
            raise RuntimeError("a trace recording cannot be nested in itself")
        if not self.detached:
            _install()
        self._tmp = Path(tempfile.mkdtemp(prefix="shipgate-trace-"))
        site_dir, self.trace_dir = self._tmp / "site", self._tmp / "paths"
        try:
            site_dir.mkdir()
            self.trace_dir.mkdir()
            hook = site_dir / "sitecustomize.py"
            files.write_new(hook, SITECUSTOMIZE.encode(), like=hook)  # names it on EFBIG
        except BaseException:
            shutil.rmtree(self._tmp, ignore_errors=True)  # __exit__ will not run
            raise
        roots = dict.fromkeys([os.path.abspath(self.root), os.path.realpath(self.root)])
        if self.installed:
            roots |= dict.fromkeys(d.rstrip(os.sep) for d in site_dirs())
        pythonpath = (str(site_dir), os.environ.get("PYTHONPATH"))
        self.env = {
            "PYTHONPATH": os.pathsep.join(p for p in pythonpath if p),
            DIR_VAR: str(self.trace_dir),
            ROOTS_VAR: os.pathsep.join(roots),
        }
        if not self.detached:
            self._saved = {k: os.environ.get(k) for k in self.env}
            os.environ.update(self.env)
            _stack.append(self)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if not self.detached:
            _stack.remove(self)
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved, self.env = {}, {}
        assert self.trace_dir is not None and self._tmp is not None
        lost = _lost_report(self.trace_dir)
        for report in sorted(self.trace_dir.glob("*.paths")):
            text = report.read_bytes().decode("utf-8", "surrogateescape")
            self.seen.update(line for line in text.split("\n") if line)
        if _stack and not self.detached:
            _stack[-1].seen |= self.seen
        shutil.rmtree(self._tmp, ignore_errors=True)
        self.trace_dir = self._tmp = None
        if lost is not None and exc_type is None:  # else the block's own error is the one
            raise lost


def _lost_report(trace_dir: Path) -> OSError | None:
    """The error of a traced process that could not write all of its report (a full disk):
    a ``<pid>.failed-<errno>`` marker, or a last line cut short. Its sources would be
    incomplete, so the recording fails, naming the report file."""
    for marker in sorted(trace_dir.glob("*.failed-*")):
        pid, _, code = marker.name.partition(".failed-")
        number = int(code) if code.isdigit() else errno.EIO
        return OSError(number, f"{os.strerror(number)} {_LOST}", str(trace_dir / f"{pid}.paths"))
    for report in sorted(trace_dir.glob("*.paths")):
        data = report.read_bytes()
        if data and not data.endswith(b"\n"):
            return OSError(errno.EIO, f"cut short {_LOST}", str(report))
    return None


#: What a lost report means, in the error.
_LOST = "(where a traced process records the files it reads: its sources would be incomplete)"


#: Recordings in progress, innermost last; the hook reports to every one of them.
_stack: list[Recording] = []
_installed: list[bool] = []  # [True] once the hook is in (a list: no `global` needed)
_pid = os.getpid()
_child = {"pid": None, "fd": None, "opening": False, "failed": None}  # a forked child's report


def _path_of(arg: object) -> str | None:
    if isinstance(arg, int):
        return None
    try:
        path = os.fspath(arg)  # type: ignore[arg-type]
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        return os.path.abspath(path)
    except (TypeError, ValueError, UnicodeDecodeError):
        return None


def _hook(event: str, args: tuple) -> None:
    if event != "open" or not _stack or _child["opening"]:
        return
    if _child["failed"] is not None and _child["failed"] == os.getpid():
        return
    path = _path_of(args[0])
    if path is None:
        return
    pid = os.getpid()
    if pid == _pid:
        for rec in _stack:
            rec.seen.add(path)
        return
    # A fork of this process (multiprocessing, a DataLoader worker): its memory is lost at
    # exit, so it reports through the trace directory like a traced child.
    if "\n" in path:
        return
    try:
        if _child["pid"] != pid:
            _child["opening"] = True
            try:
                name = os.path.join(_stack[-1].trace_dir, f"{pid}.paths")
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                _child["fd"] = os.open(name, flags, 0o600)
            finally:
                _child["opening"] = False
            _child["pid"] = pid
        data = (path + "\n").encode("utf-8", "surrogateescape")
        while data:  # a short write is followed by the error that cut it
            data = data[os.write(_child["fd"], data) :]
    except OSError as error:
        _child_failed(pid, error)


def _child_failed(pid: int, error: OSError) -> None:
    """A forked child could not write its report: leave the marker the parent raises
    (gates/provenance/trace_hook.py's ``failed``), and report nothing more from this process."""
    _child["failed"] = pid
    _child["opening"] = True
    try:
        marker = os.path.join(_stack[-1].trace_dir, f"{pid}.failed-{error.errno or errno.EIO}")
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
    except OSError:
        pass  # the parent still sees a last line cut short
    finally:
        _child["opening"] = False


def _install() -> None:
    if not _installed:
        sys.addaudithook(_hook)  # cannot be removed: it does nothing while _stack is empty
        _installed.append(True)


def recording(root: Path, *, detached: bool = False, installed: bool = False) -> Recording:
    """Record the files this process and its Python children open while the block runs
    (``with trace.recording(root) as traced:``).

    Sets ``PYTHONPATH``, ``$SHIPGATE_TRACE_DIR`` and ``$SHIPGATE_TRACE_ROOTS`` in
    ``os.environ`` for the block and restores them after. Recordings nest; an outer one also
    sees what an inner one saw.

    ``detached=True``: only the children given ``traced.env`` are recorded, not this process,
    and ``os.environ`` is left alone; several may run at once, one per thread (the parallel
    audit), each seeing only its own children.

    ``installed=True``: children also report the files they open under site-packages, so
    that :meth:`Recording.distributions` can name what a build imported."""
    return Recording(root, detached=detached, installed=installed)


def site_dirs() -> tuple[str, ...]:
    """Where this interpreter imports installed distributions from (purelib, platlib, the
    site-packages directories), absolute and real, each ending in a separator."""
    found = [sysconfig.get_paths()[key] for key in ("purelib", "platlib")]
    found += site.getsitepackages() if hasattr(site, "getsitepackages") else []
    out = []
    for directory in found:
        for form in (os.path.abspath(directory), os.path.realpath(directory)):
            out.append(form.rstrip(os.sep) + os.sep)
    return tuple(dict.fromkeys(out))


def distributions(seen: Iterable[str]) -> dict[str, str]:
    """The installed distributions owning a file among ``seen`` (absolute paths under
    :func:`site_dirs`), name -> version as installed now, sorted by name."""
    bases = site_dirs()
    tops = set()
    for path in seen:
        rel = _relative(path, bases)
        if not rel:
            continue
        parts = rel.split("/")
        if parts[0] == "__pycache__" and len(parts) > 1:  # a top-level module's byte code
            parts = parts[1:]
        if parts[0].endswith((".dist-info", ".egg-info", ".pth")):
            continue
        tops.add(parts[0].split(".", 1)[0])
    if not tops:
        return {}
    owners = importlib.metadata.packages_distributions()
    found = {}
    for top in tops:
        for name in owners.get(top, ()):
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                found[name] = importlib.metadata.version(name)
    return dict(sorted(found.items()))


def _source_of(path: str) -> str:
    """A byte-code cache file's ``.py`` (the import read it instead); else the path itself."""
    if path.endswith(".pyc") and "__pycache__" in path:
        with contextlib.suppress(ValueError, NotImplementedError):
            return importlib.util.source_from_cache(path)
    return path


def _relative(path: str, bases: tuple[str, ...]) -> str | None:
    for base in bases:
        if path.startswith(base):
            return PurePosixPath(*Path(path[len(base) :]).parts).as_posix()
    return None


def excluded(rel: str) -> bool:
    """Written by gates itself (:data:`EXCLUDED`), so never a source."""
    return any(rel == e.rstrip("/") or (e.endswith("/") and rel.startswith(e)) for e in EXCLUDED)


def tracked_files(root: Path) -> set[str] | None:
    """Paths (relative, posix) git tracks under ``root``; None when it is no git work tree."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z"],
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return {os.fsdecode(p) for p in proc.stdout.split(b"\0") if p}


def _plausible(rel: str) -> bool:
    """Without git: not in a hidden directory or a byte-code cache."""
    parts = rel.split("/")
    return not any(p.startswith(".") or p == "__pycache__" for p in parts[:-1])


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def sources(root: Path, seen: set[str]) -> list[dict]:
    """The project files among the absolute paths ``seen``, each with its sha256 now."""
    both = (os.path.abspath(root), os.path.realpath(root))
    bases = tuple(dict.fromkeys(b.rstrip(os.sep) + os.sep for b in both))
    candidates = set()
    for opened in seen:
        path = _source_of(opened)
        rel = _relative(path, bases)
        if rel is None:
            rel = _relative(os.path.realpath(path), bases)
        if rel and not excluded(rel):
            candidates.add(rel)
    tracked = tracked_files(root)
    keep = sorted(
        rel
        for rel in candidates
        if (rel in tracked if tracked is not None else _plausible(rel)) and _regular(root / rel)
    )
    return [{"path": rel, "sha256": sha256_file(root / rel)} for rel in keep]
