"""Per-step metrics: JSON lines, a live training_state.json, a progress line on a terminal.

    writer = MetricsWriter(out_dir, model_cfg, seq_len, device)   # out_dir None: nothing written
    record = writer.step_record(step, epoch=0, loss=3.2, lr=3e-4, grad_norm=0.8, tokens=4096,
                                seconds=0.5)
    writer.write(record, max_steps=1000, log_interval=10)

- ``metrics.jsonl``: one object per step - step, epoch, loss, lr, grad_norm, tokens,
  tokens_per_s, step_s, and mfu on CUDA only (a CPU has no meaningful peak to divide by).
- ``training_state.json``: the latest record plus the run's progress, replaced atomically
  (gates/files.py: temp file, fsync, os.replace) so a reader never sees half a file;
  ``finish(status, reason)`` adds how the run ended (status, reason, ended_at), once, at its
  end.
- A progress line on stderr, only when stderr is a terminal (logs stay clean).
- On resume from the checkpoint of step k, ``rewind(out_dir, k, max_steps=...)`` first
  drops every metrics line past step k (those steps are taken again) and a torn last line
  (a SIGKILL mid-write), rewriting the file atomically, and points training_state.json at
  step k; so after any crash and resume every step appears once. A bad line anywhere but
  the last is an error naming the file and the line, never skipped.
- ``read_metrics(path)`` reads the records back under the same rule (``trainer plot``).
- ``runs.db``: the run store (trainer/store/recorder.py), a row per step beside each line,
  derived from these files; it never stops training (a failure is one warning).

MFU = achieved model FLOP/s / the device's peak bf16 FLOP/s, with the model FLOPs of one
token of training (forward + backward = 3 x forward) counted as in PaLM (Chowdhery et
al. 2022, appendix B):

    flops_per_token = 6 * N  +  12 * L * H * T
                      \\_____/    \\___________/
    matmuls over N non-embedding   attention scores and weighted values: QK^T and AV are
    parameters (2 per multiply-     2 * T * H multiply-adds per token and layer forward,
    add, x3 for fwd + bwd)          x2 FLOPs, x3 fwd + bwd  (H = heads * head_dim)

N counts every weight matrix a token is multiplied by (including lm_head), not the
embedding lookup, which is a gather. Causal masking is not discounted (as in PaLM).
"""

from __future__ import annotations

import json
import math
import sys
from datetime import UTC, datetime
from pathlib import Path

import torch

from gates.files import atomic_write_bytes
from trainer.model.config import LlamaConfig

# The file formats live in a torch-free module so `trainer monitor` starts fast; these
# names stay importable from here, where the loop and the tests look for them.
from trainer.runfiles.metrics_file import (  # noqa: F401 - re-exported
    END_STATUSES,
    METRICS_FILE,
    STATE_FILE,
    MetricsFileError,
    atomic_write_json,
    parse_line,
    parse_lines,
    read_metrics,
)
from trainer.store.recorder import RunRecorder

#: Dense bf16 peak FLOP/s by device-name fragment (vendor datasheets, no sparsity).
PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12}


def matmul_params(cfg: LlamaConfig) -> int:
    """Parameters of every matrix a token is multiplied by (layers and lm_head)."""
    hidden, head_dim = cfg.hidden_size, cfg.resolved_head_dim
    q_out = cfg.num_attention_heads * head_dim
    kv_out = cfg.num_key_value_heads * head_dim
    attention = hidden * q_out + 2 * hidden * kv_out + q_out * hidden
    mlp = 3 * hidden * cfg.intermediate_size
    return cfg.num_hidden_layers * (attention + mlp) + hidden * cfg.vocab_size


def flops_per_token(cfg: LlamaConfig, seq_len: int) -> float:
    """Training FLOPs per token: 6 N + 12 L H T (see the module docstring)."""
    attention_width = cfg.num_attention_heads * cfg.resolved_head_dim
    return 6.0 * matmul_params(cfg) + 12.0 * cfg.num_hidden_layers * attention_width * seq_len


