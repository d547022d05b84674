"""`gates check`, `gates promote`, `gates demote` — re-measure a gate, and change its status
only through that measurement."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from gates import exit_codes, measure, promotion, service
from gates.check import CheckResult
from gates.cli.common import (
    UsageError,
    positive_int,
    recorded_command,
    valid_contracts,
)
from gates.model.contract import Contract, Gate
from gates.model.source import read_yaml
from gates.provenance import at_ref, evidence, freshness
from gates.pv.checks.project_rules import evidence_mismatches
from gates.pv.validate import find_root
from gates.refusal import RefusedError
from gates.runner import checkrun


def recover_interrupted(args: argparse.Namespace) -> None:
    """Before a `gates` command reads any contract: finish or undo a promotion or demotion a
    crash interrupted in the project of the contracts it was given (``--root``, else each
    file's nearest pyproject.toml, from any working directory), and say what was done."""
    if args.root:
        roots = {args.root}
    else:
        given = args.files or sorted(Path("contracts").glob("*.yaml"))
        roots = {find_root(path) for path in given}
    for root in sorted(roots):
        done = promotion.recover_before_reading(root)
        if done:
            print(f"gates: {done.describe()} (in {root})", file=sys.stderr)


def find_gate(contracts: list[Contract], gate_id: str) -> tuple[Contract, Gate]:
    """gates.service.find_gate; an unknown id is a usage error (with the nearest id)."""
    try:
        return service.find_gate(contracts, gate_id)
    except service.UnknownGateError as exc:
        raise UsageError(str(exc)) from None


def _target(args: argparse.Namespace) -> tuple[Path, Contract, Gate]:
    contracts = valid_contracts(args, "gates", remeasuring=True)
    contract, gate = find_gate(contracts, args.gate)
    root = args.root or find_root(contract.path)
    return root, contract, gate


def unvalidated_gate(contract_path: Path, gate_id: str) -> tuple[Contract, Gate]:
    """``gate_id`` of the contract at ``contract_path``, read without validating it: for a
    child whose parent validated the contract files before starting it (gates.cli.check_one,
    gates.cli.audit_measurement). RefusedError when the contract has no such gate."""
    source = read_yaml(contract_path)
    contract = Contract.from_data(source.path, source.data)
    gate = contract.gate(gate_id)
    if gate is None:
        raise RefusedError(f"{contract_path}: no gate {gate_id}")
    return contract, gate


def print_check(result: CheckResult) -> None:
    ev = result.evidence
    print(f"{ev['gate']}: {result.verdict}")
    for name, m in ev["measurements"].items():
        print(f"  {name} = {m['value']:g} {m['unit']}")
    for t in ev.get("thresholds", [ev["threshold"]]):
        print(f"  threshold: {t['metric']} {t['comparator']} {t['value']:g} {t['unit']}")
    for test in ev.get("tests", []):
        print(f"  test {test['id']}: {test['outcome']} ({test['seconds']:.1f} s)")
    for a in ev["artifacts"]:
        where = a.get("path") or f"{a.get('name', '')} (cache or outside the project)"
        print(f"  artifact {where} sha256:{a['sha256'][:16]}… {a['bytes']} bytes")
    for notice in result.notices:
        print(f"  note: {notice}")
    for reason in result.reasons:
        print(f"  ! {reason}")


def cmd_check(args: argparse.Namespace) -> int:
    if args.ship_blocking or args.all or args.changed_since:
        if args.mutant:
            raise UsageError("--mutant measures one GATE")
        return cmd_check_many(args)
    if args.gate is None:
        raise UsageError(
            "name the GATE to check, or pass --ship-blocking, --all or --changed-since REF"
        )
    if args.mutant and (args.out or args.artifact):
        raise UsageError("--mutant measures mutated code: no --out evidence, no --artifact")
    root, contract, gate = _target(args)
    result = service.check_gate(
        contract,
        gate,
        args.artifact,
        root=root,
        command=recorded_command("gates", root),
        mutant=args.mutant,
    )
    print_check(result)  # first: the verdict is shown even if its evidence cannot be written
    if args.mutant:
        return mutant_verdict(gate.id, args.mutant, result.verdict)
    return written_verdict(result, args.out)


def written_verdict(result: CheckResult, out: Path | None) -> int:
    """The evidence of a checked gate written to ``out`` (when given); `gates check`'s exit
    status for its verdict: 0 for PASS or PARTIAL, else findings."""
    if out:
        service.write_evidence(out, result.evidence)
        print(f"evidence written to {out}")
    return exit_codes.OK if result.verdict in ("PASS", "PARTIAL") else exit_codes.FINDINGS


def mutant_verdict(gate_id: str, mutant_id: str, verdict: str) -> int:
    """Under a mutant, FAIL is the measurement catching the bug: exit 0; else findings."""
    if verdict == "FAIL":
        print(f"mutant {mutant_id}: caught ({gate_id} FAILs on it)")
        return exit_codes.OK
    print(f"mutant {mutant_id}: SURVIVED ({gate_id} is {verdict} on the bug)")
    return exit_codes.FINDINGS


def cmd_check_many(args: argparse.Namespace) -> int:
    """`gates check --ship-blocking` (every ship-blocking gate) or `--all` (every PASS/PARTIAL
    gate): re-measure each in a process of its own (gates.cli.check_one: `gates check GATE`
    less the validation done here, once), ``--jobs`` at a time with timed gates alone
    (gates.runner.checkrun), writing nothing; fails unless each one's verdict is the status
    its contract records (PASS; PARTIAL for a PARTIAL gate). A missing artifact is
    rebuilt from its recipe into the cache (gates.provenance.recipes). CI runs it at HEAD."""
    flags = [
        f for f, on in (("--ship-blocking", args.ship_blocking), ("--all", args.all),
                        ("--changed-since", args.changed_since)) if on
    ]  # fmt: skip
    if len(flags) > 1:
        raise UsageError(f"{' or '.join(flags)}, not both")
    if args.gate is not None or args.artifact or args.out:
        raise UsageError(f"{flags[0]} checks every such gate: drop GATE, --artifact, --out")
    contracts = valid_contracts(args, "gates", remeasuring=True)
    changed = _changed_since(args, contracts) if args.changed_since else {}
    jobs = []
    expected: dict[str, str] = {}
    for c in contracts:
        for g in c.gates:
            recorded = g.status in ("PASS", "PARTIAL")
            if args.ship_blocking:
                chosen = g.ship_blocking
            else:
                chosen = recorded and (args.all or g.id in changed)
            if chosen:
                measurer = measure.lookup(g.id, args.root or find_root(c.path))
                timed = measurer is not None and measurer.timed
                recipe = measurer.recipe.command if measurer and measurer.recipe else ()
                jobs.append(checkrun.Job(g.id, c.path, timed=timed, recipe=recipe))
                expected[g.id] = "PARTIAL" if g.status == "PARTIAL" else "PASS"

    def report(outcome: checkrun.Outcome) -> None:
        print(f"== gates check {outcome.gate_id} ({outcome.seconds:.1f} s)", flush=True)
        print(outcome.output, end="" if outcome.output.endswith("\n") else "\n", flush=True)

    started = time.perf_counter()
    results = checkrun.run_all(
        jobs,
        lambda job, out: checkrun.gates_check_argv(job, out, args.root),
        parallel=args.jobs,
        report=report,
    )
    wall = time.perf_counter() - started
    timed = {job.gate_id for job in jobs if job.timed}
    print(f"\n{'gate':<28} {'verdict':<10} {'seconds':>8}")
    for r in results:
        print(
            f"{r.gate_id:<28} {r.verdict:<10} {r.seconds:>8.1f}"
            + ("  (alone)" if r.gate_id in timed else "")
        )
    failed = [r.gate_id for r in results if r.verdict != expected[r.gate_id]]
    total = sum(r.seconds for r in results)
    which = "ship-blocking gates" if args.ship_blocking else "gates"
    if args.changed_since:
        which = f"gates changed since {args.changed_since}"
    print(
        f"{which} re-measured: {len(results) - len(failed)} of {len(results)} as recorded "
        f"in {wall:.0f} s ({total:.0f} s of runs, {args.jobs} at a time, timed gates alone)"
        + (f"; not as recorded: {', '.join(failed)}" if failed else "")
    )
    return exit_codes.FINDINGS if failed else exit_codes.OK


def _changed_since(args: argparse.Namespace, contracts: list) -> dict[str, list[str]]:
    """Gate id -> why it changed since --changed-since REF; printed, with the changed gates
    that have no recorded verdict to re-measure."""
    root = (args.root or find_root(contracts[0].path)).resolve()
    try:
        changed = at_ref.changed_gates(root, contracts, args.changed_since)
    except at_ref.RefError as exc:
        raise UsageError(str(exc)) from exc
    status = {g.id: g.status for c in contracts for g in c.gates}
    for gate_id, why in changed.items():
        note = (
            ""
            if status[gate_id] in ("PASS", "PARTIAL")
            else f" ({status[gate_id]}: not re-measured)"
        )
        print(f"{gate_id} changed since {args.changed_since}: {'; '.join(why)}{note}")
    if not changed:
        print(f"no gate changed since {args.changed_since}")
    return changed


def cmd_promote(args: argparse.Namespace) -> int:
    if args.stale:
        return cmd_promote_stale(args)
    if args.dry_run:
        raise UsageError("--dry-run goes with --stale")
    if args.gate is None:
        raise UsageError("name the GATE to promote, or pass --stale")
    args.to = args.to or "PASS"
    root, contract, gate = _target(args)
    result = promotion.promote(
        root,
        contract.path,
        gate.id,
        args.artifact,
        to=args.to,
        allow_dirty=args.allow_dirty,
        command=recorded_command("gates", root),
    )
    print_check(result)
    print(
        f"promoted {gate.id} to {args.to}: {contract.path} is now "
        f"{result.evidence['contract']['version']}, evidence "
        f"evidence/{contract.id}/{gate.id}.json"
    )
    return exit_codes.OK


def _out_of_date(root: Path, contract: Contract, gate: Gate) -> str | None:
    """Why a PASS/PARTIAL gate's evidence must be re-measured: it is stale
    (gates.provenance.freshness), or it no longer agrees with its contract
    (EVIDENCE-MISMATCH: a threshold changed, a test bound or unbound since); None when
    neither."""
    why = freshness.gate_staleness(root, gate)
    if why is not None or gate.status not in ("PASS", "PARTIAL") or not gate.evidence:
        return why
    try:
        recorded = evidence.load(root / gate.evidence)
    except evidence.EvidenceError:
        return None  # unreadable or invalid evidence: pv's other rules name it
    disagree = [i.message for i in evidence_mismatches(contract, gate, recorded, ())]
    return f"its evidence disagrees with the contract: {disagree[0]}" if disagree else None


def cmd_promote_stale(args: argparse.Namespace) -> int:
    """`gates promote --stale`: re-promote, to its current status, every PASS/PARTIAL gate
    whose evidence is stale (gates.provenance.freshness) or disagrees with its contract, each in a
    fresh `gates promote` process: a module an earlier gate imported in this process would
    not be opened, so not traced, again (gates.provenance.trace)."""
    if args.gate is not None or args.artifact or args.to:
        raise UsageError(
            "--stale re-promotes every stale gate to its status: drop GATE, --artifact and --to"
        )
    contracts = valid_contracts(args, "gates", remeasuring=True)
    stale = [
        (c, g, why)
        for c in contracts
        for g in c.gates
        if (why := _out_of_date(args.root or find_root(c.path), c, g)) is not None
    ]
    if not stale:
        print("no gate is stale")
        return exit_codes.OK
    failed = 0
    for c, g, why in stale:
        if args.dry_run:
            print(f"{g.id}: {g.status}, stale: {why}")
            continue
        cmd = [sys.executable, "-m", "gates.cli.gates", "promote", g.id, "--to", g.status]
        cmd += ["--files", str(c.path)]
        cmd += ["--root", str(args.root)] if args.root else []
        cmd += ["--allow-dirty", args.allow_dirty] if args.allow_dirty else []
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            print(f"{g.id}: re-promoted to {g.status} (was stale: {why})", flush=True)
            continue
        failed += 1
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        print(f"{g.id}: FAILED (exit {proc.returncode}): {lines[-1] if lines else ''}", flush=True)
        print("\n".join(f"  {line}" for line in lines[-20:]), file=sys.stderr, flush=True)
    if failed:
        print(f"{failed} of {len(stale)} stale gates could not be re-promoted", file=sys.stderr)
        return exit_codes.FINDINGS
    return exit_codes.OK


def cmd_demote(args: argparse.Namespace) -> int:
    root, contract, gate = _target(args)
    version = promotion.demote(root, contract.path, gate.id, args.reason)
    print(f"demoted {gate.id} to PENDING: {contract.path} is now {version}")
    return exit_codes.OK


def add_parsers(sub: argparse._SubParsersAction, add_contract_arguments) -> None:
    p = sub.add_parser(
        "check",
        help="run a gate's tests and measurement; write nothing "
        "to the contract (evidence only with --out)",
    )
    p.add_argument("gate", metavar="GATE", nargs="?")
    p.add_argument("--artifact", action="append", type=Path, default=[], metavar="PATH")
    p.add_argument("--out", type=Path, help="write the evidence JSON here")
    p.add_argument(
        "--mutant",
        metavar="ID",
        help="measure GATE with this declared mutant applied, bound tests not run; exits 0 "
        "when the measurement FAILs on it (caught), 1 when it survives",
    )
    p.add_argument(
        "--ship-blocking",
        action="store_true",
        help="instead of one GATE: re-measure every ship-blocking gate, each in its own "
        "process; fails unless all PASS (CI runs this at HEAD)",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="instead of one GATE: re-measure every PASS/PARTIAL gate, each in its own "
        "process; fails unless each gets the verdict its contract records",
    )
    p.add_argument(
        "--changed-since",
        metavar="REF",
        help="instead of one GATE: re-measure every PASS/PARTIAL gate whose contract entry, "
        "bound tests' entries, evidence or recorded sources differ from git REF (a pull "
        "request's base)",
    )
    p.add_argument(
        "--jobs",
        type=positive_int,
        default=os.cpu_count() or 1,
        metavar="N",
        help="with --ship-blocking or --all: gates at a time (default: the CPUs, %(default)s "
        "here); a timed gate always runs alone",
    )
    add_contract_arguments(p, flag=True)
    p.set_defaults(run=cmd_check)

    p = sub.add_parser(
        "promote",
        help="re-measure a gate, write its evidence and update the "
        "contract (status, version, changelog)",
    )
    p.add_argument("gate", metavar="GATE", nargs="?")
    p.add_argument("--artifact", action="append", type=Path, default=[], metavar="PATH")
    p.add_argument("--to", choices=("PASS", "PARTIAL"), default=None, help="default: PASS")
    p.add_argument(
        "--stale",
        action="store_true",
        help="instead of one GATE: re-promote every PASS/PARTIAL gate whose evidence is stale "
        "(`pv validate`: EVIDENCE-STALE) to its status, each in its own process",
    )
    p.add_argument("--dry-run", action="store_true", help="with --stale: list them, run nothing")
    p.add_argument(
        "--allow-dirty",
        metavar="REASON",
        default=None,
        help="promote despite uncommitted changes in the project, saying why "
        "(recorded in the evidence as git.dirty_override.reason)",
    )
    add_contract_arguments(p, flag=True)
    p.set_defaults(run=cmd_promote)

    p = sub.add_parser("demote", help="return a gate to PENDING, with the reason in the changelog")
    p.add_argument("gate", metavar="GATE")
    p.add_argument("--reason", required=True)
    add_contract_arguments(p, flag=True)
    p.set_defaults(run=cmd_demote)
