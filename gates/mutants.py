"""Mutants: the known bugs a falsification test exists to catch, as explicit injections.

A project keeps its mutants in the directories its ``[tool.shipgate] mutants`` names
(gates.model.project; ``tests/mutants`` by default)::

    from gates.mutants import mutant

    @mutant("ties-broken-by-hash-order")
    def _(patch):                     # patch is a pytest.MonkeyPatch
        patch.setattr(bpe, "tie_key", lambda pair: hash(pair))

`pv validate` finds them statically (AST, nothing imported); `gates audit` first applies each
mutant dry to check the seams it patches exist and accept the original's calls (gates.audit.seams),
then runs a test with ``SHIPGATE_MUTANT=<id>`` and the pytest plugin (gates.runner.pytest_plugin)
applies that mutant before any test runs. docs/mutants.md has the whole story.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from gates.model import project

ENV_VAR = "SHIPGATE_MUTANT"

MutantFn = Callable[..., None]
REGISTRY: dict[str, MutantFn] = {}
#: mutant id → the exception types whose raising is the test's detection of it (a refusal).
REFUSALS: dict[str, tuple[type[BaseException], ...]] = {}


def mutant(
    mutant_id: str, *, refused_with: tuple[type[BaseException], ...] = ()
) -> Callable[[MutantFn], MutantFn]:
    """Register the decorated function as the implementation of ``mutant_id``.

    A test kills a mutant when one of its assertions fails (gates.runner.testrun.is_assertion); an
    exception is a crash, and so is ``pytest.fail`` called while handling one (a test helper
    turning any error into a failure). ``refused_with``: the exception types whose raising IS
    the detection of this bug — the code refusing the bad state the mutant makes (a digest
    mismatch refused with CheckpointError) — so that one, raised or turned into pytest.fail,
    counts as a kill. Say it only where refusing is the tested behaviour."""

    def register(fn: MutantFn) -> MutantFn:
        if mutant_id in REGISTRY and REGISTRY[mutant_id] is not fn:
            raise ValueError(f"mutant {mutant_id!r} is implemented twice")
        REGISTRY[mutant_id] = fn
        if refused_with:
            REFUSALS[mutant_id] = tuple(refused_with)
        return fn

    return register


def discover(root: Path) -> dict[str, str]:
    """mutant id → ``file:line`` of its implementation, found without importing anything."""
    return project.discover(root, "mutants")


def load(root: Path) -> None:
    """Import the project's mutant modules (``[tool.shipgate] mutants``) so they register."""
    project.import_all(root, "mutants")


class UnknownMutantError(LookupError):
    """No mutant of that id is declared under the root; the message names some that are."""


def apply(root: Path, mutant_id: str):
    """Apply the declared mutant ``mutant_id`` in this process; returns its MonkeyPatch
    (undo it to restore the real code). Raises UnknownMutantError when none is declared."""
    import pytest  # noqa: PLC0415 - a mutant patches through pytest.MonkeyPatch

    load(root)
    impl = REGISTRY.get(mutant_id)
    if impl is None:
        known = ", ".join(sorted(REGISTRY)[:5])
        raise UnknownMutantError(
            f"no mutant {mutant_id!r} is declared under {root} (some: {known})"
        )
    patch = pytest.MonkeyPatch()
    try:
        impl(patch)
    except BaseException:
        patch.undo()  # half a mutant is not left behind
        raise
    return patch


def apply_from_env(root: Path):
    """Apply the mutant named by $SHIPGATE_MUTANT in this process, as the pytest plugin
    does; for child processes of a test or a measurement. Returns the MonkeyPatch (None
    when the variable is unset), so the caller can undo it."""
    mutant_id = os.environ.get(ENV_VAR)
    if not mutant_id:
        return None
    try:
        return apply(root, mutant_id)
    except UnknownMutantError as exc:
        raise SystemExit(f"{ENV_VAR}={mutant_id}: {exc}") from None
