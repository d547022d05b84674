"""The run-config values a device cannot honour, found before anything is written: by
`trainer validate` (trainer/config/validate.py), `trainer plan` (its config section),
`trainer apply` / `trainer pipeline` (which validate first, for the device they will run on)
and the training loop itself (trainer/train/loop.py train(), for configs built in code).

    device_findings(cfg, "cpu")               # [ConfigFinding(code="device-unsupported")]
    check_device(cfg, "cpu")                  # ConfigError with those findings
    unsupported_precision("bf16", "cuda")     # None: a CUDA run trains in bf16 autocast

``training.mixed_precision``:

- fp32 runs everywhere.
- bf16 is autocast on CUDA. On a CPU the loop would train float32 instead, quietly not the
  run the file describes, so it is refused there.
- fp16 is refused on every device: fp16 autocast needs a gradient scaler (fp16's 5-bit
  exponent flushes small gradients to zero), and the loop runs none.

``--device auto`` in `trainer validate` means "whatever machine runs it": a value only
*this* machine cannot honour (bf16 without CUDA) is a warning there, since a GPU config
checked on a CPU box in CI is fine. `trainer apply`, `trainer pipeline` and `trainer plan`
name the device the run gets, and refuse it as an error. No torch import unless the
answer depends on this machine (bf16 with ``auto``).
"""

from __future__ import annotations

from collections.abc import Callable

from trainer.config.messages import ConfigError, ConfigFinding
from trainer.config.sections import RunConfig

DEVICES = ("auto", "cpu", "cuda")
CODE = "device-unsupported"
FIELD = "training.mixed_precision"
IN_CODE = "<config built in code>"  # a finding's path when the config has no file


def unsupported_precision(precision: str, device: str) -> str | None:
    """Why a run on ``device`` (cpu | cuda) cannot train in ``precision``; None if it can."""
    if precision == "fp16":
        return (
            "fp16 needs a gradient scaler (small gradients underflow to zero in fp16), "
            "which the training loop does not run"
        )
    if precision == "bf16" and device != "cuda":
        return "bf16 is autocast on CUDA; a CPU run would train in float32, not bf16"
    return None


def cuda_available() -> bool:
    import torch  # noqa: PLC0415 - only when the answer depends on this machine

    return torch.cuda.is_available()


def run_device(requested: str, has_cuda: Callable[[], bool] = cuda_available) -> str:
    """The device (cpu | cuda) a run asked for ``requested`` gets: auto is CUDA if present."""
    if requested not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {requested!r}")
    if requested == "auto":
        return "cuda" if has_cuda() else "cpu"
    return requested


def device_findings(
    cfg: RunConfig, device: str, has_cuda: Callable[[], bool] = cuda_available
) -> list[ConfigFinding]:
    """What a run of ``cfg`` on ``device`` (auto | cpu | cuda) cannot honour, cited at the
    key. An error, except a value only this machine refuses under ``auto``: a warning."""
    precision = cfg.training.mixed_precision
    nowhere = unsupported_precision(precision, "cuda")  # CUDA runs everything the CPU does
    if nowhere:
        return [_finding(cfg, nowhere, "set mixed_precision: bf16 (CUDA) or fp32", "error")]
    if unsupported_precision(precision, "cpu") is None:
        return []  # fp32: no need to ask which device this is
    target = run_device(device, has_cuda)
    why = unsupported_precision(precision, target)
    if why is None:
        return []
    if device == "auto":
        return [
            _finding(
                cfg,
                f"{precision} is autocast on CUDA and this machine has no CUDA device: "
                "a run here would be refused",
                "fine for a GPU run: check it with --device cuda; set mixed_precision: fp32 "
                "to run it here",
                "warning",
            )
        ]
    return [
        _finding(cfg, why, "set mixed_precision: fp32 for a CPU run, or run it on CUDA", "error")
    ]


def check_device(cfg: RunConfig, device: str) -> None:
    """ConfigError naming every value a run of ``cfg`` on ``device`` (cpu | cuda: the device
    the run got) cannot honour; the loop calls it before it builds or writes anything."""
    findings = device_findings(cfg, device)
    if findings:
        raise ConfigError(findings)


def _finding(cfg: RunConfig, message: str, hint: str, severity: str) -> ConfigFinding:
    if cfg.path is None:  # built in code: no file, no line to cite
        return ConfigFinding(IN_CODE, None, None, FIELD, message, hint, CODE, severity)
    line, column = cfg.position_of(FIELD)
    return ConfigFinding(str(cfg.path), line, column, FIELD, message, hint, CODE, severity)
