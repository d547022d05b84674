"""The pipeline's closing summary: what was made, how good it is, which gates hold.

    summary = build_summary(run_dir, state, corpus, run_config, outcomes)   # summary.json
    print(render_summary(summary))

Every number is read back from a file the stages wrote (the data manifest, metrics.jsonl,
baseline.json, the checkpoint and export on disk, the contracts and their evidence), not
carried over from memory, so the summary of a fully reused pipeline is the same as that
of the run that made it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from trainer.pipeline.state import PipelineState
from trainer.runfiles.metrics_file import read_metrics
from trainer.runfiles.names import PipelineDir


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def _training(run_dir: Path, run_config: Any) -> dict:
    train = PipelineDir(run_dir).train
    records = read_metrics(train.metrics)
    if not records:
        raise ValueError(f"{train.metrics}: no step recorded")
    vals = [(r["step"], r["val_loss"]) for r in records if "val_loss" in r]
    speeds = sorted(r["tokens_per_s"] for r in records if isinstance(r["tokens_per_s"], float))
    state_file = train.training_state
    end = json.loads(state_file.read_text(encoding="utf-8")) if state_file.is_file() else {}
    return {
        **_roofline(records, run_config),
        "steps": records[-1]["step"],
        "max_steps": run_config.training.max_steps,
        "first_loss": records[0]["loss"],
        "last_loss": records[-1]["loss"],
        "last_val_loss": vals[-1][1] if vals else None,
        "last_val_step": vals[-1][0] if vals else None,
        "median_tokens_per_s": speeds[len(speeds) // 2] if speeds else None,
        "seconds": sum(r["step_s"] for r in records if isinstance(r["step_s"], float)),
        "status": end.get("status", "finished" if records[-1]["step"] else "unknown"),
        "reason": end.get("reason", ""),
    }


def _finite(value: object) -> bool:
    return isinstance(value, float | int) and not isinstance(value, bool) and math.isfinite(value)


def _roofline(records: list[dict], run_config: Any) -> dict:
    """The median step's share of this CPU's measured float32 matmul peak (the records'
    peak_fraction, trainer/plan/roofline.py), and that peak, recovered from a record as
    model FLOP/s / peak_fraction; None for both on a run without it (CUDA, older runs)."""
    pairs = sorted(
        (r["peak_fraction"], r["tokens_per_s"])
        for r in records
        if _finite(r.get("peak_fraction")) and r["peak_fraction"] > 0 and _finite(r["tokens_per_s"])
    )
    if not pairs:
        return {"median_peak_fraction": None, "matmul_peak_flops": None}
    from trainer.plan.flops import flops_per_token  # noqa: PLC0415 - torch: only here

    fraction, tokens_per_s = pairs[len(pairs) // 2]
    per_token = flops_per_token(run_config.model, run_config.data.seq_len)
    return {
        "median_peak_fraction": fraction,
        "matmul_peak_flops": tokens_per_s * per_token / fraction,
    }


def _store(run_dir: Path) -> dict:
    """The training run's id and its run store (runs.db), for `trainer runs show`."""
    from trainer.store.rundir import read_run_manifest  # noqa: PLC0415

    train = PipelineDir(run_dir).train
    _, run_id, _ = read_run_manifest(train.root)
    store = train.store
    return {"run_id": run_id, "store": str(store) if store.is_file() else None}


def _gate_rows(contracts_dir: Path, checks: dict) -> list[dict]:
    """Every gate of every contract: status, threshold, the evidence's measured value,
    whether that evidence is stale (`pv status`'s rule: a source changed since, or an audit
    row of its tests that no longer holds) and this run's re-measurement where the gate
    stage made one."""
    from gates.pv.staleness import staleness  # noqa: PLC0415
    from gates.pv.validate import find_root, validate  # noqa: PLC0415

    files = sorted(contracts_dir.glob("*.yaml"))
    if not files:
        return []
    result = validate(files)
    if result.unreadable or result.report.errors:
        raise ValueError(f"{contracts_dir}: contracts do not validate (run `pv validate`)")
    stale = staleness(result.contracts)
    rows = []
    for contract in result.contracts:
        root = find_root(contract.path)
        for gate in contract.gates:
            t, measured = gate.threshold, None
            if gate.evidence and (root / gate.evidence).is_file():
                ev = json.loads((root / gate.evidence).read_text(encoding="utf-8"))
                metric = ev["measurements"].get(t.metric)
                if metric is not None:
                    measured = metric["value"]
            why = (
                f"{t.metric} = {_number(measured)} {t.unit} (needs {t.comparator} "
                f"{_number(t.value)})"
                if measured is not None
                else gate.partial_note or f"no evidence yet; needs {t}"
            )
            rows.append(
                {
                    "gate": gate.id,
                    "contract": contract.id,
                    "status": gate.status,
                    "ship_blocking": gate.ship_blocking,
                    "why": " ".join(why.split()),
                    "this_run": checks.get(gate.id, {}).get("verdict"),
                    "stale": stale.get(gate.id),
                }
            )
    return rows


