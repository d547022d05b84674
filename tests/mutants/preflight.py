"""Known bugs of the vocabulary preflight (FALSIFY-ARCH-370M-011), injected by `gates audit`.

Both patch trainer/train/preflight.py check_run, the one call loop.train makes before it
builds the model; everything else is the real code. Killed by
tests/unit/trainer/test_loop_preflight.py.
"""

from gates.mutants import mutant
from trainer.train import loop, preflight


@mutant("vocab-preflight-after-first-step")
def _preflight_after_first_step(patch):
    # The check is made where a "sanity check at the first evaluation" would make it: the
    # model is built, steps are taken and the run's files written before it refuses.
    check, evaluate = preflight.check_run, loop._Run.evaluate
    pending: list[tuple] = []

    def remember(config, options, *sources):
        pending.append((config, options, *sources))
        return []

    def evaluate_then_check(self, step, record):
        while pending:
            check(*pending.pop())
        evaluate(self, step, record)

    patch.setattr(preflight, "check_run", remember)
    patch.setattr(loop._Run, "evaluate", evaluate_then_check)


@mutant("vocab-preflight-skipped-on-resume")
def _preflight_skipped_on_resume(patch):
    # "The checkpoint was checked when it was written": a resume goes straight to loading.
    check = preflight.check_run

    def fresh_runs_only(config, options, *sources):
        return [] if options.resume_from is not None else check(config, options, *sources)

    patch.setattr(preflight, "check_run", fresh_runs_only)
