"""The contract model: typed, read-only views of a schema-valid contract document.

Build with :func:`Contract.from_data` only after the document passed the JSON Schema
(`gates.model.schema`); every object keeps its document path so findings can point at it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gates.model.findings import DocPath

SHIP_STATUSES = ("PENDING", "PARTIAL", "PASS", "FAIL")


@dataclass(frozen=True, slots=True)
class Mutant:
    id: str
    description: str
    where: DocPath


@dataclass(frozen=True, slots=True)
class FalsificationTest:
    id: str
    rule: str
    prediction: str
    status: str  # bound | planned
    test: str | None
    if_fails: str
    mutants: tuple[Mutant, ...]
    where: DocPath

    @property
    def bound(self) -> bool:
        return self.status == "bound"


@dataclass(frozen=True, slots=True)
class Invariant:
    id: str
    statement: str
    formula: str | None
    falsified_by: tuple[str, ...]
    where: DocPath


@dataclass(frozen=True, slots=True)
class Threshold:
    metric: str
    comparator: str
    value: float
    unit: str

    def holds(self, measured: float) -> bool:
        """Does a measured value satisfy this threshold?"""
        return {
            "<": measured < self.value,
            "<=": measured <= self.value,
            "==": measured == self.value,
            ">=": measured >= self.value,
            ">": measured > self.value,
        }[self.comparator]

    def as_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "comparator": self.comparator,
            "value": self.value,
            "unit": self.unit,
        }

    def __str__(self) -> str:
        # Integers print exactly (373509120, not 3.73509e+08); other floats as written.
        value = int(self.value) if float(self.value).is_integer() else self.value
        return f"{self.metric} {self.comparator} {value} {self.unit}"


def thresholds_of(raw: dict | list) -> tuple[Threshold, ...]:
    """A gate's ``threshold``: one mapping, or a list of them that must all hold."""
    return tuple(Threshold(**t) for t in (raw if isinstance(raw, list) else [raw]))


@dataclass(frozen=True, slots=True)
class Gate:
    id: str
    rule: str
    falsification_tests: tuple[str, ...]
    #: All must hold; the first is the gate's headline (changelog, summaries). A refusal
    #: gate's later thresholds bound its false refusals, so refusing everything fails.
    thresholds: tuple[Threshold, ...]
    ship_blocking: bool
    status: str
    evidence: str | None
    partial_note: str | None
    blocks_on: tuple[str, ...]
    where: DocPath
    #: (mutant id, why) pairs `gates audit` does not run against this gate's measurement.
    measurement_exempt: tuple[tuple[str, str], ...] = ()

    @property
    def threshold(self) -> Threshold:
        return self.thresholds[0]

    def thresholds_text(self) -> str:
        return " and ".join(str(t) for t in self.thresholds)


@dataclass(frozen=True, slots=True)
class ChangelogEntry:
    version: str
    date: str
    text: str
    where: DocPath


@dataclass(frozen=True, slots=True)
class Metadata:
    id: str
    version: str
    status: str
    kind: str
    created: str
    updated: str
    description: str
    references: tuple[str, ...]
    depends_on: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Contract:
    path: Path
    metadata: Metadata
    invariants: tuple[Invariant, ...]
    falsification_tests: tuple[FalsificationTest, ...]
    gates: tuple[Gate, ...]
    changelog: tuple[ChangelogEntry, ...]

    @property
    def id(self) -> str:
        return self.metadata.id

    def test(self, test_id: str) -> FalsificationTest | None:
        return next((t for t in self.falsification_tests if t.id == test_id), None)

    def gate(self, gate_id: str) -> Gate | None:
        return next((g for g in self.gates if g.id == gate_id), None)

    @classmethod
    def from_data(cls, path: Path, data: dict[str, Any]) -> Contract:
        md = data["metadata"]
        return cls(
            path=path,
            metadata=Metadata(
                id=md["id"],
                version=md["version"],
                status=md["status"],
                kind=md["kind"],
                created=md["created"],
                updated=md["updated"],
                description=md["description"],
                references=tuple(md.get("references", ())),
                depends_on=tuple(md.get("depends_on", ())),
            ),
            invariants=tuple(
                Invariant(
                    i["id"],
                    i["statement"],
                    i.get("formula"),
                    tuple(i["falsified_by"]),
                    ("invariants", n),
                )
                for n, i in enumerate(data["invariants"])
            ),
            falsification_tests=tuple(
                FalsificationTest(
                    t["id"],
                    t["rule"],
                    t["prediction"],
                    t["status"],
                    t.get("test"),
                    t["if_fails"],
                    tuple(
                        Mutant(m["id"], m["description"], ("falsification_tests", n, "mutants", k))
                        for k, m in enumerate(t.get("mutants", ()))
                    ),
                    ("falsification_tests", n),
                )
                for n, t in enumerate(data["falsification_tests"])
            ),
            gates=tuple(
                Gate(
                    g["id"],
                    g["rule"],
                    tuple(g["falsification_tests"]),
                    thresholds_of(g["threshold"]),
                    g["ship_blocking"],
                    g["status"],
                    g.get("evidence"),
                    g.get("partial_note"),
                    tuple(g.get("blocks_on", ())),
                    ("gates", n),
                    tuple(
                        (mutant, e["reason"])
                        for e in g.get("measurement_exempt", ())
                        for mutant in e["mutants"]
                    ),
                )
                for n, g in enumerate(data["gates"])
            ),
            changelog=tuple(
                ChangelogEntry(c["version"], c["date"], c["text"], ("changelog", n))
                for n, c in enumerate(data["changelog"])
            ),
        )
