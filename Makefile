# shipgate — the two commands the README promises, plus a few helpers.
#   make demo   the main job on the embedded default data (creates .venv when missing)
#   make test   the whole test suite, as CI runs it (creates .venv when missing)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# torch is pinned to the CPU wheel so pip never pulls a multi-GB CUDA build by accident.
# On a GPU machine: make venv TORCH_SPEC='torch==2.13.0' TORCH_PIP_ARGS='--index-url <your CUDA wheel index>'
TORCH_SPEC     ?= torch==2.13.0
TORCH_PIP_ARGS ?=
PYTEST_ARGS    ?=
# The suite on every core (pytest-xdist; worksteal evens out the long 370M tests).
# PYTEST_JOBS= runs it in one process.
PYTEST_JOBS    ?= -n auto --dist worksteal
# The slowest tests, printed at the end of `make test`: CI's log then says where the suite's
# time goes on the machine that ran it (the suite's budget is 20 minutes on 2 cores).
PYTEST_DURATIONS ?= --durations=30 --durations-min=5
# One intra-op thread per torch process in the suite (the workers and every trainer they
# start), unless the caller says otherwise: the workers already fill the cores, and two
# OpenMP threads per process then wait on each other. tools/run_dir_harness.py's test under
# one busy 2-thread process: 264 s with torch's default threads, 112 s with one.
PYTEST_THREADS ?= $(or $(OMP_NUM_THREADS),1)
PYTEST := OMP_NUM_THREADS=$(PYTEST_THREADS) tools/pytest.sh

.PHONY: venv demo test test-quick test-reversed ship-blocking gates-check audit lint clean golden framework-alone examples-alone

venv: $(STAMP)

# Two distributions from this repository: the framework (`shipgate`, pyproject.toml) with the
# `dev` extra (this repository's tests) and the reference trainer (`shipgate-trainer`,
# trainer/pyproject.toml), both editable and in one resolve. The Trainer pack
# (examples/hf-trainer, a distribution of its own) goes in editable and without its
# dependencies: the `dev` extra holds them, and its "shipgate" is this repository.
# trainer/setup.py compiles the BPE merge loop (trainer/tokenizer/_merge_loop.c, a C compiler
# is needed); an edit to it rebuilds the venv's install, so the module matches its source.
$(STAMP): pyproject.toml trainer/pyproject.toml trainer/setup.py trainer/tokenizer/_merge_loop.c \
          examples/hf-trainer/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check $(TORCH_PIP_ARGS) '$(TORCH_SPEC)'
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]' -e trainer
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e examples/hf-trainer
	touch $(STAMP)

# The main job: `trainer pipeline` runs every stage (tokenizer, shards, training, export,
# baseline, plots, gates, report) into $(DEMO) and prints a summary. Stages are keyed by
# content hashes: a re-run reuses what is unchanged and resumes an interrupted training.
DEMO        ?= runs/demo
DEMO_CONFIG ?= configs/quickstart-cpu.yaml
DEMO_ARGS   ?=

