"""shipgate gates: the contract model, the strict validator (`pv`) and gate tooling (`gates`).

Contracts live in ``contracts/*.yaml`` and follow ``gates/schemas/contract.schema.json``.
Run ``pv validate contracts/*.yaml`` in CI; ``pv status`` summarises gates.
"""

__version__ = "0.1.0"
