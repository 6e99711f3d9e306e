# The two commands: `make serve` starts the server, `make test` runs the whole suite.
# Both create or refresh .venv on first use (and whenever pyproject.toml changes).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# What serving needs (the package and its dependencies, no test tools): `make serve` only.
SERVE_STAMP := $(VENV)/.serve-installed
SOURCES := pyproject.toml setup.py src/iobridge/npamp/_speedups.c

.PHONY: serve test lint bench e2e-deps frontend-deps clean mutants mutants-report mutants-check mutants-record fuzz

# The dev install holds everything serving needs, so it marks the serve install done too.
$(STAMP): $(SOURCES)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP) $(SERVE_STAMP)

# --no-compile: bytecode is written when a module is first imported, only for the modules the
# server imports (pip compiling every installed file took half of a cold `make serve`).
$(SERVE_STAMP): $(SOURCES)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-compile -e .
	touch $(SERVE_STAMP)

serve: $(SERVE_STAMP)
	$(BIN)/iobridge serve

tests/e2e/node_modules/.installed: tests/e2e/package.json
	cd tests/e2e && npm install --no-audit --no-fund --silent
	touch $@

tests/web/node_modules/.installed: tests/web/package.json
	cd tests/web && npm install --no-audit --no-fund --silent
	touch $@

e2e-deps: tests/e2e/node_modules/.installed tests/web/node_modules/.installed

# assistant-ui and CopilotKit (tests/frontends), installed exactly from the lock.
tests/frontends/node_modules/.installed: tests/frontends/package.json tests/frontends/package-lock.json
	cd tests/frontends && npm ci --no-audit --no-fund --silent
	touch $@

frontend-deps: tests/frontends/node_modules/.installed

test: $(STAMP) e2e-deps frontend-deps
	$(BIN)/ruff check src tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy

# Every bench script (``_*.py`` are their shared parts); the slow ones in their --quick form.
BENCH_QUICK := bench/cold_start.py bench/idle_runs.py bench/long_thread.py bench/memory_bounds.py bench/scale_out.py

bench: $(STAMP)
	for script in bench/[!_]*.py; do \
	  case " $(BENCH_QUICK) " in *" $$script "*) flags=--quick;; *) flags=;; esac; \
	  $(BIN)/python $$script $$flags || exit 1; \
	done

# The compiled N-PAMP per-event path (src/iobridge/npamp/_speedups.c) built with AddressSanitizer
# and UBSan, fuzzed against its pure-Python twins for FUZZ_SECONDS (not in CI; see
# scripts/fuzz_speedups.py). A finding aborts with the sanitizer's report or a mismatch.
FUZZ_SECONDS ?= 300
FUZZ_SO := build/fuzz/_speedups.so
CC ?= cc

fuzz: $(STAMP)
	mkdir -p build/fuzz
	$(CC) -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
	  -fno-sanitize-recover=undefined -Wall -Wextra -Werror -fPIC -shared \
	  -I"$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
	  src/iobridge/npamp/_speedups.c -o $(FUZZ_SO)
	PYTHONMALLOC=malloc ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  LD_PRELOAD="$$($(CC) -print-file-name=libasan.so)" \
	  $(BIN)/python scripts/fuzz_speedups.py $(FUZZ_SO) --seconds $(FUZZ_SECONDS)

