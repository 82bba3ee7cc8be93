"""Real PostgreSQL clients against a real ``shoal serve``: psycopg 3, asyncpg and psql."""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import asyncpg
import psycopg
import pytest

from .conftest import PgServer

PSQL = shutil.which("psql")
LONG_QUERY = "SELECT max(value * 3 % 7 + value) AS m FROM range(200000000000)"
"""Runs for minutes unless stopped (about 2e11 rows of arithmetic)."""


def _psql(pg: PgServer, *args: str, tenant: str = "acme") -> subprocess.CompletedProcess[str]:
    assert PSQL is not None, "psql is installed by .ci/run (postgresql-client)"
    env = dict(os.environ, PGPASSWORD=pg.tokens[tenant], PGCONNECT_TIMEOUT="10")
    return subprocess.run(
        [PSQL, "-X", "-h", "127.0.0.1", "-p", str(pg.port), "-U", tenant, "-d", "shoal", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


# -- psycopg (extended protocol) ----------------------------------------------------------


def test_psycopg_text_and_binary_results_with_server_side_parameters(pg: PgServer) -> None:
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        cur = conn.execute(
            "SELECT timestamp, severity_number, severity_text, body, attributes, trace_id "
            "FROM logs WHERE severity_number >= %s AND timestamp >= %s "
            "ORDER BY timestamp LIMIT %s",
            (9, dt.datetime(2026, 1, 1, tzinfo=dt.UTC), 5),
        )
        assert [c.name for c in cur.description] == [
            "timestamp", "severity_number", "severity_text", "body", "attributes", "trace_id",
        ]  # fmt: skip
        assert [c.type_code for c in cur.description] == [1184, 23, 25, 25, 114, 25]
        rows = cur.fetchall()
        assert len(rows) == 5
        first = rows[0]
        assert first[0] == dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        assert first[1] >= 9
        assert isinstance(first[4], dict) and "http.route" in first[4]
        assert all(a[0] <= b[0] for a, b in itertools.pairwise(rows))

        binary = conn.cursor(binary=True)
        binary.execute(
            "SELECT timestamp, severity_number, body, attributes, flags, "
            "CAST(1.5 AS DOUBLE) AS f, true AS b, CAST('2026-01-02' AS DATE) AS d, "
            "X'00ff' AS raw, [1, 2, 3] AS arr, CAST(12.50 AS DECIMAL(10, 2)) AS n "
            "FROM logs ORDER BY timestamp LIMIT 2"
        )
        rows = binary.fetchall()
        assert rows[0][0] == dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        assert isinstance(rows[0][1], int) and isinstance(rows[0][2], str)
        assert isinstance(rows[0][3], dict)
        assert rows[0][5:] == (
            1.5, True, dt.date(2026, 1, 2), b"\x00\xff", [1, 2, 3], decimal.Decimal("12.50"),
        )  # fmt: skip

        text = conn.execute(
            "SELECT [1, 2, 3] AS arr, CAST(12.50 AS DECIMAL(10, 2)) AS n, "
            "CAST('2026-01-02' AS DATE) AS d, X'00ff' AS raw, CAST('NaN' AS DOUBLE) AS nan"
        ).fetchone()
        assert text is not None
        assert text[:4] == ([1, 2, 3], decimal.Decimal("12.50"), dt.date(2026, 1, 2), b"\x00\xff")
        assert text[4] != text[4]  # NaN

        # the same prepared statement, many times, with parameters of several types
        for severity in (1, 9, 17):
            (count,) = conn.execute(
                "SELECT count(*) FROM logs WHERE severity_number >= %s", (severity,), prepare=True
            ).fetchone() or (None,)
            (expected,) = conn.execute(
                f"SELECT count(*) FROM logs WHERE severity_number >= {severity}"
            ).fetchone() or (None,)
            assert count == expected and count is not None
        quoted = conn.execute("SELECT %s AS s, %s AS n", ("it's; DROP TABLE logs --", None))
        assert quoted.fetchone() == ("it's; DROP TABLE logs --", None)


def test_psycopg_errors_carry_sqlstate_and_the_session_goes_on(pg: PgServer) -> None:
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UndefinedColumn) as info:
            conn.execute("SELECT no_such_column FROM logs")
        assert info.value.sqlstate == "42703"
        with pytest.raises(psycopg.errors.SyntaxError):
            conn.execute("SELEC 1")
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("SELECT * FROM no_such_table")
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("DROP TABLE logs")
        assert refused.value.sqlstate is not None
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):
            conn.execute("SELECT %s::int AS x", ("seven",))
        # the connection is still usable after every error
        assert conn.execute("SELECT count(*) FROM spans").fetchone() == (100,)

    # a transaction (psycopg's default) works, and so does an error inside it
    with psycopg.connect(pg.dsn()) as conn:
        assert conn.execute("SELECT count(*) FROM logs").fetchone() == (300,)
        conn.commit()
        with pytest.raises(psycopg.errors.UndefinedColumn):
            conn.execute("SELECT nope FROM logs")
        conn.rollback()
        assert conn.execute("SELECT 1 AS one").fetchone() == (1,)


