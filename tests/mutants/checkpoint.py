"""Known bugs of checkpointing and export (C-TRAINING-LOOP FALSIFY-TRAIN-LOOP-012/013/015/016,
C-LLAMA-370M-SOVEREIGN FALSIFY-ARCH-370M-010), injected by `gates audit`.

Each patches one named seam of trainer/checkpoint (module attributes looked up at call
time), so the rest is the real code. lm-head-dropped-on-save and export-of-empty-state-dict
live in tests/mutants/model.py (they patch trainer/model/hf.py, which both use).
"""

import copy
import dataclasses
import pickle
import random

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from gates.mutants import mutant
from trainer.checkpoint import export, load, optimizer_state, rng, save, verify
from trainer.checkpoint import state as state_file
from trainer.checkpoint.durable import write_json
from trainer.checkpoint.layout import MANIFEST_FILE, MODEL_FILE
from trainer.model import llama
from trainer.train import checkpointing, components, guards, loop, optim


# ---------------------------------------------------------------- what is saved / restored
@mutant("optimizer-moments-not-saved")
def _moments_not_saved(patch):
    real = optimizer_state.optimizer_tensors

    def zero_moments(model, optimizer):
        tensors, groups = real(model, optimizer)
        for key, t in tensors.items():
            if key.endswith((".exp_avg", ".exp_avg_sq")):
                tensors[key] = torch.zeros_like(t)  # AdamW restarts from zero moments
        return tensors, groups

    patch.setattr(optimizer_state, "optimizer_tensors", zero_moments)


@mutant("adam-step-count-not-restored")
def _step_count_reset(patch):
    real = optimizer_state.restore_optimizer

    def restart_counts(model, optimizer, *args, **kwargs):
        real(model, optimizer, *args, **kwargs)
        for entry in optimizer.state.values():
            entry["step"] = torch.zeros_like(entry["step"])

    patch.setattr(optimizer_state, "restore_optimizer", restart_counts)


def _state_field_reset(patch, **reset):
    real = state_file.state_from_json
    patch.setattr(
        state_file,
        "state_from_json",
        lambda obj, **kw: dataclasses.replace(real(obj, **kw), **reset),
    )


@mutant("scheduler-step-not-restored")
def _scheduler_reset(patch):
    _state_field_reset(patch, scheduler_step=0)  # warmup starts again


@mutant("data-position-not-restored")
def _data_position_reset(patch):
    _state_field_reset(patch, epoch_step=0)  # back to the start of the epoch


@mutant("rng-not-restored")
def _rng_reseeded(patch):
    def reseed(tensors, states, **kwargs):
        torch.manual_seed(0)
        random.seed(0)
        np.random.seed(0)

    patch.setattr(rng, "restore_rng", reseed)


@mutant("step-counter-off-by-one-on-resume")
def _repeat_one_step(patch):
    patch.setattr(components, "first_step_after", lambda step: step)  # repeats it


@mutant("save-interval-off-by-one")
def _saves_one_late(patch):
    patch.setattr(
        checkpointing.Checkpointer,
        "due",
        lambda self, step: (
            self.save_interval is not None and step > 1 and (step - 1) % self.save_interval == 0
        ),  # 11, 21, 31
    )


@mutant("sigterm-ignored")
def _sigterm_default(patch):
    patch.setattr(checkpointing.StopSignals, "__enter__", lambda self: self)  # no handlers


@mutant("checkpoint-written-on-abort")
def _save_on_abort(patch):
    real = loop._Run.step

    def step_saving_on_abort(self, plan):
        try:
            return real(self, plan)
        except guards.NonFiniteError:
            if self.checkpointer is not None:
                self.save(plan)  # the aborted step's state, as if it were a good one
            raise

    patch.setattr(loop._Run, "step", step_saving_on_abort)


@mutant("final-checkpoint-skipped")
def _no_final_save(patch):
    real = checkpointing.Checkpointer.save

    def only_on_interval(self, step, *args, **kwargs):
        return real(self, step, *args, **kwargs) if self.due(step) else None

    patch.setattr(checkpointing.Checkpointer, "save", only_on_interval)


