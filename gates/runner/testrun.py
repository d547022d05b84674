"""Run bound falsification tests (pytest node ids) in a subprocess, optionally mutated, and
say how each failing test failed.

pytest's exit status says only *that* a test failed. The audit needs to know *how*: a test
that fails on an assertion (its check fired) kills a mutant; one that dies of a TypeError from
a drifted seam does not. So the child pytest is told a file in $SHIPGATE_FAILURES, and the
shipgate plugin (gates.runner.pytest_plugin) appends one JSON line per failing report to it: the
phase, the exception's type and first line, whether it is an assertion, and the module it
was raised in. ``TestOutcome.failures`` holds them, in the order they happened. A file the
child could not write (a full disk) is an OSError naming it (gates.io.files
``raise_child_write_failure``), never a verdict read from half a file.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gates import mutants
from gates.io import files, jsonfile

if TYPE_CHECKING:  # not imported at run time: every audited pytest imports this module
    from gates.provenance import trace
    from gates.runner import forkrun

#: pytest exit codes: 0 all passed, 1 some failed; anything else is not a verdict.
_OUTCOMES = {0: "passed", 1: "failed"}

#: Set only for the child pytest (and removed from its environment by the plugin, so a
#: pytest that a test starts itself does not write here too).
FAILURES_VAR = "SHIPGATE_FAILURES"

#: Longest first line of an exception message kept; the full text is in the output.
_MESSAGE_CHARS = 300
#: A failures file holds a line per failing report, and a run stops at the first (-x).
MAX_FAILURES_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Failure:
    """One failing pytest report: the test's check firing, or something else going wrong."""

    node: str
    phase: str  # collect | setup | call | teardown
    exception: str | None  # "AssertionError", "_pytest.outcomes.Failed", None: none raised
    message: str  # its first line
    assertion: bool  # AssertionError or pytest's Failed (pytest.fail, "DID NOT RAISE")
    raised_in: str | None  # module of the innermost frame not hidden from tracebacks

    def describe(self) -> str:
        what = f"{self.exception}: {self.message}" if self.message else str(self.exception)
        return f"{what} ({self.phase}, raised in {self.raised_in or '?'})"


@dataclass(frozen=True)
class TestOutcome:
    node: str
    mutant: str | None
    outcome: str  # passed | failed | error
    seconds: float
    output: str
    failures: tuple[Failure, ...] = ()  # when failed: each failing report, first first
    timed_out: bool = False  # outcome is then "error"

    __test__ = False  # not a pytest test class, despite the name

    @property
    def failed_on_assertion(self) -> bool:
        """Failed, and the first failure is an assertion: the test's own check fired.

        With ``-x`` the first failing test ends the run; its first failing phase decides, so
        a teardown that also breaks after the assertion fired does not undo the kill.
        """
        return self.outcome == "failed" and bool(self.failures) and self.failures[0].assertion