def test_psycopg_session_settings_and_catalog(pg: PgServer) -> None:
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        assert (
            conn.info.parameter_status(
                "server_version",
            )
            is not None
        )
        assert conn.info.server_version >= 140000
        assert conn.info.parameter_status("standard_conforming_strings") == "on"
        conn.execute("SET application_name = 'dashboards'")
        conn.execute("SET TIME ZONE 'UTC'")
        conn.execute("SET extra_float_digits = 3")
        assert conn.execute("SHOW application_name").fetchone() == ("dashboards",)
        assert conn.execute("SHOW TimeZone").fetchone() == ("UTC",)
        row = conn.execute(
            "SELECT version() AS v, current_setting('server_version') AS s, current_database() AS d"
        ).fetchone()
        assert row is not None and row[0].startswith("PostgreSQL ") and row[2] == "shoal"
        assert row[1].startswith("16.")
        every = dict((r[0], r[1]) for r in conn.execute("SHOW ALL"))
        assert every["server_encoding"] == "UTF8" and every["application_name"] == "dashboards"
        settings = conn.execute("SELECT setting FROM pg_settings WHERE name = 'datestyle'")
        assert settings.fetchone() == ("ISO, MDY",)
        types = dict(conn.execute("SELECT typname, oid FROM pg_catalog.pg_type").fetchall())
        assert types["timestamptz"] == 1184 and types["_int8"] == 1016
        unaliased = conn.execute("SELECT 1, count(*), sum(severity_number) + 1 FROM logs")
        assert [c.name for c in unaliased.description or []] == ["?column?", "count", "?column?"]
        named = conn.execute("SELECT version(), current_database()")
        assert [c.name for c in named.description or []] == ["version", "current_database"]
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            conn.execute("SET client_encoding = 'LATIN1'")
        with pytest.raises(psycopg.Error):
            conn.execute("SET datafusion.execution.batch_size = 1")
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'public' ORDER BY table_name"
        ).fetchall()
        assert tables == [("logs",), ("metrics",), ("spans",)]
        columns = conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = 'logs' ORDER BY ordinal_position"
        ).fetchall()
        assert columns[0][0] == "timestamp" and len(columns) > 10


def test_wrong_or_missing_token_gets_28P01_and_roles_are_checked(pg: PgServer) -> None:
    with pytest.raises(psycopg.OperationalError) as info:
        psycopg.connect(pg.dsn(password="shoal_00000000_" + "A" * 43))
    assert "28P01" in str(info.value) or "password authentication failed" in str(info.value)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(pg.dsn(password="not-a-token"))
    with pytest.raises(psycopg.OperationalError, match="lacks the 'query' role"):
        psycopg.connect(pg.dsn(password=pg.tokens["ingest-only"]))
    with pytest.raises(psycopg.OperationalError, match='database "postgres" does not exist'):
        psycopg.connect(pg.dsn(dbname="postgres"))
    # the server is unharmed
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        assert conn.execute("SELECT 1 AS x").fetchone() == (1,)


