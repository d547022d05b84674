"""Every exit status of the `trainer` command line, each number with one name.

    from trainer import exit_codes
    return exit_codes.ABORTED          # looked up at exit time (a mutant sets it to 0)

The framework's codes are shared (gates/exit_codes.py, re-exported here); the trainer's
own never reuse a framework number, so a status means the same thing whichever tool
returned it (`trainer pipeline` passes `trainer apply`'s on):

    0    OK             done; `trainer apply`: its last step, early stopping, or SIGTERM/SIGINT
                        after the step in progress and its checkpoint
    1    FINDINGS       an input that fails its checks: config, data, tokenizer, run or
                        checkpoint directory, a refused resume, a failed pipeline stage;
                        nothing written. `trainer pipeline`: also a gate its gate stage
                        checked that reads FAIL (all written; the gate named on stderr)
    2    USAGE          bad command line (argparse)
    3    INTERNAL       pv and gates: a bug in shipgate (the trainer never returns it: an
                        unexpected exception ends it with Python's traceback, status 1)
    4    ALERT_STOPPED  a stop rule of monitoring.alerts ended the run after a step
                        (checkpointed when the run has a checkpoint directory)
    5    ABORTED        the run aborted: non-finite loss or gradient norm, divergence,
                        exhausted data; the step and the value on stderr
    6    SAVE_FAILED    the run's final checkpoint (its last step, early stop, stop alert or
                        SIGTERM/SIGINT save) could not be written (disk full, file size
                        limit, permission): its steps are not all saved; the cause and the
                        last good checkpoint on stderr, status save_failed in
                        training_state.json and the run store; `trainer pipeline` neither
                        exports nor scores it
    130, 143        SIGNALLED_BASE + the signal's number: `trainer pipeline` whose training
                    run SIGINT or SIGTERM stopped (after a step and its checkpoint): not
                    done, nothing exported, the next run resumes it; SIGINT in another
                    stage: that stage not recorded done
    141  BROKEN_PIPE    standard output closed by its reader (`trainer runs ls | head`)

Under torchrun the launcher's own status is 1 whenever a rank exits non-zero.
"""

from gates.exit_codes import (  # noqa: F401 - re-exported: the trainer's names for them
    BROKEN_PIPE,
    FINDINGS,
    INTERNAL,
    OK,
    USAGE,
    stop_on_broken_pipe,
)

ALERT_STOPPED = 4
ABORTED = 5
SAVE_FAILED = 6
SIGNALLED_BASE = 128  # the shell's convention: a job a signal ended exits 128 + its number
