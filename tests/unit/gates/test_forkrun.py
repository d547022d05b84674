"""gates.runner.forkrun: a run forked from a warm interpreter is the fresh ``python -m pytest``
run the audit's slow path starts — same environment, directory, exit status, exit handlers
and traced sources — and a run that hangs or loses its interpreter ends without a verdict.

A throwaway project under tmp_path; the warm interpreter preloads only what a test names, so
each starts in well under a second."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import signal
import textwrap
import threading
import time
from pathlib import Path

import pytest

from gates.provenance import trace
from gates.runner import forkrun, testrun

pytestmark = pytest.mark.skipif(not forkrun.AVAILABLE, reason="os.fork is Unix only")

TESTS = """\
import atexit
import os
import subprocess
import sys
import time
from pathlib import Path

import helper


def test_env_and_directory():
    assert os.environ["FORKRUN_PROBE"] == "set for this run"
    assert Path.cwd() == Path(os.environ["FORKRUN_ROOT"])
    assert "FORKRUN_INHERITED" not in os.environ
    assert helper.VALUE == 7


def test_fails_on_an_assertion():
    assert helper.VALUE == 8


def test_signal_handlers_are_a_fresh_interpreters():
    import signal

    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_registers_an_exit_handler():
    marker = Path(os.environ["FORKRUN_MARKER"])
    atexit.register(marker.write_text, "exit handlers ran")


def test_the_preload_is_out_of_the_collectors_reach():
    import gc

    assert gc.get_freeze_count() > 0


def test_hangs_with_a_grandchild():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    Path(os.environ["FORKRUN_MARKER"]).write_text(str(child.pid))
    time.sleep(300)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "tests").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\nfilterwarnings = ['error']\n")
    (root / "helper.py").write_text("VALUE = 7\n")
    (root / "tests" / "test_probe.py").write_text(textwrap.dedent(TESTS))
    return root


@pytest.fixture
def warm(project: Path):
    interpreter = forkrun.WarmInterpreter(project, preload=("helper",))
    yield interpreter
    interpreter.close()


def _env(project: Path, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKRUN_")}
    env |= {"FORKRUN_ROOT": str(project), "FORKRUN_MARKER": str(tmp_path / "marker"), **extra}
    return env


def _run(warm, node: str, env: dict[str, str], tmp: Path, timeout_s: float = 60):
    tmp.mkdir(exist_ok=True)
    return warm.run(["-q", "-x", "-p", "no:cacheprovider", node], env, tmp, timeout_s)


def test_a_forked_run_gets_the_runs_environment_and_directory(project, warm, tmp_path, monkeypatch):
    monkeypatch.setenv("FORKRUN_INHERITED", "the warm interpreter's, not the run's")
    env = _env(project, tmp_path, FORKRUN_PROBE="set for this run")
    done = _run(warm, "tests/test_probe.py::test_env_and_directory", env, tmp_path / "a")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    failed = _run(warm, "tests/test_probe.py::test_fails_on_an_assertion", env, tmp_path / "b")
    assert failed.returncode == 1 and "assert 7 == 8" in failed.stdout


def test_signal_handlers_are_a_fresh_interpreters(project, warm, tmp_path):
    """The warm interpreter handles SIGTERM (to kill its child); a run must not inherit that
    handler: a test that sends itself SIGTERM would end with the warm one's exit status."""
    node = "tests/test_probe.py::test_signal_handlers_are_a_fresh_interpreters"
    done = _run(warm, node, _env(project, tmp_path), tmp_path / "a")
    assert done.returncode == 0, done.stdout + done.stderr


def test_exit_handlers_run_as_at_a_normal_exit(project, warm, tmp_path):
    done = _run(
        warm,
        "tests/test_probe.py::test_registers_an_exit_handler",
        _env(project, tmp_path),
        tmp_path / "a",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "marker").read_text() == "exit handlers ran"


def test_a_traced_run_reads_again_what_the_warm_interpreter_had_imported(project, warm, tmp_path):
    """helper.py was imported before the fork (preloaded); the run must still count it, as a
    fresh process would, or the audit's sources would miss the project's own modules."""
    env = _env(project, tmp_path, FORKRUN_PROBE="set for this run")
    with trace.recording(project, detached=True) as traced:
        done = _run(
            warm, "tests/test_probe.py::test_env_and_directory", env | traced.env, tmp_path / "a"
        )
    assert done.returncode == 0, done.stdout + done.stderr
    read = {s["path"] for s in traced.sources()}
    assert {"helper.py", "tests/test_probe.py", "pyproject.toml"} <= read


def test_a_run_past_its_deadline_is_killed_with_its_children(project, warm, tmp_path):
    start = time.monotonic()
    done = _run(
        warm,
        "tests/test_probe.py::test_hangs_with_a_grandchild",
        _env(project, tmp_path),
        tmp_path / "a",
        timeout_s=4,
    )
    assert done.timed_out and time.monotonic() - start < 30
    grandchild = int((tmp_path / "marker").read_text())
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild), "the test's own child outlived the timeout"


