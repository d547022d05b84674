"""Measurements of C-NANOGPT-LOOP's gates (contracts/nanogpt-training-loop-v1.yaml) on
nanogpt_train.py as it is: accumulation (GATE-NANOGPT-LOOP-001), the applied lr (-002), the
reported gradient norm and clipping (-003) and bitwise resume (-004).

The script runs unchanged; `_watched_train` swaps the two module-level names it looks up at
call time (GPT, get_batch) for recording wrappers and hangs gradient and optimizer hooks on
what it builds. The cases are written here from the contract, independently of the bound
tests in tests/. Run through the framework, from this example's root:

    gates check GATE-NANOGPT-LOOP-001        # or: gates promote GATE-NANOGPT-LOOP-001
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from gates.measure import GateContext, Measurement, measures

SOURCES = ("nanogpt_train.py", "nanogpt_model.py")


def _inputs(ctx: GateContext) -> list[Path]:
    return [ctx.root / name for name in SOURCES]


@contextlib.contextmanager
def _one_thread():
    """One intra-op thread, as the bound tests and the resumed processes use: shared 2-core
    machines run a tiny step far faster so, and bitwise comparisons need equal counts."""
    import torch  # noqa: PLC0415 - torch only when a gate is measured

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclasses.dataclass
class _Run:
    log: list[dict]
    model: object
    optimizer: object
    batches: list  # train micro-batches (x, y) in draw order
    steps: list[dict]  # per optimizer step: lrs, params, pre_clip, post_clip


def _watched_train(cfg, scripted=None) -> _Run:
    """nanogpt_train.train(cfg), recorded; `scripted` replaces the sampled train batches."""
    import nanogpt_model  # noqa: PLC0415 - the example root is on sys.path
    import nanogpt_train  # noqa: PLC0415
    from torch.optim.optimizer import register_optimizer_step_pre_hook  # noqa: PLC0415

    run = _Run([], None, None, [], [])
    pre_clip: dict = {}
    real_get_batch, real_gpt = nanogpt_train.get_batch, nanogpt_train.GPT

    def get_batch(data, split, batch_size, block_size):
        if split == "train" and scripted is not None:
            batch = scripted[len(run.batches)]
        else:
            batch = real_get_batch(data, split, batch_size, block_size)
        if split == "train":
            run.batches.append(batch)
        return batch

    def build(config):
        model = nanogpt_model.GPT(config)
        for name, p in model.named_parameters():
            p.register_post_accumulate_grad_hook(
                lambda p, name=name: pre_clip.__setitem__(name, p.grad.detach().clone())
            )
        run.model = model
        return model

    def before_step(optimizer, args, kwargs):
        run.optimizer = optimizer
        named = list(run.model.named_parameters())
        run.steps.append(
            {
                "lrs": [g["lr"] for g in optimizer.param_groups],
                "params": {n: p.detach().clone() for n, p in named},
                "pre_clip": dict(pre_clip),
                "post_clip": {n: p.grad.detach().clone() for n, p in named},
            }
        )

    nanogpt_train.get_batch, nanogpt_train.GPT = get_batch, build
    handle = register_optimizer_step_pre_hook(before_step)
    try:
        run.log = nanogpt_train.train(cfg)
    finally:
        handle.remove()
        nanogpt_train.get_batch, nanogpt_train.GPT = real_get_batch, real_gpt
    return run


def _rel(got, want) -> float:
    got, want = got.double(), want.double()
    scale = float(want.norm())
    return float((got - want).norm()) / scale if scale else float((got - want).norm())


# ---------------------------------------------------------------- GATE-NANOGPT-LOOP-001
def _token_mean_reference(model, params, batches):
    """float64 token-mean cross-entropy over all non-ignored targets of `batches` together,
    at weights `params`: (loss, gradients by name)."""
    import nanogpt_model  # noqa: PLC0415
    import torch  # noqa: PLC0415

    with torch.random.fork_rng():
        ref = nanogpt_model.GPT(model.config).double()
    with torch.no_grad():
        for name, p in ref.named_parameters():
            p.copy_(params[name])
    nll, count = torch.zeros((), dtype=torch.float64), 0
    for x, y in batches:
        logits, _ = ref(x)
        keep = y.reshape(-1) != -1
        logp = torch.log_softmax(logits.reshape(-1, logits.size(-1)), dim=-1)[keep]
        nll = nll - logp.gather(1, y.reshape(-1)[keep][:, None]).sum()
        count += int(keep.sum())
    loss = nll / count
    loss.backward()
    return loss.item(), {n: p.grad for n, p in ref.named_parameters()}


def _accumulation_case(cfg, scripted=None) -> tuple[float, float, list[int]]:
    """(worst gradient relative error, logged-loss relative error, non-ignored counts)."""
    run = _watched_train(cfg, scripted)
    step = run.steps[0]
    loss, grads = _token_mean_reference(run.model, step["params"], run.batches)
    worst = max(_rel(step["pre_clip"][n], g) for n, g in grads.items())
    counts = [int((y != -1).sum()) for _, y in run.batches]
    return worst, abs(run.log[0]["loss"] - loss) / loss, counts


def _ignored_micro_batches():
    """4 micro-batches of 2 x 32 targets with 0, 25, 50 and 90 % of them -1 (ignored)."""
    import torch  # noqa: PLC0415

    g = torch.Generator().manual_seed(2024)
    out = []
    for keep in (32, 24, 16, 3):
        x = torch.randint(0, 128, (2, 32), generator=g)
        y = torch.randint(0, 128, (2, 32), generator=g)
        y[:, keep:] = -1
        out.append((x, y))
    return out


def _accumulation_partial(worst, unequal, counts, worst_logged) -> dict | None:
    """What the threshold's metric (the script's own batches) leaves undischarged of the
    invariant, each only while it measures above the gate's 1e-5; None when nothing does."""
    missing = []
    if unequal > 1e-5:
        missing.append(
            "micro-batches with different numbers of ignore_index=-1 targets: nanoGPT "
            "divides each micro-batch's own token mean by grad_accum, so the gradient "
            f"weights micro-batches, not tokens, equally (relative error {unequal:.3g} "
            f"for counts {counts})"
        )
    if worst_logged > 1e-5:
        missing.append(
            "the logged loss is the last micro-batch's loss x grad_accum (nanoGPT: "
            "'approximating the true total loss'), not the step's token mean (relative "
            f"error up to {worst_logged:.1e} for grad_accum 2..8; exact at 1)"
        )
    if not missing:
        return None
    return {
        "discharged": [
            "the gradient of a step is the global token-mean gradient, within "
            f"{worst:.1e} of float64, for grad_accum 1, 2, 4 and 8 over the batches the "
            "script draws (every micro-batch has batch_size x block_size targets)",
        ],
        "not_discharged": missing,
    }


