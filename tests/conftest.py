"""Shared test set-up: Hypothesis profiles and paths.

Profiles: ``ci`` (derandomized, no deadline; loaded when $CI is set), ``dev``
(random, fewer examples) and ``stress`` (2000 examples). Choose with HYPOTHESIS_PROFILE.
"""

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=True,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=40)
# `gates audit` runs each mutant under "audit": a killed mutant needs no shrunk example.
settings.register_profile(
    "audit",
    parent=settings.get_profile("ci"),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
# Long local hunts for counterexamples; never used by CI.
settings.register_profile("stress", deadline=None, max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

ROOT = Path(__file__).resolve().parent.parent
FIXTURE_PROJECT = ROOT / "tests" / "fixtures" / "pv_project"


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture
def fixture_project() -> Path:
    return FIXTURE_PROJECT


@pytest.fixture
def measured_widget(tmp_path: Path) -> tuple[Path, Path]:
    """(root, contract) of the widget project (tests/acceptance/widget_project.py) with its
    measurements registered in this process: for tests that call gates.promotion or
    gates.service directly."""
    from tests.acceptance import widget_project  # noqa: PLC0415 - only for tests that ask

    root = tmp_path / "widget"
    root.mkdir()
    return root, widget_project.build_measured(root)


@pytest.fixture(scope="session", autouse=True)
def _session_shipgate_home(tmp_path_factory):
    """Runs register themselves in $SHIPGATE_HOME/registry.db (trainer/store/registry.py):
    never the real home's, from module- and session-scoped fixtures either."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SHIPGATE_HOME", str(tmp_path_factory.mktemp("shipgate-home")))
        # The CPU's matmul peak (trainer/plan/roofline.py), measured once per session.
        patch.setenv("SHIPGATE_CACHE_DIR", str(tmp_path_factory.mktemp("shipgate-cache")))
        yield


@pytest.fixture(autouse=True)
def shipgate_home(tmp_path_factory, monkeypatch) -> Path:
    """A registry of this test's own (empty at its start)."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("SHIPGATE_HOME", str(home))
    return home