def test_a_run_whose_interpreter_dies_has_no_verdict_and_the_next_run_works(
    project, warm, tmp_path
):
    env = _env(project, tmp_path)
    hang = threading.Thread(
        target=lambda: results.append(
            _run(warm, "tests/test_probe.py::test_hangs_with_a_grandchild", env, tmp_path / "a")
        )
    )
    results: list[forkrun.Completed] = []
    hang.start()
    while not (tmp_path / "marker").exists():
        time.sleep(0.05)
    assert warm._proc is not None
    os.kill(warm._proc.pid, signal.SIGKILL)
    hang.join(timeout=30)
    (died,) = results
    assert died.returncode not in (0, 1) and "warm interpreter died" in died.stderr
    env["FORKRUN_PROBE"] = "set for this run"
    again = _run(warm, "tests/test_probe.py::test_env_and_directory", env, tmp_path / "b")
    assert again.returncode == 0, again.stdout + again.stderr


def test_run_node_through_a_warm_interpreter_reports_like_a_fresh_process(
    project, warm, tmp_path, monkeypatch
):
    monkeypatch.setenv("FORKRUN_ROOT", str(project))
    monkeypatch.setenv("FORKRUN_MARKER", str(tmp_path / "marker"))
    monkeypatch.setenv("FORKRUN_PROBE", "set for this run")
    node = "tests/test_probe.py::test_fails_on_an_assertion"
    fresh = testrun.run_node(project, node)
    forked = testrun.run_node(project, node, warm=warm)
    assert (fresh.outcome, fresh.failures) == (forked.outcome, forked.failures)
    assert forked.outcome == "failed" and forked.failed_on_assertion
    assert forked.failures[0].message == "assert 7 == 8"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (not yet reaped by init) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_run_of_another_commands_main_gets_its_args_and_exit_status(project, warm, tmp_path):
    """``module``: the fork calls that module's ``main(args)`` instead of pytest's (how the
    audit measures a gate under a mutant), the project's modules imported afresh."""
    (project / "tool.py").write_text(
        "import sys\n\nimport helper\n\n\ndef main(args):\n"
        "    print('args', args, 'argv', sys.argv[1:], 'value', helper.VALUE)\n"
        "    return len(args)\n"
    )
    (project / "helper.py").write_text("VALUE = 9\n")  # the preloaded 7 is stale
    (tmp_path / "m").mkdir()
    done = warm.run(["a", "b"], _env(project, tmp_path), tmp_path / "m", 60, module="tool")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "args ['a', 'b'] argv ['a', 'b'] value 9" in done.stdout


def test_a_module_edited_after_the_warm_interpreter_compiled_it_runs_as_edited(
    project, warm, tmp_path
):
    """The warm interpreter compiles the project once, at its start; a source edited since
    (here: the same size, within the same second) runs as it reads now, never as compiled."""
    env = _env(project, tmp_path, FORKRUN_PROBE="set for this run")
    first = _run(warm, "tests/test_probe.py::test_env_and_directory", env, tmp_path / "a")
    assert first.returncode == 0, first.stdout + first.stderr  # helper.VALUE == 7
    (project / "helper.py").write_text("VALUE = 8\n")
    edited = _run(warm, "tests/test_probe.py::test_fails_on_an_assertion", env, tmp_path / "b")
    assert edited.returncode == 0, edited.stdout + edited.stderr


def test_a_runs_collector_skips_what_the_warm_interpreter_preloaded(project, warm, tmp_path):
    node = "tests/test_probe.py::test_the_preload_is_out_of_the_collectors_reach"
    done = _run(warm, node, _env(project, tmp_path), tmp_path / "a")
    assert done.returncode == 0, done.stdout + done.stderr


