"""Export for other tools: model.safetensors + config.json (+ tokenizer files), never empty.

    report = export_model(model, out_dir, tokenizer_dir=None)   # the live model
    report = export_checkpoint(ckpt_dir, out_dir)               # a verified checkpoint

The directory loads with transformers.LlamaForCausalLM.from_pretrained(out_dir) (and the
tokenizer, when exported, with tokenizers.Tokenizer.from_file). The exporter refuses,
creating nothing at ``out_dir``, unless the tensors it is about to write are exactly the
configured model's (every name, shape, non-empty, every value finite: a NaN or an infinity
is refused naming the tensor) and bitwise the live weights, and ``out_dir`` is a UTF-8 name
that is absent or an empty directory, under a writable directory (an OSError of the write
is an ExportError naming the path, the staging directory removed); after the
write it reads the file back and checks the sha256 of every tensor against the live ones
before publishing the directory by rename (INV-TRAIN-LOOP-015, INV-ARCH-370M-004). The
source system exported a 200-byte file holding nothing after 25 hours of training.

Where it may write (issue 31): never at or inside a checkpoint directory (a
``step-NNNNNNNN``, or any directory holding a checkpoint's manifest and state), nor inside
a directory of checkpoints (a run's ``checkpoints/``, or one holding ``latest`` beside
``step-NNNNNNNN`` directories): a checkpoint holds its own files only, and one file more
makes it invalid to inspect and resume (out_dir_in_checkpoints_problem, checked before
anything is written). A full disk or a file-size limit (ENOSPC, EFBIG), safetensors'
write included, is an ExportError naming the file, the staging directory removed: no
partial ``out_dir`` is ever published. export_checkpoint takes the writer lock
(trainer/runfiles/lock.py) of the run directory ``out_dir`` is in, if any (a second
writer there is refused, naming its pid); it reads the checkpoint without one, as every
reader does.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from gates.io.files import fsync_dir, fsync_file
from trainer.checkpoint.durable import write_json
from trainer.checkpoint.layout import (
    CHECKPOINT_STATE_FILE,
    CHECKPOINTS_DIR,
    LATEST_POINTER,
    MANIFEST_FILE,
    MODEL_FILE,
    CheckpointError,
    checkpoint_dirs,
    step_of,
)
from trainer.checkpoint.verify import verify_checkpoint
from trainer.model import hf, llama
from trainer.model.config import LlamaConfig
from trainer.model.params import parameter_shapes
from trainer.model.vocab import VocabMismatchError, check_vocab_agreement, tokenizer_vocab_size
from trainer.runfiles.lock import RunDirLockedError, owning_run_dir, writer_lock
from trainer.userfiles import UserFileError, display, output_dir_problem, read_user_text

CONFIG_FILE = "config.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
_LISTED = 5


class ExportError(ValueError):
    """The export would not be the model asked for; nothing was written."""


#: Everything export_checkpoint raises for a checkpoint it will not export (each names the
#: file and the reason), or a run directory another process writes; nothing is written then.
EXPORT_ERRORS = (
    ExportError,
    CheckpointError,
    hf.WeightsFileError,
    VocabMismatchError,
    RunDirLockedError,
)


@dataclass(frozen=True)
class ExportReport:
    out_dir: Path
    tensor_count: int
    tensor_bytes: int  # sum of numel * itemsize over the tensors written
    files: tuple[str, ...]


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    """A tensor's bytes (row-major) as a flat uint8 tensor, without a copy where it is
    already contiguous on the CPU."""
    return t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)


def tensor_sha256(t: torch.Tensor) -> str:
    """sha256 of a tensor's bytes (row-major): bitwise identity, NaN and -0.0 included."""
    return hashlib.sha256(memoryview(_bytes_of(t).numpy())).hexdigest()


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same dtype, shape and bytes (NaN payloads and -0.0 included): what comparing
    ``tensor_sha256`` of both says, without hashing either."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bytes_of(a), _bytes_of(b))


def _weights_to_export(model: llama.Llama) -> dict[str, torch.Tensor]:
    """The tensors written: the model's state dict as hf.py lays it out."""
    return hf._tensors_for_file(model)


def _export_problems(tensors: dict[str, torch.Tensor], model: llama.Llama) -> list[str]:
    if not tensors:
        return ["the state dict to export is empty"]
    expected = parameter_shapes(model.config)
    problems = hf._layout_problems({n: tuple(t.shape) for n, t in tensors.items()}, expected)
    empty = [n for n, t in tensors.items() if t.numel() == 0]
    if empty:
        problems.append(f"empty tensors {', '.join(empty[:_LISTED])}")
    problems.extend(_non_finite_problems(tensors))
    live = model.state_dict()
    differ = [n for n, t in tensors.items() if n in live and not bitwise_equal(t, live[n])]
    if differ:
        problems.append(f"not the live weights: {', '.join(differ[:_LISTED])}")
    return problems