def peak_flops(device: torch.device) -> float | None:
    """The device's peak bf16 FLOP/s, or None when unknown (then no MFU is reported)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for fragment, peak in PEAK_BF16_FLOPS.items():
        if fragment in name:
            return peak
    return None


def rewind(out_dir: Path, step: int, *, max_steps: int) -> list[int]:
    """Make ``out_dir``'s metrics those of a run that stopped after ``step``: drop the lines
    of later steps and a torn last line (metrics.jsonl rewritten atomically, only when
    something changes), and point training_state.json at ``step``'s record. Returns the
    steps dropped. Raises MetricsFileError on a bad line before the last."""
    path = Path(out_dir) / METRICS_FILE
    if not path.is_file():
        return []
    raw = path.read_bytes()
    kept, dropped, last_record = [], [], None
    for line, record in parse_lines(raw, path):  # a torn last line is left out
        if record["step"] > step:
            dropped.append(record["step"])
        else:
            kept.append(line)
            last_record = record
    text = b"".join(line + b"\n" for line in kept)
    if text != raw:
        atomic_write_bytes(path, text)
    state = Path(out_dir) / STATE_FILE
    if state.is_file():
        atomic_write_json(state, {"max_steps": max_steps, "last": last_record})
    return dropped


def _json_number(value: float) -> float | str:
    """JSON has no NaN/inf: write them as strings rather than lie or crash."""
    return value if math.isfinite(value) else str(value)


class MetricsWriter:
    def __init__(
        self, out_dir: Path | None, cfg: LlamaConfig, seq_len: int, device: torch.device
    ) -> None:
        self.out_dir = None if out_dir is None else Path(out_dir)
        self.flops_per_token = flops_per_token(cfg, seq_len)
        self.peak = peak_flops(device)
        self._lines = None
        self._tty = sys.stderr.isatty()
        self.recorder: RunRecorder | None = None
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self._lines = (self.out_dir / METRICS_FILE).open("a", encoding="utf-8")
            # runs.db, derived from these files: a store failure warns once, never raises.
            self.recorder = RunRecorder(self.out_dir)
            self.recorder.start()

    def step_record(
        self,
        step: int,
        *,
        epoch: int,
        loss: float,
        lr: float,
        grad_norm: float,
        tokens: int,
        seconds: float,
    ) -> dict:
        tokens_per_s = tokens / seconds if seconds > 0 else float("inf")
        record = {
            "step": step,
            "epoch": epoch,
            "loss": loss,
            "lr": lr,
            "grad_norm": grad_norm,
            "tokens": tokens,
            "tokens_per_s": tokens_per_s,
            "step_s": seconds,
        }
        if self.peak is not None:
            record["mfu"] = tokens_per_s * self.flops_per_token / self.peak
        return record

    def write(self, record: dict, *, max_steps: int, log_interval: int = 1) -> None:
        if self._lines is not None:
            line = {k: _json_number(v) if isinstance(v, float) else v for k, v in record.items()}
            self._lines.write(json.dumps(line) + "\n")
            self._lines.flush()
            state = {"max_steps": max_steps, "last": line}
            atomic_write_json(self.out_dir / STATE_FILE, state)
            if self.recorder is not None:
                self.recorder.step(line, max_steps=max_steps)
        if self._tty and record["step"] % log_interval == 0:
            print(
                f"\rstep {record['step']}/{max_steps}  loss {record['loss']:.4f}  "
                f"lr {record['lr']:.2e}  |g| {record['grad_norm']:.3f}  "
                f"{record['tokens_per_s']:,.0f} tok/s",
                end="",
                file=sys.stderr,
                flush=True,
            )

    def finish(self, status: str, reason: str, *, max_steps: int | None = None) -> None:
        """Add how the run ended to training_state.json, atomically: its latest state plus
        ``status`` (END_STATUSES), ``reason`` and ``ended_at`` (UTC, ISO 8601). Without it
        a monitor cannot tell a run that stopped on purpose (early stopping, a signal, an
        alert) or aborted from one that died without a word (SIGKILL: "stale").
        ``max_steps`` fills a state file the run never wrote (it ended before a step)."""
        if status not in END_STATUSES:
            raise ValueError(f"end status {status!r} is not one of {', '.join(END_STATUSES)}")
        if self.out_dir is None:
            return
        path = self.out_dir / STATE_FILE
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            state = {"max_steps": max_steps, "last": None}
        except ValueError as exc:  # not JSON: written by something else (ours is atomic)
            raise MetricsFileError(
                f"{path}: not JSON ({exc}); the end status is not recorded"
            ) from None
        if not isinstance(state, dict):
            raise MetricsFileError(f"{path}: not a JSON object; the end status is not recorded")
        ended = datetime.now(UTC).isoformat(timespec="seconds")
        atomic_write_json(path, state | {"status": status, "reason": reason, "ended_at": ended})
        if self.recorder is not None:
            self.recorder.finish(status, reason, ended=ended)

    def checkpoint(self, step: int, path: Path) -> None:
        """The checkpoint of ``step`` was saved at ``path``: the run store records it."""
        if self.recorder is not None:
            self.recorder.checkpoint(step, path)

    def close(self) -> None:
        if self.recorder is not None:
            self.recorder.close()
        if self._lines is not None:
            self._lines.close()
            self._lines = None
        if self._tty:
            print(file=sys.stderr)
