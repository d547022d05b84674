"""FALSIFY-NANOGPT-LOOP-004 (C-NANOGPT-LOOP, after INV-TRAIN-LOOP-012 and -016): a run
resumed from a checkpoint in a new process is bitwise the run that never stopped (losses, grad
norms, lrs, weights and AdamW moments and step counts), and the checkpoint is safetensors
and JSON only.

Run A trains iterations 0..12 without stopping. Run B checkpoints at iteration 8 (the
evaluation before that step) and dies after iteration 9. A new Python process resumes B's
checkpoint and trains iterations 8..12. Dropout 0.1 and random batch offsets both draw from
the torch RNG, so a resume that does not continue the RNG stream diverges.

Run: pytest tests/test_resume.py
"""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import nanogpt_train
import pytest
import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parent.parent
RUN = nanogpt_train.TrainConfig(
    max_iters=12,
    eval_interval=4,  # evaluations, and checkpoints, at iterations 4, 8 and 12
    eval_iters=2,
    log_interval=0,
    gradient_accumulation_steps=2,
    batch_size=2,
    block_size=16,
    dropout=0.1,
    warmup_iters=3,
    lr_decay_iters=12,
)
KILLED_AFTER, CHECKPOINT = 9, 8

#: Resumes in a fresh interpreter and writes its log and final state. Under `gates audit`
#: the mutant being audited is applied in this process too (gates.mutants.apply_from_env).
CHILD = """
import json, sys
from pathlib import Path
import torch
torch.set_num_threads(1)
from gates.mutants import apply_from_env
apply_from_env(Path.cwd())
from safetensors.torch import save_file
import nanogpt_model, nanogpt_train
built, optimizers = [], []
def build(config):
    model = nanogpt_model.GPT(config)
    configure = model.configure_optimizers
    def configure_and_keep(*args):
        optimizers.append(configure(*args))
        return optimizers[-1]
    model.configure_optimizers = configure_and_keep
    built.append(model)
    return model
nanogpt_train.GPT = build
log = nanogpt_train.train(nanogpt_train.TrainConfig(**json.loads(sys.argv[1])))
Path(sys.argv[2], "log.json").write_text(json.dumps(log))
model, optimizer = built[0], optimizers[0]
state = {n: p.detach() for n, p in model.named_parameters()}
for n, p in model.named_parameters():
    state.update({f"{k}.{n}": v for k, v in optimizer.state[p].items()})
save_file(state, str(Path(sys.argv[2], "state.safetensors")))
"""


def _final_state(model, optimizer) -> dict[str, torch.Tensor]:
    """Weights and AdamW state (exp_avg, exp_avg_sq, step) by parameter name, as CHILD writes."""
    state = {n: p.detach().clone() for n, p in model.named_parameters()}
    for n, p in model.named_parameters():
        state.update({f"{k}.{n}": v.clone() for k, v in optimizer.state[p].items()})
    return state


@pytest.mark.ship_blocking
def test_a_run_resumed_in_a_new_process_is_bitwise_the_run_that_never_stopped(probe, tmp_path):
    straight = nanogpt_train.train(dataclasses.replace(RUN, out_dir=str(tmp_path / "a")))
    state_a = _final_state(probe.models[0], probe.optimizers[0])
    interrupted = dataclasses.replace(RUN, out_dir=str(tmp_path / "b"), max_iters=KILLED_AFTER)
    nanogpt_train.train(interrupted)
    checkpoint = tmp_path / "b"
    assert json.loads((checkpoint / "ckpt.json").read_text())["iter_num"] == CHECKPOINT
    assert {p.suffix for p in checkpoint.iterdir()} == {".safetensors", ".json"}

    resume = {**dataclasses.asdict(RUN), "out_dir": str(checkpoint), "init_from": "resume"}
    out = tmp_path / "resumed"
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(resume), str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = json.loads((out / "log.json").read_text())
    state_c = load_file(out / "state.safetensors")

    assert [r["iter"] for r in resumed] == list(range(CHECKPOINT, RUN.max_iters + 1))
    for want, got in zip(straight[CHECKPOINT:], resumed, strict=True):
        assert got == want, f"iteration {want['iter']}: resumed {got}, uninterrupted {want}"
    assert state_c.keys() == state_a.keys()
    differing = {n: int((state_c[n] != state_a[n]).sum()) for n in state_a}
    assert not any(differing.values()), f"weights or AdamW state differ: {differing}"
