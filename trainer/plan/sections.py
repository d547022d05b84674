"""The checks of `trainer plan`, one function per section, each returning a Section.

Run order differs from print order: data is read before the step algebra, which needs
the sequence count N from its manifest. Every expected failure (a missing path, a corrupt
manifest, a tokenizer that does not match) becomes a finding naming the YAML field and
line; nothing here prints.

    report = make_plan(PlanOptions(config=Path("configs/quickstart-cpu.yaml")))
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gates.io.files import sha256_file
from trainer.config.algebra import AlgebraReport, RuleResult, evaluate
from trainer.config.device import device_findings
from trainer.config.load import load_config
from trainer.config.messages import ConfigError, ConfigFinding
from trainer.config.sections import RunConfig
from trainer.config.sequences import sequences_in
from trainer.data.manifest import Manifest, load_manifest
from trainer.data.shards import ShardError
from trainer.model.params import param_count, tensor_count
from trainer.model.vocab import VocabMismatchError, check_vocab_agreement, tokenizer_vocab_size
from trainer.plan import memory, timing
from trainer.plan.report import SECTION_KEYS, PlanReport, Section
from trainer.tokenizer.model import TokenizerFileError

CONTRACT = "C-TRAINCFG-001"
#: Without --time-budget, an estimate above this many hours is warned about.
DEFAULT_TIME_WARN_HOURS = 24.0
DEVICES = ("auto", "cpu", "cuda")
#: The timing model may use at most this share of the host's available memory.
MEASUREMENT_MEMORY_FRACTION = 0.5


@dataclass(frozen=True)
class PlanOptions:
    config: Path
    sequences: int | None = None  # --sequences: what-if N instead of the manifest's count
    device: str = "auto"  # auto | cpu | cuda: the device the run is planned for
    device_memory: int | None = None  # --device-memory, bytes
    timing: bool = True
    time_budget_hours: float | None = None
    world_size: int = 1  # --world-size: data-parallel processes (the step algebra's global batch)


@dataclass(frozen=True)
class CudaInfo:
    available: bool
    total_memory: int = 0
    name: str = ""


def cuda_info() -> CudaInfo:
    import torch  # noqa: PLC0415 - torch only for the device facts

    if not torch.cuda.is_available():
        return CudaInfo(False)
    props = torch.cuda.get_device_properties(0)
    return CudaInfo(True, props.total_memory, props.name)


def _line(cfg: RunConfig, field: str) -> int:
    """The field's YAML line, or its nearest ancestor's (where a defaulted key goes)."""
    return cfg.position_of(field)[0]


# ---------------------------------------------------------------- 1. config
def config_section(path: Path, device: str) -> tuple[Section, RunConfig | None]:
    """The config loaded, and its values a run on ``device`` (cpu | cuda) cannot honour."""
    section = Section("config")
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        _add_findings(section, exc.findings)
        return section, None
    _add_findings(section, device_findings(cfg, device))
    t, d = cfg.training, cfg.data
    section.values = {
        "path": str(cfg.path),
        "name": cfg.name,
        "model_preset": cfg.model_preset,
        "shards": str(d.shards),
        "tokenizer": str(d.tokenizer),
        "micro_batch": d.micro_batch,
        "seq_len": d.seq_len,
        "gradient_accumulation": t.gradient_accumulation,
        "epochs": t.epochs,
        "max_steps": t.max_steps,
        "warmup_steps": t.warmup_steps,
        "mixed_precision": t.mixed_precision,
    }
    model = f"preset {cfg.model_preset}" if cfg.model_preset else "explicit architecture"
    section.details = [
        f"{cfg.path}: loaded ({model}{', name ' + cfg.name if cfg.name else ''})",
        f"micro_batch {d.micro_batch} x gradient_accumulation {t.gradient_accumulation} x "
        f"seq_len {d.seq_len}; max_steps {t.max_steps}, epochs {t.epochs}, warmup "
        f"{t.warmup_steps}, {t.mixed_precision}",
    ]
    return section, cfg


def _add_findings(section: Section, findings: list[ConfigFinding]) -> None:
    for f in findings:
        add = section.warning if f.severity == "warning" else section.error
        add(f.message, f.field or None, f.line, f.hint)


# ---------------------------------------------------------------- 2. architecture
def architecture_section(cfg: RunConfig) -> Section:
    m = cfg.model
    section = Section("architecture")
    for problem in m.problems():
        field = f"model.architecture.{problem.field}"
        section.error(problem.message, field, _line(cfg, field), problem.hint)
    head_dim = m.resolved_head_dim
    section.values = {
        "vocab_size": m.vocab_size,
        "hidden_size": m.hidden_size,
        "intermediate_size": m.intermediate_size,
        "num_hidden_layers": m.num_hidden_layers,
        "num_attention_heads": m.num_attention_heads,
        "num_key_value_heads": m.num_key_value_heads,
        "head_dim": head_dim,
        "max_position_embeddings": m.max_position_embeddings,
        "rope_theta": m.rope_theta,
        "rms_norm_eps": m.rms_norm_eps,
        "tie_word_embeddings": m.tie_word_embeddings,
    }
    if not section.findings:
        section.details = [
            f"{m.num_hidden_layers} layers, hidden {m.hidden_size} = {m.num_attention_heads} "
            f"heads x head_dim {head_dim} (even, for RoPE theta {m.rope_theta:g})",
            f"GQA: {m.num_attention_heads} query heads / {m.num_key_value_heads} KV heads = "
            f"groups of {m.kv_group_size}; SwiGLU intermediate {m.intermediate_size}; vocab "
            f"{m.vocab_size}; lm_head {'tied to' if m.tie_word_embeddings else 'separate from'} "
            "the embedding",
        ]
    return section


# ---------------------------------------------------------------- 3. parameters
def built_parameter_count(cfg: RunConfig) -> tuple[int, int]:
    """(parameters, state-dict tensors) of the module built on the meta device."""
    from trainer.model.llama import build_model  # noqa: PLC0415 - torch

    model = build_model(cfg.model, device="meta")
    return sum(p.numel() for p in model.parameters()), len(model.state_dict())


def parameters_section(cfg: RunConfig) -> Section:
    section = Section("parameters")
    p, tensors = param_count(cfg.model), tensor_count(cfg.model)
    built, built_tensors = built_parameter_count(cfg)
    sizes = memory.checkpoint_bytes(cfg.model)
    section.values = {
        "parameters": p,
        "tensors": tensors,
        "built_parameters": built,
        "built_tensors": built_tensors,
        "checkpoint_weights_bytes": sizes["weights"],
        "checkpoint_optimizer_bytes": sizes["optimizer"],
        "checkpoint_total_bytes": sizes["total"],
    }
    if (built, built_tensors) != (p, tensors):
        section.error(
            f"analytic count {p:,} parameters in {tensors} tensors != built module's {built:,} "
            f"in {built_tensors}",
            "model",
            _line(cfg, "model"),
            "a bug in trainer/model/params.py or llama.py: report it",
        )
    section.details = [
        f"{p:,} parameters in {tensors} tensors (analytic; the module built on the meta "
        f"device has {built:,} in {built_tensors})",
        f"checkpoint: weights {memory.format_bytes(sizes['weights'])} (4 P, float32 "
        f"safetensors) + AdamW state {memory.format_bytes(sizes['optimizer'])} (8 P) = "
        f"{memory.format_bytes(sizes['total'])}",
    ]
    return section


# ---------------------------------------------------------------- 4. memory
_DTYPES = {
    "fp32": "float32 throughout: weights, gradients, AdamW moments, activations, logits",
    "bf16": "autocast bf16: weights, gradients and AdamW moments float32; projections and "
    "attention bf16; residual stream, RMSNorm, logsumexp and log-softmax float32",
    "fp16": "autocast fp16 (+ loss scaling): weights, gradients and AdamW moments float32; "
    "projections and attention fp16; residual stream, RMSNorm, logsumexp and log-softmax "
    "float32",
}


def memory_section(cfg: RunConfig, device: str, cuda: CudaInfo, override: int | None) -> Section:
    section = Section("memory")
    # A CPU holds float32 whatever the config asks; the config section refuses the rest.
    precision = "fp32" if device == "cpu" else cfg.training.mixed_precision
    d = cfg.data
    estimate = memory.estimate_memory(cfg.model, d.micro_batch, d.seq_len, precision)
    try:
        available = memory.device_memory(
            device, override, (lambda: (cuda.total_memory, cuda.name)) if cuda.available else None
        )
    except ValueError as exc:
        section.error(str(exc), hint="--device-memory 24GiB (for example)")
        available = None
    total = estimate.total
    section.values = {
        "device": device,
        "precision": precision,
        "items": [item.as_dict() for item in estimate.items],
        "total_bytes": total,
        "device_bytes": available.bytes if available else None,
        "device_source": available.source if available else None,
        "fraction": total / available.bytes if available else None,
    }
    width = max(len(item.name) for item in estimate.items)
    section.details.append(f"{device}, {_DTYPES[precision]}")
    if precision != cfg.training.mixed_precision:
        section.details.append(f"(estimated for fp32, not {cfg.training.mixed_precision})")
    section.details += [
        f"{item.name:<{width}}  {memory.format_bytes(item.bytes):>11}  = {item.formula}"
        for item in estimate.items
    ]
    section.details.append(f"{'total':<{width}}  {memory.format_bytes(total):>11}")
    section.details.append(
        "activations: autograd's saved tensors counted per layer for trainer/model/llama.py "
        "(fused SDPA, no T x T matrix), checked against saved_tensors_hooks in tests"
    )
    if available is None:
        return section
    section.details.append(
        f"device memory {memory.format_bytes(available.bytes)} ({available.source}): "
        f"{100 * total / available.bytes:.1f} % used"
    )
    field = "data.micro_batch"
    if total > available.bytes:
        section.error(
            f"a step needs {memory.format_bytes(total)}, more than the "
            f"{memory.format_bytes(available.bytes)} of {available.source}",
            field,
            _line(cfg, field),
            "lower micro_batch (raise gradient_accumulation to keep the global batch) or "
            "seq_len, or plan for a device with more memory (--device-memory)",
        )
    elif total > memory.WARN_FRACTION * available.bytes:
        section.warning(
            f"a step needs {memory.format_bytes(total)}, "
            f"{100 * total / available.bytes:.0f} % of {memory.format_bytes(available.bytes)}: "
            "allocator overhead and workspaces are not in the estimate",
            field,
            _line(cfg, field),
            "lower micro_batch for headroom",
        )
    return section


# ---------------------------------------------------------------- 6. data
def data_section(cfg: RunConfig) -> tuple[Section, Manifest | None]:
    section = Section("data")
    field, shards = "data.shards", cfg.data.shards
    section.values = {"shards": str(shards), "verified": False}
    if not shards.exists():
        section.error(
            f"{shards} does not exist",
            field,
            _line(cfg, field),
            "encode the corpus first: trainer data encode --tokenizer TOK --out DIR, "
            "or fix the path (relative to the working directory)",
        )
        return section, None
    try:
        manifest = load_manifest(shards, verify=True)
    except ShardError as exc:
        section.error(
            str(exc),
            field,
            _line(cfg, field),
            "re-encode the directory (trainer data encode ... --force); shards are checked "
            "against manifest.json's sha256",
        )
        return section, None
    splits = manifest.data["splits"]
    n = sequences_in(manifest, cfg.data.seq_len)
    section.values.update(
        verified=True,
        manifest_sha256=manifest.sha256,
        vocab_size=manifest.vocab_size,
        train_tokens=splits["train"]["tokens"],
        val_tokens=splits["val"]["tokens"],
        train_shards=len(splits["train"]["shards"]),
        val_shards=len(splits["val"]["shards"]),
        sequences=n,
    )
    section.details = [
        f"{manifest.path}: every shard's sha256 verified",
        f"train {splits['train']['tokens']:,} tokens in {len(splits['train']['shards'])} "
        f"shards, val {splits['val']['tokens']:,} tokens",
        f"N = (train_tokens - 1) // seq_len = ({splits['train']['tokens']:,} - 1) // "
        f"{cfg.data.seq_len} = {n:,} sequences",
    ]
    if splits["val"]["tokens"] <= cfg.data.seq_len:
        section.warning(
            f"the val split has {splits['val']['tokens']} tokens, not one sequence of "
            f"seq_len {cfg.data.seq_len} + 1: no validation loss can be computed",
            field,
            _line(cfg, field),
            "encode with a larger --val-fraction",
        )
    if manifest.vocab_size != cfg.model.vocab_size:
        vocab_field = "model.architecture.vocab_size"
        section.error(
            f"the shards were encoded with a vocab of {manifest.vocab_size}, the model's "
            f"vocab_size is {cfg.model.vocab_size}",
            vocab_field,
            _line(cfg, vocab_field),
            f"set vocab_size: {manifest.vocab_size}, or encode with the model's tokenizer",
        )
    return section, manifest


# ---------------------------------------------------------------- 5. algebra
def _rule(section: Section, cfg: RunConfig, result: RuleResult, level: str) -> None:
    field = result.fields[0]
    add = section.error if level == "error" else section.warning
    add(result.message, field, _line(cfg, field), f"{CONTRACT} {result.rule}")


def algebra_section(
    cfg: RunConfig, sequences: int | None, what_if: bool, world_size: int = 1
) -> tuple[Section, AlgebraReport | None]:
    section = Section("algebra")
    if sequences is None:
        section.skipped = (
            "no sequence count: data.shards did not verify; pass --sequences N for a what-if plan"
        )
        return section, None
    p = param_count(cfg.model)
    inputs = cfg.algebra_inputs(sequences=sequences, params=p, world_size=world_size)
    report = evaluate(inputs)
    for violation in report.violations:
        _rule(section, cfg, violation, "error")
    for warning in report.warnings:
        _rule(section, cfg, warning, "warning")
    section.values = {
        "sequences": sequences,
        "sequences_source": "--sequences" if what_if else "manifest",
        **report.to_json(),
    }
    gb, t = inputs.global_batch, cfg.training
    source = "what-if, from --sequences" if what_if else "counted from the shard manifest"
    spe = report.steps_per_epoch
    section.details = [
        f"N = {sequences:,} sequences ({source}), global batch b x g x w = "
        f"{inputs.micro_batch} x {inputs.grad_accum} x {inputs.world_size} = {gb}",
        f"steps_per_epoch = floor(N / (b g w)) = {spe:,}; reachable = min(max_steps {t.max_steps},"
        f" epochs {t.epochs} x {spe:,}) = {report.reachable_steps:,}"
        + (f"; min_epochs = ceil(M / spe) = {report.min_epochs:,}" if report.min_epochs else ""),
        f"tokens D = reachable x b x g x w x L = {report.tokens:,} = "
        f"{report.tokens_per_param:.2f} per parameter (P = {p:,})",
        f"warmup {t.warmup_steps} of {t.max_steps} steps; the learning rate peaks at "
        f"{report.lr_max_reached:.3g} (lr {cfg.optimizer.lr:g}, "
        f"{100 * report.lr_max_reached / cfg.optimizer.lr:.3g} %), ends at min_lr "
        f"{cfg.optimizer.min_lr:.3g}",
    ]
    if report.forced:
        section.details.append(
            "training.force_token_budget: the token rule is overridden; the run records it"
        )
    return section, report


# ---------------------------------------------------------------- 7. tokenizer
def tokenizer_section(cfg: RunConfig, manifest: Manifest | None) -> Section:
    section = Section("tokenizer")
    field, path = "data.tokenizer", cfg.data.tokenizer
    section.values = {"tokenizer": str(path), "vocab_size": None}
    if not path.exists():
        section.error(
            f"{path} does not exist",
            field,
            _line(cfg, field),
            "train one (trainer tokenizer train --vocab-size V --out DIR) or fix the path",
        )
        return section
    try:
        vocab = tokenizer_vocab_size(path)
    except TokenizerFileError as exc:
        section.error(str(exc), field, _line(cfg, field), "point data.tokenizer at a tokenizer")
        return section
    section.values["vocab_size"] = vocab
    section.details = [f"{path}: {vocab:,} tokens; model vocab_size {cfg.model.vocab_size:,}"]
    try:
        check_vocab_agreement(cfg.model.vocab_size, vocab, tokenizer_path=path)
    except VocabMismatchError as exc:
        vocab_field = "model.architecture.vocab_size"
        section.error(str(exc), vocab_field, _line(cfg, vocab_field), f"vocab_size: {vocab}")
    if manifest is not None:
        tokenizer_json = path / "tokenizer.json" if path.is_dir() else path
        encoded_with = manifest.data["tokenizer"]["sha256"]
        actual = sha256_file(tokenizer_json)
        section.values["matches_shards"] = actual == encoded_with
        if actual != encoded_with:
            section.error(
                f"{tokenizer_json} (sha256 {actual[:16]}) is not the tokenizer the shards in "
                f"{cfg.data.shards} were encoded with (sha256 {encoded_with[:16]})",
                field,
                _line(cfg, field),
                "point data.tokenizer at the encoding tokenizer, or re-encode the shards",
            )
        else:
            section.details.append(f"the shards in {cfg.data.shards} were encoded with it")
    return section


# ---------------------------------------------------------------- 8. time
def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1e3:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def time_section(
    cfg: RunConfig,
    device: str,
    cuda: CudaInfo,
    algebra: AlgebraReport | None,
    budget_hours: float | None,
) -> Section:
    section = Section("time")
    if device == "cuda" and not cuda.available:
        section.skipped = "planned for CUDA, and this machine has no CUDA device to time"
        return section
    t, o = cfg.training, cfg.optimizer
    steps = algebra.reachable_steps if algebra is not None else t.max_steps
    if device == "cpu":
        needed = timing.measurement_bytes(cfg.model, cfg.data.micro_batch, cfg.data.seq_len)
        host = memory.host_available_memory()
        if needed > MEASUREMENT_MEMORY_FRACTION * host.bytes:
            section.warning(
                f"not measured: the 2-layer timing model needs {memory.format_bytes(needed)}, "
                f"more than half of the {memory.format_bytes(host.bytes)} available "
                f"({host.source})",
                hint="plan on a machine with more memory, or --no-timing",
            )
            return section
    load = timing.machine_load() if device == "cpu" else None
    estimate = timing.measure(
        cfg.model,
        micro_batch=cfg.data.micro_batch,
        seq_len=cfg.data.seq_len,
        grad_accum=t.gradient_accumulation,
        steps=steps,
        optimizer={
            "lr": o.lr,
            "betas": (o.beta1, o.beta2),
            "eps": o.eps,
            "weight_decay": o.weight_decay,
        },
        device=device,
        # A CPU plan with bf16/fp16 has already failed in the memory section.
        precision=t.mixed_precision if device == "cuda" else "fp32",
    )
    noise = estimate.too_noisy or timing.busy_verdict(load)
    run_seconds = estimate.run_seconds or 0.0
    section.values = {
        "device": estimate.device,
        "precision": estimate.precision,
        "threads": estimate.threads,
        "measured_small": [estimate.small.batch, estimate.small.seq_len],
        "measured_large": [estimate.large.batch, estimate.large.seq_len],
        "cell_seconds": estimate.seconds,
        "fixed_seconds": estimate.fixed_seconds,
        "layer_fixed_seconds": estimate.layer_fixed_seconds,
        "flops_per_second": estimate.flops_per_second,
        "micro_batch_seconds": estimate.micro_batch_seconds,
        "optimizer_seconds": estimate.optimizer_seconds,
        "step_seconds": estimate.step_seconds,
        "steps": steps,
        "steps_source": "reachable" if algebra is not None else "max_steps",
        "run_seconds": run_seconds,
        "run_hours": run_seconds / 3600,
        "budget_hours": budget_hours,
        "cell_passes": {k: p.as_dict() for k, p in estimate.cell_passes.items()},
        "too_noisy": noise is not None,
        "load_average": None if load is None else load[0],
    }
    section.details = estimate.basis()
    if noise is not None:
        # No made-up number: the fitted times stay out of the values and the text.
        for key in ("micro_batch_seconds", "optimizer_seconds", "step_seconds", "run_seconds"):
            section.values[key] = None
        section.values["run_hours"] = None
        section.values["noise"] = noise
        unchecked = "; the --time-budget was not checked" if budget_hours is not None else ""
        section.warning(
            noise + unchecked,
            hint="run `trainer plan` again when the machine is quieter (other processes slow "
            "the timed passes down), or --no-timing",
        )
        return section
    section.details += [
        f"per micro-batch {_duration(estimate.micro_batch_seconds)}; per optimizer step "
        f"{t.gradient_accumulation} x micro-batch + AdamW {_duration(estimate.optimizer_seconds)}"
        f" = {_duration(estimate.step_seconds)}",
        f"run: {steps:,} {'reachable' if algebra is not None else 'max'} steps x "
        f"{_duration(estimate.step_seconds)} = {_duration(run_seconds)} (evaluation, checkpoints "
        "and data loading not included)",
    ]
    _roofline(section, cfg, estimate, device)
    field = "training.max_steps"
    limit = budget_hours if budget_hours is not None else DEFAULT_TIME_WARN_HOURS
    if run_seconds > limit * 3600:
        message = (
            f"the run is estimated at {_duration(run_seconds)} on this {estimate.device}, over "
            + (f"the --time-budget of {limit:g} h" if budget_hours is not None else f"{limit:g} h")
        )
        hint = "fewer steps, a smaller model or micro-batch, or a faster device"
        if budget_hours is not None:
            section.error(message, field, _line(cfg, field), hint)
        else:
            section.warning(message, field, _line(cfg, field), hint)
    return section


def _roofline(
    section: Section, cfg: RunConfig, estimate: timing.TimingEstimate, device: str
) -> None:
    """The estimated step's model FLOP/s (flops.py's 6N + 12LHT per token, as
    the run's metrics count it) against a peak: this CPU's measured float32 matmul peak
    (roofline.py), or on CUDA the datasheet bf16 peak when the device is
    known (MFU). Values ``model_flops_per_second`` and ``peak_fraction`` or ``mfu``."""
    import torch  # noqa: PLC0415 - the measurement has imported it already

    from trainer.plan import flops, roofline  # noqa: PLC0415 - torch: only here

    d, t = cfg.data, cfg.training
    tokens = d.micro_batch * d.seq_len * t.gradient_accumulation
    rate = flops.flops_per_token(cfg.model, d.seq_len) * tokens / estimate.step_seconds
    section.values["model_flops_per_second"] = rate
    per_step = (
        f"roofline: the estimated step runs {rate / 1e9:,.1f} GFLOP/s of model FLOPs "
        "(6N + 12LHT per token)"
    )
    if device == "cpu":
        peak = roofline.matmul_peak()
        fraction = roofline.peak_fraction(rate, peak.flops_per_second)
        section.values["matmul_peak_flops"] = peak.flops_per_second
        section.values["peak_fraction"] = fraction
        if fraction is not None:
            section.details.append(
                f"{per_step}, {roofline.percent(fraction)} of this CPU's measured float32 matmul "
                f"peak ({peak}: torch.mm {peak.size} x {peak.size}, "
                f"{peak.key.get('torch_threads')} threads" + (", cached)" if peak.cached else ")")
            )
            if fraction > 1:
                section.details.append(
                    "  above the measured peak: the peak was measured while the machine was "
                    f"busy; delete {roofline.cache_path()} to measure it again"
                )
        return
    name = torch.cuda.get_device_name(0)
    peak = flops.peak_flops(torch.device("cuda"))
    section.values["datasheet_peak_flops"] = peak
    section.values["mfu"] = None if peak is None else rate / peak
    if peak is None:
        section.details.append(f"{per_step}; no datasheet peak known for {name}: no MFU")
    else:
        section.details.append(
            f"{per_step}, MFU {roofline.percent(rate / peak)} of the {name}'s datasheet dense bf16 "
            f"peak ({peak / 1e12:,.0f} TFLOP/s)"
        )


# ---------------------------------------------------------------- the plan
def resolve_device(requested: str, cuda: CudaInfo) -> str:
    if requested not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {requested!r}")
    if requested == "auto":
        return "cuda" if cuda.available else "cpu"
    return requested


def make_plan(options: PlanOptions) -> PlanReport:
    """Every section for ``options.config``; sections that cannot run say why."""
    what_if = options.sequences is not None
    cuda = cuda_info()
    device = resolve_device(options.device, cuda)
    config, cfg = config_section(options.config, device)
    sections = {key: Section(key) for key in SECTION_KEYS}
    sections["config"] = config
    if cfg is None:
        for key in SECTION_KEYS[1:]:
            sections[key].skipped = "the config did not load"
        return PlanReport(str(options.config), sections, what_if)
    sections["architecture"] = architecture_section(cfg)
    sections["parameters"] = parameters_section(cfg)
    sections["memory"] = memory_section(cfg, device, cuda, options.device_memory)
    sections["data"], manifest = data_section(cfg)
    counted = sections["data"].values.get("sequences")
    n = options.sequences if what_if else counted
    sections["algebra"], algebra = algebra_section(cfg, n, what_if, options.world_size)
    if what_if and counted is not None:
        sections["algebra"].details.append(f"(the manifest counts N = {counted:,})")
    sections["tokenizer"] = tokenizer_section(cfg, manifest)
    if options.timing:
        sections["time"] = time_section(cfg, device, cuda, algebra, options.time_budget_hours)
    else:
        sections["time"].skipped = "--no-timing"
    return PlanReport(str(options.config), sections, what_if)