def _non_finite_problems(tensors: dict[str, torch.Tensor]) -> list[str]:
    """Tensors holding a NaN or an infinity: weights no consumer can use (INV-TRAIN-LOOP-015)."""
    bad = []
    for name, t in tensors.items():
        if t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all()):
            nan = int(torch.isnan(t).sum())
            inf = int(torch.isinf(t).sum())
            bad.append(f"{name} ({nan} NaN, {inf} infinite of {t.numel()} values)")
    if not bad:
        return []
    more = f" and {len(bad) - _LISTED} more tensors" if len(bad) > _LISTED else ""
    return [f"non-finite weights in {', '.join(bad[:_LISTED])}{more}"]


def _written_problems(path: Path, model: llama.Llama) -> list[str]:
    """Read the written file back: every live tensor present and bitwise equal."""
    live = model.state_dict()
    problems = []
    with safe_open(str(path), framework="pt", device="cpu") as fh:
        names = set(fh.keys())
        if names != set(live):
            problems.append(f"{len(names)} tensors written, the model has {len(live)}")
        for name in sorted(names & set(live)):
            if not bitwise_equal(fh.get_tensor(name), live[name]):
                problems.append(f"{name} does not hash to the live weights")
    return problems


def _tokenizer_files(tokenizer_dir: Path, vocab_size: int) -> list[Path]:
    """The tokenizer files to copy (``tokenizer_dir`` may also name its tokenizer.json)."""
    tokenizer_dir = Path(tokenizer_dir)
    if tokenizer_dir.name == "tokenizer.json" and tokenizer_dir.is_file():
        tokenizer_dir = tokenizer_dir.parent
    if not (tokenizer_dir / "tokenizer.json").is_file():
        raise ExportError(f"{tokenizer_dir}: no tokenizer.json to export")
    check_vocab_agreement(
        vocab_size, tokenizer_vocab_size(tokenizer_dir), tokenizer_path=tokenizer_dir
    )
    return [tokenizer_dir / n for n in TOKENIZER_FILES if (tokenizer_dir / n).is_file()]


def _is_checkpoint_dir(directory: Path) -> bool:
    """A checkpoint's directory: named step-NNNNNNNN, or holding a checkpoint's manifest
    and state (a checkpoint copied under another name)."""
    return step_of(directory) is not None or all(
        os.path.lexists(directory / name) for name in (MANIFEST_FILE, CHECKPOINT_STATE_FILE)
    )


def _is_checkpoints_dir(directory: Path) -> bool:
    """A directory of checkpoints: a run directory's ``checkpoints/`` (where trainer apply
    saves them), or any directory holding the ``latest`` pointer beside step-NNNNNNNN
    directories (where save_checkpoint wrote them)."""
    parent = directory.parent
    if directory.name == CHECKPOINTS_DIR and owning_run_dir(parent) == parent:
        return True
    return os.path.isfile(directory / LATEST_POINTER) and bool(checkpoint_dirs(directory))


def out_dir_in_checkpoints_problem(out_dir: Path, checkpoint: Path | None = None) -> str | None:
    """Why ``out_dir`` may not hold an export (None: it may): it is, or is inside, a
    checkpoint directory (``checkpoint``, the one exported, above all) or a directory of
    checkpoints. An export's files in a checkpoint make it invalid (a checkpoint holds its
    own files only), and a directory of checkpoints holds those and `latest` only."""
    target = Path(os.path.realpath(out_dir))
    exported = Path(os.path.realpath(checkpoint)) if checkpoint is not None else None
    in_checkpoint = (
        "a checkpoint holds its own files only, and one more makes it invalid to inspect and resume"
    )
    for directory in (target, *target.parents):
        if directory == exported:
            what, why = f"the checkpoint it exports, {display(checkpoint)}", in_checkpoint
        elif _is_checkpoint_dir(directory):
            what, why = f"the checkpoint directory {display(directory)}", in_checkpoint
        elif _is_checkpoints_dir(directory):
            what = f"the checkpoints directory {display(directory)}"
            why = "it holds checkpoints and their `latest` pointer only"
        else:
            continue
        where = "is" if directory == target else "is inside"
        return (
            f"{display(out_dir)}: {where} {what}; {why}: choose an --out outside the "
            "checkpoints (a run keeps its export in RUN_DIR/export)"
        )
    return None


