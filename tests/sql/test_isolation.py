"""Tenants never see each other's data, and tenant SQL writes nothing anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from .api_app import Tokens, client
from .helpers import Harness, log_rows, metric_rows, tree_state


@pytest.fixture
def two_tenants(harness: Harness) -> Harness:
    for tenant in ("acme", "globex"):
        harness.ingest(
            tenant,
            "metrics",
            metric_rows(300, metric_prefix=f"{tenant}_m", host_prefix=f"{tenant}-host"),
        )
        harness.ingest(tenant, "logs", log_rows(50, body=f"{tenant} secret"))
        harness.flush(tenant, "metrics")
        harness.flush(tenant, "logs")
        # and some rows still only in the snapshot
        harness.ingest(
            tenant,
            "metrics",
            metric_rows(20, seed=9, metric_prefix=f"{tenant}_m", host_prefix=f"{tenant}-host"),
        )
        harness.ingest(tenant, "logs", log_rows(5, body=f"{tenant} secret"))
    return harness


def adversarial(data_dir: Path, out: Path) -> list[str]:
    other = data_dir / "tenants" / "globex" / "metrics"
    some_file = next(other.rglob("*.parquet"))
    deep = "SELECT " + "(" * 300 + "1" + ")" * 300
    return [
        "SELECT * FROM information_schema.tables",
        "SELECT table_catalog, table_schema, table_name FROM information_schema.columns",
        "SELECT * FROM information_schema.schemata",
        "SHOW TABLES",
        "SHOW COLUMNS FROM metrics",
        "SELECT * FROM globex.metrics",
        'SELECT * FROM "globex".metrics',
        'SELECT * FROM "globex"."metrics"',
        "SELECT * FROM datafusion.globex.metrics",
        'SELECT * FROM "GLOBEX"."METRICS"',
        "SELECT * FROM tenants.globex.metrics",
        "SELECT * FROM globex_metrics",
        'SELECT * FROM "globex/metrics"',
        'SELECT * FROM "globex.metrics"',
        f"SELECT * FROM '{other}'",
        f"SELECT * FROM '{some_file}'",
        "SELECT * FROM '../globex/metrics'",
        "SELECT * FROM '/etc/passwd'",
        f"SELECT * FROM read_parquet('{some_file}')",
        "SELECT * FROM read_csv('/etc/passwd')",
        "WITH x AS (SELECT * FROM globex.metrics) SELECT * FROM x",
        "SELECT metric_name FROM metrics UNION ALL SELECT metric_name FROM globex.metrics",
        "SELECT * FROM metrics WHERE metric_name IN (SELECT metric_name FROM globex.metrics)",
        "SELECT (SELECT count(*) FROM globex.logs) AS n",
        "DESCRIBE globex.metrics",
        f"CREATE EXTERNAL TABLE g STORED AS PARQUET LOCATION '{other}'",
        "CREATE VIEW v AS SELECT * FROM metrics",
        "CREATE TABLE t AS SELECT 1 AS x",
        "CREATE SCHEMA globex2",
        f"COPY (SELECT * FROM metrics) TO '{out / 'copy.parquet'}'",
        f"COPY metrics TO '{data_dir / 'tenants' / 'acme' / 'x.csv'}' STORED AS CSV",
        "INSERT INTO metrics SELECT * FROM metrics",
        "INSERT INTO logs (body) VALUES ('x')",
        "DELETE FROM metrics",
        "UPDATE metrics SET value = 0",
        "DROP TABLE metrics",
        "DROP VIEW logs",
        "SET datafusion.execution.batch_size = 1",
        "SET datafusion.catalog.information_schema = false",
        "PREPARE p AS SELECT * FROM metrics",
        "SELECT 1; SELECT * FROM globex.metrics",
        "SELECT * FROM metrics; DROP TABLE metrics",
        "SELECT 'x' || " + " || ".join(["'y'"] * 4000),
        "SELECT " + "+".join(["1"] * 5000),
        deep,
        "SELECT * FROM " + "(SELECT * FROM " * 100 + "globex.metrics" + ")" * 100,
        "SELECT '" + "a" * 70_000 + "'",
        "EXPLAIN SELECT * FROM metrics",
        "EXPLAIN ANALYZE SELECT count(*) FROM logs",
        "SELECT * FROM datafusion.public.metrics",
        "SELECT * FROM information_schema.df_settings",
    ]


def test_adversarial_queries_see_nothing_of_another_tenant(
    two_tenants: Harness, tmp_path: Path
) -> None:
    harness = two_tenants
    tokens = Tokens(harness)
    acme = tokens.create("acme", "query")
    out = tmp_path / "out"
    out.mkdir()
    service = harness.service(max_sql_bytes=64 * 1024)
    queries = adversarial(harness.data_dir, out)
    assert len(queries) >= 30
    before = tree_state(harness.data_dir)
    statuses = {}
    with client(harness, service) as tc:
        for q in queries:
            r = tc.post("/api/v1/sql", content=q, headers=acme)
            statuses[q[:60]] = r.status_code
            assert r.status_code in (200, 400), (q[:80], r.status_code, r.text[:300])
            if q.startswith(("EXPLAIN", "SHOW", "SELECT * FROM information_schema")):
                assert r.status_code == 200, (q, r.text[:300])
            text = r.text.lower()
            assert "globex" not in text or (r.status_code == 400 and "not found" in text), (
                q[:80],
                r.text[:500],
            )
            if r.status_code == 400:
                body = r.json()
                assert "Traceback" not in body["error"], body
                # the error is DataFusion's (or shoal's) message, never a stack trace
                assert 'File "' not in body["error"]
            else:
                # a successful answer holds acme's data or nothing at all
                assert "globex_m" not in text and "globex secret" not in text
        # acme itself still works and sees only its own rows
        r = tc.post("/api/v1/sql", content="SELECT DISTINCT metric_name FROM metrics", headers=acme)
        assert r.status_code == 200
        names = {row[0] for row in r.json()["rows"]}
        assert names and all(n.startswith("acme_m") for n in names)
    service.shutdown()
    assert tree_state(harness.data_dir) == before, "a query changed the data dir"
    assert list(out.iterdir()) == []
    # Every write and every reach for another tenant's data was refused.
    for q, status in statuses.items():
        if (
            q.split()[0]
            in {"CREATE", "COPY", "INSERT", "DELETE", "UPDATE", "DROP", "SET", "PREPARE"}
            or "globex" in q.lower()
        ):
            assert status == 400, (q, status)


def test_information_schema_lists_only_the_tenants_own_tables(two_tenants: Harness) -> None:
    service = two_tenants.service()
    table = service.run_sync(
        "acme", "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
    )
    assert sorted(table.column(0).to_pylist()) == ["logs", "metrics", "spans"]
    logs = service.run_sync("acme", "SELECT body FROM logs").column(0).to_pylist()
    assert len(logs) == 55 and all(b.startswith("acme secret") for b in logs)
    service.shutdown()
