"""shipgate gates: the contract model, the strict validator (`pv`) and gate tooling (`gates`).

Contracts live in ``contracts/*.yaml`` and follow ``gates/schemas/contract.schema.json``.
Run ``pv validate contracts/*.yaml`` in CI; ``pv status`` summarises gates.

Layers, bottom to top. A module imports from its own subpackage and from the layers below
its own, never from one beside or above it, in a function body too (tests/unit/test_layers.py
holds the graph to this list). What an adopting project writes with sits at the top level:
``gates.mutants`` (@mutant), ``gates.measure`` (@measures); so do the command line's exit
statuses, the one refusal, a check, the service layer and a promotion:

1. io, exit_codes, refusal - files written whole or not at all, JSON read defensively; the
   exit statuses of pv, gates and trainer; RefusedError
2. model - contracts, their schema and rules, findings, versions, [tool.shipgate]
3. mutants - the known bugs a falsification test must catch (@mutant)
4. provenance - evidence, its freshness and git history, traces, recipes and their cache
5. measure - the measurement registry (@measures)
6. runner - pytest in forked children, bound tests under a mutant, gate checks in parallel
7. pv - the validator, its checks and renderers, contract diffs and edits, `pv init`
8. check - a gate's bound tests and measurement: its verdict and evidence
9. service - the one way through: validate, find a gate, check it, write its evidence
10. audit, promotion - the mutation audit; promote and demote
11. report - `gates report`'s inputs and its page
12. cli - the `pv` and `gates` commands
"""

__version__ = "0.1.0"