def test_without_tls_configured_sslrequest_is_answered_n(pg: PgServer) -> None:
    with pytest.raises(psycopg.OperationalError, match="server does not support SSL"):
        psycopg.connect(pg.dsn(sslmode="require"))
    with psycopg.connect(pg.dsn(sslmode="prefer"), autocommit=True) as conn:
        assert conn.pgconn.ssl_in_use is False
        assert conn.execute("SELECT 2 AS x").fetchone() == (2,)


# -- tenancy -------------------------------------------------------------------------------


def test_tenants_see_only_their_own_rows(pg: PgServer) -> None:
    with (
        psycopg.connect(pg.dsn("acme"), autocommit=True) as acme,
        psycopg.connect(pg.dsn("globex"), autocommit=True) as globex,
    ):
        acme_traces = {r[0] for r in acme.execute("SELECT DISTINCT trace_id FROM spans")}
        globex_traces = {r[0] for r in globex.execute("SELECT DISTINCT trace_id FROM spans")}
        assert acme_traces and globex_traces and not acme_traces & globex_traces
        for trace in list(globex_traces)[:3]:
            found = acme.execute("SELECT count(*) FROM spans WHERE trace_id = %s", (trace,))
            assert found.fetchone() == (0,)


def test_tenancy_attack_list_through_psycopg_returns_nothing_of_the_other_tenant(
    pg: PgServer, tmp_path: Path
) -> None:
    from tests.sql.test_isolation import adversarial

    other = {r for r in _values(pg, "globex", "SELECT DISTINCT trace_id FROM spans")}
    other |= set(_values(pg, "globex", "SELECT DISTINCT trace_id FROM logs"))
    assert other
    out = tmp_path / "out"
    out.mkdir()
    refused = 0
    with psycopg.connect(pg.dsn("acme"), autocommit=True) as conn:
        for query in adversarial(pg.process.data_dir, out):
            try:
                rows = conn.execute(query).fetchall() if "%" not in query else []
            except psycopg.Error as exc:
                refused += 1
                assert "Traceback" not in str(exc)
                continue
            seen = repr(rows)
            assert not any(trace in seen for trace in other), query[:80]
        # acme itself still works
        assert conn.execute("SELECT count(*) FROM logs").fetchone() == (300,)
    assert refused >= 20
    assert list(out.iterdir()) == []


def _values(pg: PgServer, tenant: str, sql: str) -> list[str]:
    with psycopg.connect(pg.dsn(tenant), autocommit=True) as conn:
        return [str(r[0]) for r in conn.execute(sql) if r[0] is not None]


# -- cancel ---------------------------------------------------------------------------------


def test_psycopg_cancel_stops_the_running_query(pg: PgServer) -> None:
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        timer = threading.Timer(1.0, conn.cancel_safe)
        timer.start()
        try:
            with pytest.raises(psycopg.errors.QueryCanceled) as info:
                conn.execute(LONG_QUERY)
        finally:
            timer.cancel()
        # cancelled by the request, not stopped by the query time limit (also 57014)
        assert "canceling statement due to user request" in str(info.value)
        # the session goes on, and the query's work has stopped: the server's CPU use
        # falls back to idle
        assert conn.execute("SELECT 3 AS x").fetchone() == (3,)
    time.sleep(0.5)
    before = pg.process.cpu_seconds()
    time.sleep(2.0)
    assert pg.process.cpu_seconds() - before < 1.0


# -- asyncpg (binary, prepared statements; strict about the protocol) ------------------------


