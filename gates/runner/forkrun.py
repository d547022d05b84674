"""Run pytest in children forked from a warm interpreter: the audit's fast path.

A mutation audit runs one pytest per test and mutant. Started fresh, each pays an
interpreter, ``import torch`` and friends (1 to 5 s) before its test begins, often more than
the test itself. Here one *warm* interpreter per worker (``python -m gates.runner.forkrun``, a
child of the audit) imports the heavy third-party modules once (:data:`PRELOAD`) and then
forks a child per run; the child looks like the fresh ``python -m pytest`` the slow path
starts (gates.runner.testrun):

- the environment is replaced by the run's (``$SHIPGATE_MUTANT``, the trace variables…),
  the working directory is the project root, and stdin, stdout and stderr are /dev/null and
  two files, as pipes would be;
- every module of the project is dropped from ``sys.modules`` after the fork, so the run
  imports (and the trace hook sees it read) each project file it needs, exactly as a fresh
  process would: a run's ``sources`` do not depend on what the warm interpreter imported;
- the trace hook (gates/provenance/trace_hook.py ``start``) is installed before anything of
  the project is imported, when the run is traced;
- it exits with pytest's status after the exit handlers ran, like ``python -m pytest``.

Two things keep a run's fixed cost low without changing what it does. The warm interpreter
moves what the preload made out of the collector's reach (``gc.freeze``), so a child's
``gc.collect`` walks only what the run made. And it compiles the project's ``.py`` files once,
keeping each code object with the bytes it came from: a child importing a module still reads
its source (the trace sees it) and takes the kept code only when those bytes are what it read
(:func:`_serve_compiled`); nothing is written, and byte code on disk is used as before.

Only modules outside the project are preloaded, and none of them is run: the warm
interpreter never calls into torch, so no intra-op thread pool exists to be broken by the
fork. The child leads a process group of its own; a timeout kills the group (the test's own
children too), and so does the warm interpreter's end (EOF on its stdin, SIGTERM, or the
audit dying). Unix only (``os.fork``); elsewhere the audit starts each pytest afresh.

Protocol: one JSON request a line on stdin, one JSON reply a line on stdout::

    {"args": [...], "env": {...}, "cwd": "...", "stdout": "...", "stderr": "...",
     "timeout_s": 900, "traced": true | false}
    {"returncode": 0, "timed_out": false}
"""

from __future__ import annotations

import _imp
import atexit
import contextlib
import gc
import importlib
import importlib.machinery
import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, ModuleType

#: Set to "PASSIVE" for processes run side by side (`gates audit`, `gates check --jobs`): idle
#: OpenMP threads must sleep, not spin (two runs of two spinning threads on two cores ran
#: 20-40x slower). libgomp reads it when torch is imported.
OMP_WAIT = "OMP_WAIT_POLICY"

#: Set by `gates audit` (:func:`run_pooled`) to each run's share of the cores, as the suite's
#: xdist workers get theirs (the Makefile runs pytest with OMP_NUM_THREADS=1): runs of two
#: threads side by side on two cores took 10-15 % longer than runs of one (a tiny model's
#: training, the 370M export against HF's). Read, like OMP_WAIT, when torch is imported.
OMP_THREADS = "OMP_NUM_THREADS"

#: Imported once by the warm interpreter when installed: what a test run would otherwise
#: import afresh each time. Never a module of the project under audit (those are dropped
#: after the fork anyway).
PRELOAD = (
    "pytest",
    "hypothesis",
    "numpy",
    "torch",
    "torch.nn",
    "torch.optim",
    "torch.distributed",
    "safetensors.torch",
    "tokenizers",
    "jsonschema",
    "ruamel.yaml",
    "transformers",
    "transformers.models.llama.modeling_llama",
    # pytest loads anyio's plugin (an entry point) in every run, and the plugin imports
    # anyio's asyncio backend: 0.26 s a run on this machine.
    "anyio._backends._asyncio",
)

#: Directories under the project root never compiled into the cache: hidden ones (``.git``,
#: ``.venv``, caches), byte code, and anything that is a virtual environment.
_NOT_SOURCE = frozenset({"__pycache__", "node_modules", "site-packages"})

#: Forking needs os.fork (Unix); elsewhere the audit starts each pytest afresh.
AVAILABLE = hasattr(os, "fork")

