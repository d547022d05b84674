"""shipgate reference trainer: byte-level BPE, corpus shards, Llama model, training loop.

The system the contracts in ``contracts/`` are falsified against. PyTorch, CUDA when
present, CPU otherwise. Entry point: the ``trainer`` command (``trainer.cli``).

Layers, bottom to top. A module imports from its own subpackage and from the layers below
its own, never from one beside or above it, in a function body too; each subpackage's
commands.py (its `trainer` subcommand) obeys the same rule, and only cli.py gathers them
all (tests/unit/test_layers.py holds the graph to this list):

1. exit_codes, runfiles, terminal, userfiles, setup - the command line's exit statuses; a
   run's files, their names and how each is written; what reaches the terminal (the
   "trainer" logger's handler); how a file a user names is read, and a directory checked for
   writing; setup.py, the build's script (it compiles tokenizer/_merge_loop.c), which only
   the build backend runs
2. tokenizer - byte-level BPE and the corpus it reads
3. model, data - the Llama model and its weight files; token shards from a corpus
4. config, checkpoint - run configs (schema, step algebra, LR schedule); checkpoints
5. store, plan, monitor, plot - the run store; `trainer plan`; a run's progress; plots
6. train - the training loop, and apply_config: a config's checks, then its run
7. oracle - the grammar oracle, trained by the loop
8. pipeline - the main job, through the functions below and the gates framework's
9. cli - `trainer`: the parser of every subcommand
10. __main__ - `python -m trainer`
"""

__version__ = "0.1.0"