def _number(value: float) -> str:
    """Integers exactly (373509120, not 3.73509e+08); other values to 4 significant digits."""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


def build_summary(
    run_dir: Path,
    state: PipelineState,
    corpus: dict,
    run_config: Any,
    outcomes: list,
    *,
    contracts_dir: Path = Path("contracts"),
) -> dict:
    run_dir = Path(run_dir)
    job = PipelineDir(run_dir)
    manifest = json.loads((job.data / "manifest.json").read_text(encoding="utf-8"))
    splits = manifest["splits"]
    tokens = manifest["totals"]["tokens"]
    baseline = json.loads(job.baseline.read_text(encoding="utf-8"))
    checkpoint = run_dir / state.output("train", "checkpoint")
    checks = state.stages.get("gates", {}).get("results", {}).get("checks", {})
    rows = _gate_rows(contracts_dir, checks)
    plots = state.stages.get("plots", {}).get("results", {}).get("files", [])
    return {
        "run_dir": str(run_dir),
        "stages": [
            {"stage": o.name, "reused": o.reused, "seconds": round(o.seconds, 1)} for o in outcomes
        ],
        "tokenizer": {
            "vocab_size": manifest["tokenizer"]["vocab_size"],
            "sha256": manifest["tokenizer"]["sha256"],
            "corpus_files": corpus["files"],
            "corpus_bytes": corpus["bytes"],
            "tokens": tokens,
            "bytes_per_token": corpus["bytes"] / tokens if tokens else None,
        },
        "data": {
            "train_tokens": splits["train"]["tokens"],
            "val_tokens": splits["val"]["tokens"],
            "train_documents": splits["train"]["documents"],
            "val_documents": splits["val"]["documents"],
        },
        "training": _training(run_dir, run_config),
        "run": _store(run_dir),
        "baseline": baseline,
        "checkpoint": {
            "path": str(checkpoint),
            "bytes": _tree_bytes(checkpoint),
            "manifest_sha256": state.output("train", "manifest_sha256"),
        },
        "export": {
            "path": str(job.export),
            "bytes": _tree_bytes(job.export),
            "model_sha256": state.output("export", "model_sha256"),
        },
        "plots": [str(run_dir / p) for p in plots],
        "report": str(job.report) if job.report.is_file() else None,
        "gates": rows,
        "checks": checks,
    }


