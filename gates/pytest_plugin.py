"""pytest plugin (entry point ``shipgate``): applies the mutant named by $SHIPGATE_MUTANT.

Inactive unless the variable is set, so ordinary test runs are untouched. An unknown
mutant id is a usage error (exit 4), never a silent pass that would count as "survived"
or a crash that would count as "killed".
"""

from __future__ import annotations

import os

import pytest

from gates import mutants, project


def pytest_configure(config: pytest.Config) -> None:
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
