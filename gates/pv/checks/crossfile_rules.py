"""Checks across every contract of one `pv validate` run."""

from __future__ import annotations

from collections.abc import Iterator

from gates.model.contract import Contract
from gates.model.findings import Issue


def global_duplicate_ids(contracts: list[Contract]) -> Iterator[tuple[Contract, Issue]]:
    """ID-DUPLICATE: contract, invariant, test and gate ids are unique across all files.

    (Within one file the contract-level checker reports them; here only cross-file repeats.)
    """
    first: dict[str, tuple[Contract, tuple]] = {}
    for c in contracts:
        items = [(c.id, ("metadata", "id"))]
        items += [(i.id, (*i.where, "id")) for i in c.invariants]
        items += [(t.id, (*t.where, "id")) for t in c.falsification_tests]
        items += [(g.id, (*g.where, "id")) for g in c.gates]
        local: set[str] = set()
        for id_, where in items:
            if id_ in first and first[id_][0] is not c and id_ not in local:
                other = first[id_][0]
                yield c, Issue("ID-DUPLICATE", where, f"`{id_}` is already defined in {other.path}")
            first.setdefault(id_, (c, where))
            local.add(id_)


def dangling_dependencies(
    contracts: list[Contract], known_ids: set[str]
) -> Iterator[tuple[Contract, Issue]]:
    """REF-DANGLING: metadata.depends_on names a contract that exists."""
    for c in contracts:
        for k, dep in enumerate(c.metadata.depends_on):
            if dep == c.id:
                yield (
                    c,
                    Issue(
                        "REF-DANGLING", ("metadata", "depends_on", k), f"{c.id} depends on itself"
                    ),
                )
            elif dep not in known_ids:
                yield (
                    c,
                    Issue(
                        "REF-DANGLING",
                        ("metadata", "depends_on", k),
                        f"{c.id} depends on `{dep}`, which no contract defines "
                        "(looked in the files given and their directories)",
                    ),
                )


def dependency_cycles(contracts: list[Contract]) -> Iterator[tuple[Contract, Issue]]:
    """DEPENDS-CYCLE: depends_on forms no cycle.

    Each cycle is reported once, at the first of its contracts in the order the files were given.
    """
    graph = {c.id: [d for d in c.metadata.depends_on if d != c.id] for c in contracts}
    by_id = {c.id: c for c in contracts}
    reported: set[frozenset[str]] = set()
    for start in graph:
        stack = [(start, [start])]
        while stack:
            node, trail = stack.pop()
            for nxt in graph.get(node, []):
                if nxt == start:
                    cycle = frozenset(trail)
                    if cycle not in reported:
                        reported.add(cycle)
                        c = by_id[start]
                        k = c.metadata.depends_on.index(trail[1] if len(trail) > 1 else start)
                        yield (
                            c,
                            Issue(
                                "DEPENDS-CYCLE",
                                ("metadata", "depends_on", k),
                                "dependency cycle: " + " → ".join([*trail, start]),
                            ),
                        )
                elif nxt not in trail and nxt in graph:
                    stack.append((nxt, [*trail, nxt]))
