# shoal: every set-up step lives here, so a fresh clone needs only `make serve` or `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
PYTEST := $(BIN)/python -m pytest

.PHONY: serve test test-fast test-slow test-spark test-all lint typecheck check \
        bench bench-wal bench-otlp bench-append bench-ingest bench-replay bench-query bench-storm bench-pipeline \
        bench-pg bench-promql clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,spark]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

BENCH_STAMP := $(STAMP)-bench
$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,spark,bench]'
	touch $(BENCH_STAMP)

venv: $(STAMP)

## Run the server on the embedded default (./shoal-data, loopback, no tokens).
serve: $(STAMP)
	$(BIN)/shoal serve

## The default test suite (CI runs exactly this): lint, types, every test but the
## slow ones (the Spark jobs included: local-mode PySpark on the machine's Java 17).
test: $(STAMP)
	$(BIN)/ruff check shoal tests loadtest
	$(BIN)/ruff format --check shoal tests loadtest
	$(BIN)/mypy
	$(PYTEST) -m "not slow"

## The default suite without the Spark jobs (about half the time).
test-fast: $(STAMP)
	$(PYTEST) -m "not slow and not spark"

test-slow: $(STAMP)
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

bench: bench-wal bench-otlp bench-append bench-ingest bench-replay bench-query bench-storm bench-pipeline

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

## One tenant's storm of heavy queries against another tenant's queries and ingest.
bench-storm: $(BENCH_STAMP)
	$(BIN)/python -m loadtest.bench_storm

## The PostgreSQL protocol against HTTP + Arrow: small-query latency, a 1M-row result's rate.
bench-pg: $(BENCH_STAMP)
	$(BIN)/python -m loadtest.bench_pg

bench-pipeline: $(BENCH_STAMP)
	$(BIN)/python -m loadtest.bench_pipeline

# needs Debian's prometheus (apt-get install prometheus); --series/--hours to scale
bench-promql: $(BENCH_STAMP)
	$(BIN)/python -m loadtest.bench_promql $(BENCH_PROMQL_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
