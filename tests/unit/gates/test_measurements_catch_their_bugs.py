"""Mutants against measurements (issue 33 item 5): a gate's measurement must FAIL on the bugs
of its invariant, not only its bound tests. Each pair below is a declared mutant (its bound
test kills it under `gates audit`) that the gate's measurement once passed; run as
`gates check GATE --mutant ID` runs it (gates.promotion.check with ``mutant``), the gate must
FAIL on a threshold, not by a crash. The real code's PASS is `gates check --all`'s in CI.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gates import promotion

ROOT = Path(__file__).resolve().parents[3]

#: gate → (its contract, the mutants its measurement must catch)
CAUGHT = {
    "GATE-TRAIN-LOOP-007": ("training-loop-v1.yaml", ["lr-schedule-compressed-to-stop-after"]),
    "GATE-TRAIN-LOOP-009": ("training-loop-v1.yaml", ["padding-counted-in-loop-global-count"]),
    "GATE-ARCH-370M-001": ("llama-370m-sovereign-v1.yaml", ["rmsnorm-uses-variance"]),
    "GATE-CFG-003": ("training-config-kernel-v1.yaml", ["data-free-warmup-rule-removed"]),
}
PAIRS = [(gate, mutant) for gate, (_, ids) in CAUGHT.items() for mutant in ids]


@pytest.mark.parametrize(("gate_id", "mutant_id"), PAIRS)
def test_the_gate_fails_on_its_bug(gate_id: str, mutant_id: str):
    contract_path = ROOT / "contracts" / CAUGHT[gate_id][0]
    contract, gate = promotion.load_gate(ROOT, contract_path, gate_id)
    bound = [contract.test(ref) for ref in gate.falsification_tests]
    assert mutant_id in {m.id for t in bound if t for m in t.mutants}, (
        f"{mutant_id} is not a mutant of {gate_id}'s bound tests: the audit would not run it"
    )
    result = promotion.check(ROOT, contract, gate, [], command=["test"], mutant=mutant_id)
    assert result.verdict == "FAIL", f"{gate_id} does not catch {mutant_id}: {result.evidence}"
    assert any("misses" in reason for reason in result.reasons), result.reasons
    assert result.evidence["tests"] == []  # the measurement alone
