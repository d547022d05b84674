"""Semantic checkers for contracts: one pure function per rule, each yielding `Issue`s.

- :mod:`.contract_rules` — one contract alone (ids, references, versions, dates, gates).
- :mod:`.project_rules` — one contract against its project (bound tests, markers, evidence).
- :mod:`.crossfile_rules` — all contracts of a run together (global ids, depends_on).

Checkers never print and never raise on content; the validator adds file:line:column.
"""