#: How often the warm interpreter looks at a running child (and at its own parent).
_POLL_S = 0.02


@dataclass(frozen=True)
class Completed:
    """What a forked run left: like ``subprocess.CompletedProcess`` plus a timeout flag."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False


class WarmInterpreter:
    """The audit's handle on one warm interpreter; one run at a time (one per worker thread).

    Started on the first :meth:`run`; started again if it died. :meth:`close` ends it and any
    child still running."""

    def __init__(self, root: Path, preload: tuple[str, ...] = PRELOAD) -> None:
        self.root = root
        self.preload = preload
        # The environment as it is now, for every start: a restart inside a trace recording
        # (gates.check's attached one) must not make the interpreter, which reads every
        # project file to compile it, a traced reader of them all.
        self._env = dict(os.environ)
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start it now (it preloads while the caller goes on), not on the first run."""
        with self._lock:
            if self._proc is None:
                self._proc = self._start()

    def _start(self) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "gates.runner.forkrun", *self.preload],
            cwd=self.root,
            env=self._env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def run(
        self,
        args: list[str],
        env: dict[str, str],
        tmp: Path,
        timeout_s: float,
        module: str = "pytest",
    ) -> Completed:
        """Run ``python -m pytest *args`` as a fork, in ``env``, at the project root; its
        output goes to files under ``tmp``. Traced when ``env`` says so (gates.provenance.trace).
        ``module``: another command's module whose ``main(args)`` the fork calls instead
        (``gates.cli.gates``: a measurement under a mutant)."""
        from gates.provenance import trace  # noqa: PLC0415 - the warm interpreter never needs it

        out, err = tmp / "stdout.txt", tmp / "stderr.txt"
        request = {
            "module": module,
            "args": args,
            "env": env,
            "cwd": str(self.root),
            "stdout": str(out),
            "stderr": str(err),
            "timeout_s": timeout_s,
            "traced": bool(env.get(trace.DIR_VAR)),
        }
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = self._start()
            proc = self._proc
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps(request) + "\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
            except (OSError, ValueError):  # ValueError: closed by close() meanwhile
                line = ""
            if not line:  # it died (killed, out of memory): this run has no verdict
                self._proc = None
                code = proc.wait()
                _close_pipes(proc)
                return Completed(-1, _read(out), _read(err) + _died(code))
            reply = json.loads(line)
        return Completed(reply["returncode"], _read(out), _read(err), reply["timed_out"])

    def close(self) -> None:
        """End the warm interpreter; a run still going is killed (its caller gets an error
        back). Safe from another thread while a run is in progress."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()  # its SIGTERM handler kills the running child's group first
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        _close_pipes(proc)


def run_pooled(
    root: Path,
    tasks: list[Callable[[WarmInterpreter | None], None]],
    *,
    jobs: int,
    warm: bool,
    groups: list[str] | None = None,
) -> None:
    """Call every task, ``jobs`` at a time, each with a warm interpreter of its own (None
    when not ``warm``: the task starts a fresh process), in the given order but for one
    rule: a task whose ``groups`` entry (the audit's: its test or gate) is running already
    waits while a task of another group can start. Runs of one test compete for the same
    resources (the 370M checkpoint test's disk and 7 GB of memory): two of them side by
    side took as long as one after the other. The first task to raise (a full disk) ends
    the others, its runs killed, and is raised."""
    workers = max(1, jobs)
    groups = groups or [str(n) for n in range(len(tasks))]
    if len(groups) != len(tasks):
        raise ValueError(f"{len(groups)} groups for {len(tasks)} tasks")
    # Side by side, idle OpenMP threads must sleep (OMP_WAIT) and each run gets its share of
    # the cores (OMP_THREADS), unless the caller chose; set before the warm interpreters
    # start, since they import torch, and seen by every run and the processes it starts.
    side_by_side = {OMP_WAIT: "PASSIVE", OMP_THREADS: str(core_share(workers))}
    chosen_here = [name for name in side_by_side if workers > 1 and name not in os.environ]
    for name in chosen_here:
        os.environ[name] = side_by_side[name]
    started = [WarmInterpreter(root) for _ in range(workers)] if warm else []
    waiting = list(range(len(tasks)))
    running: Counter[str] = Counter()
    lock = threading.Lock()
    failed = threading.Event()

    def take() -> int | None:
        with lock:
            if failed.is_set() or not waiting:
                return None
            index = next((i for i in waiting if not running[groups[i]]), waiting[0])
            waiting.remove(index)
            running[groups[index]] += 1
            return index

    def worker(interpreter: WarmInterpreter | None) -> None:
        while (index := take()) is not None:
            try:
                tasks[index](interpreter)
            finally:
                with lock:
                    running[groups[index]] -= 1

    pool = ThreadPoolExecutor(max_workers=workers)
    futures = [pool.submit(worker, interpreter) for interpreter in started or [None] * workers]
    try:
        for future in as_completed(futures):
            future.result()  # the first to raise ...
    finally:
        failed.set()  # ... and the other workers take no more tasks
        for interpreter in started:
            interpreter.close()  # a run still going is killed: its thread sees an error
        pool.shutdown(wait=True)
        for name in chosen_here:
            os.environ.pop(name, None)


def core_share(workers: int) -> int:
    """The cores each of ``workers`` runs side by side may use: those this process may run
    on, shared out evenly, at least one."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // max(1, workers))


def _close_pipes(proc: subprocess.Popen) -> None:
    for pipe in (proc.stdin, proc.stdout):
        with contextlib.suppress(OSError, ValueError):  # a write cut short by its death
            if pipe is not None:
                pipe.close()


def _read(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def _died(code: int) -> str:
    how = f"signal {-code}" if code < 0 else f"status {code}"
    return f"\ngates.runner.forkrun: the warm interpreter died ({how}) during this run\n"


# ---- the warm interpreter (python -m gates.runner.forkrun) -------------------------------------


def _preload(names: list[str]) -> None:
    for name in names:
        with contextlib.suppress(ImportError):  # not installed here: the run imports less
            importlib.import_module(name)


def _compile_project(root: str) -> dict[str, tuple[bytes, CodeType]]:
    """Every ``.py`` under ``root`` compiled as the import system compiles it, by absolute
    path, with the bytes it was compiled from; a file that does not compile is left out (the
    run that imports it reports the error, as a fresh one would)."""
    compiled: dict[str, tuple[bytes, CodeType]] = {}
    for directory, subdirs, names in os.walk(os.path.abspath(root)):
        subdirs[:] = [
            d
            for d in subdirs
            if not d.startswith(".")
            and d not in _NOT_SOURCE
            and not os.path.exists(os.path.join(directory, d, "pyvenv.cfg"))
        ]
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                with contextlib.suppress(Exception):  # unreadable, or a syntax error
                    with open(path, "rb") as f:
                        data = f.read()
                    compiled[path] = (data, compile(data, path, "exec", dont_inherit=True))
    return compiled


def _serve_compiled(compiled: dict[str, tuple[bytes, CodeType]]) -> None:
    """Have the import system take a module's code from ``compiled`` when the source it has
    just read (and the trace has seen it read) is byte for byte the source compiled there;
    any other source, or another optimization level, is compiled as before."""
    loader = importlib.machinery.SourceFileLoader
    compile_source = loader.source_to_code

    def source_to_code(self, data, path, *, _optimize=-1):
        entry = compiled.get(os.path.abspath(path)) if _optimize == -1 else None
        if entry is None or entry[0] != data:
            return compile_source(self, data, path, _optimize=_optimize)
        code = entry[1]
        _imp._fix_co_filename(code, path)  # the path this import found it by
        return code

    loader.source_to_code = source_to_code


def _project_modules(root: str) -> list[str]:
    """Names of imported modules whose file lies in the project and not in the interpreter's
    own prefix (a virtual environment may live inside the project)."""
    inside = os.path.realpath(root) + os.sep
    prefixes = tuple(
        os.path.realpath(p) + os.sep for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}
    )
    names = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not path:
            continue
        real = os.path.realpath(path)
        if real.startswith(inside) and not real.startswith(prefixes):
            names.append(name)
    return names


def _child(request: dict) -> None:
    """In the forked child: become the fresh ``python -m pytest`` run; never returns."""
    code = 1
    try:
        os.setsid()
        # A fresh interpreter's handlers, not the warm one's (its SIGTERM handler would
        # end a test that sends itself SIGTERM with the warm interpreter's exit status).
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(os.open(request["stdout"], flags, 0o600), 1)
        os.dup2(os.open(request["stderr"], flags, 0o600), 2)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - lives as long as the process
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        for entry in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
            if entry and entry not in sys.path:
                sys.path.insert(1, entry)
        for name in _project_modules(request["cwd"]):
            del sys.modules[name]
        if request.get("traced"):
            _trace_hook().start()
        module = request.get("module", "pytest")
        if module == "pytest":
            import pytest  # noqa: PLC0415 - preloaded; imported here for the name

            _declare_preloaded_plugins_unrewritten()
            sys.argv = [os.path.join(os.path.dirname(pytest.__file__), "__main__.py")]
            # pytest.main: what `python -m pytest` calls, less its deprecated console wrapper
            command = pytest.main
        else:
            sys.argv = [module]
            command = importlib.import_module(module).main
        sys.argv += request["args"]
        try:
            code = int(command(request["args"]))
        except SystemExit as stop:  # as the interpreter maps it
            code = _exit_status(stop.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()  # what a normal exit runs (torch, tempfile, logging…)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code if isinstance(code, int) else 1)


def _trace_hook() -> ModuleType:
    """gates/provenance/trace_hook.py, loaded from its file under a private name, as a fresh
    traced process runs it (a copy, as ``sitecustomize``): imported as
    ``gates.provenance.trace_hook`` it would import the ``gates`` package before the hook
    starts, and a run that imports ``gates`` later (the pytest plugin does) would not be seen
    reading ``gates/__init__.py`` when the package is part of the project."""
    path = Path(__file__).resolve().parent.parent / "provenance" / "trace_hook.py"
    spec = importlib.util.spec_from_file_location("_shipgate_trace_hook", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _declare_preloaded_plugins_unrewritten() -> None:
    """Mark the packages of pytest plugins that a preloaded module imported (transformers
    imports anyio) as not for assertion rewriting, as their own docstring may: in a fresh
    process pytest imports them first and rewrites them, here they are imported already, and
    pytest's "already imported so cannot be rewritten" warning would end every run of a
    project whose ``filterwarnings`` is ``error``. Nothing else of pytest changes."""
    import importlib.metadata  # noqa: PLC0415

    packages = set()  # as pytest marks them: every top-level module of a plugin's distribution
    for dist in importlib.metadata.distributions():
        if any(ep.group == "pytest11" for ep in dist.entry_points):
            for file in dist.files or []:
                if file.suffix == ".py":
                    packages.add(file.parts[0] if len(file.parts) > 1 else file.stem)
    for name in sorted(packages & sys.modules.keys()):
        module = sys.modules[name]
        module.__doc__ = (module.__doc__ or "") + "\n\nPYTEST_DONT_REWRITE (gates.runner.forkrun)"


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")  # what the interpreter prints for a non-integer exit
    return 1


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _wait(pid: int, timeout_s: float, parent: int) -> tuple[int, bool]:
    """Wait for the child; kill its group at the deadline or when our parent is gone."""
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            _kill_group(pid)  # what it left running dies with it, as at a pipe's EOF
            return os.waitstatus_to_exitcode(status), False
        if time.monotonic() > deadline or os.getppid() != parent:
            _kill_group(pid)
            os.waitpid(pid, 0)
            return -signal.SIGKILL, True
        select.select([], [], [], _POLL_S)


def main(preload: list[str]) -> int:
    # Replies go to a copy of stdout; fd 1 becomes stderr, so nothing a preloaded module
    # prints can be taken for a reply.
    protocol_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    _preload(preload)
    _serve_compiled(_compile_project(os.getcwd()))
    # What the preload made lives as long as the interpreter: leave it out of every
    # collection, so each child's gc.collect (pytest calls it twice at the end of a session)
    # walks only what the run made — 0.4 s a run with torch and transformers loaded — and
    # the child's pages stay shared instead of copied on the collector's writes.
    gc.freeze()
    parent = os.getppid()
    current: list[int] = []

    def stop(signum, _frame):
        for pid in current:
            _kill_group(pid)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()  # nothing buffered is written twice, by the child too
        pid = os.fork()
        if pid == 0:
            protocol_out.close()  # the child must not hold the reply pipe
            _child(request)
        current[:] = [pid]
        returncode, timed_out = _wait(pid, request["timeout_s"], parent)
        current.clear()
        protocol_out.write(json.dumps({"returncode": returncode, "timed_out": timed_out}) + "\n")
        protocol_out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