def test_asyncpg_prepared_statements_binary_results_and_cancel(pg: PgServer) -> None:
    async def run() -> None:
        conn = await asyncpg.connect(
            host="127.0.0.1", port=pg.port, user="acme", password=pg.tokens["acme"],
            database="shoal",
        )  # fmt: skip
        try:
            rows = await conn.fetch(
                "SELECT timestamp, severity_number, body, attributes FROM logs "
                "ORDER BY timestamp LIMIT 3"
            )
            assert rows[0]["timestamp"] == dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
            assert isinstance(rows[0]["severity_number"], int)
            assert '"http.route"' in rows[0]["attributes"]
            statement = await conn.prepare(
                "SELECT count(*) AS n FROM logs WHERE severity_number > $1::int "
                "AND timestamp >= $2::timestamptz"
            )
            assert [a.name for a in statement.get_parameters()] == ["int4", "timestamptz"]
            since = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
            high = await statement.fetchval(16, since)
            low = await statement.fetchval(0, since)
            assert 0 < high < low <= 300
            limited = await conn.fetch("SELECT span_id FROM spans ORDER BY timestamp LIMIT $1", 4)
            assert len(limited) == 4  # LIMIT $1 is taken as a count (int8)
            async with conn.transaction():
                cursor = conn.cursor("SELECT span_id FROM spans ORDER BY timestamp", prefetch=13)
                ids = [r["span_id"] async for r in cursor]
            assert len(ids) == 100
            with pytest.raises(asyncpg.PostgresError) as info:
                await conn.fetch("SELECT missing FROM spans")
            assert info.value.sqlstate == "42703"
            with pytest.raises(asyncio.TimeoutError):
                await conn.fetchval(LONG_QUERY, timeout=1.0)  # asyncpg cancels on timeout
            assert await conn.fetchval("SELECT 5 AS x") == 5
        finally:
            await conn.close()

    asyncio.run(run())


# -- psql (simple protocol) ----------------------------------------------------------------


