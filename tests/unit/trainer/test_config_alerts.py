"""monitoring.alerts in a run config: good rules load into AlertRules; every bad input is
one finding at the file:line:column of the entry's offending key or value, with a hint;
`trainer validate` and `trainer plan` accept and refuse the same configs (one loader).
The grammar itself (trainer/config/alerts.py) is pinned case by case."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer import cli
from trainer.config.alerts import METRICS, AlertRule, AlertSyntaxError, parse_when
from trainer.config.load import load_config
from trainer.config.messages import ConfigError
from trainer.config.validate import validate
from trainer.train.checkpointing import identity_hash, run_identity

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "configs"

BASE = """\
model:
  preset: tiny
data:
  shards: data/
  tokenizer: tok/
  micro_batch: 4
  seq_len: 128
optimizer:
  lr: 3.0e-4
training:
  epochs: 2
  max_steps: 100
  warmup_steps: 10
  output_dir: out/
monitoring:
  log_interval: 10
"""
RULES_LINE = 17  # the line of "  alerts:" when appended to BASE


def _config(tmp_path: Path, rules: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(BASE + "  alerts:\n" + rules, encoding="utf-8")
    return path


def _one_finding(tmp_path: Path, rules: str):
    with pytest.raises(ConfigError) as info:
        load_config(_config(tmp_path, rules))
    findings = info.value.findings
    assert len(findings) == 1, [f.render() for f in findings]
    return findings[0]


# ---------------------------------------------------------------- good rules
def test_good_rules_load_in_file_order_with_their_numbers(tmp_path):
    cfg = load_config(
        _config(
            tmp_path,
            "    - when: loss > 12.0   # a comment\n"
            "      action: stop\n"
            "    - when: grad_norm>=1_000\n"
            "      action: stop\n"
            "      after_step: 20\n"
            "    - when: val_loss <= 9.5e0\n"
            "      action: warn\n"
            "    - when: '  lr < -1'\n"
            "      action: warn\n",
        )
    )
    assert cfg.monitoring.alerts == (
        AlertRule("loss > 12.0", "loss", ">", 12.0, "stop", 0),
        AlertRule("grad_norm>=1_000", "grad_norm", ">=", 1000.0, "stop", 20),
        AlertRule("val_loss <= 9.5e0", "val_loss", "<=", 9.5, "warn", 0),
        AlertRule("lr < -1", "lr", "<", -1.0, "warn", 0),
    )
    assert cfg.line_of("monitoring.alerts") == RULES_LINE
    assert cfg.to_json()["monitoring"]["alerts"][1]["after_step"] == 20  # in the run manifest


def test_no_alerts_is_an_empty_tuple_and_the_fixture_with_every_metric_is_valid(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(BASE, encoding="utf-8")
    assert load_config(path).monitoring.alerts == ()
    valid = load_config(FIXTURES / "valid" / "alerts.yaml")
    assert {rule.metric for rule in valid.monitoring.alerts} == set(METRICS)


def test_alert_rules_do_not_change_the_config_hash_a_resume_checks(tmp_path):
    # A run stopped by an alert resumes with the rule adjusted, and checkpoints written
    # before monitoring.alerts existed keep their hash.
    b = load_config(_config(tmp_path, "    - when: loss > 3\n      action: stop\n"))
    (tmp_path / "run.yaml").write_text(BASE, encoding="utf-8")  # the same file, no rules
    a = load_config(tmp_path / "run.yaml")
    assert run_identity(a)[0] == run_identity(b)[0]
    resolved = a.to_json()
    resolved["monitoring"] = {"log_interval": 10}  # the config as written before the key
    assert run_identity(a)[0] == identity_hash(resolved)
    changed = dict(resolved, monitoring={"log_interval": 11})
    assert run_identity(a)[0] != identity_hash(changed), "hash is blind"


# ---------------------------------------------------------------- bad rules, file:line
@pytest.mark.parametrize(
    ("rules", "field", "line", "column", "words"),
    [
        (
            "    - when: perplexity > 12\n      action: stop\n",
            "monitoring.alerts[0].when",
            18,
            13,
            "unknown metric 'perplexity'",
        ),
        (
            "    - when: los > 12\n      action: stop\n",
            "monitoring.alerts[0].when",
            18,
            13,
            "did you mean loss?",
        ),
        (
            "    - when: loss > 3\n      action: warn\n"
            "    - when: loss => 12\n      action: stop\n",
            "monitoring.alerts[1].when",
            20,
            13,
            "comparator '=>'",
        ),
        (
            "    - when: loss == 12\n      action: stop\n",
            "monitoring.alerts[0].when",
            18,
            13,
            "comparator '=='",
        ),
        (
            "    - when: loss > twelve\n      action: stop\n",
            "monitoring.alerts[0].when",
            18,
            13,
            "'twelve' in 'loss > twelve' is not a number",
        ),
        (
            "    - when: loss > nan\n      action: stop\n",
            "monitoring.alerts[0].when",
            18,
            13,
            "is not a finite number",
        ),
        (
            "    - when: loss > 1e999\n      action: stop\n",
            "monitoring.alerts[0].when",
            18,
            13,
            "is not a finite number",
        ),
        (
            "    - when: loss >\n      action: stop\n",
            "monitoring.alerts[0].when",
            18,
            13,
            "no threshold",
        ),
        (
            "    - when: 12 < loss\n      action: stop\n",
            "monitoring.alerts[0].when",
            18,
            13,
            "is not a rule",
        ),
        (
            "    - when: loss > 12\n      action: halt\n",
            "monitoring.alerts[0].action",
            19,
            15,
            "'halt' is not one of stop, warn",
        ),
        (
            "    - when: loss > 12\n      action: stop\n      level: high\n",
            "monitoring.alerts[0].level",
            20,
            7,
            "unknown key 'level'",
        ),
        (
            "    - when: loss > 12\n",
            "monitoring.alerts[0].action",
            18,
            7,
            "missing required key 'action'",
        ),
        (
            "    - when: 12\n      action: stop\n",
            "monitoring.alerts[0].when",
            18,
            13,
            "expected string",
        ),
        (
            "    - when: loss > 12\n      action: stop\n      after_step: 2.5\n",
            "monitoring.alerts[0].after_step",
            20,
            19,
            "expected integer",
        ),
        ("    loss > 12\n", "monitoring.alerts", 18, 5, "expected array"),
    ],
    ids=[
        "unknown-metric",
        "metric-typo",
        "bad-comparator-second-rule",
        "equality",
        "non-numeric",
        "nan",
        "overflow",
        "no-threshold",
        "reversed",
        "unknown-action",
        "unknown-key",
        "no-action",
        "when-not-text",
        "after-step-not-whole",
        "not-a-list",
    ],
)
def test_a_bad_rule_is_one_finding_at_its_line(tmp_path, rules, field, line, column, words):  # noqa: PLR0917
    finding = _one_finding(tmp_path, rules)
    assert (finding.field, finding.line, finding.column) == (field, line, column), finding.render()
    assert words in finding.render(), finding.render()
    assert finding.render().startswith(f"{tmp_path / 'run.yaml'}:{line}:{column}: error {field}")


def test_every_bad_rule_of_a_file_is_reported_in_one_pass(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(FIXTURES / "invalid" / "bad-alerts.yaml")
    keys = ("when", "when", "when", "when", "action", "severity", "when", "after_step")
    fields = [f.field for f in info.value.findings]
    assert fields == [f"monitoring.alerts[{i}].{key}" for i, key in enumerate(keys)]


@pytest.mark.parametrize(
    ("command", "cited"),
    [
        ("validate", "{path}:18:13: error monitoring.alerts[0].when: comparator '~'"),
        ("plan", "error: {path}:18: monitoring.alerts[0].when: comparator '~'"),
    ],
)
def test_validate_and_plan_refuse_a_bad_rule_naming_its_line(tmp_path, capsys, command, cited):
    path = _config(tmp_path, "    - when: loss ~ 3\n      action: stop\n")
    assert cli.main([command, str(path)]) == 1
    out = capsys.readouterr()
    assert cited.format(path=path) in out.out + out.err, out.out + out.err


def test_a_rule_the_run_can_never_check_is_a_warning_at_its_entry(tmp_path):
    path = _config(
        tmp_path,
        "    - when: loss > 3\n      action: stop\n      after_step: 100\n"  # max_steps 100
        "    - when: loss > 3\n      action: stop\n      after_step: 101\n"
        "    - when: val_loss > 3\n      action: warn\n",  # eval_interval 1000 > 100
    )
    findings, cfg, _ = validate(path)
    assert cfg is not None, "warnings only"
    dead = [f for f in findings if f.code == "alert-never-checked"]
    assert [(f.field, f.line, f.column, f.severity) for f in dead] == [
        ("monitoring.alerts[1]", 21, 7, "warning"),
        ("monitoring.alerts[2]", 24, 7, "warning"),
    ]
    assert "after_step 101 > max_steps 100" in dead[0].message
    assert "eval_interval 1000 > max_steps 100" in dead[1].message


def test_validate_lists_the_rules_of_a_valid_config(capsys):
    assert cli.main(["validate", str(FIXTURES / "valid" / "alerts.yaml")]) == 0
    out = capsys.readouterr().out
    assert "  alerts    stop: loss > 12.0; grad_norm>=1_000 from step 20" in out


# ---------------------------------------------------------------- the grammar
@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("loss > 12.0", ("loss", ">", 12.0)),
        ("loss>12", ("loss", ">", 12.0)),
        ("  grad_norm >= 5  ", ("grad_norm", ">=", 5.0)),
        ("lr < 1e-6", ("lr", "<", 1e-6)),
        ("step_s <= +2.5E1", ("step_s", "<=", 25.0)),
        ("tokens_per_s < 1_000.5", ("tokens_per_s", "<", 1000.5)),
        ("val_loss > .5", ("val_loss", ">", 0.5)),
        ("loss > -3.", ("loss", ">", -3.0)),
    ],
)
def test_the_grammar_reads_every_yaml_number_form(text, parsed):
    assert parse_when(text) == parsed


@pytest.mark.parametrize(
    "text",
    ["loss > inf", "loss > -.inf", "loss > NaN", "loss > 1_", "loss > 1__0", "loss > _1",
     "loss > 1.2.3", "loss > 0x10", "loss > 1e", "loss > .", "loss >> 1", "loss < > 1",
     "loss", "", "> 3", "loss > 3 and grad_norm > 1", "mfu < 0.3"],
)  # fmt: skip
def test_the_grammar_refuses_what_is_not_metric_comparator_finite_number(text):
    with pytest.raises(AlertSyntaxError) as info:
        parse_when(text)
    assert info.value.hint, "every refusal says how to write it"