def _load(path: Path):
    spec = importlib.util.spec_from_file_location("served_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kept_code_is_served_only_for_the_bytes_it_was_compiled_from(tmp_path, monkeypatch):
    """A positive control for the compile cache: code kept for a file's exact bytes is what an
    import of that file runs (here deliberately other code, to tell the two apart), under the
    path the import found; other bytes are compiled as read."""
    loader = importlib.machinery.SourceFileLoader
    monkeypatch.setattr(loader, "source_to_code", loader.source_to_code)  # undone after
    source = tmp_path / "served.py"
    source.write_text("VALUE = 2\n\ndef where():\n    return where.__code__.co_filename\n")
    kept = compile("VALUE = 1\n\ndef where():\n    return 'kept'\n", "elsewhere.py", "exec")
    forkrun._serve_compiled({str(source): (source.read_bytes(), kept)})

    module = _load(source)
    assert module.VALUE == 1  # served from the cache
    assert module.where.__code__.co_filename == str(source)

    source.write_text("VALUE = 3\n")
    assert _load(source).VALUE == 3  # other bytes: compiled as read


def test_the_project_is_compiled_without_hidden_directories_or_virtualenvs(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("X = 1\n")
    (tmp_path / "broken.py").write_text("def (:\n")  # left for the run to report
    for hidden in (".venv", "env", "pkg/__pycache__"):
        (tmp_path / hidden).mkdir()
        (tmp_path / hidden / "inside.py").write_text("Y = 2\n")
    (tmp_path / "env" / "pyvenv.cfg").write_text("home = /usr\n")
    compiled = forkrun._compile_project(str(tmp_path))
    assert set(compiled) == {str(tmp_path / "pkg" / "mod.py")}
    data, code = compiled[str(tmp_path / "pkg" / "mod.py")]
    assert data == b"X = 1\n" and code.co_filename == str(tmp_path / "pkg" / "mod.py")


def test_a_traced_fork_reads_what_a_fresh_traced_process_reads_the_tracers_package_too():
    """Here the ``gates`` package is part of the project, and a bound test's run reads
    gates/__init__.py (the pytest plugin imports it). A fork must be seen reading it as a
    fresh process is, though the trace hook lives in that package: imported as a module of it
    before the hook started, the package was never read again, and `gates check`'s sources
    (its bound tests run in forks) missed it."""
    root = Path(__file__).resolve().parents[3]
    node = "tests/unit/gates/test_semver.py::test_build_metadata_does_not_change_precedence"
    warm = forkrun.WarmInterpreter(root, preload=("pytest",))
    read = []
    try:
        for interpreter in (None, warm):
            with trace.recording(root, detached=True) as traced:
                outcome = testrun.run_node(root, node, traced=traced, warm=interpreter)
            assert outcome.outcome == "passed", outcome.output
            read.append({s["path"] for s in traced.sources()})
    finally:
        warm.close()
    fresh, forked = read
    assert {"gates/__init__.py", "tests/unit/gates/test_semver.py"} <= fresh
    assert forked == fresh


def _pooled_env(jobs: int) -> list[dict[str, str | None]]:
    """What each of three tasks run by run_pooled sees of the OpenMP variables."""
    seen: list[dict[str, str | None]] = []

    def task(_interpreter) -> None:
        seen.append(
            {name: os.environ.get(name) for name in (forkrun.OMP_WAIT, forkrun.OMP_THREADS)}
        )

    forkrun.run_pooled(Path.cwd(), [task] * 3, jobs=jobs, warm=False)
    return seen


def test_runs_side_by_side_get_their_share_of_the_cores_unless_the_caller_chose(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    for name in (forkrun.OMP_WAIT, forkrun.OMP_THREADS):
        monkeypatch.delenv(name, raising=False)
    share = {forkrun.OMP_WAIT: "PASSIVE", forkrun.OMP_THREADS: "2"}  # 4 cores, 2 at a time
    assert _pooled_env(jobs=2) == [share] * 3
    assert forkrun.OMP_THREADS not in os.environ and forkrun.OMP_WAIT not in os.environ
    # One at a time: a run has every core, as when run alone.
    assert _pooled_env(jobs=1) == [{forkrun.OMP_WAIT: None, forkrun.OMP_THREADS: None}] * 3
    # What the caller set is kept, and left set.
    monkeypatch.setenv(forkrun.OMP_THREADS, "3")
    assert _pooled_env(jobs=2) == [{forkrun.OMP_WAIT: "PASSIVE", forkrun.OMP_THREADS: "3"}] * 3
    assert os.environ[forkrun.OMP_THREADS] == "3" and forkrun.OMP_WAIT not in os.environ
    assert forkrun.core_share(8) == 1  # never none


def test_two_runs_of_one_group_start_side_by_side_only_when_nothing_else_waits():
    """In order, but a run whose group (its test) is running waits while another group's
    can start: two runs of the 370M checkpoint test side by side took as long as one after
    the other. With only that group left, its runs do share the workers."""
    started: list[str] = []
    second_a_started = threading.Event()

    def task(name: str):
        def run(_interpreter) -> None:
            started.append(name)
            if name == "a1":  # long: runs until another run of its group has started
                assert second_a_started.wait(timeout=10), "a2 never ran beside a1"
            elif name == "a2":
                second_a_started.set()

        return run

    names = ["a1", "a2", "a3", "b1", "b2"]  # longest first, as the audit orders them
    groups = [n[0] for n in names]
    forkrun.run_pooled(Path.cwd(), [task(n) for n in names], jobs=2, warm=False, groups=groups)
    assert set(started[:2]) == {"a1", "b1"}  # not a1 and a2
    assert started[2:] == ["b2", "a2", "a3"]  # every b before a second a
    with pytest.raises(ValueError, match="2 groups for 3 tasks"):
        forkrun.run_pooled(Path.cwd(), [task("x")] * 3, jobs=2, warm=False, groups=["g", "g"])


def test_the_first_task_to_raise_stops_the_pool_and_is_raised():
    ran: list[int] = []

    def task(n: int):
        def run(_interpreter) -> None:
            ran.append(n)
            if n == 1:
                raise OSError(28, "No space left on device")

        return run

    with pytest.raises(OSError, match="No space left"):
        forkrun.run_pooled(Path.cwd(), [task(n) for n in range(20)], jobs=2, warm=False)
    assert 1 in ran and len(ran) < 20
