# shoal: every set-up step lives here, so a fresh clone needs only `make serve` or `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
LOCK   := requirements.lock
CSRC   := shoal/_wire.h shoal/promwrite/_scan.c shoal/otlp/_scan.c
# One stamp per set of extras, keyed on pyproject.toml, the lock file and the C sources the
# install compiles: `make serve` installs only what the server runs; the test and Spark
# extras come with `make test`.
HASH   := $(shell cat pyproject.toml $(LOCK) setup.py $(CSRC) | cksum | cut -d' ' -f1)
SERVE_STAMP := $(VENV)/.installed-serve-$(HASH)
STAMP  := $(VENV)/.installed-dev-$(HASH)
PYTEST := $(BIN)/python -m pytest
# The default suites run across processes, whole files to a process: most tests wait
# on servers, subprocesses and disks rather than the CPU, so three share two cores well.
TEST_WORKERS ?= 3
PARALLEL := -n $(TEST_WORKERS) --dist loadfile
PIP    := $(BIN)/python -m pip install --quiet --constraint $(LOCK)

.PHONY: serve test test-fast test-slow test-spark test-all lint typecheck check lock \
        bench bench-wal bench-otlp bench-append bench-ingest bench-replay bench-query bench-storm bench-pipeline \
        bench-freshness bench-pg bench-promql bench-browser bench-logs bench-traces bench-peers bench-storage \
        bench-cardinality clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(SERVE_STAMP): pyproject.toml $(LOCK) setup.py $(CSRC) | $(BIN)/python
	$(PIP) -e .
	touch $(SERVE_STAMP)

$(STAMP): pyproject.toml $(LOCK) setup.py $(CSRC) | $(BIN)/python
	$(PIP) -e '.[dev,spark]'
	touch $(STAMP) $(SERVE_STAMP)

BENCH_STAMP := $(STAMP)-bench
$(BENCH_STAMP): $(STAMP)
	$(PIP) -e '.[dev,spark,bench]'
	touch $(BENCH_STAMP)

venv: $(STAMP)

## Run the server on the embedded default (./shoal-data, loopback, no tokens).
serve: $(SERVE_STAMP)
	$(BIN)/shoal serve

## The default test suite (CI runs exactly this): lint, types, every test but the
## slow ones (the Spark jobs included: local-mode PySpark on the machine's Java 17).
test: $(STAMP)
	$(BIN)/ruff check shoal tests loadtest
	$(BIN)/ruff format --check shoal tests loadtest
	$(BIN)/mypy
	$(PYTEST) -m "not slow" $(PARALLEL)

## The default suite without the Spark jobs.
test-fast: $(STAMP)
	$(PYTEST) -m "not slow and not spark" $(PARALLEL)

test-slow: $(BENCH_STAMP)
	$(PYTEST) -m slow

test-spark: $(STAMP)
	$(PYTEST) -m spark

test-all: $(STAMP)
	$(PYTEST)

lint: $(STAMP)
	$(BIN)/ruff check shoal tests loadtest
	$(BIN)/ruff format --check shoal tests loadtest

typecheck: $(STAMP)
	$(BIN)/mypy

bench: bench-wal bench-otlp bench-append bench-ingest bench-replay bench-query bench-freshness bench-storm \
       bench-pipeline

bench-wal: $(BENCH_STAMP)
	$(BIN)/python -m loadtest.bench_wal

bench-otlp: $(BENCH_STAMP)
	$(BIN)/python -m loadtest.bench_otlp

bench-append: $(BENCH_STAMP)
	$(BIN)/python -m loadtest.bench_append

bench-ingest: $(BENCH_STAMP)
	$(BIN)/python -m loadtest ingest --duration 300

bench-replay: $(BENCH_STAMP)
	$(BIN)/python -m loadtest.bench_replay

bench-query: $(BENCH_STAMP)
	$(BIN)/python -m loadtest.bench_query

## From an acknowledged OTLP export to the SQL answer that counts it (target: median under 10 ms).
bench-freshness: $(BENCH_STAMP)
	$(BIN)/python -m loadtest.bench_freshness

## One tenant's storm of heavy queries against another tenant's queries and ingest.
bench-storm: $(BENCH_STAMP)
	$(BIN)/python -m loadtest.bench_storm

## The PostgreSQL protocol against HTTP + Arrow: small-query latency, a 1M-row result's rate.
bench-pg: $(BENCH_STAMP)
	$(BIN)/python -m loadtest.bench_pg

bench-pipeline: $(BENCH_STAMP)
	$(BIN)/python -m loadtest.bench_pipeline

## Loki's API over 10M log lines of a day, and Loki push against OTLP (BENCH_LOGS_ARGS to scale)
bench-logs: $(BENCH_STAMP)
	$(BIN)/python -m loadtest.bench_logs $(BENCH_LOGS_ARGS)

# needs Debian's prometheus (apt-get install prometheus); --series/--hours to scale
bench-promql: $(BENCH_STAMP)
	$(BIN)/python -m loadtest.bench_promql $(BENCH_PROMQL_ARGS)

# the metric browser over 100,000 series (needs prometheus too)
bench-browser: $(BENCH_STAMP)
	$(BIN)/python -m loadtest.bench_promql --series 100000 --hours 0.1 --browser-only

# Tempo's API over 100,000 traces (about 2M spans) of the last 24 hours
bench-traces: $(BENCH_STAMP)
	$(BIN)/python -m loadtest.bench_traces $(BENCH_TRACES_ARGS)

## shoal beside Prometheus and VictoriaMetrics on the same remote-write samples
## (needs Debian's prometheus and victoria-metrics: apt-get install prometheus victoria-metrics)
bench-peers: $(BENCH_STAMP)
	$(BIN)/python -m loadtest.bench_peers $(BENCH_PEERS_ARGS)

## Local disk against a bucket (the tests' S3 server on loopback) in one run: flush, a day's
## append, the SQL and PromQL panels cold and warm, and the requests each phase makes
bench-storage: $(BENCH_STAMP)
	$(BIN)/python -m loadtest.bench_storage $(BENCH_STORAGE_ARGS)

## How costs grow with active series, 16,000 -> 160,000 -> 1,000,000 (the last at one sample
## per series every 15 s), beside Prometheus, shoal in a 2 GiB memory cgroup (needs root for
## the cgroup, and Debian's prometheus)
bench-cardinality: $(BENCH_STAMP)
	$(BIN)/python -m loadtest.bench_cardinality $(BENCH_CARDINALITY_ARGS)

## Re-resolve requirements.lock from pyproject.toml's ranges (every extra, every
## supported Python), keeping the locked versions that still fit; `make lock
## UPGRADE=1` moves everything to the newest versions the ranges allow.
lock: | $(BIN)/python
	$(BIN)/python -m pip install --quiet 'uv>=0.13,<0.14'
	$(BIN)/uv pip compile pyproject.toml --universal --python-version 3.11 \
	    --extra dev --extra spark --extra bench --no-header --annotation-style line \
	    $(if $(UPGRADE),--upgrade) -o $(LOCK)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
