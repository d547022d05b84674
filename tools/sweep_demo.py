"""Sweep candidate quickstart configurations through the real `make demo` pipeline and record
each one's wall-clock and validation perplexity ratio to the Kneser-Ney trigram (issue 21,
item 3: the demo model must beat its trigram within the 5-minute pipeline budget).

    python tools/sweep_demo.py --out evidence/benchmarks/demo-sweep-cpu.json
    python tools/sweep_demo.py --only v2048-d128-l4 --out /tmp/one.json

Each candidate is configs/quickstart-cpu.yaml with a few keys replaced (dotted YAML paths,
listed in CANDIDATES and recorded in the JSON). It runs as `trainer pipeline --config C
--out WORK/v<vocab> --no-gates` in a fresh process, so its wall-clock includes every stage a
newcomer's `make demo` runs except the gate stage (which re-measures three gates and does
not depend on the model); the tokenizer and shards of one vocabulary are trained once and
reused by the next candidate of that vocabulary (the pipeline's own stage reuse), so the
JSON records each candidate's stage seconds and marks reused stages. The ratio is the
pipeline's own baseline stage: the trigram is fitted on exactly the tokens the run
consumed and both are scored on the same validation targets.

The machine is 2 cores and other work may run beside the sweep: the load average before
and after each candidate is recorded, and the shipped configuration is timed again by a
fresh `make demo` (README).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "configs" / "quickstart-cpu.yaml"

#: name -> dotted-key overrides of configs/quickstart-cpu.yaml.
CANDIDATES: dict[str, dict[str, Any]] = {}


def _candidate(name: str, **overrides: Any) -> None:
    CANDIDATES[name] = {k.replace("__", "."): v for k, v in overrides.items()}


def _shape(shape: tuple[int, int, int, int, int, int]) -> dict:
    """(vocab, hidden, layers, heads, KV heads, MLP width), embeddings tied."""
    vocab, hidden, layers, heads, kv, ffn = shape
    return {
        "model__architecture__vocab_size": vocab,
        "model__architecture__hidden_size": hidden,
        "model__architecture__num_hidden_layers": layers,
        "model__architecture__num_attention_heads": heads,
        "model__architecture__num_key_value_heads": kv,
        "model__architecture__intermediate_size": ffn,
        "model__architecture__tie_word_embeddings": True,
    }


def _schedule(*, steps: int, eval_every: int, save_every: int) -> dict:
    """A schedule of ``steps`` with the quickstart's 10 % warmup."""
    return {
        "training__max_steps": steps,
        "training__warmup_steps": steps // 10,
        "training__eval_interval": eval_every,
        "training__save_interval": save_every,
    }


_candidate("quickstart-v8192-d64-l2")  # the configuration shipped before issue 21
_candidate("v8192-d64-l2-lr3e-3", optimizer__lr=3.0e-3)
_candidate("v2048-d128-l4-lr3e-3", **_shape((2048, 128, 4, 4, 2, 344)), optimizer__lr=3.0e-3)
_candidate("v4096-d128-l4-lr3e-3", **_shape((4096, 128, 4, 4, 2, 344)), optimizer__lr=3.0e-3)
_candidate("v2048-d192-l4-lr2e-3", **_shape((2048, 192, 4, 6, 2, 512)), optimizer__lr=2.0e-3)
_candidate(
    "v1024-d128-l4-lr3e-3-900",
    **_shape((1024, 128, 4, 4, 2, 344)),
    optimizer__lr=3.0e-3,
    **_schedule(steps=900, eval_every=300, save_every=300),
)
_candidate(
    "v2048-d128-l4-lr4e-3-800",
    **_shape((2048, 128, 4, 4, 2, 344)),
    optimizer__lr=4.0e-3,
    **_schedule(steps=800, eval_every=200, save_every=400),
)

