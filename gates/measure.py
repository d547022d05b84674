"""The measurement registry: each gate id maps to the function that measures it.

A new gate is one function plus contract YAML::

    @measures("GATE-ARCH-370M-002", artifact="checkpoint directory", check=is_checkpoint,
              recipe=Recipe(("python", "tools/make_370m_checkpoint.py", "--out", "{out}"),
                            select="checkpoints/step-00000002"))
    def checkpoint_passes_inspection(ctx: GateContext) -> Measurement: ...

Measurement modules belong to the project, not to the framework: they live in the
directories its ``pyproject.toml`` names under ``[tool.shipgate] measurements``
(gates.model.project; ``tests/measurements`` by default). A lookup imports the one module
that registers the gate (found by reading them: :func:`locate`), not all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gates.model import project
from gates.model.contract import Contract, Gate
from gates.provenance.recipes import Recipe


@dataclass(frozen=True)
class GateContext:
    root: Path
    contract: Contract
    gate: Gate
    artifacts: tuple[Path, ...]


@dataclass
class Measurement:
    #: metric → (value, unit); must include the gate threshold's metric.
    values: dict[str, tuple[float, str]]
    workload: str
    inputs: list[Path] = field(default_factory=list)
    parameters: dict = field(default_factory=dict)
    notes: str = ""
    #: For a PARTIAL discharge: what is and is not discharged.
    partial: dict[str, list[str]] | None = None


MeasureFn = Callable[[GateContext], Measurement]


@dataclass(frozen=True)
class Measurer:
    gate_id: str
    fn: MeasureFn
    #: What artifact the gate is measured on (None: it needs none), e.g. "checkpoint directory".
    artifact: str | None = None
    #: Returns why a path is not that kind of artifact, or None when it is.
    check: Callable[[Path], str | None] | None = None
    #: How the project rebuilds the artifact (gates.provenance.recipes), so that `gates check` and
    #: `gates promote` without --artifact can rebuild one that is gone.
    recipe: Recipe | None = None
    #: The measurement times this machine (wall time or memory, side by side): `gates check
    #: --ship-blocking` runs it with no other gate beside it (gates.runner.checkrun).
    timed: bool = False


REGISTRY: dict[str, Measurer] = {}


def measures(
    gate_id: str,
    *,
    artifact: str | None = None,
    check: Callable[[Path], str | None] | None = None,
    recipe: Recipe | None = None,
    timed: bool = False,
) -> Callable[[MeasureFn], MeasureFn]:
    if recipe is not None and artifact is None:
        raise ValueError(f"{gate_id}: a recipe makes an artifact; say which (artifact=...)")

    def register(fn: MeasureFn) -> MeasureFn:
        REGISTRY[gate_id] = Measurer(gate_id, fn, artifact, check, recipe, timed)
        return fn

    return register


def locate(gate_id: str, root: Path) -> str | None:
    """The dotted name of the measurement module under ``root`` that registers ``gate_id``,
    found by reading the modules, importing none (gates.model.project.registering_module):
    None when none visibly does; a ProjectConfigError when two do."""
    return project.registering_module(root, "measurements", gate_id)


def load(gate_id: str, root: Path, module: str | None) -> Measurer | None:
    """The measurer of ``gate_id``, importing ``module`` (what :func:`locate` found) and
    nothing else of the project's measurements; every module when it was None or did not
    register the gate (a registration pv cannot read, made by running code)."""
    if module is not None:
        project.import_all(root, "measurements", only=module)
    if gate_id not in REGISTRY:
        project.import_all(root, "measurements")
    return REGISTRY.get(gate_id)


def lookup(gate_id: str, root: Path) -> Measurer | None:
    """The measurer of ``gate_id`` among the project's measurement modules under ``root``:
    only the module that registers it is imported, so a gate's traced sources hold that
    module and what it imports, not every measurement module of the project."""
    return load(gate_id, root, locate(gate_id, root))