def failed_checks(summary: dict) -> list[str]:
    """One line per gate the gate stage checked whose verdict is neither PASS nor PARTIAL
    (what `gates check` exits non-zero for), naming its evidence: the pipeline then exits
    FINDINGS, so a run that fails a gate never reads as done. A reused verdict counts too."""
    return [
        f"{gate} reads {check['verdict']}"
        f"{' on this run' if check.get('on_this_run') else ''} (evidence "
        f"{Path(summary['run_dir']) / check['evidence']})"
        for gate, check in summary.get("checks", {}).items()
        if check["verdict"] not in ("PASS", "PARTIAL")
    ]


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def render_summary(s: dict) -> str:
    tok, data, tr, base = s["tokenizer"], s["data"], s["training"], s["baseline"]
    reused = sum(st["reused"] for st in s["stages"])
    lines = [
        "",
        f"shipgate pipeline: {s['run_dir']}  ({len(s['stages'])} stages, {reused} reused, "
        f"{s.get('seconds', 0):.0f} s)",
        f"  tokenizer   byte-level BPE, vocab {tok['vocab_size']:,}; corpus "
        f"{tok['corpus_files']:,} files, {_mb(tok['corpus_bytes'])} -> {tok['tokens']:,} tokens "
        f"({tok['bytes_per_token']:.2f} bytes/token)",
        f"  data        train {data['train_tokens']:,} tokens ({data['train_documents']:,} "
        f"documents), val {data['val_tokens']:,} tokens ({data['val_documents']:,})",
    ]
    val = (
        f", val loss {tr['last_val_loss']:.3f} at step {tr['last_val_step']}"
        if tr["last_val_loss"] is not None
        else ""
    )
    lines.append(
        f"  training    {tr['steps']} of {tr['max_steps']} steps ({tr['status']}), loss "
        f"{tr['first_loss']:.3f} -> {tr['last_loss']:.3f}{val}{_speed(tr)}"
    )
    run = s["run"]
    if run["store"] is not None:
        lines.append(f"  run store   {run['store']}  (`trainer runs show {run['run_id'][:8]}`)")
    else:  # a run directory trained before the store existed
        lines.append(
            f"  run store   none yet: `trainer runs sync {PipelineDir(s['run_dir']).train.root}` "
            "records it"
        )
    model, kn = base["model"], base["kn_trigram"]
    verdict = "the model is better" if base["ratio"] < 1 else "the trigram is still better"
    lines.append(
        f"  validation  perplexity {model['perplexity']:.1f} (loss {model['loss']:.3f}) vs "
        f"Kneser-Ney trigram {kn['perplexity']:.1f} fitted on the same "
        f"{kn['training_tokens']:,} training tokens: ratio {base['ratio']:.2f}, {verdict} "
        f"({base['validation']['targets']:,} val targets)"
    )
    ck, ex = s["checkpoint"], s["export"]
    lines.append(f"  checkpoint  {ck['path']}  {_mb(ck['bytes'])}  manifest sha256 "
                 f"{ck['manifest_sha256'][:16]}")  # fmt: skip
    lines.append(f"  export      {ex['path']}  {_mb(ex['bytes'])}  model sha256 "
                 f"{ex['model_sha256'][:16]}")  # fmt: skip
    if s["plots"]:
        lines.append(f"  plots       {', '.join(s['plots'])}")
    if s.get("report"):
        lines.append(f"  report      {s['report']}  (gates, evidence and audit in a browser)")
    lines.extend(render_gate_table(s["gates"]))
    return "\n".join(lines)


def _speed(tr: dict) -> str:
    """The training line's speed, e.g. "; 13,028 tokens/s median, 26 % of this CPU's
    measured float32 matmul peak (190 GFLOP/s)"; the peak part only for a run whose
    records carry peak_fraction (a CPU run)."""
    speed = tr["median_tokens_per_s"]
    if not speed:
        return ""
    text = f"; {speed:,.0f} tokens/s median"
    fraction, peak = tr.get("median_peak_fraction"), tr.get("matmul_peak_flops")
    if fraction is not None and peak is not None:
        from trainer.plan.roofline import percent  # noqa: PLC0415

        text += (
            f", {percent(fraction)} of this CPU's measured float32 matmul peak "
            f"({peak / 1e9:,.0f} GFLOP/s)"
        )
    return text


def render_gate_table(rows: list[dict]) -> list[str]:
    if not rows:
        return ["  gates       no contracts here: nothing to show"]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    blocking = [r for r in rows if r["ship_blocking"]]
    met = sum(r["status"] == "PASS" for r in blocking)
    on_stale = sum(r["stale"] is not None for r in blocking)
    head = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    stale = f", {on_stale} of them on stale evidence" if on_stale else ""
    lines = [
        f"  gates       {len(rows)} gates: {head}; ship-blocking {met} of {len(blocking)} "
        f"PASS{stale}",
        f"    {'gate':<24} {'status':<7} {'ship':<5} {'this run':<9} why",
    ]
    for r in rows:
        this = r["this_run"] or "-"
        ship = "yes" if r["ship_blocking"] else ""
        lines.append(f"    {r['gate']:<24} {r['status']:<7} {ship:<5} {this:<9} {r['why']}")
        if r["stale"] is not None:
            lines.append(f"    {'':<24} STALE: {r['stale']}")
    return lines