demo: $(STAMP)
	$(BIN)/trainer pipeline --config $(DEMO_CONFIG) --out $(DEMO) $(DEMO_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check gates trainer tools tests examples

# Projects under examples/ adopt shipgate on their own (each has its pyproject.toml and
# [tool.shipgate] table); their contracts are validated and audited from inside them.
EXAMPLES := $(patsubst %/pyproject.toml,%,$(wildcard examples/*/pyproject.toml))
ABS_BIN  := $(abspath $(BIN))

test: $(STAMP) lint
	$(BIN)/pv validate contracts/*.yaml
	for ex in $(EXAMPLES); do (cd $$ex && $(ABS_BIN)/pv validate contracts/*.yaml) || exit 1; done
	$(PYTEST) $(PYTEST_JOBS) $(PYTEST_DURATIONS) $(PYTEST_ARGS)

# Rewrite the golden traces (tests/golden/) after a change meant to move them; say why.
golden: $(STAMP)
	$(BIN)/python -m tests.golden.traces --write

test-quick: $(STAMP)
	$(PYTEST) $(PYTEST_JOBS) -m "not slow" $(PYTEST_ARGS)

# The whole suite in reverse order (tests/reverse_order.py), each file in one worker: a net for
# tests that pass only after the tests before them. Not in CI (it is a second suite's time).
test-reversed: $(STAMP)
	$(PYTEST) -p tests.reverse_order -n auto --dist loadfile $(PYTEST_ARGS)

# Exactly the tests bound to ship-blocking gates (none bound yet is not a failure).
ship-blocking: $(STAMP)
	ALLOW_NO_TESTS=1 $(PYTEST) $(PYTEST_JOBS) -m ship_blocking $(PYTEST_ARGS)

# Re-measure every PASS/PARTIAL gate at HEAD, ship-blocking or not (its bound tests and its
# measurement, each gate in its own process, as many at a time as there are CPUs, a gate that
# times the machine alone), writing nothing tracked: an artifact that is not here is rebuilt
# from its recipe into the ignored cache .cache/shipgate/ (SHIPGATE_CACHE moves it). Fails
# unless each gets the verdict its contract records; then pv checks the evidence is fresh.
# The disk is shared: with less than GATES_CHECK_MIN_FREE_GB free here, one gate at a time
# (two 370M gates side by side held 15 GB with the cached checkpoint; one at a time, 10).
GATES_CHECK_MIN_FREE_GB ?= 20
gates-check: $(STAMP)
	free_gb=$$(df -Pk . | awk 'NR == 2 {print int($$4 / 1048576)}'); jobs=; \
	if [ "$$free_gb" -lt $(GATES_CHECK_MIN_FREE_GB) ]; then \
	  echo "gates-check: $$free_gb GB free (< $(GATES_CHECK_MIN_FREE_GB)): one gate at a time"; \
	  jobs="--jobs 1"; \
	fi; \
	$(BIN)/gates check --all $$jobs --files contracts/*.yaml
	$(BIN)/pv status --require-ship-ready contracts/*.yaml

# The mutation audit of every bound falsification test in contracts/: each passes on the
# real code and fails under each of its mutants (one pytest run per test and mutant, forked
# from warm interpreters, as many at a time as there are CPUs: docs/mutants.md). CI runs it
# after `make test`; it is not a pytest test, so the suite stays inside its budget. It writes committed evidence: per test and mutant
# the outcome, seconds and the files the run read (pv reports AUDIT-STALE when one changes),
# evidence/audit/audit.json here and in each example. Relative, so the recorded command holds
# no absolute path.
AUDIT_OUT ?= evidence/audit/audit.json

# Each part says how long it took (issue 32's budget is for the main project's audit).
audit: $(STAMP)
	mkdir -p $(dir $(AUDIT_OUT))
	start=$$(date +%s); CI=true $(BIN)/gates audit --out $(AUDIT_OUT) --files contracts/*.yaml; \
	rc=$$?; echo "audit: the main project took $$(( $$(date +%s) - start )) s"; exit $$rc
	start=$$(date +%s); for ex in $(EXAMPLES); do \
	  (cd $$ex && mkdir -p evidence/audit && CI=true $(ABS_BIN)/gates audit \
	    --files contracts/*.yaml --out evidence/audit/audit.json) || exit 1; \
	done; echo "audit: the examples took $$(( $$(date +%s) - start )) s"

# Adopters in virtualenvs of their own (tools/adopter_venv.py; each needs the package registry).
# framework-alone: the framework alone (no torch, numpy, matplotlib or trainer importable), then
# pv init, pv validate, gates check and gates audit on the scaffold; CI runs it (under a minute).
# examples-alone: each example with only what its pyproject.toml declares (torch first, the CPU
# wheel), then its pv validate, suite and every gate; minutes each, so not in CI.
framework-alone:
	$(PYTHON) tools/adopter_venv.py framework

examples-alone:
	for ex in $(EXAMPLES); do $(PYTHON) tools/adopter_venv.py $$ex || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
