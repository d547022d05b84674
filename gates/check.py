"""`gates check`: run a gate's bound tests and its measurement against real artifacts, and
say its verdict with the evidence that shows it. Writes nothing: gates.service writes a
check's evidence, gates.promotion commits it with the contract's edit.

Refusals raise :class:`RefusedError`: the gate cannot be measured (no measurement, an
artifact that cannot be resolved, evidence that would be invalid); nothing was written.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from gates import measure, mutants
from gates.model import project
from gates.model.contract import Contract, Gate
from gates.provenance import evidence, recipes, trace
from gates.refusal import RefusedError
from gates.runner import forkrun, testrun


@dataclass
class CheckResult:
    verdict: str  # PASS | PARTIAL | FAIL
    reasons: list[str]
    evidence: dict
    tests: list[testrun.TestOutcome] = field(default_factory=list)
    #: What the output says besides the verdict: an artifact rebuilt with another digest.
    notices: list[str] = field(default_factory=list)


def _recorded_artifacts(root: Path, gate: Gate) -> list[dict]:
    if not gate.evidence or not (root / gate.evidence).is_file():
        return []
    try:
        recorded = evidence.load(root / gate.evidence)
    except evidence.EvidenceError as exc:
        raise RefusedError(f"current evidence is unusable: {exc}") from None
    return list(recorded["artifacts"])


#: A measured artifact: where it is, and its evidence entry (name, sha256, bytes, path?,
#: recipe?).
ArtifactRef = tuple[Path, dict]


def _artifact_entry(
    path: Path,
    root: Path,
    recipe: recipes.Recipe | None,
    sha256: str,
    size: int,
    *,
    build: recipes.BuildRecord | None = None,
) -> dict:
    """The evidence entry of an artifact: a repository-relative ``path`` only when it lies
    under the root and outside the cache (a cache entry is found by its digest; a path
    outside the root names one machine), the recipe that rebuilds it, and the files its
    build read (when it was built from the recipe: pv's freshness covers them)."""
    entry: dict = {"name": path.name, "sha256": sha256, "bytes": size}
    resolved, cache = path.resolve(), recipes.cache_dir(root)
    if resolved.is_relative_to(root.resolve()) and not resolved.is_relative_to(cache):
        entry["path"] = resolved.relative_to(root.resolve()).as_posix()
    if recipe is not None:
        entry["recipe"] = recipes.record(recipe, root)
    if build is not None and build.sources:
        entry["build_sources"] = list(build.sources)
    if build is not None and build.distributions:
        entry["build_distributions"] = dict(build.distributions)
    return entry


def _why_differs(root: Path, recipe: recipes.Recipe, recorded: dict) -> str:
    """Why a rebuild digests differently from the recorded artifact, as far as it shows."""
    before = recorded.get("recipe")
    if before is None:
        return "the evidence records no recipe, so what built it is unknown"
    now = recipes.record(recipe, root)
    changed = sorted(
        {i["path"] for i in before.get("inputs", [])} ^ {i["path"] for i in now["inputs"]}
        | {
            i["path"]
            for i in now["inputs"]
            for j in before.get("inputs", [])
            if i["path"] == j["path"] and i["sha256"] != j["sha256"]
        }
    )
    if changed:
        return f"the code changed: the recipe's inputs {', '.join(changed)} differ"
    if before.get("command") != now["command"] or before.get("select") != now.get("select"):
        return "the recipe's command changed"
    if before.get("digest") != now["digest"]:
        return "the recipe's digest rules changed"
    why = f" ({recipe.why_not_bitwise})" if recipe.why_not_bitwise else ""
    return f"the recipe's output is not bitwise reproducible here{why}"


def _from_recipe(root: Path, recipe: recipes.Recipe, want: str | None) -> recipes.Built:
    try:
        return recipes.obtain(root, recipe, want)
    except recipes.RecipeError as exc:
        raise RefusedError(f"cannot rebuild the artifact from its recipe: {exc}") from None


def _build_record(root: Path, recipe: recipes.Recipe, sha256: str) -> recipes.BuildRecord | None:
    """What built the artifact whose digest is ``sha256`` from the code as it is: the build
    record of its cache entry (content-addressed: the same bytes, built by the recipe from
    this tree with the distributions installed now), or None when there is no such entry."""
    hit = recipes.cached(recipes.cache_dir(root), sha256, recipe, root)
    return hit[1] if hit is not None else None


def _resolve_artifacts(
    root: Path,
    gate: Gate,
    measurer: measure.Measurer,
    given: list[Path],
    *,
    require_build_record: bool = False,
) -> tuple[list[ArtifactRef], list[str]]:
    """Artifacts to measure, each with its evidence entry, and notes for the evidence.

    With --artifact, those paths. Without, the ones the current evidence records: at its
    recorded path when it is there and digests the same; else, when the measurer has a
    recipe, the cache entry of the recorded digest, else a rebuild from the recipe (noted
    when its digest differs); without a recipe, a missing or changed artifact is refused.
    A gate with a recipe and no evidence yet is measured on the recipe's artifact.

    An artifact is a function of the code that built it. For a gate with a recipe, a path's
    build record is the one its evidence entry keeps (while those files hash the same) or
    the cache entry of its digest; a recorded path built from other code is rebuilt, and a
    given path with no build record from this tree is measured as is with a note, or, with
    ``require_build_record`` (a promotion: the contract's own evidence), refused. A gate
    without a recipe has nothing that could build its artifact: it is measured as is."""
    recipe = measurer.recipe
    if measurer.artifact is None:
        if given:
            raise RefusedError(f"{gate.id} is measured without artifacts; drop --artifact")
        return [], []
    refs: list[ArtifactRef] = []
    notes: list[str] = []

    def add(path: Path, sha256: str, size: int, build: recipes.BuildRecord | None) -> None:
        refs.append((path, _artifact_entry(path, root, recipe, sha256, size, build=build)))

    if given:
        for path in given:
            found = _given_artifact(
                root, gate, recipe, path, require_build_record=require_build_record, notes=notes
            )
            add(path, *found)
    else:
        recorded = _recorded_artifacts(root, gate)
        if not recorded and recipe is None:
            raise RefusedError(
                f"{gate.id} is measured on a {measurer.artifact}: pass --artifact PATH"
            )
        if not recorded:
            _log(f"gates: {gate.id} records no artifact yet: using its recipe")
            built = _from_recipe(root, recipe, None)
            add(built.path, built.sha256, built.bytes, built.build)
        for ref in recorded:
            shown = ref.get("path") or ref.get("name") or "artifact"
            path = (root / ref["path"]) if ref.get("path") else None
            if path is not None and path.exists():
                now, size = _digest(path, recipe)
                built_from, why = (
                    _recorded_build(root, recipe, ref) if now == ref["sha256"] else (None, "")
                )
                if built_from is not None:
                    add(path, now, size, built_from)
                    continue
                if recipe is None:
                    raise RefusedError(
                        f"artifact {shown} no longer matches {gate.evidence}: "
                        f"sha256 {now[:12]}… != recorded {ref['sha256'][:12]}…"
                    )
                if now == ref["sha256"]:
                    _log(f"gates: artifact {shown} was {why}: rebuilt from its recipe")
                else:
                    _log(f"gates: artifact {shown} no longer digests as {gate.evidence} records")
            elif recipe is None:
                raise RefusedError(f"artifact {shown} recorded in {gate.evidence} is gone")
            elif path is not None:
                _log(f"gates: artifact {shown} recorded in {gate.evidence} is not here")
            built = _from_recipe(root, recipe, ref["sha256"])
            if built.sha256 != ref["sha256"]:
                note = (
                    f"artifact {built.path.name} as its recipe makes it here "
                    f"({'rebuilt' if built.source == 'built' else 'from the cache'}) has sha256 "
                    f"{built.sha256}, not the recorded {ref['sha256']}: "
                    f"{_why_differs(root, recipe, ref)}; measured against the threshold"
                )
                _log(f"gates: {note}")
                notes.append(note)
            add(built.path, built.sha256, built.bytes, built.build)
    for path, _ in refs:
        reason = measurer.check(path) if measurer.check else None
        if reason:
            raise RefusedError(f"artifact {path} is not a {measurer.artifact}: {reason}")
    return refs, notes


def _given_artifact(
    root: Path,
    gate: Gate,
    recipe: recipes.Recipe | None,
    path: Path,
    *,
    require_build_record: bool,
    notes: list[str],
) -> tuple[str, int, recipes.BuildRecord | None]:
    """A ``--artifact`` path's digest, bytes and build record (see _resolve_artifacts);
    a note is added when it is measured with none."""
    if not path.exists():
        raise RefusedError(f"artifact {path} does not exist")
    sha256, size = _digest(path, recipe)
    built_from = (
        _build_record(root, recipe, sha256) if recipe is not None else recipes.BuildRecord(())
    )
    if built_from is None:
        why = (
            f"artifact {path}: nothing records that {gate.id}'s recipe built it from "
            f"the code as it is (no build of sha256 {sha256[:12]}… from this tree)"
        )
        if require_build_record:
            raise RefusedError(
                f"{why}; its evidence would vouch for code that may not have made it. "
                f"Promote without --artifact to measure the recipe's own build"
            )
        note = f"{why}: measured as is"
        _log(f"gates: {note}")
        notes.append(note)
    return sha256, size, built_from


def _recorded_build(
    root: Path, recipe: recipes.Recipe | None, ref: dict
) -> tuple[recipes.BuildRecord | None, str]:
    """(the build record, "") of a recorded path artifact that still digests as recorded: an
    empty one without a recipe (nothing could build it); else the entry's ``build_sources``
    and ``build_distributions`` while they hold, or the cache entry of its digest. (None, why
    it was not built from this tree) otherwise, completing "it was …"."""
    if recipe is None:
        return recipes.BuildRecord(()), ""
    recorded = recipes.BuildRecord(
        tuple(ref.get("build_sources") or ()), dict(ref.get("build_distributions") or {})
    )
    if recorded.sources:
        why = recorded.differs(root)
        return (None, why) if why else (recorded, "")
    cached = _build_record(root, recipe, ref["sha256"])
    return cached, "" if cached is not None else "not recorded as built from the code as it is"


def _digest(path: Path, recipe: recipes.Recipe | None) -> tuple[str, int]:
    try:
        return recipes.digest(path, recipe)
    except (recipes.RecipeError, OSError) as exc:
        raise RefusedError(f"cannot digest artifact {path}: {exc}") from None


def _log(line: str) -> None:
    # WARNING: with no handler configured (the gates CLI adds none), logging's last-resort
    # handler writes the bare line to stderr, which is where a user should see a rebuild.
    logging.getLogger(__name__).warning(line)


def check(
    root: Path,
    contract: Contract,
    gate: Gate,
    artifacts: list[Path],
    *,
    command: list[str],
    contract_version: str | None = None,
    want: str | None = None,
    allow_dirty: str | None = None,
    mutant: str | None = None,
    require_build_record: bool = False,
) -> CheckResult:
    """Run the gate's bound tests and measurement; the verdict is ``want`` (PASS/PARTIAL) when
    everything holds, else FAIL. Without ``want``, what the measurement says: PARTIAL when it
    names something not discharged, else PASS.

    ``mutant``: measure with that declared mutant applied in this process, and run no bound
    test (their verdicts under mutants are `gates audit`'s): FAIL is the measurement catching
    the bug. Refused for a gate measured on an artifact: the artifact is built in another
    process, which the mutant does not reach."""
    # What the bound tests and the measurement read (gates.provenance.trace): from the import
    # of the module that measures this gate, but not the artifacts' resolution (a rebuild
    # from a recipe only sometimes runs). Which module that is, locate decides by reading
    # every measurement module, outside the recording: the module's own decorator says
    # so (a source), and a second module registering the gate is refused, not hidden.
    try:
        module = measure.locate(gate.id, root)
        with (traced := trace.recording(root)):
            measurer = measure.load(gate.id, root, module)
    except project.ProjectConfigError as e:
        raise RefusedError(str(e)) from e
    if measurer is None:
        raise RefusedError(
            f"no measurement is registered for {gate.id}: add a function decorated "
            f"with @measures({gate.id!r}) in a directory that [tool.shipgate] measurements "
            "names in pyproject.toml (docs/measurements.md)"
        )
    if mutant is not None and measurer.artifact is not None:
        raise RefusedError(
            f"{gate.id} is measured on a {measurer.artifact} built in another process: a "
            f"mutant applied here does not reach its build; its bound tests meet {mutant} "
            "under `gates audit`"
        )
    refs, artifact_notes = _resolve_artifacts(
        root, gate, measurer, artifacts, require_build_record=require_build_record
    )
    reasons: list[str] = []

    ctx = measure.GateContext(root, contract, gate, tuple(p for p, _ in refs))
    outcomes, result = _tests_then_measurement(ctx, measurer, traced, mutant, reasons)
    for path, before in refs:
        if _digest(path, measurer.recipe)[0] != before["sha256"]:
            raise RefusedError(f"artifact {path} changed while it was being measured")

    for t in gate.thresholds:
        if t.metric not in result.values:
            raise RefusedError(f"the measurement of {gate.id} did not report {t.metric}")
        value, unit = result.values[t.metric]
        if unit != t.unit:
            raise RefusedError(f"{t.metric} measured in {unit}, the threshold is in {t.unit}")
        if not t.holds(value):
            reasons.append(f"{t.metric} = {value:g} {unit} misses {t}")
    want = want or ("PARTIAL" if result.partial else "PASS")
    if want == "PARTIAL" and not result.partial:
        reasons.append("--to PARTIAL needs a measurement that says what is not discharged")
    if want == "PASS" and result.partial:
        missing = ", ".join(result.partial.get("not_discharged", [])) or "something"
        reasons.append(f"the measurement does not discharge {missing}: that is PARTIAL")
    git = evidence.git_info(root)
    if git["dirty"] and allow_dirty:
        # Why the measurement was allowed over uncommitted changes; without it, a dirty
        # record is one pv rejects (EVIDENCE-DIRTY). `gates check` passes none: it writes
        # nothing into the contract, and pv never reads its --out file.
        git["dirty_override"] = {"reason": allow_dirty.strip()}
    verdict = "FAIL" if reasons else want

    record = {
        "schema_version": 1,
        "contract": {"id": contract.id, "version": contract_version or contract.metadata.version},
        "gate": gate.id,
        "falsification_tests": list(gate.falsification_tests),
        "captured_at": evidence.utc_now(),
        "host": evidence.host_info(project.load_config(root).packages),
        "git": git,
        "command": command,
        "workload": {
            "description": result.workload,
            "parameters": result.parameters,
            "inputs": [evidence.file_ref(p, root).as_dict() for p in result.inputs],
        },
        "measurements": {k: {"value": v, "unit": u} for k, (v, u) in result.values.items()},
        "threshold": gate.threshold.as_dict(),
        "thresholds": [t.as_dict() for t in gate.thresholds],
        "verdict": verdict,
        "tests": [
            {"id": ref, "node": o.node, "outcome": o.outcome, "seconds": o.seconds}
            for ref, o in outcomes
        ],
        "artifacts": [entry for _, entry in refs],
        "sources": traced.sources(measurer.fn),  # and the measurement's own module
    }
    if verdict == "PARTIAL":
        record["partial"] = result.partial
    if result.notes or artifact_notes:
        record["notes"] = "\n".join([*artifact_notes, *([result.notes] if result.notes else [])])
    problems = evidence.schema_errors(record)
    if problems:
        raise RefusedError(f"the measurement produced invalid evidence: {problems[0]}")
    return CheckResult(verdict, reasons, record, [o for _, o in outcomes], artifact_notes)


def _tests_then_measurement(
    ctx: measure.GateContext,
    measurer: measure.Measurer,
    traced: trace.Recording,
    mutant: str | None,
    reasons: list[str],
) -> tuple[list[tuple[str, testrun.TestOutcome]], measure.Measurement]:
    """The gate's bound tests (none under a mutant), then its measurement, both recorded by
    ``traced``; what did not pass is appended to ``reasons``."""
    outcomes = []
    if mutant is None:
        # The warm interpreter ends before the measurement: its memory is the measurement's.
        with _warm_interpreter(ctx.root, ctx.gate) as warm, traced:
            outcomes = _run_bound_tests(ctx.root, ctx.contract, ctx.gate, reasons, warm)
    with traced, _mutated(ctx.root, mutant):
        return outcomes, measurer.fn(ctx)


@contextlib.contextmanager
def _warm_interpreter(root: Path, gate: Gate) -> Iterator[forkrun.WarmInterpreter | None]:
    """A warm interpreter for a gate with several bound tests, started here, outside the
    trace recording (gates.runner.forkrun), and closed on leaving: each test then runs in a
    fork of it instead of a fresh ``python -m pytest``, without ~1.5-5 s of start-up and
    imports apiece; a run's outcome and traced sources are the same either way (the audit
    runs every test so). None for one test, where the warm start (5-7 s: the preload and the
    project compiled) costs more than it saves."""
    if len(gate.falsification_tests) < 2 or not forkrun.AVAILABLE:
        yield None
        return
    warm = forkrun.WarmInterpreter(root)
    warm.start()
    try:
        yield warm
    finally:
        warm.close()


def _run_bound_tests(
    root: Path,
    contract: Contract,
    gate: Gate,
    reasons: list[str],
    warm: forkrun.WarmInterpreter | None = None,
) -> list[tuple[str, testrun.TestOutcome]]:
    """Each bound test of ``gate`` run once (in a fork of ``warm`` when given); what did not
    pass is appended to ``reasons``."""
    outcomes = []
    for ref in gate.falsification_tests:
        test = contract.test(ref)
        if test is None or not test.bound or not test.test:
            reasons.append(f"{ref} is not bound to a test")
            continue
        outcome = testrun.run_node(root, test.test, warm=warm)
        outcomes.append((ref, outcome))
        if outcome.outcome != "passed":
            tail = "\n".join(outcome.output.strip().splitlines()[-15:])
            reasons.append(f"{ref} ({test.test}) {outcome.outcome}:\n{tail}")
    return outcomes


@contextlib.contextmanager
def _mutated(root: Path, mutant_id: str | None) -> Iterator[None]:
    """The declared mutant ``mutant_id`` applied for the block (nothing when None)."""
    if mutant_id is None:
        yield
        return
    try:
        patch = mutants.apply(root, mutant_id)
    except mutants.UnknownMutantError as exc:
        raise RefusedError(str(exc)) from None
    try:
        # and in the measurement's child processes that apply it (mutants.apply_from_env)
        patch.setenv(mutants.ENV_VAR, mutant_id)
        yield
    finally:
        patch.undo()
