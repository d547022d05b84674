"""`trainer inspect PATH` and `trainer export CKPT --out DIR`.

    trainer inspect runs/demo/checkpoints/step-00000015 [--json]
    trainer export runs/demo/checkpoints/step-00000015 --out release/ [--tokenizer DIR]

inspect prints format, version, step, tensor count, parameter count, architecture and a
checksum verdict per file, computed from the bytes (the source system's inspector
hard-coded ``valid: true``), and runs the checks a resume runs on state.json (its fields'
types, its step against the directory's): what it calls valid a resume loads. Exit
status 1 when anything is invalid. export writes nothing unless the checkpoint verifies
and the export checks pass, --out is outside every checkpoint, and no other process
writes the run directory --out is in (its writer lock, named by pid); a full disk is a
message naming the file, nothing left half-written; exit 1 otherwise. Neither command
takes a lock to read the checkpoint.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trainer import exit_codes
from trainer.userfiles import display


def cmd_inspect(args: argparse.Namespace) -> int:
    from trainer.checkpoint.verify import inspect_checkpoint  # noqa: PLC0415 - no torch at start-up

    report = inspect_checkpoint(args.path)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return exit_codes.OK if report.valid else exit_codes.FINDINGS
    m = report.manifest or {}
    print(f"checkpoint      {display(report.path)}")
    print(f"format          {m.get('format')} version {m.get('format_version')}")
    print(f"step            {m.get('step')}")
    print(f"tensors         {m.get('tensor_count')}")
    print(f"parameters      {m.get('parameter_count')}")
    print(f"dtype           {m.get('dtype')}")
    print(f"architecture    {json.dumps(m.get('architecture'), sort_keys=True)}")
    for verdict in report.files:
        print(f"  {'ok ' if verdict.ok else 'BAD'} {verdict.name}: {verdict.reason}")
    for problem in report.problems:
        print(f"trainer inspect: invalid: {problem}", file=sys.stderr)
    print(f"verdict         {'valid' if report.valid else 'INVALID'}")
    return exit_codes.OK if report.valid else exit_codes.FINDINGS


def cmd_export(args: argparse.Namespace) -> int:
    from trainer.checkpoint.export import EXPORT_ERRORS, export_checkpoint  # noqa: PLC0415

    try:
        report = export_checkpoint(args.checkpoint, args.out, tokenizer_dir=args.tokenizer)
    except EXPORT_ERRORS as exc:
        print(f"trainer export: error: {exc}", file=sys.stderr)
        return exit_codes.FINDINGS
    print(
        f"{report.out_dir}: {report.tensor_count} tensors, {report.tensor_bytes} tensor bytes; "
        f"{', '.join(report.files)}"
    )
    return exit_codes.OK


def add_checkpoint_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="verify a checkpoint and report what it holds")
    p.add_argument("path", type=Path, metavar="PATH")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_inspect)
    p = sub.add_parser("export", help="export a checkpoint for transformers (safetensors)")
    p.add_argument("checkpoint", type=Path, metavar="CKPT")
    p.add_argument("--out", type=Path, required=True, help="output directory (new or empty)")
    p.add_argument(
        "--tokenizer", type=Path, default=None, help="tokenizer directory (default: state.json's)"
    )
    p.set_defaults(run=cmd_export)
