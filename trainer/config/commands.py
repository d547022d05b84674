"""`trainer validate CONFIG [--json]` — check a run config without data, model or GPU.

Checks the YAML, the schema (trainer/config/schema.json), the architecture, the
C-TRAINCFG-001 rules that need no sequence count (warmup <= 10 % of max_steps, warmup <
max_steps, min_lr = 0.1 x lr, tokens per parameter at their upper bound), and the values
the device cannot honour (mixed_precision: fp16 anywhere, bf16 off CUDA;
trainer/config/device.py). Steps per epoch, the epochs cap and the reachable steps need N,
which ``trainer plan`` counts from the shard manifest. Fast enough for CI: no torch import
(except --device auto with bf16, to ask whether this machine has CUDA). The checks are
trainer/config/validate.py's (`trainer apply` and `trainer pipeline` make them too, for
the device they run on).

    trainer validate configs/quickstart.yaml           # exit 0 valid, 1 invalid
    trainer validate configs/llama-370m.yaml --device cuda   # checked for a GPU run
    file:line:column: error FIELD: message (hint)       # one line per problem
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from trainer import exit_codes
from trainer.config.algebra import DataFreeReport
from trainer.config.device import DEVICES
from trainer.config.sections import RunConfig
from trainer.config.validate import CONTRACT, validate
from trainer.model.params import param_count

NOT_CHECKED = (
    "steps per epoch, the epochs cap and the reachable steps need N, the training "
    "sequences; `trainer plan CONFIG` counts N from the shard manifest and checks them"
)


def summary(cfg: RunConfig, report: DataFreeReport, world_size: int = 1) -> list[str]:
    m, d, t, o = cfg.model, cfg.data, cfg.training, cfg.optimizer
    tokens_per_step = d.micro_batch * t.gradient_accumulation * world_size * d.seq_len
    processes = f" x {world_size} processes" if world_size > 1 else ""
    model = f"preset {cfg.model_preset}" if cfg.model_preset else "architecture"
    return [
        f"  model     {model}: {param_count(m):,} parameters, {m.num_hidden_layers} layers, "
        f"hidden {m.hidden_size}, heads {m.num_attention_heads}/{m.num_key_value_heads}, "
        f"vocab {m.vocab_size}",
        f"  batch     micro_batch {d.micro_batch} x gradient_accumulation "
        f"{t.gradient_accumulation}{processes} x seq_len {d.seq_len} = {tokens_per_step:,} tokens "
        "per step",
        f"  schedule  {t.max_steps} steps (epochs cap {t.epochs}), warmup {t.warmup_steps}, "
        f"lr {o.lr:g} -> min_lr {o.min_lr:g}, {t.lr_scheduler}",
        f"  tokens    at most {report.tokens_upper_bound:,} "
        f"({report.tokens_per_param_upper_bound:.2f} per parameter) if all {t.max_steps} "
        "steps are reachable",
        *_alert_lines(cfg),
        f"  not checked: {NOT_CHECKED}",
    ]


def _alert_lines(cfg: RunConfig) -> list[str]:
    """One summary line per action of monitoring.alerts (none without rules)."""
    lines = []
    for action in ("stop", "warn"):
        rules = [
            rule.when + (f" from step {rule.after_step}" if rule.after_step else "")
            for rule in cfg.monitoring.alerts
            if rule.action == action
        ]
        if rules:
            lines.append(f"  alerts    {action}: {'; '.join(rules)}")
    return lines


def cmd_validate(args: argparse.Namespace) -> int:
    findings, cfg, report = validate(args.config, args.world_size, args.device)
    errors = [f for f in findings if f.severity == "error"]
    if args.json:
        print(
            json.dumps(
                {
                    "config": str(args.config),
                    "valid": not errors,
                    "findings": [f.to_json() for f in findings],
                    "algebra": report.to_json() if report else None,
                    "params": param_count(cfg.model) if cfg else None,
                    "world_size": args.world_size,
                    "device": args.device,
                    "not_checked": NOT_CHECKED,
                },
                indent=2,
            )
        )
        return exit_codes.FINDINGS if errors else exit_codes.OK
    for finding in findings:
        print(finding.render())
    if errors:
        print(f"{args.config}: invalid ({len(errors)} error{'s' * (len(errors) != 1)})")
        return exit_codes.FINDINGS
    assert cfg is not None and report is not None  # loaded, since no error
    print(f"{args.config}: valid (schema, architecture, data-free {CONTRACT} rules)")
    print("\n".join(summary(cfg, report, args.world_size)))
    return exit_codes.OK


def add_validate_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="check a run config: schema, architecture and the data-free step algebra",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("config", type=Path, metavar="CONFIG")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="the device the run is checked for (default auto: what no device can run is "
        "an error, what this machine cannot run a warning)",
    )
    add_world_size_argument(p)
    p.set_defaults(run=cmd_validate)


def _world_size(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} processes: must be >= 1")
    return value


def add_world_size_argument(p: argparse.ArgumentParser) -> None:
    """--world-size N: check the step algebra for N data-parallel processes (torchrun)."""
    p.add_argument(
        "--world-size",
        type=_world_size,
        default=1,
        metavar="N",
        help="data-parallel processes the run will have under torchrun (default 1): the "
        "global batch is micro_batch x gradient_accumulation x N",
    )