# Mutation testing (slow, not in CI; docs/testing.md). One group at a time, MUTANT_CHILDREN
# mutmut workers, each group with its own tests only. Repoint a group here when its modules move.
# A run writes docs/mutants/<group>.json when it ends (commit it); `make mutants-record` writes
# it for a run that was stopped. MUTANT_RESUME=1 goes on with a stopped run: its scratch copy in
# build/ (same commit, clean tree), or else the record's open mutants, at any commit where the
# record holds. MUTANT_REOPEN=1, once new test files were committed for a record's survivors,
# judges only its survivors and untested mutants again (its kills hold) at the new commit.
# MUTANT_CARRY="tests/x.py::test_y ...", once those tests' bodies changed, carries the record
# to the new commit, judging again only the mutants the change can turn.
# MUTANT_CHECK=1 (or `make mutants-check`) only says whether the record holds.
MUTANT_CHILDREN ?= 4
MUTANT_ALL := protocol auth npamp runtime observability cluster http store app agents
MUTANT_GROUPS ?= $(MUTANT_ALL)
MUTANT_TARGETS := $(addprefix mutants-,$(MUTANT_ALL))
.PHONY: $(MUTANT_TARGETS)
MUTATE_protocol := src/iobridge/protocol/*.py
# resources.py is models and the schemas they publish, computed once at import (mutmut
# never sees that code run mutated); tests/http/test_openapi.py checks the served schemas.
SKIP_protocol := src/iobridge/protocol/resources.py
TESTS_protocol := tests/protocol
# Hypothesis over whole runs: 16 of the group's 20 s per surviving mutant; kept in `make test`.
DESELECT_protocol := tests/protocol/test_guard_properties.py::test_any_agent_behaviour_yields_a_valid_run \
	tests/protocol/test_guard_properties.py::test_any_function_agent_streams_a_valid_run_and_the_thread_keeps_it
MUTATE_auth := src/iobridge/auth.py
TESTS_auth := tests/http/test_ownership.py tests/npamp_server/test_settings.py \
	tests/hostile/test_jwt_claims.py
NPAMP := src/iobridge/npamp
# "stream" of the issue is CC-STREAM: the session (bridge/session.py) and its state machine.
MUTATE_npamp := $(NPAMP)/wire/frame.py $(NPAMP)/record/cipher.py $(NPAMP)/handshake/machine.py \
	$(NPAMP)/bridge/envelope.py $(NPAMP)/bridge/session.py $(NPAMP)/bridge/state.py
# test_connection and test_aio drive the batch paths (FrameReader.next_channel,
# ReceiveState.open_run) that only a whole association takes.
TESTS_npamp := tests/npamp/test_frame.py tests/npamp/test_record.py tests/npamp/test_handshake.py \
	tests/npamp/test_handshake_kat.py tests/npamp/test_bridge.py tests/npamp/test_stream.py \
	tests/npamp/test_connection.py tests/npamp/test_aio.py tests/npamp/test_compiled_paths.py
MUTATE_runtime := src/iobridge/runtime/*.py
RUNTIME_CORE_TESTS := tests/runtime tests/http/test_runs.py tests/http/test_function_agents.py \
	tests/observability/test_metrics.py tests/observability/test_tracing.py
# Durable runs (revival, checkpoints, take-over), subagents (delegation), the cluster's
# in-process seam (following, cluster), queued input (admission), encrypted reasoning,
# resumable streams' ids and the run bounds live in runtime/ too; without their in-process
# tests 1,280 of its 4,173 mutants had none at ad7eb43.
TESTS_runtime := $(RUNTIME_CORE_TESTS) tests/durable/test_durable_backend.py \
	tests/durable/test_foreign_dormant.py tests/durable/test_upstream_durable.py \
	tests/branches/test_branches_http.py tests/branches/test_multitask.py \
	tests/branches/test_strategy_options.py tests/agents/test_subagents.py \
	tests/agents/test_subagent_tools.py tests/agents/test_reasoning_values.py \
	tests/cluster/test_backend.py tests/cluster/test_backend_threads.py \
	tests/hostile/test_shared_principal_runs.py tests/hostile/test_run_bounds.py \
	tests/hostile/test_terminal_events.py tests/hostile/test_tool_call_ids.py \
	tests/hostile/test_strict_input.py tests/http/test_stream_writes.py
# The store's timeouts and failed writes (RUN_ERROR STORE_UNAVAILABLE, readiness) are tested
# on PostgreSQL only (a server that never answers, a frozen one).
POSTGRES_runtime := 1
# Server subprocesses (they import the unmutated code) for 29 s and 7 s: they can kill no mutant;
# the cluster tests' own (`=`: DESELECT_cluster is set below).
DESELECT_runtime = tests/runtime/test_memory.py::test_history_survives_a_killed_server_process \
	tests/runtime/test_shutdown.py::test_sigterm_ends_every_live_run_with_server_shutdown \
	$(DESELECT_cluster)

MUTATE_observability := src/iobridge/observability/*.py
TESTS_observability := tests/observability
# Server subprocesses (they import the unmutated code): they can kill no mutant.
DESELECT_observability := tests/observability/test_metrics_port.py \
	tests/observability/test_logs.py::test_serve_with_json_logs_writes_only_json_lines \
	tests/observability/test_logs.py::test_an_unknown_log_format_is_refused \
	tests/observability/test_tracing.py::test_without_tracing_no_opentelemetry_sdk_is_imported
# The Redis seam in process: each test starts its own redis-server. tests/cluster/test_replicas.py
# and test_npamp.py drive replica subprocesses (unmutated code) and are not in the group;
# test_without_redis_url_nothing_of_redis_is_imported_or_run is one too.
MUTATE_cluster := src/iobridge/cluster/*.py
TESTS_cluster := tests/cluster/test_backend.py tests/cluster/test_backend_threads.py tests/cluster/test_redis_seam.py \
	tests/hostile/test_shared_principal_runs.py
# Mirror-loop mutants hang the follow tests: five times a test's time (not ten) is enough.
TIMEOUT_cluster := 5
# test_a_follower_whose_attach_was_lost_asks_for_the_mirror (heartbeat 0.1 s, lost 0.3 s)
# hung the measuring run twice under coverage on the loaded machine (pytest's 120 s timeout).
DESELECT_cluster := tests/cluster/test_backend.py::test_without_redis_url_nothing_of_redis_is_imported_or_run \
	tests/cluster/test_backend.py::test_a_follower_whose_attach_was_lost_asks_for_the_mirror
MUTATE_http := src/iobridge/http/*.py
# test_multitask.py: the ": queued" comment of an enqueued run's stream.
TESTS_http := tests/http tests/observability/test_metrics.py tests/observability/test_readiness.py \
	tests/hostile/test_server_limits.py tests/hostile/test_cross_site.py \
	tests/hostile/test_encoded_slash.py tests/hostile/test_unusable_principals.py \
	tests/branches/test_multitask.py
# A server subprocess, and node's syntax check of the playground's scripts: neither runs http/.
DESELECT_http := tests/http/test_demo_hostile.py \
	tests/http/test_playground.py::test_scripts_parse_as_modules
# The store runs its contract on PostgreSQL too (pg_run_sql.py and the dialect branches of
# sqlalchemy_store.py run nowhere else); IOBRIDGE_TEST_POSTGRES_URL is kept for this group.
# test_branch_store.py: fork, list, read and switch branches (nothing else in the group does);
# the durable ones: the checkpoint rows (checkpoint_rows.py and the store's checkpoint calls).
MUTATE_store := src/iobridge/store/*.py
TESTS_store := tests/store tests/branches/test_branch_store.py tests/runtime/test_memory.py \
	tests/runtime/test_store_timeouts.py tests/durable/test_checkpoint_store.py \
	tests/durable/test_durable_backend.py
POSTGRES_store := 1
# Alembic loads env.py and the revisions by path under names of its own, so mutmut's
# trampoline never sees them as iobridge.store.migrations.*: their mutants can neither be
# tied to a test nor switched on (all "no tests"). The migrated schema is compared with
# records.metadata by tests/store/test_sqlalchemy_store.py instead.
SKIP_store := src/iobridge/store/migrations/*
DESELECT_store := tests/runtime/test_memory.py::test_history_survives_a_killed_server_process
MUTATE_app := src/iobridge/app.py
# The Backend is the door to branches, discovery, durable runs and the cluster: their
# in-process tests judge it too (a first run without them left 548 of 1,293 untested).
TESTS_app := $(RUNTIME_CORE_TESTS) tests/http/test_threads.py tests/http/test_agents.py \
	tests/cluster/test_backend.py tests/cluster/test_backend_threads.py \
	tests/branches/test_branches_http.py tests/durable/test_durable_backend.py \
	tests/durable/test_foreign_dormant.py tests/durable/test_upstream_durable.py
DESELECT_app := $(DESELECT_runtime)
POSTGRES_app := 1
MUTATE_agents := src/iobridge/agents/*.py
TESTS_agents := tests/agents tests/http/test_agents.py tests/http/test_agent_ids.py
# Checks of the install in a fresh interpreter (subprocess): they import no mutated code.
DESELECT_agents := tests/agents/test_provider_extras.py::test_base_install_serves_without_the_optional_sdks

mutants: $(STAMP)
	$(MAKE) --no-print-directory $(addprefix mutants-,$(MUTANT_GROUPS))
	$(BIN)/python scripts/mutants.py report $(MUTANT_GROUPS)

$(MUTANT_TARGETS): mutants-%: $(STAMP)
	$(if $(TIMEOUT_$*),IOBRIDGE_MUTANT_TIMEOUT_FACTOR=$(TIMEOUT_$*)) $(BIN)/python scripts/mutants.py run $* --max-children $(MUTANT_CHILDREN) \
	  --mutate $(foreach p,$(MUTATE_$*),'$(p)') --tests $(TESTS_$*) \
	  $(if $(DESELECT_$*),--deselect $(DESELECT_$*)) $(if $(POSTGRES_$*),--postgres) \
	  $(if $(SKIP_$*),--skip $(foreach p,$(SKIP_$*),'$(p)')) $(if $(MUTANT_RESUME),--resume) \
	  $(if $(MUTANT_REOPEN),--reopen) $(if $(MUTANT_CHECK),--check) \
	  $(if $(MUTANT_CARRY),--carry $(MUTANT_CARRY))

mutants-report:
	$(BIN)/python scripts/mutants.py report $(MUTANT_GROUPS)

mutants-record: $(STAMP)
	for g in $(MUTANT_GROUPS); do $(BIN)/python scripts/mutants.py record $$g || exit 1; done

# Every group's verdicts, checked against the tree checked out (exit 1 if one does not hold).
mutants-check: $(STAMP)
	@status=0; for g in $(MUTANT_GROUPS); do \
	  $(MAKE) --no-print-directory -s mutants-$$g MUTANT_CHECK=1 || status=1; done; exit $$status

clean:
	rm -rf $(VENV) tests/e2e/node_modules tests/web/node_modules tests/frontends/node_modules build
