"""Measurements of GATE-HF-TRAINER-001 .. 004 (contracts/hf-trainer-loop-v1.yaml).

Each runs the installed transformers.Trainer through a larger version of its bound test's
scenario (hf_example.py) and reports what it measured, whatever that is: the verdict is the
threshold's, never this module's. Run by ``gates check GATE-HF-TRAINER-00N`` or
``gates promote`` from examples/hf-trainer.
"""

from __future__ import annotations

from gates.measure import GateContext, Measurement, measures

MODEL = "LlamaForCausalLM (2 layers, hidden 32, 4 heads / 2 kv heads, vocab 96), eager attention"


def _inputs(ctx: GateContext) -> list:
    return [ctx.root / "hf_example.py"]


@measures("GATE-HF-TRAINER-001")
def token_mean_under_accumulation(ctx: GateContext) -> Measurement:
    import hf_example  # noqa: PLC0415 - torch and transformers load on demand only

    splits = [(12, 1), (6, 2), (4, 3), (3, 4), (2, 6), (1, 12)]
    results = [
        hf_example.accumulation(mb, ga, sequences=12, seed=s) for s in (0, 1) for mb, ga in splits
    ]
    worst_grad = max(r.max_grad_relative_error for r in results)
    worst_loss = max(r.loss_relative_error for r in results)
    return Measurement(
        values={
            "max_loss_grad_relative_error": (max(worst_grad, worst_loss), "ratio"),
            "max_grad_relative_error": (worst_grad, "ratio"),
            "max_logged_loss_relative_error": (worst_loss, "ratio"),
            "splits_with_unequal_micro_batches": (
                sum(len(set(r.micro_batch_targets)) == r.grad_accum > 1 for r in results),
                "splits",
            ),
        },
        workload=(
            f"{MODEL} in float64; one optimizer step of transformers.Trainer over a global batch "
            "of 12 sequences (16 positions, 1 to 15 non-padding targets each, labels -100 at "
            "padding), split into micro-batch x gradient_accumulation_steps 12x1, 6x2, 4x3, "
            "3x4, 2x6, 1x12 (sequential sampler, max_grad_norm 0), data and init seeds 0 and 1; "
            "the accumulated .grad of every parameter and the logged loss against one float64 "
            "token-mean cross-entropy backward over the whole batch, written from the logits"
        ),
        inputs=_inputs(ctx),
        parameters={
            **hf_example.versions(),
            "splits": [list(s) for s in splits],
            "seeds": [0, 1],
            # Trainer 4.x rounds its logged loss to 4 decimals: within that, no error.
            "logged_loss_decimals": hf_example.logged_loss_decimals(),
        },
        notes="; ".join(
            f"{r.grad_accum} x {r.micro_batch} sequences, targets {r.micro_batch_targets}: grad "
            f"{r.max_grad_relative_error:.2e}, loss {r.loss_relative_error:.2e}"
            for r in results[: len(splits)]
        )
        + ". Trainer's causal-LM loss upcasts logits with .float(), so a float64 model's loss "
        "and gradient are float32-accurate (~1e-7), not float64-accurate.",
    )


@measures("GATE-HF-TRAINER-002")
def scheduled_lr_applied(ctx: GateContext) -> Measurement:
    import hf_example  # noqa: PLC0415

    peak, warmup, steps = 1e-2, 5, 40
    recorder, expected = hf_example.lr_trace(steps, warmup, peak)
    bad = hf_example.lr_mismatches(recorder, expected)
    bad_steps = {int(b.split()[1].rstrip(":")) for b in bad if b.startswith("step ")}
    first = [groups[0] for groups in recorder.lrs]
    peak_step = next((s for s, lr in enumerate(first, 1) if lr == peak), None)
    return Measurement(
        values={
            "lr_mismatched_steps": (len(bad_steps) + (len(recorder.lrs) != steps) * steps, "steps"),
            "optimizer_steps_observed": (len(recorder.lrs), "steps"),
            "param_groups": (len(recorder.lrs[0]) if recorder.lrs else 0, "groups"),
            "lr_at_step_1": (recorder.lrs[0][0], "lr"),
            "lr_at_last_step": (recorder.lrs[-1][0], "lr"),
        },
        workload=(
            f"{MODEL}; transformers.Trainer for {steps} optimizer steps (12 sequences, "
            "micro-batch 2, gradient_accumulation_steps 2), lr_scheduler_type cosine, peak "
            f"{peak}, warmup_steps {warmup}, weight_decay 0.1 (two parameter groups); every "
            "group's lr read from optimizer.param_groups just before optimizer.step() (a step "
            "pre-hook on the torch optimizer) and compared "
            "(relative 1e-12) with get_cosine_schedule_with_warmup's documented formula; the "
            "logged learning_rate compared with the lr applied"
        ),
        inputs=_inputs(ctx),
        parameters={**hf_example.versions(), "steps": steps, "warmup_steps": warmup, "peak": peak},
        notes=(
            "; ".join(bad[:5]) or f"all {steps} steps x {len(recorder.lrs[0])} groups on schedule"
        )
        + f". Applied lr at step 1: {first[0]!r}; first step at the peak: {peak_step}; "
        f"at the last step: {first[-1]!r}",
    )


