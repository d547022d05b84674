"""One gate of `gates check --all` (or ``--ship-blocking``, ``--changed-since``): the process
gates.runner.checkrun starts for each gate.

    python -m gates.cli.check_one GATE CONTRACT OUT [ROOT]

Measured as `gates check GATE --files CONTRACT --out OUT [--root ROOT]` measures it
(gates.service.check_gate), less that command's validation of the contract: the parent
validated every contract file together before its first run (gates.cli.gates_promotion
``cmd_check_many``), and each child spent ~2 s of its fixed cost doing it again. Prints what
`gates check` prints and writes the evidence to OUT; the exit status is that command's (0 for
PASS or PARTIAL, 1 for FAIL or a refusal, whose message is on stderr)."""

from __future__ import annotations

import sys
from pathlib import Path

from gates import service
from gates.cli.common import run_guarded
from gates.cli.gates_promotion import print_check, unvalidated_gate, written_verdict
from gates.io.machine_paths import portable_command
from gates.pv.validate import find_root


def main(argv: list[str]) -> int:
    gate_id, contract_path, out, *rest = argv
    contract, gate = unvalidated_gate(Path(contract_path), gate_id)
    root = Path(rest[0]) if rest else find_root(contract.path)
    # The command line of the `gates check GATE` this run stands for, as evidence records it.
    args = [
        "check",
        gate_id,
        "--out",
        out,
        "--files",
        contract_path,
        *(["--root", *rest] if rest else []),
    ]
    command = portable_command("gates", args, root)
    result = service.check_gate(contract, gate, [], root=root, command=command)
    print_check(result)
    return written_verdict(result, Path(out))


if __name__ == "__main__":
    sys.exit(run_guarded("gates", lambda: main(sys.argv[1:]), debug=False))
