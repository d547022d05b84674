"""Measurements of C-LLAMA-370M-SOVEREIGN's checkpoint and export gates, on a real checkpoint.

    gates promote GATE-ARCH-370M-002     # rebuilds the checkpoint (CHECKPOINT_370M) if missing
    python tools/make_370m_checkpoint.py --out runs/gates/arch-370m          # or by hand:
    gates check GATE-ARCH-370M-005 --artifact runs/gates/arch-370m/checkpoints/step-00000002

GATE-ARCH-370M-002 (FALSIFY-ARCH-370M-010) counts failed checks on a checkpoint the
training loop wrote after two optimizer steps: what `trainer inspect --json` says about it
(run as a subprocess, as a user would), and this module's own reading of the bytes -
safetensors headers parsed with struct + json, every file hashed with hashlib against
manifest.json, the 219 names / shapes / float32 of the contract's header table, the
parameter count, finite values, lm_head distinct from the embedding, AdamW moments and
step for every parameter, and weights that are not the init (the model rebuilt with the
seed state.json records must differ from every saved tensor, by no more than two small
optimizer steps can move it).

GATE-ARCH-370M-005 (FALSIFY-ARCH-370M-013) exports that checkpoint with `trainer export`
(subprocess), reads the export's header from its bytes and measures
tensor_bytes_mismatch = |export tensor bytes - 1,494,036,480| + bytes of the contract's
tensors missing from the export + bytes of those whose shape, dtype or raw bytes differ
from the checkpoint's model.safetensors (per-tensor sha256).

Expected numbers are the contract's (the table at the top of
contracts/llama-370m-sovereign-v1.yaml), written here, never read back from
trainer/model. The checks take an :class:`Expected`, so a unit test can run them on a
tiny model's checkpoint. torch and numpy are imported inside functions: every
measurement module is imported whenever any gate is looked up.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gates.measure import GateContext, Measurement, measures
from gates.provenance.recipes import Recipe
from tests.checkpoint_digests import bytes_as_listed

#: How the checkpoint of GATE-ARCH-370M-002/-004/-005 is rebuilt (gates.provenance.recipes): the
#: tool's run directory, of which the step-2 checkpoint is the artifact.
CHECKPOINT_370M = Recipe(
    command=("python", "tools/make_370m_checkpoint.py", "--out", "{out}"),
    select="checkpoints/step-00000002",
    name="arch-370m",
    seed=0,  # SEED and DATA_SEED of the tool
    bitwise_across_machines=False,
    why_not_bitwise=(
        "float32 training on CPU: the weights after two AdamW steps depend on the torch "
        "build and the CPU's kernels (AVX2 vs AVX-512); a machine of the same kind with the "
        "same packages rebuilds it bit for bit"
    ),
    env={"SHIPGATE_HOME": "{scratch}"},  # the run registry: not the user's
    timeout_s=1800,
)

VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, INNER = 50257, 1024, 24, 16, 4, 64, 2816
PARAMETERS = 373_509_120
TENSORS = 219
TENSOR_BYTES = 1_494_036_480  # PARAMETERS * 4 (float32)
STEPS = 2  # FALSIFY-ARCH-370M-010: "after two optimizer steps"
# Two AdamW steps move a weight by about lr * |m / sqrt(v)| <= ~1.5e-3 at the artifact's
# lr 3e-4; a rebuild with the wrong seed differs from the run's init by the init scale
# (N(0, 0.02): maxima ~0.1). A drift above this bound means the "init" compared against is
# not the run's, so "differs from the init" would prove nothing.
MAX_INIT_DRIFT = 0.01

MANIFEST = "manifest.json"
MODEL = "model.safetensors"
OPTIMIZER = "optimizer.safetensors"
STATE = "state.json"
EXPORT_CONFIG = "config.json"
MOMENTS = ("exp_avg", "exp_avg_sq")
STEP_DIR = re.compile(r"^step-(\d{8})$")
_ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1}
_MAX_HEADER = 100 * 1024 * 1024  # the safetensors format's own limit on the JSON header
_TIMEOUT_S = 3600


@dataclass(frozen=True)
class Expected:
    """What the checkpoint must hold: tensor name -> shape (float32), the model config
    fields the manifest must record, the step, and the largest drift from the init."""

    shapes: dict[str, tuple[int, ...]]
    architecture: dict[str, Any]
    steps: int = STEPS
    max_init_drift: float = MAX_INIT_DRIFT

    @property
    def parameters(self) -> int:
        return sum(math.prod(s) for s in self.shapes.values())

    @property
    def tensor_bytes(self) -> int:
        return 4 * self.parameters


def contract_370m() -> Expected:
    """The header table of contracts/llama-370m-sovereign-v1.yaml, in HF LlamaForCausalLM
    names: embed_tokens, 9 tensors per layer, the final norm and an untied lm_head."""
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (VOCAB, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes[p + "self_attn.q_proj.weight"] = (HEADS * HEAD_DIM, HIDDEN)
        shapes[p + "self_attn.k_proj.weight"] = (KV_HEADS * HEAD_DIM, HIDDEN)
        shapes[p + "self_attn.v_proj.weight"] = (KV_HEADS * HEAD_DIM, HIDDEN)
        shapes[p + "self_attn.o_proj.weight"] = (HIDDEN, HEADS * HEAD_DIM)
        shapes[p + "mlp.gate_proj.weight"] = (INNER, HIDDEN)
        shapes[p + "mlp.up_proj.weight"] = (INNER, HIDDEN)
        shapes[p + "mlp.down_proj.weight"] = (HIDDEN, INNER)
        shapes[p + "input_layernorm.weight"] = (HIDDEN,)
        shapes[p + "post_attention_layernorm.weight"] = (HIDDEN,)
    shapes["model.norm.weight"] = (HIDDEN,)
    shapes["lm_head.weight"] = (VOCAB, HIDDEN)
    architecture = {
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "intermediate_size": INNER,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
    }
    return Expected(shapes, architecture)


# ---------------------------------------------------------------- the artifact
def is_checkpoint_dir(path: Path) -> str | None:
    """None for a step-NNNNNNNN directory holding manifest.json; otherwise why not."""
    if not path.is_dir():
        return "not a directory"
    if not STEP_DIR.match(path.name):
        return f"{path.name!r} is not named step-NNNNNNNN"
    if not (path / MANIFEST).is_file():
        return f"no {MANIFEST} in it"
    return None


# ---------------------------------------------------------------- safetensors, by bytes
class HeaderError(ValueError):
    """A safetensors file whose header does not parse or does not describe its bytes."""


@dataclass(frozen=True)
class Tensor:
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute file offsets of the tensor's bytes
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


def read_header(path: Path) -> dict[str, Tensor]:
    """name -> Tensor from the 8-byte length + JSON header; HeaderError unless the offsets
    tile the data section exactly and every span is numel * itemsize bytes."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise HeaderError(f"{path}: {size} bytes, shorter than the 8-byte header length")
        (length,) = struct.unpack("<Q", raw)
        if length > min(_MAX_HEADER, size - 8):
            raise HeaderError(f"{path}: header length {length} exceeds the file ({size} bytes)")
        try:
            header = json.loads(fh.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise HeaderError(f"{path}: header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise HeaderError(f"{path}: header is not a JSON object")
    header.pop("__metadata__", None)
    data_start = 8 + length
    tensors: dict[str, Tensor] = {}
    for name, entry in header.items():
        try:
            dtype, shape, (a, b) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
        except (TypeError, KeyError, ValueError) as exc:
            raise HeaderError(f"{path}: entry {name!r} is malformed ({exc})") from None
        if dtype not in _ITEMSIZE or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise HeaderError(f"{path}: {name}: dtype {dtype!r}, shape {list(shape)}")
        if not all(isinstance(x, int) and x >= 0 for x in (a, b)):
            raise HeaderError(f"{path}: {name}: data_offsets {[a, b]}")
        if b - a != math.prod(shape) * _ITEMSIZE[dtype]:
            raise HeaderError(f"{path}: {name}: {b - a} bytes for {dtype} {list(shape)}")
        tensors[name] = Tensor(dtype, shape, data_start + a, data_start + b)
    position = data_start
    for name, t in sorted(tensors.items(), key=lambda kv: kv[1].start):
        if t.start != position:
            raise HeaderError(f"{path}: {name} starts at {t.start}, expected {position}")
        position = t.end
    if position != size:
        raise HeaderError(f"{path}: tensors end at byte {position}, the file has {size}")
    return tensors


def _raw(path: Path, t: Tensor):
    """The tensor's bytes as a read-only uint8 memmap (nothing loaded up front)."""
    import numpy as np  # noqa: PLC0415

    if t.nbytes == 0:
        return np.zeros(0, dtype=np.uint8)
    return np.memmap(path, dtype=np.uint8, mode="r", offset=t.start, shape=(t.nbytes,))


def _floats(path: Path, t: Tensor):
    if t.dtype != "F32":
        raise HeaderError(f"{path}: dtype {t.dtype}, expected F32")
    return _raw(path, t).view("<f4").reshape(t.shape)


def _sha256(path: Path, t: Tensor) -> str:
    return hashlib.sha256(memoryview(_raw(path, t))).hexdigest()


# ---------------------------------------------------------------- the trainer CLI
def run_trainer(root: Path, *args: str) -> subprocess.CompletedProcess:
    """`trainer ARGS` in a fresh interpreter, as a user runs it (never raises on exit != 0)."""
    return subprocess.run(
        [sys.executable, "-m", "trainer.cli", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=_TIMEOUT_S,
        check=False,
    )


# ---------------------------------------------------------------- GATE-ARCH-370M-002
@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class _Checkpoint:
    """What the checks share: the directory, its manifest and headers, read lazily."""

    path: Path
    expected: Expected
    root: Path
    _cache: dict[str, Any] = field(default_factory=dict)

    def manifest(self) -> dict[str, Any]:
        if "manifest" not in self._cache:
            data = json.loads((self.path / MANIFEST).read_text(encoding="utf-8"))
            if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
                raise ValueError(f"{MANIFEST} is not an object with a files table")
            self._cache["manifest"] = data
        return self._cache["manifest"]

    def state(self) -> dict[str, Any]:
        if "state" not in self._cache:
            self._cache["state"] = json.loads((self.path / STATE).read_text(encoding="utf-8"))
        return self._cache["state"]

    def header(self, name: str) -> dict[str, Tensor]:
        if name not in self._cache:
            self._cache[name] = read_header(self.path / name)
        return self._cache[name]

    def inspect(self) -> tuple[int, dict[str, Any] | None, str]:
        if "inspect" not in self._cache:
            done = run_trainer(self.root, "inspect", str(self.path.resolve()), "--json")
            try:
                report = json.loads(done.stdout)
            except json.JSONDecodeError:
                report = None
            self._cache["inspect"] = (done.returncode, report, done.stderr.strip()[-500:])
        return self._cache["inspect"]


def _listed(names, limit: int = 4) -> str:
    names = sorted(names)
    return ", ".join(names[:limit]) + (
        f" (+{len(names) - limit} more)" if len(names) > limit else ""
    )


def _check_inspect_valid(c: _Checkpoint) -> str | None:
    rc, report, stderr = c.inspect()
    if report is None:
        return f"`trainer inspect --json` exit {rc}, no JSON on stdout; stderr: {stderr}"
    if rc != 0 or report.get("valid") is not True or report.get("problems"):
        return f"exit {rc}, valid {report.get('valid')}, problems {report.get('problems')}"
    return None


def _check_inspect_counts(c: _Checkpoint) -> str | None:
    _, report, _ = c.inspect()
    want = (len(c.expected.shapes), c.expected.parameters)
    got = (report or {}).get("tensor_count"), (report or {}).get("parameter_count")
    return None if got == want else f"reports {got[0]} tensors, {got[1]} parameters; want {want}"


def _check_inspect_checksums(c: _Checkpoint) -> str | None:
    _, report, _ = c.inspect()
    verdicts = {f["name"]: f for f in (report or {}).get("files", [])}
    bad = [f"{n}: {v['reason']}" for n, v in verdicts.items() if v.get("ok") is not True]
    unreported = set(c.manifest()["files"]) - set(verdicts)
    if bad or unreported or not verdicts:
        return f"bad {bad}, no verdict for {sorted(unreported)}"
    return None


def _well_formed(entry: Any) -> bool:
    """A size and a digest: the whole file's sha256, or one per range (format 3), or both."""
    if not isinstance(entry, dict) or not isinstance(entry.get("size"), int):
        return False
    digests = [entry.get("sha256")] if "sha256" in entry else []
    if "range_sha256" in entry:
        ranges = entry["range_sha256"]
        if not isinstance(ranges, list) or not isinstance(entry.get("range_bytes"), int):
            return False
        digests += ranges
    return bool(digests) and all(re.fullmatch(r"[0-9a-f]{64}", str(d)) for d in digests)


def _check_manifest_lists_every_file(c: _Checkpoint) -> str | None:
    listed = c.manifest()["files"]
    present = {p.name for p in c.path.iterdir()} - {MANIFEST}
    required = {MODEL, OPTIMIZER, STATE}
    malformed = [n for n, e in listed.items() if not _well_formed(e)]
    if present != set(listed) or not required <= set(listed) or malformed:
        return (
            f"unlisted {sorted(present - set(listed))}, listed but absent "
            f"{sorted(set(listed) - present)}, required missing {sorted(required - set(listed))}, "
            f"entries without sha256/size {malformed}"
        )
    return None


def _check_manifest_sizes(c: _Checkpoint) -> str | None:
    wrong = [
        f"{n}: {(c.path / n).stat().st_size} != {e['size']}"
        for n, e in c.manifest()["files"].items()
        if (c.path / n).stat().st_size != e["size"]
    ]
    return "; ".join(wrong) or None


def _check_manifest_sha256(c: _Checkpoint) -> str | None:
    wrong = [n for n, e in c.manifest()["files"].items() if not bytes_as_listed(c.path / n, e)]
    return f"sha256 differs from the manifest: {wrong}" if wrong else None


def _check_headers_parse(c: _Checkpoint) -> str | None:
    problems = []
    for file in sorted(c.path.glob("*.safetensors")):
        try:
            c.header(file.name)
        except (HeaderError, OSError) as exc:
            problems.append(str(exc))
    if not (c.path / MODEL).is_file():
        problems.append(f"no {MODEL}")
    return "; ".join(problems) or None


def _check_tensor_count(c: _Checkpoint) -> str | None:
    n, want = len(c.header(MODEL)), len(c.expected.shapes)
    return None if n == want else f"{n} tensors, the contract says {want}"


def _check_names_and_shapes(c: _Checkpoint) -> str | None:
    header, want = c.header(MODEL), c.expected.shapes
    missing, unexpected = set(want) - set(header), set(header) - set(want)
    wrong = [
        f"{n} {list(header[n].shape)}" for n in want if n in header and header[n].shape != want[n]
    ]
    if missing or unexpected or wrong:
        return (
            f"missing [{_listed(missing)}], unexpected [{_listed(unexpected)}], "
            f"wrong shape {wrong[:4]}"
        )
    return None


def _check_dtype_float32(c: _Checkpoint) -> str | None:
    other = {n: t.dtype for n, t in c.header(MODEL).items() if t.dtype != "F32"}
    return f"not F32: {dict(list(other.items())[:4])}" if other else None


def _check_parameter_count(c: _Checkpoint) -> str | None:
    n = sum(math.prod(t.shape) for t in c.header(MODEL).values())
    want = c.expected.parameters
    return None if n == want else f"{n:,} parameters, the contract says {want:,}"


def _check_manifest_claims(c: _Checkpoint) -> str | None:
    m = c.manifest()
    want = {
        "tensor_count": len(c.expected.shapes),
        "parameter_count": c.expected.parameters,
        "dtype": "float32",
    }
    wrong = {k: m.get(k) for k, v in want.items() if m.get(k) != v}
    return f"manifest says {wrong}, expected {want}" if wrong else None


def _check_architecture(c: _Checkpoint) -> str | None:
    saved = dict(c.manifest()["architecture"])
    if saved.get("head_dim") is None and saved.get("num_attention_heads"):
        saved["head_dim"] = saved["hidden_size"] // saved["num_attention_heads"]
    wrong = {k: saved.get(k) for k, v in c.expected.architecture.items() if saved.get(k) != v}
    return f"manifest architecture differs: {wrong}" if wrong else None


def _check_values_finite(c: _Checkpoint) -> str | None:
    import numpy as np  # noqa: PLC0415

    bad = [
        n for n, t in c.header(MODEL).items() if not np.isfinite(_floats(c.path / MODEL, t)).all()
    ]
    return f"non-finite values in {_listed(bad)}" if bad else None


def _check_lm_head_distinct(c: _Checkpoint) -> str | None:
    header = c.header(MODEL)
    lm_head, embed = header["lm_head.weight"], header["model.embed_tokens.weight"]
    if _sha256(c.path / MODEL, lm_head) == _sha256(c.path / MODEL, embed):
        return "lm_head.weight holds the same bytes as model.embed_tokens.weight"
    return None


def _check_step(c: _Checkpoint) -> str | None:
    match = STEP_DIR.match(c.path.name)
    steps = {
        "directory": int(match.group(1)) if match else None,
        "manifest": c.manifest().get("step"),
        "state.json": c.state().get("step"),
    }
    wrong = {k: v for k, v in steps.items() if v != c.expected.steps}
    return f"steps {wrong}, expected {c.expected.steps} everywhere" if wrong else None


def _check_optimizer_state(c: _Checkpoint) -> str | None:
    """exp_avg and exp_avg_sq (parameter shape, float32, finite, v >= 0, not all zero) and
    step == the checkpoint's step, for every parameter; nothing else."""
    import numpy as np  # noqa: PLC0415

    header, path = c.header(OPTIMIZER), c.path / OPTIMIZER
    want = {f"{n}.{k}" for n in c.expected.shapes for k in (*MOMENTS, "step")}
    problems = []
    if set(header) != want:
        problems.append(
            f"missing [{_listed(want - set(header))}], unexpected [{_listed(set(header) - want)}]"
        )
    for name, shape in c.expected.shapes.items():
        for key in MOMENTS:
            t = header.get(f"{name}.{key}")
            if t is None:
                continue
            if t.dtype != "F32" or t.shape != shape:
                problems.append(f"{name}.{key}: {t.dtype} {list(t.shape)}")
                continue
            values = _floats(path, t)
            if not np.isfinite(values).all():
                problems.append(f"{name}.{key}: non-finite values")
            elif key == "exp_avg_sq" and (values.min() < 0 or not values.any()):
                problems.append(f"{name}.{key}: negative or all zero")
        t = header.get(f"{name}.step")
        if t is not None:
            step = _raw(path, t).view("<f4" if t.dtype == "F32" else "<i8")
            if t.shape != () or step.size != 1 or float(step[0]) != c.expected.steps:
                problems.append(f"{name}.step: {t.dtype} {list(t.shape)} = {step.tolist()}")
    return _listed(problems, 3) if problems else None


def _rebuilt_init(c: _Checkpoint):
    """The run's initial weights: the model of the manifest's config built with the seed
    state.json records, as the loop builds it (trainer.train.loop._start)."""
    if "init" not in c._cache:
        from trainer.model.config import LlamaConfig  # noqa: PLC0415
        from trainer.model.llama import build_model  # noqa: PLC0415

        seed = c.state().get("seed")
        if not isinstance(seed, int):
            raise ValueError(f"state.json records seed {seed!r}; the init cannot be rebuilt")
        cfg = LlamaConfig(**c.manifest()["architecture"])
        c._cache["init"] = build_model(cfg, device="cpu", seed=seed).state_dict()
    return c._cache["init"]


def _init_comparison(c: _Checkpoint) -> tuple[list[str], float]:
    """(tensors bitwise equal to the rebuilt init, max |saved - init| over all tensors)."""
    import numpy as np  # noqa: PLC0415

    if "init_cmp" not in c._cache:
        init, header = _rebuilt_init(c), c.header(MODEL)
        equal, drift = [], 0.0
        for name, t in header.items():
            saved, fresh = _floats(c.path / MODEL, t), init[name].detach().numpy()
            if np.array_equal(saved, fresh):
                equal.append(name)
            drift = max(drift, float(np.abs(saved - fresh).max(initial=0.0)))
        c._cache["init_cmp"] = (equal, drift)
        c._cache.pop("init")  # 1.5 GB for the 370M model; not needed again
    return c._cache["init_cmp"]


def _check_not_init_weights(c: _Checkpoint) -> str | None:
    equal, _ = _init_comparison(c)
    return f"{len(equal)} tensors equal the fresh init: {_listed(equal)}" if equal else None


def _check_init_is_the_runs(c: _Checkpoint) -> str | None:
    _, drift = _init_comparison(c)
    if drift > c.expected.max_init_drift:
        return (
            f"max |saved - rebuilt init| = {drift:.3g} > {c.expected.max_init_drift}: the "
            f"rebuild is not this run's init, or {c.expected.steps} steps moved the weights "
            "further than they can"
        )
    return None


CHECKS: dict[str, Callable[[_Checkpoint], str | None]] = {
    "inspect_cli_valid": _check_inspect_valid,
    "inspect_cli_counts": _check_inspect_counts,
    "inspect_cli_checksums": _check_inspect_checksums,
    "manifest_lists_every_file": _check_manifest_lists_every_file,
    "manifest_sizes_match": _check_manifest_sizes,
    "manifest_sha256_match": _check_manifest_sha256,
    "manifest_claims": _check_manifest_claims,
    "safetensors_headers_parse": _check_headers_parse,
    "model_tensor_count": _check_tensor_count,
    "model_names_and_shapes": _check_names_and_shapes,
    "model_dtype_float32": _check_dtype_float32,
    "model_parameter_count": _check_parameter_count,
    "model_architecture": _check_architecture,
    "model_values_finite": _check_values_finite,
    "lm_head_differs_from_embedding": _check_lm_head_distinct,
    "two_optimizer_steps": _check_step,
    "optimizer_state_complete": _check_optimizer_state,
    "not_init_weights": _check_not_init_weights,
    "init_rebuild_is_the_runs": _check_init_is_the_runs,
}


def checkpoint_checks(
    root: Path, path: Path, expected: Expected
) -> tuple[list[Check], dict[str, Any]]:
    """Every check of CHECKS on checkpoint ``path`` (one that cannot run has failed), and
    the facts worth recording beside them."""
    ckpt = _Checkpoint(Path(path), expected, Path(root))
    results = []
    for name, check in CHECKS.items():
        try:
            problem = check(ckpt)
        except Exception as exc:  # a check that cannot run is a failure, with the reason
            problem = f"could not run: {type(exc).__name__}: {exc}"
        results.append(Check(name, problem is None, problem or "ok"))
    equal, drift = ckpt._cache.get("init_cmp", (None, None))
    facts = {
        "max_abs_drift_from_init": drift,
        "tensors_equal_to_init": None if equal is None else len(equal),
    }
    return results, facts


@measures(
    "GATE-ARCH-370M-002",
    artifact="checkpoint directory",
    check=is_checkpoint_dir,
    recipe=CHECKPOINT_370M,
)
def checkpoint_passes_checks(ctx: GateContext) -> Measurement:
    expected = contract_370m()
    checks, facts, failed = {}, {}, []
    for path in ctx.artifacts:
        results, facts[path.name] = checkpoint_checks(ctx.root, path, expected)
        for c in results:
            checks[f"{path.name}: {c.name}" if len(ctx.artifacts) > 1 else c.name] = c
            if not c.ok:
                failed.append(f"{path.name} {c.name}: {c.detail}")
    return Measurement(
        values={
            "checks_failed": (len(failed), "checks"),
            "checks_run": (len(checks), "checks"),
        },
        workload="trainer inspect --json (subprocess) and independent checks (headers read "
        "with struct + json, files hashed with hashlib against manifest.json, the contract's "
        f"{len(expected.shapes)}-tensor table, {expected.parameters:,} parameters, float32, "
        "finite values, lm_head != embedding, AdamW exp_avg/exp_avg_sq/step for every "
        "parameter, weights != the init rebuilt from state.json's seed) on a checkpoint "
        f"the training loop wrote after {expected.steps} optimizer steps of the 370M model "
        "(tools/make_370m_checkpoint.py)",
        inputs=[ctx.root / "tools" / "make_370m_checkpoint.py"],
        parameters={
            "checks": {n: "pass" if c.ok else f"FAIL: {c.detail}" for n, c in checks.items()},
            "init_comparison": facts,
            "max_init_drift_allowed": expected.max_init_drift,
        },
        notes="; ".join(failed),
    )


# ---------------------------------------------------------------- GATE-ARCH-370M-005
def export_mismatch(root: Path, checkpoint: Path, expected: Expected) -> dict[str, Any]:
    """Export ``checkpoint`` with `trainer export` into a temporary directory and compare
    the export's tensors with the contract's table and the checkpoint's model file."""
    checkpoint = Path(checkpoint)
    ckpt_header = read_header(checkpoint / MODEL)
    with tempfile.TemporaryDirectory(prefix="gate-arch-370m-005-") as tmp:
        out = Path(tmp) / "export"
        done = run_trainer(root, "export", str(checkpoint.resolve()), "--out", str(out))
        weights = out / MODEL
        header: dict[str, Tensor] = {}
        problems = []
        if done.returncode != 0:
            problems.append(f"trainer export exit {done.returncode}: {done.stderr.strip()[-500:]}")
        if weights.is_file():
            try:
                header = read_header(weights)
            except HeaderError as exc:
                problems.append(str(exc))  # an unreadable export counts as holding nothing
        else:
            problems.append(f"no {MODEL} in the export")
        export_bytes = sum(t.nbytes for t in header.values())
        missing, differing = [], []
        for name in expected.shapes:
            t = header.get(name)
            want_shape = expected.shapes[name]
            if t is None:
                missing.append(name)
            elif (
                t.dtype != "F32"
                or t.shape != want_shape
                or name not in ckpt_header
                or _sha256(weights, t) != _sha256(checkpoint / MODEL, ckpt_header[name])
            ):
                differing.append(name)
        config = out / EXPORT_CONFIG
        tie = json.loads(config.read_text())["tie_word_embeddings"] if config.is_file() else None
        files = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
        file_bytes = weights.stat().st_size if weights.is_file() else 0

    def nbytes(names: list[str]) -> int:
        return sum(4 * math.prod(expected.shapes[n]) for n in names)

    return {
        "tensor_bytes_mismatch": abs(export_bytes - expected.tensor_bytes)
        + nbytes(missing)
        + nbytes(differing),
        "export_tensor_bytes": export_bytes,
        "expected_tensor_bytes": expected.tensor_bytes,
        "checkpoint_tensor_bytes": sum(t.nbytes for t in ckpt_header.values()),
        "export_tensors": len(header),
        "export_file_bytes": file_bytes,
        "config_json_present": int("config.json" in files),
        "tie_word_embeddings": tie,
        "missing": missing,
        "differing": differing,
        "unexpected": sorted(set(header) - set(expected.shapes)),
        "files": files,
        "problems": problems,
    }


@measures(
    "GATE-ARCH-370M-005",
    artifact="checkpoint directory",
    check=is_checkpoint_dir,
    recipe=CHECKPOINT_370M,
)
def export_holds_every_byte(ctx: GateContext) -> Measurement:
    expected = contract_370m()
    results = [export_mismatch(ctx.root, path, expected) for path in ctx.artifacts]
    notes = [
        f"{path.name}: {'; '.join(r['problems'])} missing [{_listed(r['missing'])}] "
        f"differing [{_listed(r['differing'])}] unexpected [{_listed(r['unexpected'])}]"
        for path, r in zip(ctx.artifacts, results, strict=True)
        if r["tensor_bytes_mismatch"] or r["problems"]
    ]
    first = results[0]
    return Measurement(
        values={
            "tensor_bytes_mismatch": (sum(r["tensor_bytes_mismatch"] for r in results), "bytes"),
            "export_tensor_bytes": (first["export_tensor_bytes"], "bytes"),
            "checkpoint_tensor_bytes": (first["checkpoint_tensor_bytes"], "bytes"),
            "export_tensors": (first["export_tensors"], "tensors"),
            "export_file_bytes": (first["export_file_bytes"], "bytes"),
            "config_json_present": (first["config_json_present"], "files"),
        },
        workload="trainer export CKPT --out TMP (subprocess) of a checkpoint the training "
        f"loop wrote after {expected.steps} optimizer steps of the 370M model "
        "(tools/make_370m_checkpoint.py); the export's safetensors header read with struct "
        "+ json; tensor_bytes_mismatch = |export tensor bytes - "
        f"{expected.tensor_bytes:,}| + bytes of the contract's {len(expected.shapes)} "
        "tensors missing from the export + bytes of those whose dtype, shape or per-tensor "
        "sha256 differ from the checkpoint's model.safetensors",
        inputs=[ctx.root / "tools" / "make_370m_checkpoint.py"],
        parameters={
            "expected_tensor_bytes": expected.tensor_bytes,
            "export_files": first["files"],
            "tie_word_embeddings": first["tie_word_embeddings"],
            "missing": first["missing"],
            "differing": first["differing"],
            "unexpected": first["unexpected"],
        },
        notes=" | ".join(notes),
    )


# --- GATE-ARCH-370M-004 --------------------------------------------------------------

LOGIT_PROMPTS, LOGIT_PROMPT_LEN = 8, 64  # FALSIFY-ARCH-370M-012


@measures(
    "GATE-ARCH-370M-004",
    artifact="checkpoint directory",
    check=is_checkpoint_dir,
    recipe=CHECKPOINT_370M,
)
def export_logits_vs_transformers(ctx: GateContext) -> Measurement:
    """`trainer export` of the checkpoint, loaded by transformers.LlamaForCausalLM from
    its own config.json, against our model loaded from the checkpoint: max |logit diff|
    over 8 seeded prompts of 64 ids, float32 on CPU, deterministic, eager attention."""
    import torch  # noqa: PLC0415 - torch and transformers on demand only
    import transformers  # noqa: PLC0415

    from trainer.model import hf  # noqa: PLC0415
    from trainer.model.config import LlamaConfig  # noqa: PLC0415
    from trainer.model.llama import build_model  # noqa: PLC0415

    (ckpt,) = ctx.artifacts
    transformers.utils.logging.set_verbosity_error()
    manifest = json.loads((ckpt / MANIFEST).read_text(encoding="utf-8"))
    cfg = LlamaConfig(**manifest["architecture"])
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        with tempfile.TemporaryDirectory(prefix="gate-arch-004-") as tmp:
            out = Path(tmp) / "export"
            done = run_trainer(ctx.root, "export", str(ckpt), "--out", str(out))
            if done.returncode != 0:
                raise RuntimeError(f"trainer export failed: {done.stderr[-2000:]}")
            theirs = transformers.LlamaForCausalLM.from_pretrained(
                out, attn_implementation="eager", dtype=torch.float32
            ).eval()
            ours = build_model(cfg, device="meta")
            hf.load_weights(ours, ckpt / MODEL)
            ours.eval()
            prompts = torch.randint(
                0, cfg.vocab_size, (LOGIT_PROMPTS, LOGIT_PROMPT_LEN),
                generator=torch.Generator().manual_seed(0),
            )  # fmt: skip
            per_prompt = []
            with torch.no_grad():
                for prompt in prompts:
                    ids = prompt.unsqueeze(0)
                    per_prompt.append((ours(ids) - theirs(ids).logits).abs().max().item())
    finally:
        torch.use_deterministic_algorithms(deterministic)
    return Measurement(
        values={"max_abs_logit_diff": (max(per_prompt), "logit (float32, absolute)")},
        workload=(
            f"{ckpt.name}: `trainer export` loaded by transformers "
            f"{transformers.__version__} LlamaForCausalLM.from_pretrained (eager attention, "
            "float32) against our Llama loaded from the checkpoint's model.safetensors; "
            f"{LOGIT_PROMPTS} prompts of {LOGIT_PROMPT_LEN} ids drawn with seed 0 from the "
            "vocabulary; CPU, deterministic algorithms"
        ),
        parameters={"per_prompt_max_abs_diff": per_prompt},
    )