@measures("GATE-NANOGPT-LOOP-001")
def accumulation_is_the_global_token_mean(ctx: GateContext) -> Measurement:
    import nanogpt_train  # noqa: PLC0415

    base = nanogpt_train.TrainConfig(
        max_iters=0, eval_interval=0, log_interval=0, grad_clip=0.0, block_size=32
    )
    equal, logged = {}, {}
    with _one_thread():
        for accum in (1, 2, 4, 8):
            split = {"gradient_accumulation_steps": accum, "batch_size": 8 // accum}
            equal[accum], logged[accum], _ = _accumulation_case(dataclasses.replace(base, **split))
        cfg = dataclasses.replace(base, gradient_accumulation_steps=4, batch_size=2)
        unequal, _, counts = _accumulation_case(cfg, _ignored_micro_batches())
    worst = max(equal.values())
    worst_logged = max(logged[a] for a in (2, 4, 8))
    return Measurement(
        values={
            "max_grad_relative_error": (worst, "ratio"),
            **{f"grad_relative_error_accum_{a}": (e, "ratio") for a, e in equal.items()},
            "grad_relative_error_unequal_ignored_counts": (unequal, "ratio"),
            "logged_loss_relative_error_accum_1": (logged[1], "ratio"),
            "max_logged_loss_relative_error_accum_2_to_8": (worst_logged, "ratio"),
        },
        workload="one optimizer step of the tiny GPT (2 layers, 32 wide, float32, CPU) on a "
        "global batch of 8 sequences x 32 tokens drawn by the script's get_batch, split into "
        "grad_accum 1, 2, 4 and 8 equal micro-batches; then grad_accum 4 over scripted "
        f"micro-batches with {counts} non-ignored targets (-1 elsewhere). The accumulated "
        "gradient (post-accumulate-grad hooks, before clipping) and the logged loss against "
        "a float64 token-mean cross-entropy over every non-ignored target of the global batch",
        inputs=_inputs(ctx),
        parameters={"grad_accum": [1, 2, 4, 8], "non_ignored_counts": counts},
        notes=f"equal counts: worst {worst:.2e}; unequal counts {counts}: {unequal:.3g}; "
        f"logged loss at grad_accum 1: {logged[1]:.2e}, at 2..8 up to {worst_logged:.2e}",
        partial=_accumulation_partial(worst, unequal, counts, worst_logged),
    )


# ---------------------------------------------------------------- GATE-NANOGPT-LOOP-002
def _contract_lr(it: int, peak: float, floor: float, warmup: int, end: int) -> float:
    if it < warmup:
        return peak * (it + 1) / (warmup + 1)
    if it > end:
        return floor
    return floor + 0.5 * (1 + math.cos(math.pi * (it - warmup) / (end - warmup))) * (peak - floor)


@measures("GATE-NANOGPT-LOOP-002")
def lr_on_every_group_at_every_step(ctx: GateContext) -> Measurement:
    import nanogpt_train  # noqa: PLC0415

    cfg = nanogpt_train.TrainConfig(
        max_iters=60,
        eval_interval=0,
        log_interval=0,
        batch_size=2,
        block_size=8,
        learning_rate=6e-4,
        min_lr=6e-5,
        warmup_iters=10,
        lr_decay_iters=50,
    )
    with _one_thread():
        run = _watched_train(cfg)
    args = (cfg.learning_rate, cfg.min_lr, cfg.warmup_iters, cfg.lr_decay_iters)
    mismatched, worst = [], 0.0
    for it, step in enumerate(run.steps):
        want = _contract_lr(it, *args)
        errors = [abs(lr - want) / want for lr in step["lrs"]]
        worst = max(worst, *errors)
        if max(errors) > 1e-12:
            mismatched.append(it)
    missing = cfg.max_iters + 1 - len(run.steps)
    return Measurement(
        values={
            "lr_mismatched_steps": (len(mismatched) + abs(missing), "steps"),
            "optimizer_steps": (len(run.steps), "steps"),
            "param_groups": (len(run.steps[0]["lrs"]), "groups"),
            "max_lr_relative_error": (worst, "ratio"),
        },
        workload=f"{cfg.max_iters + 1} iterations (0..{cfg.max_iters}, nanoGPT's inclusive "
        f"loop) of the tiny GPT; peak {cfg.learning_rate}, warmup {cfg.warmup_iters}, cosine "
        f"to {cfg.min_lr} at {cfg.lr_decay_iters}, then the floor; every param group's lr "
        "read by a global optimizer step pre-hook against the contract's schedule "
        "(relative error <= 1e-12)",
        inputs=_inputs(ctx),
        parameters=dataclasses.asdict(cfg),
        notes=f"mismatched iterations: {mismatched[:10]}; missing steps: {missing}",
    )


# ---------------------------------------------------------------- GATE-NANOGPT-LOOP-003
@measures("GATE-NANOGPT-LOOP-003")
def reported_norm_is_the_pre_clip_norm(ctx: GateContext) -> Measurement:
    import nanogpt_train  # noqa: PLC0415
    import torch  # noqa: PLC0415

    cfg = nanogpt_train.TrainConfig(
        max_iters=29,
        eval_interval=0,
        log_interval=0,
        gradient_accumulation_steps=2,
        batch_size=2,
        block_size=16,
        warmup_iters=3,
        lr_decay_iters=29,
        grad_clip=1.5,  # norms fall from about 3.1 to 1.4: early steps clipped, later not
    )
    with _one_thread():
        run = _watched_train(cfg)
    norm_err = clip_err = 0.0
    clipped = 0
    for record, step in zip(run.log, run.steps, strict=True):
        pre = step["pre_clip"]
        norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in pre.values()))
        norm_err = max(norm_err, abs(record["grad_norm"] - norm) / norm)
        scale = min(1.0, cfg.grad_clip / (norm + 1e-6))
        clipped += scale < 1.0
        for name, g in pre.items():
            clip_err = max(clip_err, _rel(step["post_clip"][name], g.double() * scale))
    return Measurement(
        values={
            "max_grad_norm_relative_error": (max(norm_err, clip_err), "ratio"),
            "reported_norm_relative_error": (norm_err, "ratio"),
            "clipped_gradient_relative_error": (clip_err, "ratio"),
            "clipped_steps": (clipped, "steps"),
            "steps": (len(run.steps), "steps"),
            "max_pre_clip_norm": (max(r["grad_norm"] for r in run.log), "norm"),
        },
        workload=f"{len(run.steps)} optimizer steps of the tiny GPT, grad_accum 2, clip "
        f"{cfg.grad_clip}; the reported norm against a float64 global L2 norm of the "
        "accumulated gradients (post-accumulate-grad hooks, before clipping), and every "
        "clipped gradient (optimizer step pre-hook) against pre-clip x min(1, clip / "
        "(norm + 1e-6)); the metric is the larger of the two relative errors",
        inputs=_inputs(ctx),
        parameters=dataclasses.asdict(cfg),
        notes=f"{clipped} of {len(run.steps)} steps clipped; torch "
        f"{torch.__version__.split('+')[0]} clip_grad_norm_",
    )


