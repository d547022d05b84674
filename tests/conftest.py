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