@measures("GATE-HF-TRAINER-003")
def grad_norm_before_clipping(ctx: GateContext) -> Measurement:
    import hf_example  # noqa: PLC0415

    clip, steps = 0.5, 30
    trace = hf_example.grad_norm_trace(steps=steps, clip=clip)
    errors = [abs(s.logged - s.pre_clip) / s.pre_clip for s in trace]
    return Measurement(
        values={
            "max_grad_norm_relative_error": (max(errors), "ratio"),
            "steps_clipped": (sum(s.pre_clip > clip for s in trace), "steps"),
            "max_post_clip_norm": (max(s.post_clip for s in trace), "norm"),
            "max_clip_relative_error": (max(s.clip_relative_error for s in trace), "ratio"),
            "min_pre_clip_norm": (min(s.pre_clip for s in trace), "norm"),
            "max_pre_clip_norm": (max(s.pre_clip for s in trace), "norm"),
        },
        workload=(
            f"{MODEL}; transformers.Trainer for {steps} optimizer steps (12 sequences, "
            f"micro-batch 2, gradient_accumulation_steps 2), max_grad_norm {clip}; the logged "
            "grad_norm against the float64 global L2 norm of the accumulated gradients as the "
            "last post-accumulate-grad hook saw them (before clipping), and the gradients at "
            "optimizer.step() against pre-clip * min(1, clip / (norm + 1e-6))"
        ),
        inputs=_inputs(ctx),
        parameters={**hf_example.versions(), "steps": steps, "max_grad_norm": clip},
        notes=f"pre-clip norms {min(s.pre_clip for s in trace):.3f} .. "
        f"{max(s.pre_clip for s in trace):.3f}; clipping engaged at "
        f"{sum(s.pre_clip > clip for s in trace)} of {len(trace)} steps",
    )


@measures("GATE-HF-TRAINER-004")
def bitwise_resume(ctx: GateContext) -> Measurement:
    import hf_example  # noqa: PLC0415

    total, stops = 9, [1, 2, 3, 4, 5, 6, 7, 8]
    results = hf_example.resume_compare(total_steps=total, stop_points=stops)
    files = results[0].checkpoint_files
    pickled = [f for f in files if f.endswith((".pt", ".pth", ".bin"))]
    return Measurement(
        values={
            "differing_values_after_resume": (
                sum(r.differing_parameter_values + r.differing_log_values for r in results),
                "values",
            ),
            "resumes": (len(results), "runs"),
            "resumes_that_raised": (sum(r.resume_error is not None for r in results), "runs"),
            "parameter_values_compared_per_resume": (results[0].parameter_values, "values"),
            "log_values_compared_per_resume": (results[0].log_values, "values"),
            "checkpoint_files_written_by_torch_save": (len(pickled), "files"),
        },
        workload=(
            f"{MODEL} with attention_dropout 0.1; transformers.Trainer for {total} optimizer "
            "steps (12 sequences shuffled by the random sampler, micro-batch 2, "
            "gradient_accumulation_steps 2: 3 steps per epoch) straight through, and for each K "
            f"in {stops} interrupted after step K (save_steps K) and finished by a fresh Trainer "
            "on a differently initialised model with resume_from_checkpoint=checkpoint-K, in "
            "the same process; final parameters and every logged loss, grad_norm and "
            "learning_rate compared bitwise"
        ),
        inputs=_inputs(ctx),
        parameters={
            **hf_example.versions(),
            "total_steps": total,
            "stop_points": stops,
            "checkpoint_files": files,
            "checkpoint_files_written_by_torch_save": pickled,
        },
        notes=(
            "; ".join(
                f"K={r.stop_at}: {r.differing_parameter_values} parameter and "
                f"{r.differing_log_values} log values differ"
                + (f" (the resume raised {r.resume_error})" if r.resume_error else "")
                for r in results
            )
            + f". Checkpoints hold {', '.join(pickled)} written by torch.save (pickle) beside "
            "model.safetensors and JSON: Trainer's own format, which INV-TRAIN-LOOP-016 of "
            "C-TRAINING-LOOP would refuse."
        ),
    )