def is_assertion(exc: BaseException | None, refusals: tuple[type[BaseException], ...] = ()) -> bool:
    """An assertion of the test: AssertionError (``assert``, pytest.raises' match, numpy's
    and torch's assert helpers) or pytest's Failed (``pytest.fail``, "DID NOT RAISE") — but
    not a Failed raised while handling another exception (a helper's ``except Exception:
    pytest.fail(...)`` turns a crash into a failure; the crash is what happened). An
    exception of ``refusals`` (the active mutant's ``refused_with``) is the detection, raised
    or handled so. An exception group (Hypothesis reporting several bugs) is one when all of
    its are."""
    import pytest  # noqa: PLC0415 - the parent process never needs pytest for this

    if isinstance(exc, BaseExceptionGroup):
        return all(is_assertion(e, refusals) for e in exc.exceptions)
    if refusals and isinstance(exc, refusals):
        return True
    if isinstance(exc, pytest.fail.Exception):
        handled = _handled(exc)
        caught = (AssertionError, pytest.fail.Exception, *refusals)
        return handled is None or any(isinstance(e, caught) for e in _chain(handled))
    return isinstance(exc, AssertionError)


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it was raised from or while handling, innermost last: a library that
    wraps every error (``raise CheckpointError(...) from exc``) keeps the test's assertion,
    raised inside it, at the end of the chain."""
    chain: list[BaseException] = []
    while exc is not None and len(chain) < 32 and not any(exc is seen for seen in chain):
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


def _handled(exc: BaseException) -> BaseException | None:
    """The exception ``exc`` was raised while handling (``__context__``), skipping pytest's
    own control flow (a skip, an xfail), or None."""
    import pytest  # noqa: PLC0415

    context = exc.__context__
    if isinstance(context, pytest.skip.Exception | pytest.xfail.Exception):
        return None
    return context


def _type_name(exc: BaseException) -> str:
    t = type(exc)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _raised_in(exc: BaseException) -> str | None:
    """Module of the innermost traceback frame that pytest would show (frames that set
    ``__tracebackhide__``, like pytest.fail's own, are skipped)."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        if frame.f_locals.get("__tracebackhide__") or frame.f_globals.get("__tracebackhide__"):
            continue
        return frame.f_globals.get("__name__")
    return None


def failure_of(
    node: str,
    phase: str,
    exc: BaseException | None,
    refusals: tuple[type[BaseException], ...] = (),
) -> Failure:
    """What the plugin records for a failing report whose exception (if any) is ``exc``;
    ``refusals``: the active mutant's ``refused_with`` (gates.mutants)."""
    if exc is None:  # e.g. XPASS(strict): pytest failed the test without an exception
        return Failure(node, phase, None, "", False, None)
    lines = str(exc).strip().splitlines()
    message = lines[0][:_MESSAGE_CHARS] if lines else ""
    assertion = is_assertion(exc, refusals)
    handled = _handled(exc) if isinstance(exc, _failed_type()) else None
    if handled is not None and not assertion:
        said = str(handled).strip().splitlines()
        shown = f": {said[0]}" if said and said[0] not in message else ""
        message = f"{message} (while handling {_type_name(handled)}{shown})"[: 2 * _MESSAGE_CHARS]
    return Failure(node, phase, _type_name(exc), message, assertion, _raised_in(exc))


def _failed_type() -> type[BaseException]:
    import pytest  # noqa: PLC0415

    return pytest.fail.Exception


def append_failure(path: Path, failure: Failure) -> None:
    """Append one line to the failures file; an OSError names it (a flush's does not)."""
    try:
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(failure.__dict__) + "\n")
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def read_failures(path: Path) -> tuple[Failure, ...]:
    """The failures the child recorded. A line that is not one (cut short: the child died
    writing it) is an OSError naming the file: the run's outcome is unknown."""
    if not path.is_file():
        return ()
    text = jsonfile.decode(files.read_regular(path, MAX_FAILURES_BYTES), path)
    failures = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            failures.append(Failure(**jsonfile.loads(line, path)))
        except (jsonfile.JsonFileError, TypeError) as exc:  # TypeError: not its fields
            why = exc.problem if isinstance(exc, jsonfile.JsonFileError) else str(exc)
            raise OSError(
                errno.EIO, f"line {number} is not a whole failure record ({why})", str(path)
            ) from None
    return tuple(failures)


def run_node(
    root: Path,
    node: str,
    mutant: str | None = None,
    timeout_s: float = 900,
    *,
    traced: trace.Recording | None = None,
    warm: forkrun.WarmInterpreter | None = None,
) -> TestOutcome:
    """Run ``node`` in a fresh ``python -m pytest``, or in a child forked from ``warm``
    (gates.runner.forkrun: the same run without the interpreter's start-up). ``traced``: a
    detached recording (gates.provenance.trace) whose variables the run gets; an attached one is in
    ``os.environ`` already."""
    env = {k: v for k, v in os.environ.items() if k != mutants.ENV_VAR}
    if traced is not None:
        env.update(traced.env)
    # Derandomized: the same examples every run. Projects following shipgate's conftest
    # convention read HYPOTHESIS_PROFILE; under a mutant, shrinking is wasted time.
    env["HYPOTHESIS_PROFILE"] = "ci"
    if mutant:
        env[mutants.ENV_VAR] = mutant
        env["HYPOTHESIS_PROFILE"] = "audit"
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", node]
    timed_out = False
    with tempfile.TemporaryDirectory(prefix="shipgate-testrun-") as tmp:
        failures_file = Path(tmp) / "failures.jsonl"
        env[FAILURES_VAR] = str(failures_file)
        start = time.perf_counter()
        try:
            if warm is not None:
                proc = warm.run(cmd[3:], env, Path(tmp), timeout_s)
                if proc.timed_out:
                    raise subprocess.TimeoutExpired(cmd, timeout_s)
            else:
                proc = subprocess.run(
                    cmd,
                    cwd=root,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=timeout_s,
                    check=False,
                )
            files.raise_child_write_failure(proc.stderr, "the test run's record of its failures")
            outcome, output = _OUTCOMES.get(proc.returncode, "error"), proc.stdout + proc.stderr
        except subprocess.TimeoutExpired:
            outcome, output, timed_out = "error", f"timed out after {timeout_s} s", True
        seconds = round(time.perf_counter() - start, 3)
        # A run killed at its deadline may have been cut off mid-line: its failures do not
        # decide anything (the outcome is a timeout), so they are not read.
        failures = () if timed_out else read_failures(failures_file)
    return TestOutcome(node, mutant, outcome, seconds, output, failures, timed_out)