# ---------------------------------------------------------------- GATE-NANOGPT-LOOP-004
#: A fresh interpreter resumes checkpoints and writes each run's log and final weights + AdamW
#: state. argv[1]: JSON list of [config, output directory, "keep" or "drop"], run in order;
#: "drop" disables torch.set_rng_state from then on (nanoGPT's checkpoint holds no RNG state),
#: so the first, "keep", resume is the one a fresh process does.
_RESUME = """
import json, sys
from pathlib import Path
import torch
torch.set_num_threads(1)
from safetensors.torch import save_file
from gates import mutants
mutants.apply_from_env(Path.cwd())  # under `gates audit`, the mutant reaches the resume too
import nanogpt_model, nanogpt_train
kept = {}
def build(config):
    model = kept["model"] = nanogpt_model.GPT(config)
    configure = model.configure_optimizers
    def configure_and_keep(*args):
        kept["optimizer"] = configure(*args)
        return kept["optimizer"]
    model.configure_optimizers = configure_and_keep
    return model
nanogpt_train.GPT = build
for config, out, rng in json.loads(sys.argv[1]):
    if rng == "drop":
        torch.set_rng_state = lambda state: None
    log = nanogpt_train.train(nanogpt_train.TrainConfig(**config))
    Path(out, "log.json").write_text(json.dumps(log))
    state = {}
    for n, p in kept["model"].named_parameters():
        state[n] = p.detach()
        state.update({f"{k}.{n}": v for k, v in kept["optimizer"].state[p].items()})
    save_file(state, str(Path(out, "state.safetensors")))
"""