def test_psql_queries_errors_and_copy(pg: PgServer, tmp_path: Path) -> None:
    done = _psql(
        pg,
        "-c", "SELECT count(*) AS n FROM logs",
        "-c", "SELECT severity_text, count(*) FROM logs GROUP BY 1 ORDER BY 1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert " 300" in done.stdout and "ERROR" in done.stdout and "INFO" in done.stdout
    bad = _psql(pg, "-v", "ON_ERROR_STOP=0", "-c", "SELECT nope FROM logs; SELECT 7 AS seven")
    assert "ERROR" in bad.stderr and "nope" in bad.stderr
    target = tmp_path / "out.tsv"
    copied = _psql(
        pg, "-c", f"\\copy (SELECT span_id, name FROM spans ORDER BY timestamp) TO '{target}'"
    )
    assert copied.returncode == 0, copied.stderr
    assert "COPY 100" in copied.stdout
    lines = target.read_text().splitlines()
    assert len(lines) == 100 and all(len(line.split("\t")) == 2 for line in lines)
    anon = subprocess.run(
        [PSQL or "psql", "-X", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "x", "-d", "shoal",
         "-w", "-c", "SELECT 1"],
        env=dict(os.environ, PGPASSWORD=""),
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert anon.returncode != 0  # tokens exist: no password, no session


def _psql_long_query(pg: PgServer, output: int) -> subprocess.Popen[str]:
    """psql running LONG_QUERY as tenant acme, its output to ``output``."""
    assert PSQL is not None
    return subprocess.Popen(
        [PSQL, "-X", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "acme", "-d", "shoal",
         "-c", LONG_QUERY],
        env=dict(os.environ, PGPASSWORD=pg.tokens["acme"]),
        stdout=output,
        stderr=output,
        text=True,
    )  # fmt: skip


def test_psql_ctrl_c_cancels_a_long_query(pg: PgServer) -> None:
    proc = _psql_long_query(pg, subprocess.PIPE)
    try:
        time.sleep(1.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "canceling statement due to user request" in err


# -- catalog: psql's \dt and \d, Grafana's query builder, and Grafana's macros --------------


def test_psql_lists_and_describes_tables(pg: PgServer) -> None:
    listed = _psql(pg, "-c", "\\dt")
    assert listed.returncode == 0 and not listed.stderr, listed.stderr
    for name in ("logs", "metrics", "spans"):
        assert f"public | {name}" in listed.stdout
    described = _psql(pg, "-c", "\\d logs")
    assert described.returncode == 0 and not described.stderr, described.stderr
    assert 'Table "public.logs"' in described.stdout
    lines = {line.split("|")[0].strip(): line for line in described.stdout.splitlines()}
    assert "timestamp with time zone" in lines["timestamp"] and "not null" in lines["timestamp"]
    assert "json" in lines["attributes"] and "text" in lines["trace_id"]
    databases = _psql(pg, "-c", "\\l")
    assert databases.returncode == 0 and " shoal " in databases.stdout, databases.stderr


GRAFANA_SEARCH_PATH = (
    "SELECT CASE WHEN trim(s[i]) = '\"$user\"' THEN user ELSE trim(s[i]) END FROM "
    "generate_series(array_lower(string_to_array(current_setting('search_path'),','),1), "
    "array_upper(string_to_array(current_setting('search_path'),','),1)) as i, "
    "string_to_array(current_setting('search_path'),',') s"
)


def test_grafana_meta_queries(pg: PgServer) -> None:
    """The queries Grafana's PostgreSQL data source sends to fill its query builder."""
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        version = conn.execute(
            "SELECT current_setting('server_version_num')::int/100 as version"
        ).fetchone()
        assert version == (1600,)
        assert (
            conn.execute(
                "SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'"
            ).fetchall()
            == []
        )
        schemas = conn.execute(
            'SELECT schema_name AS "name" FROM information_schema.schemata WHERE schema_name '
            "NOT IN ('information_schema', 'pg_catalog', 'pg_toast') ORDER BY schema_name"
        ).fetchall()
        assert schemas == [("public",)]
        tables = conn.execute(
            f"SELECT CASE WHEN quote_ident(table_schema) IN ({GRAFANA_SEARCH_PATH}) "
            "THEN quote_ident(table_name) "
            "ELSE quote_ident(table_schema) || '.' || quote_ident(table_name) END AS \"table\" "
            "FROM information_schema.tables WHERE quote_ident(table_schema) NOT IN "
            "('information_schema', 'pg_catalog') ORDER BY 1"
        ).fetchall()
        assert tables == [("logs",), ("metrics",), ("spans",)]
        columns = conn.execute(
            'SELECT quote_ident(column_name) AS "column", data_type AS "type" '
            "FROM information_schema.columns WHERE "
            "CASE WHEN array_length(parse_ident('spans'),1) = 2 "
            "THEN quote_ident(table_schema) = (parse_ident('spans'))[1] "
            "AND quote_ident(table_name) = (parse_ident('spans'))[2] "
            "ELSE quote_ident(table_name) = 'spans' "
            f"AND quote_ident(table_schema) IN ({GRAFANA_SEARCH_PATH}) END"
        ).fetchall()
        types = dict(columns)
        assert types["timestamp"] == "timestamp with time zone"
        assert types["duration_ns"] == "bigint" and types["name"] == "text"


def test_grafana_macro_expansions_run(pg: PgServer) -> None:
    """The SQL Grafana's macros expand to ($__timeFilter, $__timeGroup[Alias], $__timeEpoch,
    $__unixEpochFilter, $__unixEpochNanoFilter, $__unixEpochGroup, $__timeFrom/$__timeTo),
    sent with the simple protocol as Grafana does."""
    frm, to = "'2025-12-31T23:00:00Z'", "'2026-01-01T01:00:00.5Z'"
    queries = {
        "volume": (
            'SELECT floor(extract(epoch from timestamp)/60)*60 AS "time", severity_text, '
            f"count(*) AS n FROM logs WHERE timestamp BETWEEN {frm} AND {to} "
            "GROUP BY 1, 2 ORDER BY 1"
        ),
        "epoch": (
            'SELECT extract(epoch from timestamp) as "time", body FROM logs '
            "WHERE time_unix_nano >= 1767222000000000000 AND time_unix_nano <= "
            "1767229200000000000 ORDER BY 1 LIMIT 5"
        ),
        "unix": (
            'SELECT floor((start_time_unix_nano / 1000000000)/300)*300 AS "time", count(*) AS n '
            "FROM spans WHERE start_time_unix_nano / 1000000000 >= 1767222000 AND "
            "start_time_unix_nano / 1000000000 <= 1767229200 GROUP BY 1"
        ),
        "slowest": (
            'SELECT to_timestamp(floor(extract(epoch from timestamp)/0.5)*0.5) AS "time", '
            f"name, duration_ns FROM spans WHERE timestamp >= {frm} AND timestamp <= {to} "
            "ORDER BY duration_ns DESC LIMIT 10"
        ),
    }
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        got = {name: conn.execute(sql).fetchall() for name, sql in queries.items()}
    assert sum(row[2] for row in got["volume"]) == 300
    assert got["volume"][0][0] == 1767225600.0
    assert len(got["epoch"]) == 5
    assert got["unix"] == [(1767225600, 100)]
    assert len(got["slowest"]) == 10 and got["slowest"][0][0].year == 2026
    # the same through psql, one multi-statement string as a dashboard may send
    done = _psql(pg, "-c", queries["volume"] + "; " + queries["unix"])
    assert done.returncode == 0 and "1767225600" in done.stdout, done.stderr


# -- JDBC (Debian's libpostgresql-jdbc-java, from a small Java program) ----------------------

JDBC_JAR = Path("/usr/share/java/postgresql.jar")
PROBE = Path(__file__).parent / "clients" / "JdbcProbe.java"


def test_jdbc_metadata_and_a_prepared_statement_with_a_timestamp(pg: PgServer) -> None:
    java = shutil.which("java")
    assert java is not None, "Java 17 is part of the project's requirements (README)"
    assert JDBC_JAR.is_file(), ".ci/run installs libpostgresql-jdbc-java"
    done = subprocess.run(
        [java, "-cp", str(JDBC_JAR), str(PROBE), f"jdbc:postgresql://127.0.0.1:{pg.port}/shoal",
         "reporting", pg.tokens["acme"]],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    assert out["product"].startswith("PostgreSQL 16.0")
    assert out["tables"] == "public.logs,public.metrics,public.spans,"
    columns = dict(item.split(":") for item in out["columns"].strip(",").split(","))
    assert columns["timestamp"] == "timestamptz" and columns["duration_ns"] == "int8"
    assert columns["attributes"] == "json" and columns["kind"] == "int4"
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        expected = conn.execute("SELECT count(*) FROM logs WHERE severity_number >= 9").fetchone()
    assert expected is not None
    for run in range(6):  # the driver switches to a named server-side statement on run 5
        assert out[f"count{run}"] == f"{expected[0]} first=2026-01-01T00:00Z"
    assert out["fetched"] == "100"  # fetched 7 rows at a time through a portal


# -- Go: lib/pq and pgconn, the drivers of Grafana's PostgreSQL data source -------------------

GO_CLIENTS = Path(__file__).parent / "clients"
GOPATH = "/usr/share/gocode"  # Debian's golang-github-*-dev packages


@pytest.fixture(scope="module")
def go_probes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    go = shutil.which("go")
    assert go is not None, ".ci/run installs golang-go"
    out = tmp_path_factory.mktemp("go")
    env = dict(os.environ, GO111MODULE="off", GOPATH=GOPATH, GOCACHE=str(out / "cache"))
    built = {}
    for name in ("pqprobe", "pgconnprobe"):
        target = out / name
        done = subprocess.run(
            [go, "build", "-o", str(target), "."],
            cwd=GO_CLIENTS / name,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        built[name] = target
    return built


def _grafana_queries(trace_id: str) -> list[str]:
    """A time-series, a logs and a traces query as Grafana sends them, macros expanded."""
    window = "BETWEEN '2025-12-31T23:00:00Z' AND '2026-01-01T01:00:00Z'"
    return [
        'SELECT floor(extract(epoch from timestamp)/60)*60 AS "time", metric_name AS metric, '
        f"avg(value) AS value FROM metrics WHERE timestamp {window} "
        "GROUP BY 1, 2 ORDER BY 1",
        'SELECT timestamp AS "time", severity_text AS level, body, trace_id FROM logs '
        f"WHERE timestamp {window} AND severity_number >= 17 ORDER BY timestamp DESC LIMIT 100",
        'SELECT trace_id AS "traceID", span_id AS "spanID", parent_span_id AS "parentSpanID", '
        'service_name AS "serviceName", name AS "operationName", '
        'extract(epoch from timestamp) * 1000 AS "startTime", '
        'duration_ns / 1000000.0 AS "duration", attributes AS "tags" '
        f"FROM spans WHERE trace_id = '{trace_id}' ORDER BY timestamp",
    ]


def test_go_lib_pq_and_pgconn_run_grafanas_queries(
    pg: PgServer, go_probes: dict[str, Path]
) -> None:
    trace_id = _values(pg, "acme", "SELECT trace_id FROM spans LIMIT 1")[0]
    queries = _grafana_queries(trace_id)
    dsn = pg.dsn(sslmode="disable")
    pq = subprocess.run(
        [str(go_probes["pqprobe"]), dsn, *queries], capture_output=True, text=True, timeout=60
    )
    assert pq.returncode == 0, pq.stderr
    lines = dict(line.split("\t", 1) for line in pq.stdout.splitlines())
    assert lines["health"] == "1"
    assert lines["columns0"] == "time,metric,value\tFLOAT8,TEXT,FLOAT8"
    assert int(lines["rows0"]) > 0 and int(lines["rows1"]) > 0
    assert lines["columns2"].startswith("traceID,spanID,parentSpanID,serviceName,operationName")
    assert lines["rows2"] == "5"  # five spans per trace in the fixture's data

    # pgconn: one Exec of all three queries, as a dashboard refresh may send them
    pgconn = subprocess.run(
        [str(go_probes["pgconnprobe"]), dsn, "; ".join(queries)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert pgconn.returncode == 0, pgconn.stderr
    results = [line.split("\t") for line in pgconn.stdout.splitlines()]
    assert results[0] == ["server_version", "16.0 (shoal 0.1.0)"]
    assert [r[0] for r in results[1:]] == ["result0.0", "result0.1", "result0.2"]
    assert results[1][1] == "time:701,metric:25,value:701"
    assert results[3][2] == "5" and results[3][3] == "SELECT 5"


# -- the provisioned Grafana dashboard ---------------------------------------------------------

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "dashboards"


def _expand_grafana_macros(sql: str, start: dt.datetime, end: dt.datetime) -> str:
    """Expands the macros the dashboard uses into the SQL Grafana's PostgreSQL data source
    produces for them (time filter as RFC 3339 strings, time group as epoch arithmetic)."""

    def rfc3339(when: dt.datetime) -> str:
        return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def group(match: re.Match[str]) -> str:
        column, interval = (a.strip() for a in match.group(2).split(","))
        seconds = {"s": 1, "m": 60, "h": 3600}[interval.strip("'")[-1]] * int(
            interval.strip("'")[:-1]
        )
        expr = f"floor(extract(epoch from {column})/{seconds})*{seconds}"
        return expr + (' AS "time"' if match.group(1) == "Alias" else "")

    sql = re.sub(r"\$__timeGroup(Alias)?\(([^)]*)\)", group, sql)
    return re.sub(
        r"\$__timeFilter\(([^)]*)\)",
        lambda m: f"{m.group(1)} BETWEEN '{rfc3339(start)}' AND '{rfc3339(end)}'",
        sql,
    )


def test_provisioned_dashboard_queries_run(pg: PgServer) -> None:
    dashboard = json.loads((DASHBOARD / "logs-traces.json").read_text())
    trace_id = _values(pg, "acme", "SELECT trace_id FROM spans LIMIT 1")[0]
    start = dt.datetime(2025, 12, 31, 23, tzinfo=dt.UTC)
    end = dt.datetime(2026, 1, 1, 1, tzinfo=dt.UTC)
    answers: dict[str, tuple[list[str], list[tuple[object, ...]]]] = {}
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        for panel in dashboard["panels"]:
            (target,) = panel["targets"]
            sql = _expand_grafana_macros(target["rawSql"], start, end)
            sql = sql.replace("$trace_id", trace_id)
            cursor = conn.execute(sql)
            answers[panel["type"]] = ([c.name for c in cursor.description or []], cursor.fetchall())
    names, rows = answers["timeseries"]
    assert names == ["time", "metric", "value"] and sum(int(r[2]) for r in rows) == 300
    names, rows = answers["logs"]
    assert names[:3] == ["time", "body", "level"] and rows
    assert {r[2] for r in rows} <= {"ERROR", "FATAL"}
    names, rows = answers["table"]
    assert "duration_ms" in names and len(rows) == 50
    names, rows = answers["traces"]
    assert names[:8] == [
        "traceID", "spanID", "parentSpanID", "serviceName", "operationName", "startTime",
        "duration", "tags",
    ]  # fmt: skip
    assert len(rows) == 5 and all(r[0] == trace_id for r in rows)
    assert isinstance(rows[0][7], list) and {"key", "value"} <= set(rows[0][7][0])


def test_a_client_that_hangs_up_mid_query_stops_its_query(pg: PgServer) -> None:
    proc = _psql_long_query(pg, subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        busy = pg.process.cpu_seconds()
        time.sleep(1.0)
        assert pg.process.cpu_seconds() - busy > 0.1  # the query is running
    finally:
        proc.kill()  # no cancel request: the connection just closes
        proc.wait(10)
    time.sleep(1.5)
    before = pg.process.cpu_seconds()
    time.sleep(2.0)
    assert pg.process.cpu_seconds() - before < 1.0
    assert "client gone, cancelling its query" in pg.process.log()


def test_sql_cursors_declare_fetch_close(pg: PgServer) -> None:
    # psycopg's named (server-side) cursors: DECLARE, then FETCH FORWARD n, in a transaction
    with psycopg.connect(pg.dsn()) as conn:
        with conn.cursor(name="pages") as cur:
            cur.itersize = 7
            cur.execute("SELECT severity_number FROM logs WHERE severity_number > %s", (0,))
            first = cur.fetchmany(10)
            rest = cur.fetchall()
        assert len(first) == 10 and len(first) + len(rest) == 300
        with conn.cursor(name="binary_pages", binary=True) as cur:
            cur.execute("SELECT timestamp, span_id FROM spans ORDER BY timestamp")
            rows = list(cur)
        assert len(rows) == 100 and rows[0][0].tzinfo is not None
        conn.commit()
    # the same by hand through psql's simple protocol
    done = _psql(
        pg,
        "-c",
        "BEGIN; DECLARE c CURSOR FOR SELECT name FROM spans ORDER BY timestamp; "
        "FETCH 3 FROM c; FETCH ALL FROM c; CLOSE c; COMMIT",
    )
    assert done.returncode == 0, done.stderr
    assert "(3 rows)" in done.stdout and "(97 rows)" in done.stdout
    backwards = _psql(
        pg, "-c", "BEGIN; DECLARE c CURSOR FOR SELECT 1 AS x; FETCH BACKWARD 1 FROM c"
    )
    assert "not supported" in backwards.stderr


def test_the_row_cap_cuts_a_result_with_a_notice(pg: PgServer) -> None:
    notices: list[str] = []
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
        rows = conn.execute("SELECT value FROM range(100005)").fetchall()
        assert len(rows) == 100_000  # query_max_rows
        assert notices and "100000" in notices[0]
        assert conn.execute("SELECT 1 AS x").fetchone() == (1,)


def test_catalog_queries_are_sandboxed_too(pg: PgServer, tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    attempts = [
        "SELECT * FROM '/etc/passwd', information_schema.tables",
        "SELECT * FROM read_csv('/etc/passwd'), pg_class",
        f"COPY (SELECT * FROM pg_class) TO '{target}'",
        "CREATE TABLE pg_x AS SELECT * FROM pg_class",
        "SELECT * FROM pg_class, globex.logs",
    ]
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        for sql in attempts:
            with pytest.raises(psycopg.Error) as info:
                conn.execute(sql)
            assert "root:" not in str(info.value)
        names = {r[0] for r in conn.execute("SELECT relname FROM pg_class")}
        assert names == {"logs", "metrics", "spans"}
    assert not target.exists()
