"""One measurement run of `gates audit`: a gate measured under a mutant.

    python -m gates.cli.audit_measurement GATE MUTANT CONTRACT ROOT

Measured as `gates check GATE --mutant MUTANT --files CONTRACT --root ROOT` measures it
(gates.service.check_gate), less that command's validation of the project: the audit
validated the same contract files once, before its first run (gates.audit.measurements).
Prints what `gates check --mutant` prints, with its verdict line and exit status (the same
functions): 0 when the gate FAILs on the mutant (caught), 1 when it does not (survived). A
crash is a traceback and exit 1 without either line: no verdict."""

from __future__ import annotations

import sys
from pathlib import Path

from gates import service
from gates.cli.gates_promotion import mutant_verdict, print_check, unvalidated_gate
from gates.refusal import RefusedError


def main(argv: list[str]) -> int:
    gate_id, mutant_id, contract_path, root = argv
    try:
        contract, gate = unvalidated_gate(Path(contract_path), gate_id)
    except RefusedError as exc:
        raise SystemExit(str(exc)) from None
    command = ["gates", "check", gate_id, "--mutant", mutant_id]
    result = service.check_gate(
        contract, gate, [], root=Path(root), command=command, mutant=mutant_id
    )
    print_check(result)
    return mutant_verdict(gate_id, mutant_id, result.verdict)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