def _final_state(run: _Run) -> dict:
    state = {}
    for n, p in run.model.named_parameters():
        state[n] = p.detach()
        state.update({f"{k}.{n}": v for k, v in run.optimizer.state[p].items()})
    return state


def _resume_in_new_process(root: Path, cfg, checkpoint: Path, work: Path) -> dict:
    """rng mode -> (log, final state): each resume from its own copy of `checkpoint`, since
    a resumed run writes its own checkpoints into the directory it resumed from."""
    from safetensors.torch import load_file  # noqa: PLC0415

    jobs = []
    for rng in ("keep", "drop"):
        shutil.copytree(checkpoint, work / f"{rng}-checkpoint")
        (work / rng).mkdir()
        config = {**dataclasses.asdict(cfg), "out_dir": str(work / f"{rng}-checkpoint")}
        jobs.append([config, str(work / rng), rng])
    proc = subprocess.run(
        [sys.executable, "-c", _RESUME, json.dumps(jobs)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the resumed process failed:\n{proc.stderr[-3000:]}")
    return {
        rng: (
            json.loads((work / rng / "log.json").read_text()),
            load_file(work / rng / "state.safetensors"),
        )
        for rng in ("keep", "drop")
    }


def _differing(straight: list[dict], state_a: dict, resumed: list[dict], state_c: dict) -> int:
    """Values that differ: per-iteration records (iter, loss, lr, grad_norm) compared
    exactly, a missing or extra iteration counting 4, plus differing tensor elements."""
    count = 4 * abs(len(straight) - len(resumed))
    for want, got in zip(straight, resumed, strict=False):
        count += sum(want[k] != got.get(k) for k in want)
    for name, tensor in state_a.items():
        other = state_c.get(name)
        if other is None or other.shape != tensor.shape:
            count += tensor.numel()
        else:
            count += int((other != tensor).sum())
    return count


@measures("GATE-NANOGPT-LOOP-004")
def resume_is_bitwise(ctx: GateContext) -> Measurement:
    import nanogpt_train  # noqa: PLC0415

    kill_after = 15  # the last checkpoint before it is at iteration 12
    cfg = nanogpt_train.TrainConfig(
        max_iters=20,
        eval_interval=6,  # evaluations and checkpoints at 6, 12 and 18
        eval_iters=2,
        log_interval=0,
        gradient_accumulation_steps=2,
        batch_size=2,
        block_size=16,
        dropout=0.1,
        warmup_iters=4,
        lr_decay_iters=20,
    )
    with tempfile.TemporaryDirectory() as tmp, _one_thread():
        a = _watched_train(dataclasses.replace(cfg, out_dir=f"{tmp}/a"))
        state_a = _final_state(a)
        _watched_train(dataclasses.replace(cfg, out_dir=f"{tmp}/b", max_iters=kill_after))
        saved = json.loads(Path(tmp, "b", "ckpt.json").read_text())["iter_num"]
        suffixes = sorted({p.suffix for p in Path(tmp, "b").iterdir()})
        resume = dataclasses.replace(cfg, init_from="resume")
        resumed = _resume_in_new_process(ctx.root, resume, Path(tmp, "b"), Path(tmp))
        results = {
            rng: _differing(a.log[saved:], state_a, log, state_c)
            for rng, (log, state_c) in resumed.items()
        }
        first_iters = {rng: log[0]["iter"] for rng, (log, _) in resumed.items()}
    compared = 4 * len(a.log[saved:]) + sum(t.numel() for t in state_a.values())
    return Measurement(
        values={
            "differing_values_after_resume": (results["keep"], "values"),
            "compared_values": (compared, "values"),
            "differing_values_without_rng_state": (results["drop"], "values"),
        },
        workload=f"tiny GPT (dropout 0.1, grad_accum 2) on CPU: iterations 0..{cfg.max_iters} "
        f"uninterrupted in-process, against a run checkpointed at iteration {saved} (the "
        f"evaluation before that step), killed after iteration {kill_after}, and resumed in a "
        f"new Python process to {cfg.max_iters}; every iteration's loss, lr and grad norm from "
        f"{saved} on and the final weights, AdamW exp_avg, exp_avg_sq and step compared "
        "bitwise. Also resumed with torch.set_rng_state disabled: what nanoGPT's checkpoint, "
        "which holds no RNG state, would give",
        inputs=_inputs(ctx),
        parameters={**dataclasses.asdict(cfg), "checkpoint_at": saved, "killed_after": kill_after},
        notes=f"checkpoint file types: {', '.join(suffixes)}; resumed at iteration "
        f"{first_iters['keep']}; without the RNG state (resumed at {first_iters['drop']}) "
        f"{results['drop']} of {compared} values differ",
    )
