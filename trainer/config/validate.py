"""A run config's findings without data, model or GPU: what `trainer validate` prints,
and the first check of `trainer apply` and `trainer pipeline`.

    findings, cfg, report = validate(Path("configs/quickstart.yaml"), device="cpu")
    errors = [f for f in findings if f.severity == "error"]

The YAML, the schema (trainer/config/schema.json), the architecture, the C-TRAINCFG-001
rules that need no sequence count (trainer/config/algebra.py's data-free report), the
values the device cannot honour (trainer/config/device.py) and the alert rules the config
can never check. No torch import, except to ask for CUDA when ``device`` is auto and the
answer matters (bf16).
"""

from __future__ import annotations

from pathlib import Path

from trainer.config.algebra import DataFreeReport, RuleResult, evaluate_data_free
from trainer.config.device import device_findings
from trainer.config.load import load_config
from trainer.config.messages import ConfigError, ConfigFinding
from trainer.config.sections import RunConfig
from trainer.model.params import param_count

CONTRACT = "C-TRAINCFG-001"


def rule_finding(cfg: RunConfig, result: RuleResult, severity: str) -> ConfigFinding:
    """An algebra result as a finding cited at the YAML line of its first field."""
    field = result.fields[0]
    line, column = cfg.position_of(field)
    message = result.message.removesuffix(f"; {result.fix}") if result.fix else result.message
    hint = "; ".join(p for p in (result.fix, f"{CONTRACT} {result.rule}") if p)
    return ConfigFinding(
        str(cfg.path), line, column, field, message, hint, result.rule.lower(), severity
    )


def validate(
    path: Path, world_size: int = 1, device: str = "auto"
) -> tuple[list[ConfigFinding], RunConfig | None, DataFreeReport | None]:
    """(findings, config, data-free algebra report); config and report are None when the
    file does not load. ``world_size``: the data-parallel processes the run will have (a
    global batch is micro_batch x gradient_accumulation x world_size sequences).
    ``device``: auto | cpu | cuda, the device the run is checked for; auto refuses only
    what no device honours and warns about what this machine cannot."""
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        return exc.findings, None, None
    report = evaluate_data_free(
        cfg.algebra_inputs(sequences=None, params=param_count(cfg.model), world_size=world_size)
    )
    findings = [rule_finding(cfg, v, "error") for v in report.violations]
    findings += [rule_finding(cfg, w, "warning") for w in report.warnings]
    findings += device_findings(cfg, device)
    findings += alert_warnings(cfg)
    findings.sort(key=lambda f: (f.severity != "error", f.line or 0, f.column or 0))
    return findings, cfg, report


def alert_warnings(cfg: RunConfig) -> list[ConfigFinding]:
    """Alert rules this config can never check: from a step past max_steps, or on
    val_loss when no step evaluates (eval_interval > max_steps). Warnings: the run is
    fine, the rule is dead weight that looks like protection."""
    t = cfg.training
    found = []
    for index, rule in enumerate(cfg.monitoring.alerts):
        field = f"monitoring.alerts[{index}]"
        if rule.after_step > t.max_steps:
            why = f"after_step {rule.after_step} > max_steps {t.max_steps}"
            hint = "lower after_step"
        elif rule.metric == "val_loss" and t.eval_interval > t.max_steps:
            why = f"no evaluation: eval_interval {t.eval_interval} > max_steps {t.max_steps}"
            hint = "lower training.eval_interval"
        else:
            continue
        line, column = cfg.position_of(field)
        message = f'rule "{rule.when}" is never checked ({why})'
        found.append(
            ConfigFinding(
                str(cfg.path), line, column, field, message, hint, "alert-never-checked", "warning"
            )
        )
    return found