def _remember_init_weights(patch) -> dict[int, llama.Llama]:
    """Keep a copy of every model as built, before any training: wrap the builder and
    AdamW's constructor (the loop imports build_model by value but calls optim.build_adamw
    through the module, right after building the model)."""
    copies: dict[int, llama.Llama] = {}
    real_build, real_adamw = llama.build_model, optim.build_adamw

    def build_and_copy(cfg, **kwargs):
        model = real_build(cfg, **kwargs)
        copies.setdefault(id(model), copy.deepcopy(model))
        return model

    def adamw_and_copy(model, **kwargs):
        copies.setdefault(id(model), copy.deepcopy(model))
        return real_adamw(model, **kwargs)

    patch.setattr(llama, "build_model", build_and_copy)
    patch.setattr(optim, "build_adamw", adamw_and_copy)
    return copies


@mutant("checkpoint-saves-init-weights")
def _saves_init(patch):
    copies = _remember_init_weights(patch)
    real = save._write_model
    patch.setattr(save, "_write_model", lambda model, path: real(copies[id(model)], path))


# The exporter refuses what is not the live model's weights, naming the tensors (ExportError):
# that refusal is how FALSIFY-TRAIN-LOOP-015's test sees these two bugs.
@mutant("export-of-init-weights", refused_with=(export.ExportError,))
def _exports_init(patch):
    copies = _remember_init_weights(patch)
    real = export._weights_to_export
    patch.setattr(export, "_weights_to_export", lambda model: real(copies[id(model)]))


@mutant("export-drops-shared-tensors", refused_with=(export.ExportError,))
def _export_dedup(patch):
    real = export._weights_to_export

    def deduplicated(model):
        # Treats lm_head.weight as the tied duplicate of the embedding (same shape) and
        # drops it, as safetensors' save_model de-duplication does for a tied model.
        tensors = real(model)
        embed = tensors.get("model.embed_tokens.weight")
        head = tensors.get("lm_head.weight")
        if embed is not None and head is not None and head.shape == embed.shape:
            del tensors["lm_head.weight"]
        return tensors

    patch.setattr(export, "_weights_to_export", deduplicated)


# ---------------------------------------------------------------- atomicity
@mutant("manifest-checksum-stale")
def _stale_manifest(patch):
    def hash_then_rewrite(staging, writers, manifest_of):
        for name, write in writers:
            write(staging / name)
        manifest = manifest_of()  # hashed here ...
        # ... and the model file is written once more afterwards (a final metadata stamp).
        tensors = load_file(str(staging / MODEL_FILE))
        save_file(tensors, str(staging / MODEL_FILE), metadata={"format": "pt", "final": "1"})
        write_json(staging / MANIFEST_FILE, manifest)

    patch.setattr(save, "_write_files", hash_then_rewrite)


@mutant("manifest-written-before-data")
def _manifest_first(patch):
    def manifest_first(staging, writers, manifest_of):
        for name, write in writers:  # only to know the hashes
            write(staging / name)
        manifest = manifest_of()
        for name, _ in writers:
            (staging / name).unlink()
        write_json(staging / MANIFEST_FILE, manifest)
        save._boundary(f"wrote {MANIFEST_FILE}", staging)
        for name, write in writers:
            write(staging / name)
            save._boundary(f"wrote {name}", staging)

    patch.setattr(save, "_write_files", manifest_first)


@mutant("write-in-place-no-temp")
def _in_place(patch):
    patch.setattr(save, "_staging_dir", lambda final: final)


@mutant("loader-accepts-dir-without-manifest")
def _no_manifest_ok(patch):
    real = load._checkpoint_problems

    def lenient(path, architecture):
        if not (path / MANIFEST_FILE).exists():
            return []
        return real(path, architecture)

    patch.setattr(load, "_checkpoint_problems", lenient)


@mutant("manifest-hashes-not-verified")
def _hashes_trusted(patch):
    def exists_only(path, entry):
        if not path.is_file():
            return verify.FileVerdict(path.name, False, "listed in the manifest but missing")
        return verify.FileVerdict(path.name, True, "ok", entry.get("size"), entry.get("sha256"))

    patch.setattr(verify, "_file_verdict", exists_only)


# ---------------------------------------------------------------- pickle
@mutant("pickle-used-for-state")
def _torch_save_optimizer(patch):
    def torch_saved(tensors, path):
        torch.save(tensors, path)  # looked up at call time, like the real bug's call

    patch.setattr(save, "_write_optimizer", torch_saved)


@mutant("rng-state-pickled")
def _pickled_rng(patch):
    patch.setattr(
        rng, "_python_state_json", lambda: {"pickled": pickle.dumps(random.getstate()).hex()}
    )


@mutant("torch-load-on-resume")
def _torch_load(patch):
    patch.setattr(load, "_read_tensors", lambda path: torch.load(path, weights_only=True))
