"""python -m trainer.oracle [--seeds 0 1 2] [--out FILE.json]: the oracle's table."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trainer import exit_codes, terminal
from trainer.oracle.run import RATIO_LIMIT, SEEDS, run_seeds


def main(argv: list[str] | None = None) -> int:
    terminal.install()  # the trainer's log records on stderr as "trainer: ..." lines
    parser = argparse.ArgumentParser(prog="python -m trainer.oracle", description=__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--out", type=Path, help="write the per-seed results as JSON")
    args = parser.parse_args(argv)
    results = run_seeds(tuple(args.seeds))
    print(f"{'seed':>4} {'model ppl':>10} {'KN ppl':>10} {'ratio':>7} {'steps':>6} {'seconds':>8}")
    for r in results:
        print(
            f"{r.seed:>4} {r.model_ppl:>10.3f} {r.kn_ppl:>10.3f} {r.ratio:>7.3f} "
            f"{r.steps:>6} {r.seconds:>8.1f}"
        )
    worst = max(r.ratio for r in results)
    verdict = "PASS" if worst <= RATIO_LIMIT else "FAIL"
    print(f"worst ratio {worst:.3f} (limit {RATIO_LIMIT}): {verdict}")
    if args.out:
        payload = {
            "limit": RATIO_LIMIT,
            "worst_ratio": worst,
            "seeds": [r.to_json() for r in results],
        }
        args.out.write_text(json.dumps(payload, indent=2) + "\n")
    return exit_codes.OK if worst <= RATIO_LIMIT else exit_codes.FINDINGS


if __name__ == "__main__":
    sys.exit(main())