def export_model(
    model: llama.Llama, out_dir: Path, *, tokenizer_dir: Path | None = None
) -> ExportReport:
    """Write ``out_dir`` (which must not exist or be empty, nor be in a checkpoint) from
    the live ``model``."""
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise ExportError(f"{out_dir}: exists and is not an empty directory; nothing written")
    unusable = output_dir_problem(out_dir, published=True) or out_dir_in_checkpoints_problem(
        out_dir
    )
    if unusable:
        raise ExportError(f"{unusable}; nothing written")
    tensors = _weights_to_export(model)
    problems = _export_problems(tensors, model)
    if problems:
        raise ExportError(f"{out_dir}: refusing to export: " + "; ".join(problems))
    tokenizer = _tokenizer_files(tokenizer_dir, model.config.vocab_size) if tokenizer_dir else []
    dtype = str(next(iter(tensors.values())).dtype).removeprefix("torch.")
    staging = out_dir.with_name(f".{out_dir.name}.export-tmp")
    try:
        _write_staged(
            staging, out_dir, tensors=tensors, model=model, dtype=dtype, tokenizer=tokenizer
        )
    except _UnwrittenError as exc:
        raise ExportError(
            f"{display(out_dir / exc.name)}: cannot be written: {exc.why}; nothing written "
            f"(the staging directory {display(staging)} was removed)"
        ) from None
    except OSError as exc:
        where = (
            f" {display(_published_name(exc.filename, staging, out_dir))}" if exc.filename else ""
        )
        raise ExportError(
            f"{display(out_dir)}: cannot write{where}: {exc.strerror or exc}; nothing written"
        ) from None
    return ExportReport(
        out_dir,
        len(tensors),
        sum(t.numel() * t.element_size() for t in tensors.values()),
        tuple(sorted(p.name for p in out_dir.iterdir())),
    )


class _UnwrittenError(Exception):
    """A file of the export that could not be written (``name``, inside ``out_dir``) and
    why, where the writer's error names no file (safetensors')."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"{name}: {why}")
        self.name, self.why = name, why


def _published_name(filename: str | bytes | os.PathLike, staging: Path, out_dir: Path) -> Path:
    """``filename`` as it would have been published: a file of ``staging`` under
    ``out_dir``'s name (the user never sees the staging directory's)."""
    path = Path(os.fsdecode(filename))
    try:
        return out_dir / path.relative_to(staging)
    except ValueError:
        return path


def _write_staged(
    staging: Path,
    out_dir: Path,
    *,
    tensors: dict[str, torch.Tensor],
    model: llama.Llama,
    dtype: str,
    tokenizer: list[Path],
) -> None:
    """Write the files into ``staging``, check them, publish it as ``out_dir`` by rename;
    on any failure ``staging`` is removed and ``out_dir`` left as it was."""
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    try:
        try:
            save_file(tensors, str(staging / MODEL_FILE), metadata={"format": "pt"})
        except SafetensorError as exc:  # ENOSPC, EFBIG: safetensors says so in its own error
            raise _UnwrittenError(MODEL_FILE, str(exc)) from None
        fsync_file(staging / MODEL_FILE)
        written = _written_problems(staging / MODEL_FILE, model)
        if written:
            raise ExportError(f"{out_dir}: the written file is wrong: " + "; ".join(written))
        write_json(staging / CONFIG_FILE, hf.hf_config_dict(model.config, dtype=dtype))
        for file in tokenizer:
            shutil.copyfile(file, staging / file.name)
            fsync_file(staging / file.name)
        fsync_dir(staging)
        if out_dir.exists():
            out_dir.rmdir()  # empty, checked above
        staging.rename(out_dir)
        fsync_dir(out_dir.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def export_checkpoint(
    checkpoint: Path, out_dir: Path, *, tokenizer_dir: Path | None = None
) -> ExportReport:
    """Verify ``checkpoint``, load its weights, export them (tokenizer: the argument, else
    the one state.json names, else none). Refused before anything is written when
    ``out_dir`` is in a checkpoint (out_dir_in_checkpoints_problem); the writer lock of
    the run directory ``out_dir`` is in is held while it writes (RunDirLockedError when
    another process holds it)."""
    checkpoint, out_dir = Path(checkpoint), Path(out_dir)
    misplaced = out_dir_in_checkpoints_problem(out_dir, checkpoint)
    if misplaced:
        raise ExportError(f"{misplaced}; nothing written")
    run_dir = owning_run_dir(out_dir)
    lock = writer_lock(run_dir, "trainer export") if run_dir else contextlib.nullcontext()
    with lock:  # reading the checkpoint takes no lock; writing into a run directory does
        return _export_checkpoint(checkpoint, out_dir, tokenizer_dir)


def _export_checkpoint(checkpoint: Path, out_dir: Path, tokenizer_dir: Path | None) -> ExportReport:
    report = verify_checkpoint(checkpoint)
    cfg = LlamaConfig(**report.manifest["architecture"])
    model = llama.build_model(cfg, device="meta")
    hf.load_weights(model, checkpoint / MODEL_FILE)
    if tokenizer_dir is None:
        state_path = checkpoint / CHECKPOINT_STATE_FILE
        try:
            named = json.loads(read_user_text(state_path))
        except (UserFileError, json.JSONDecodeError) as exc:
            raise ExportError(f"{state_path}: not readable JSON ({exc})") from None
        tokenizer_dir = named.get("tokenizer_dir") if isinstance(named, dict) else None
        if tokenizer_dir is not None and not Path(tokenizer_dir).exists():
            raise ExportError(
                f"{checkpoint / CHECKPOINT_STATE_FILE}: names tokenizer directory {tokenizer_dir}, "
                "which does not exist; pass --tokenizer"
            )
    return export_model(model, out_dir, tokenizer_dir=tokenizer_dir)