_candidate(
    "v2048-d128-l4-lr4e-3-1100",
    **_shape((2048, 128, 4, 4, 2, 344)),
    optimizer__lr=4.0e-3,
    **_schedule(steps=1100, eval_every=275, save_every=550),
)
_candidate(
    "v2048-d128-l4-lr6e-3-1100",
    **_shape((2048, 128, 4, 4, 2, 344)),
    optimizer__lr=6.0e-3,
    **_schedule(steps=1100, eval_every=275, save_every=550),
)
_candidate(
    "v1024-d128-l4-lr4e-3-1200",
    **_shape((1024, 128, 4, 4, 2, 344)),
    optimizer__lr=4.0e-3,
    **_schedule(steps=1200, eval_every=300, save_every=600),
)


def _set(tree: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    for key in keys[:-1]:
        tree = tree.setdefault(key, {})
    tree[keys[-1]] = value


def candidate_config(overrides: dict[str, Any]) -> dict:
    config = copy.deepcopy(yaml.safe_load(QUICKSTART.read_text(encoding="utf-8")))
    for key, value in overrides.items():
        _set(config, key, value)
    return config


def _vocab(config: dict) -> int:
    return int(config["model"]["architecture"]["vocab_size"])


def run_candidate(name: str, overrides: dict[str, Any], work: Path) -> dict:
    config = candidate_config(overrides)
    config["name"] = f"sweep-{name}"
    config_path = work / "configs" / f"{name}.yaml"
    config_path.parent.mkdir(parents=True, exist_ok=True)
    config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    run_dir = work / f"v{_vocab(config)}"
    load_before = os.getloadavg()
    started = time.perf_counter()
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "trainer"),
            "pipeline",
            "--config",
            str(config_path),
            "--out",
            str(run_dir),
            "--no-gates",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    row: dict[str, Any] = {
        "name": name,
        "overrides": overrides,
        "exit_code": proc.returncode,
        "wall_s": round(wall, 1),
        "load_average_1min": {"before": load_before[0], "after": os.getloadavg()[0]},
    }
    if proc.returncode != 0:
        row["stderr_tail"] = proc.stderr[-2000:]
        return row
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    base, training = summary["baseline"], summary["training"]
    row.update(
        {
            "stages": summary["stages"],
            "pipeline_s_without_reused_stages": round(
                sum(s["seconds"] for s in summary["stages"] if not s["reused"]), 1
            ),
            "train_stage_s": next(s["seconds"] for s in summary["stages"] if s["stage"] == "train"),
            "steps": training["steps"],
            "median_tokens_per_s": training["median_tokens_per_s"],
            "last_val_loss": training["last_val_loss"],
            "model_perplexity": base["model"]["perplexity"],
            "kn_trigram_perplexity": base["kn_trigram"]["perplexity"],
            "ratio": base["ratio"],
            "validation_targets": base["validation"]["targets"],
            "bytes_per_token": summary["tokenizer"]["bytes_per_token"],
        }
    )
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON to write")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "sweep", help="run directories")
    ap.add_argument("--only", nargs="*", default=None, help="candidate names (default: all)")
    args = ap.parse_args(argv)
    names = args.only or list(CANDIDATES)
    unknown = [n for n in names if n not in CANDIDATES]
    if unknown:
        ap.error(f"unknown candidate(s): {', '.join(unknown)}; known: {', '.join(CANDIDATES)}")
    rows = []
    for name in names:
        row = run_candidate(name, CANDIDATES[name], args.work)
        rows.append(row)
        print(json.dumps({k: row.get(k) for k in ("name", "wall_s", "ratio", "exit_code")}))
        sys.stdout.flush()
        result = {
            "workload": "trainer pipeline --no-gates on the embedded corpus (make demo's data)",
            "base_config": "configs/quickstart-cpu.yaml",
            "budget": "make demo's pipeline <= 300 s on 2 cores (issue 21 item 3)",
            "candidates": rows,
            "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform()},
            "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
