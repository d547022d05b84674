"""pytest plugin (entry point ``shipgate``): applies the mutant named by $SHIPGATE_MUTANT, and
records how each failing test failed in the file named by $SHIPGATE_FAILURES (gates.runner.testrun).

A failure it cannot append (a full disk) ends the run as an internal error with
gates.io.files' ``child_write_failure`` line on stderr, so the parent names the file instead of
reading a verdict from a record cut short. Inactive unless the variables are set, so
ordinary test runs are untouched. An unknown
mutant id is a usage error (exit 4), never a silent pass that would count as "survived"
or a crash that would count as "killed".
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from gates import mutants
from gates.io import files
from gates.model import project
from gates.runner import testrun

_FAILURES_FILE = pytest.StashKey[Path]()
_WRITE_ERROR = pytest.StashKey[OSError]()


def pytest_configure(config: pytest.Config) -> None:
    # Popped: a pytest that a test starts itself must not append to the audit's file.
    failures = os.environ.pop(testrun.FAILURES_VAR, None)
    if failures:
        config.stash[_FAILURES_FILE] = Path(failures)
    mutant_id = os.environ.get(mutants.ENV_VAR)
    if not mutant_id:
        return
    try:
        patch = mutants.apply(config.rootpath, mutant_id)
    except mutants.UnknownMutantError:
        raise pytest.UsageError(
            f"{mutants.ENV_VAR}={mutant_id}: no @mutant({mutant_id!r}) under "
            "the [tool.shipgate] mutants directories of "
            f"{config.rootpath / project.PYPROJECT}"
        ) from None
    config.add_cleanup(patch.undo)


def pytest_report_header(config: pytest.Config) -> str | None:
    mutant_id = os.environ.get(mutants.ENV_VAR)
    return f"shipgate: mutant {mutant_id} is ACTIVE" if mutant_id else None


def _record(config: pytest.Config, report, excinfo) -> None:
    path = config.stash.get(_FAILURES_FILE, None)
    if path is None or not report.failed:
        return
    exc = excinfo.value if excinfo is not None else None
    refusals = mutants.REFUSALS.get(os.environ.get(mutants.ENV_VAR, ""), ())
    try:
        failure = testrun.failure_of(report.nodeid, report.when, exc, refusals)
        testrun.append_failure(path, failure)
    except OSError as error:  # a full disk: reported once, at the end (sessionfinish)
        config.stash.setdefault(_WRITE_ERROR, error)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A failure that could not be recorded makes the run's verdict unknown: say which file
    on stderr (the parent raises it as an OSError) and end as an internal error."""
    error = session.config.stash.get(_WRITE_ERROR, None)
    if error is not None:
        # The child-to-parent protocol line (files.raise_child_write_failure) the audit's
        # parent reads from this pytest's stderr; not a message for a user.
        sys.stderr.write(files.child_write_failure(error) + "\n")
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    result = yield
    _record(item.config, result.get_result(), call.excinfo)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    result = yield
    report = result.get_result()
    call = getattr(report, "call", None)  # set by pytest's own implementation for this hook
    _record(collector.config, report, call.excinfo if call is not None else None)
