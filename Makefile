# Switchboard — everything runs from a virtualenv in .venv, created on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: help demo test lint bench bench-ab bench-compare bench-workers cluster cluster-down mutation deploy-check clean

# `make` alone lists the targets: each target's `## ` comment is its line.
.DEFAULT_GOAL := help
help: ## This list of targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-z-]*:.*## / {printf "  %-15s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(BIN)/.installed: requirements.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	touch $@

# Gateway on embedded defaults: SQLite, in-memory channel layer, demo config, mock upstream.
# `make demo PORT=8080 MOCK_PORT=9002` picks other ports; a second demo while one runs exits 1.
demo: $(BIN)/.installed ## Serve the demo: SQLite, demo config, mock upstream (PORT, MOCK_PORT)
	$(BIN)/python manage.py demo --port $(or $(PORT),8000) --mock-port $(or $(MOCK_PORT),9001)

# The whole test suite (SQLite by default; DATABASE_URL / REDIS_URL switch to PostgreSQL / Redis).
test: $(BIN)/.installed ## Lint, format check and the whole test suite
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest

lint: $(BIN)/.installed ## ruff check
	$(BIN)/ruff check .

# wrk (Debian) drives the throughput rows; installed here when missing. LiteLLM and
# Portkey run beside Switchboard in the same run (installed outside the repository);
# `PEERS= make bench` measures Switchboard alone. The feature-enabled gateways use a
# throwaway database on DATABASE_URL's PostgreSQL server and REDIS_URL when set (else
# SQLite / no Redis, said in the output). Each step saves its result in BENCH_RUN_DIR;
# the last one prints every target of the round: measured, target, met or missed.
BENCH_RUN_DIR ?= bench/results/run
# The realistic-configuration A/B make bench runs against this revision (the first round's end; empty skips it).
BENCH_AB_BASE ?= 5101a09
bench: export SWITCHBOARD_BENCH_RUN_DIR = $(abspath $(BENCH_RUN_DIR))
bench: $(BIN)/.installed ## Every benchmark of the round, with LiteLLM/Portkey beside (BENCH_RUN_DIR)
	@command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk >/dev/null)
	@rm -rf "$$SWITCHBOARD_BENCH_RUN_DIR" && mkdir -p "$$SWITCHBOARD_BENCH_RUN_DIR" && date +%s > "$$SWITCHBOARD_BENCH_RUN_DIR/started"
	-bash bench/peers/peers.sh
	-$(BIN)/python -m bench.deployments_bench --runs 10000 --requests 2000
	-$(BIN)/python -m bench.limits_bench --number 10000 --repeat 9
	-$(BIN)/python -m bench.unconfigured_bench
	-$(BIN)/python -m bench.cache_bench --e2e --number 3000 --repeat 5 --rounds 10
	-$(BIN)/python -m bench.affinity_bench --repeats 100
	-$(BIN)/python -m bench.responses_stream_bench --rounds 5 --batch 15 --cpu-requests 50
	-$(BIN)/python -m bench.ab --base HEAD --profile alerts --no-throughput --latency-batches 10 --save-as ab_alerts
	$(if $(BENCH_AB_BASE),-$(BIN)/python -m bench.ab --base $(BENCH_AB_BASE) --profile realistic --command uvicorn --save-as ab_realistic)
	-$(BIN)/python -m bench.workers_bench --seconds 3 --reps 2 $(if $(REDIS_URL),--redis $(REDIS_URL))
	-$(BIN)/python -m bench.usage_writer_bench
	-$(BIN)/python -m bench.usage_writer_bench --database sqlite
	-$(BIN)/python -m bench.overload --seconds 10 $(if $(REDIS_URL),--redis $(REDIS_URL))
	-$(BIN)/python -m bench.fieldfuzz --server both
	$(BIN)/python -m bench.summary

# Same-run A/B (docs/performance.md#ab): BASE=<rev> and the working tree (or HEAD=<rev>) served
# side by side, 1-client latency and wrk throughput interleaved, medians over ROUNDS rounds.
# AB_ARGS passes more options, e.g. AB_ARGS="--profile features".
ROUNDS ?= 3
bench-ab: $(BIN)/.installed ## Same-run A/B of BASE=<rev> against the working tree (ROUNDS, AB_ARGS)
	@test -n "$(BASE)" || (echo "usage: make bench-ab BASE=<commit or branch> [HEAD=<rev>] [ROUNDS=3] [AB_ARGS=...]" && exit 2)
	@command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk >/dev/null)
	$(BIN)/python -m bench.ab --base $(BASE) $(if $(HEAD),--head $(HEAD)) --rounds $(ROUNDS) $(AB_ARGS)

bench-compare: $(BIN)/.installed ## Compare saved benchmark results
	$(BIN)/python -m bench.compare

# serve --workers 1 vs 2 at 32 and 128 clients, and p50 with Redis sharing on vs off (docs/scale-out.md#bench).
bench-workers: $(BIN)/.installed ## serve --workers 1 vs 2, and Redis sharing on vs off
	@command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk >/dev/null)
	$(BIN)/python -m bench.workers_bench $(if $(REDIS_URL),--redis $(REDIS_URL))

# PostgreSQL + Redis (reused if running) + 3 replicas (serve --workers 2) behind HAProxy (docs/scale-out.md#cluster).
# Ports: PORT (HAProxy, default 8100; the replicas take the next ones), MOCK_PORT (9101), STATS_PORT (8199).
REPLICAS ?= 3
WORKERS ?= 2
cluster: $(BIN)/.installed ## PostgreSQL + Redis + REPLICAS replicas behind HAProxy
	$(BIN)/python -m tools.local_cluster up --replicas $(REPLICAS) --workers $(WORKERS) \
		--port $(or $(PORT),8100) --mock-port $(or $(MOCK_PORT),9101) --stats-port $(or $(STATS_PORT),8199)

cluster-down: $(BIN)/.installed ## Stop what make cluster started
	$(BIN)/python -m tools.local_cluster down

# Mutation testing of the core, limits, budgets, cache key, breaker sync, shared limits and usage
# journal with their fast tests (docs/testing.md; Redis via SWITCHBOARD_TEST_REDIS_URL); not part of `make test`.
# Incremental: mutants/ keeps results between runs; `rm -rf mutants` starts over.
mutation: $(BIN)/.installed ## Mutation testing of the core with its fast tests
	$(BIN)/pip install --quiet -r requirements-mutation.txt
	$(BIN)/mutmut run --max-children 2
	$(BIN)/mutmut results

# The deployment artefacts of deploy/ (docs/production.md#checks): the Kubernetes manifests against
# the API schemas, the SBOM (var/deploy/sbom.cdx.json) and pip-audit of the lock, with their own
# pinned tools in var/deploy-check-venv, then the image built and smoke-tested (as root; NO_IMAGE=1 skips it).
deploy-check: ## Check deploy/: Kubernetes schemas, SBOM, pip-audit, image build + smoke test (NO_IMAGE=1)
	bash deploy/check $(if $(NO_IMAGE),--no-image) $(DEPLOY_CHECK_ARGS)

clean: ## Remove the virtualenv, var/ and mutants/
	rm -rf $(VENV) var mutants
