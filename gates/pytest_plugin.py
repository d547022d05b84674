"""pytest plugin (entry point ``shipgate``): applies the mutant named by $SHIPGATE_MUTANT, and
records how each failing test failed in the file named by $SHIPGATE_FAILURES (gates.testrun).

Inactive unless the variables are set, so ordinary test runs are untouched. An unknown
mutant id is a usage error (exit 4), never a silent pass that would count as "survived"
or a crash that would count as "killed".
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gates import mutants, project, testrun

_FAILURES_FILE = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    # Popped: a pytest that a test starts itself must not append to the audit's file.
    failures = os.environ.pop(testrun.FAILURES_VAR, None)
    if failures:
        config.stash[_FAILURES_FILE] = Path(failures)
    mutant_id = os.environ.get(mutants.ENV_VAR)
    if not mutant_id:
        return
    mutants.load(config.rootpath)
    impl = mutants.REGISTRY.get(mutant_id)
    if impl is None:
        raise pytest.UsageError(
            f"{mutants.ENV_VAR}={mutant_id}: no @mutant({mutant_id!r}) under "
            "the [tool.shipgate] mutants directories of "
            f"{config.rootpath / project.PYPROJECT}"
        )
    patch = pytest.MonkeyPatch()
    impl(patch)
    config.add_cleanup(patch.undo)


def pytest_report_header(config: pytest.Config) -> str | None:
    mutant_id = os.environ.get(mutants.ENV_VAR)
    return f"shipgate: mutant {mutant_id} is ACTIVE" if mutant_id else None


def _record(config: pytest.Config, report, excinfo) -> None:
    path = config.stash.get(_FAILURES_FILE, None)
    if path is None or not report.failed:
        return
    exc = excinfo.value if excinfo is not None else None
    testrun.append_failure(path, testrun.failure_of(report.nodeid, report.when, exc))


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
