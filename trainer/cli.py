"""`trainer` — the reference trainer's command line.

Subcommands land with their components (tokenizer, data, plan, apply, export, inspect,
monitor);
`trainer env` reports what the trainer would run on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys

from trainer import __version__, exit_codes, terminal
from trainer.checkpoint.commands import add_checkpoint_parsers
from trainer.config.commands import add_validate_parser
from trainer.data.commands import add_data_parser
from trainer.monitor.commands import add_monitor_parser
from trainer.pipeline.commands import add_pipeline_parser
from trainer.plan.commands import add_plan_parser
from trainer.plot.commands import add_plot_parser
from trainer.store.commands import add_runs_parser
from trainer.tokenizer.commands import add_tokenizer_parser
from trainer.train.commands import add_apply_parser


def environment() -> dict:
    """Python, torch and device facts; torch is imported here, never at CLI start-up."""
    import torch  # noqa: PLC0415 - keep torch out of CLI start-up

    cuda = torch.cuda.is_available()
    return {
        "trainer": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda_build": torch.version.cuda,
        "device": "cuda" if cuda else "cpu",
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if cuda
        else [],
        "cpu_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
    }


def cmd_env(args: argparse.Namespace) -> int:
    env = environment()
    if args.json:
        print(json.dumps(env, indent=2))
    else:
        for key, value in env.items():
            print(f"{key:<17} {value}")
    return exit_codes.OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainer", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"trainer {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("env", help="report Python, torch and the device training would use")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_env)
    add_tokenizer_parser(sub)
    add_data_parser(sub)
    add_validate_parser(sub)
    add_plan_parser(sub)
    add_apply_parser(sub)
    add_checkpoint_parsers(sub)
    add_plot_parser(sub)
    add_monitor_parser(sub)
    add_runs_parser(sub)
    add_pipeline_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    terminal.install()  # the trainer's log records on stderr as "trainer: ..." lines
    own_process = argv is None  # the process's command line, not a caller's (a test's) list
    if own_process:
        terminal.handle_interrupts()  # a second Ctrl-C: no traceback (trainer/terminal.py)
    status: int | None = None
    try:
        args = build_parser().parse_args(argv)
        if getattr(args, "special_token", "") is None:
            args.special_token = ["<|endoftext|>"]
        try:
            status = args.run(args)
        except BrokenPipeError:  # `trainer runs ls | head`: the reader went away
            status = exit_codes.stop_on_broken_pipe()
        if own_process:
            terminal.command_returned(status)
    except KeyboardInterrupt:
        # Ctrl-C outside a training loop (which stops cleanly on it), or once the command
        # had returned (its status stands); any further one exits at once (terminal.py).
        if not own_process:
            raise  # a caller's (a test's) interrupt is the caller's
        if status is None:
            status = terminal.INTERRUPTED
            print("trainer: interrupted", file=sys.stderr)
        if own_process:
            terminal.command_returned(status)
    return status


if __name__ == "__main__":
    sys.exit(main())
