"""examples/hf-trainer on releases other than the installed one: what hf_example.py reads
from the installed transformers instead of its version (the sampler field, the logged loss's
rounding), and a resume that raises. Each probe runs in a process of its own, from the
example's directory, as the example runs: hf_example sets torch's threads and the Hub mode
for its whole process. The installed release (5.x) is the positive control; the 4.x
behaviours are stood in for (a field removed, a method whose source rounds, a resume that
raises), since only one release is installed here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gates import mutants

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hf-trainer"

pytestmark = pytest.mark.slow  # a few Trainer runs in a fresh process: about 15 s

PROBE = textwrap.dedent('''\
    import json
    import tempfile
    from pathlib import Path

    import hf_example as h
    from transformers import Trainer


    class RoundingTrainer:
        """Stands in for 4.x: the method that logs rounds the loss to 4 decimals."""

        def _maybe_log_save_evaluate(self, tr_loss, steps):
            logs = {}
            logs["loss"] = round(tr_loss / steps, 4)
            return logs


    out = {"installed": {"sequential_by_field": h.in_order({})[1] is Trainer,
                         "decimals": h.logged_loss_decimals()}}
    # a release without train_sampling_strategy: the subclass takes the sequences in order
    h.ARGUMENT_FIELDS = h.ARGUMENT_FIELDS - {"train_sampling_strategy"}
    overrides, cls = h.in_order({"max_steps": 1})
    data = h.ToySequences(8, 16, h.TinyLlama().vocab_size, seed=3)
    with tempfile.TemporaryDirectory() as tmp:
        args = h.training_args(Path(tmp), per_device_train_batch_size=2, **overrides)
        trainer = h.make_trainer(h.build_model(h.TinyLlama()), args, data, trainer_class=cls)
        fed = [b["input_ids"].tolist() for b in trainer.get_train_dataloader()]
    in_order = [data.batch(i, i + 2)["input_ids"].tolist() for i in range(0, 8, 2)]
    out["no_field"] = {"subclass": cls is h.InOrderTrainer,
                       "field_passed": "train_sampling_strategy" in overrides,
                       "in_order": fed == in_order}
    # a Trainer that rounds its logged loss to 4 decimals
    exact = 4.123456789
    real, h.Trainer = h.Trainer, RoundingTrainer
    out["rounding"] = {"decimals": h.logged_loss_decimals(),
                       "rounded_is_no_error": h.logged_error(round(exact, 4), exact),
                       "beyond_rounding": h.logged_error(exact + 2e-4, exact)}
    h.Trainer = real
    out["exact"] = {"error": h.logged_error(exact * (1 + 1e-7), exact)}
    # a release whose callbacks have no on_pre_optimizer_step (4.41): every step observed
    from transformers.trainer_callback import CallbackHandler

    CallbackHandler.on_pre_optimizer_step = lambda self, args, state, control, **kw: control
    recorder, expected = h.lr_trace(steps=4, warmup=1)
    seen = {"lr_steps": len(recorder.lrs), "lr_bad": h.lr_mismatches(recorder, expected)}
    try:
        trace = h.grad_norm_trace(steps=3, clip=0.5)
        seen |= {"norm_steps": len(trace),
                 "clip_error": max(t.clip_relative_error for t in trace)}
    except IndexError as exc:  # no step observed: reported, for the test to say so
        seen |= {"norm_steps": 0, "clip_error": repr(exc)}
    out["no_pre_step_event"] = seen
    # a resume that raises (as 4.45 does on torch >= 2.6) is a failed resume, named
    def refuse(self, checkpoint):
        raise RuntimeError("rng state refused")
    Trainer._load_rng_state = refuse
    r = h.resume_compare(total_steps=4, stop_points=[2])[0]
    differing = r.differing_parameter_values + r.differing_log_values
    out["resume"] = {"error": r.resume_error, "differing": differing}
    print(json.dumps(out))
    ''')


def test_the_example_adapts_to_what_the_installed_transformers_can_do(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k != mutants.ENV_VAR}
    env |= {"HF_HUB_OFFLINE": "1", "PYTHONPATH": str(EXAMPLE)}
    done = subprocess.run(
        [sys.executable, str(probe)], cwd=EXAMPLE, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # the installed release (5.x): sequential through its own field, its loss logged as is
    assert out["installed"] == {"sequential_by_field": True, "decimals": None}
    assert out["no_field"] == {"subclass": True, "field_passed": False, "in_order": True}
    assert out["rounding"]["decimals"] == 4
    assert out["rounding"]["rounded_is_no_error"] == 0.0, "rounding to 4 decimals is no error"
    assert out["rounding"]["beyond_rounding"] > 1e-5, "an error beyond the rounding still is"
    assert out["exact"]["error"] == pytest.approx(1e-7, rel=1e-3), "unrounded: compared exactly"
    pre_step = out["no_pre_step_event"]
    assert (pre_step["lr_steps"], pre_step["lr_bad"], pre_step["norm_steps"]) == (4, [], 3)
    assert isinstance(pre_step["clip_error"], float) and pre_step["clip_error"] <= 1e-6, (
        "the clipped gradients are seen before the step"
    )
    assert out["resume"]["error"] == "RuntimeError: rng state refused"
    assert out["resume"]["differing"] > 0, "a resume that raised restored nothing"
