"""One data-parallel training run, launched by torchrun (or alone, as world size 1).

    python -m torch.distributed.run --standalone --nproc_per_node 2 \\
        -m tests.unit.trainer.distributed_child SPEC.json OUT
    python -m tests.unit.trainer.distributed_child SPEC.json OUT      # one process

Applies $SHIPGATE_MUTANT as the pytest plugin does (so a mutant under audit reaches every
rank), then trains the tiny model of loop_support on padded sequences whose non-padding
counts differ from row to row (so ranks hold unequal token counts), and rank 0 writes
OUT/result.json (per-step losses and grad norms as exact hex floats, the checkpoint steps)
and OUT/weights.safetensors (the final weights). SPEC holds run-config values by dotted
key ("data.micro_batch", "training.max_steps", "training.data_parallel", ...: loop_support's
loop_config) and optionally "checkpoints": true (OUT is the run directory, checkpoints in
OUT/checkpoints), "stop_after": N, "resume": true (from OUT's latest) or "resume_from":
PATH (RunOptions), and "alerts_by_rank": {RANK: [{"when": ..., "action": ...}, ...]}
(monitoring.alerts rules per rank: a test can make one rank's rule fire alone).
result.json also holds the stop reason, the steps run and the stop alert (index, step,
value, rank).

SPEC {"runs": {NAME: SPEC, ...}} takes several runs one after the other, each into
OUT/NAME, in one process group that outlives them (one torchrun launch, not one each).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from gates import mutants

ROOT = Path(__file__).resolve().parents[3]
PAD = 0


def padded_rows(n: int, seq_len: int, seed: int):
    """Rows of random tokens 1..V-1, each padded (PAD) after a seeded length of 2..T+1."""
    import torch  # noqa: PLC0415

    from tests.unit.trainer.loop_support import VOCAB, random_rows  # noqa: PLC0415

    rows = random_rows(n, seq_len, seed=seed, vocab_size=VOCAB - 1) + 1
    generator = torch.Generator().manual_seed(seed + 1)
    lengths = torch.randint(2, seq_len + 2, (n,), generator=generator)
    for i, length in enumerate(lengths.tolist()):
        rows[i, length:] = PAD
    return rows


def run(spec: dict, out: Path) -> None:
    import torch  # noqa: PLC0415
    from safetensors.torch import save_file  # noqa: PLC0415

    from tests.unit.trainer.loop_support import TensorSequences, loop_config  # noqa: PLC0415
    from trainer.train.loop import train  # noqa: PLC0415
    from trainer.train.options import RunOptions  # noqa: PLC0415

    torch.set_num_threads(1)
    values = {"training.epochs": 100} | spec  # what is not popped below: run-config keys
    checkpoints = values.pop("checkpoints", False)
    resume_from = values.pop("resume_from", "latest" if values.pop("resume", False) else None)
    options = RunOptions(
        device=values.pop("device", "cpu"),
        out_dir=out if checkpoints else None,
        checkpoint=checkpoints,
        stop_after=values.pop("stop_after", None),
        resume_from=resume_from,
    )
    by_rank = values.pop("alerts_by_rank", {})
    if by_rank:  # YAML-shaped rule mappings, parsed as a config file's are
        values["monitoring.alerts"] = by_rank.get(os.environ.get("RANK", "0"), [])
    data = TensorSequences(padded_rows(64, 8, seed=5), pad_id=PAD)
    result = train(loop_config(values), data, None, options=options)
    weights = _final_weights(result.model)  # every rank: gathering shards is a collective
    if os.environ.get("RANK", "0") != "0":
        return
    save_file(weights, str(out / "weights.safetensors"))
    record = {
        "losses": [float(x).hex() for x in result.losses],
        "grad_norms": [float(x).hex() for x in result.grad_norms],
        "checkpoints": result.checkpoints,
        "resumed_from": result.resumed_from,
        "stop_reason": result.stop_reason,
        "steps_run": result.steps_run,
        "alert": None
        if result.alert is None
        else {
            "index": result.alert.index,
            "step": result.alert.step,
            "value": result.alert.value,
            "rank": result.alert.rank,
        },
    }
    (out / "result.json").write_text(json.dumps(record), encoding="utf-8")


def _final_weights(model) -> dict:
    from trainer.train import fsdp  # noqa: PLC0415

    if fsdp.is_sharded(model):
        return {k: v.contiguous() for k, v in fsdp.full_state(model, None)[0].items()}
    return {k: v.detach().contiguous() for k, v in model.state_dict().items()}


def run_all(runs: dict[str, dict], out: Path) -> None:
    """Each run into OUT/NAME, in order, in one process group (joined here, so train()
    uses it and leaves it alone)."""
    import torch  # noqa: PLC0415

    from trainer.train import distributed  # noqa: PLC0415

    with distributed.process_group(torch.device("cpu")):
        for name, spec in runs.items():
            (out / name).mkdir(parents=True, exist_ok=True)
            run(spec, out / name)


if __name__ == "__main__":
    mutants.apply_from_env(ROOT)
    target = Path(sys.argv[2])
    target.mkdir(parents=True, exist_ok=True)
    given = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    if "runs" in given:
        run_all(given["runs"], target)
    else:
        run(given, target)
    # Said on the way out, so a rank that dies after it died at exit, not mid-run (a gloo
    # abort at interpreter exit has failed a CI run: distributed_support.run_child).
    rank = os.environ.get("RANK", "0")
    print(f"distributed_child: rank {rank} finished, process group left", file=sys.stderr)
