"""Differential testing of the SQL path: shoal against DuckDB over the same rows.

Seeded metrics, logs and spans go over OTLP/HTTP to a real ``shoal serve``: the first
parts are flushed to Parquet (a server stopped after each part flushes it, one Delta
version per part), the last stays in the WAL snapshot. The ground truth is the same
export bodies decoded in this process and loaded into DuckDB. Hundreds of generated
queries (tests/sql/difftest/templates.py) must answer the same on both, as
multisets (lists where the ORDER BY is total), floats within 1e-9 relative.

The same queries with ``as_of_version=N`` must answer what DuckDB answers over each
table as delta-rs reads it at version N, run several at once while ingest goes on;
and an ETag's 304 may only come back when the true answer did not change.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime as dt
import hashlib
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from loadtest.ingest import ServerProcess
from shoal.auth import TokenStore
from shoal.otlp.decode import decode
from tests.sql.difftest import compare, generator, templates

PARTS = 4
SIGNALS = {"metrics": "metrics", "logs": "logs", "spans": "traces"}
DEFAULT_QUERIES = 520
SLOW_QUERIES = 3000


class Truth:
    """What was sent, decoded here and held in DuckDB: the ground truth."""

    def __init__(self) -> None:
        self.tables: dict[str, list[pa.Table]] = {s: [] for s in SIGNALS}
        self.lock = threading.Lock()

    def add(self, signal: str, body: bytes) -> None:
        result = decode(signal, body)
        assert result.rejected == 0, result.errors
        with self.lock:
            self.tables[signal].append(result.table)

    def connect(self, tables: dict[str, pa.Table] | None = None) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        con.execute("SET default_null_order = 'nulls_last_on_asc_first_on_desc'")
        with self.lock:
            current = tables or {s: pa.concat_tables(t) for s, t in self.tables.items()}
        for name, table in current.items():
            con.register(name, table)
        return con


@dataclasses.dataclass
class Served:
    server: ServerProcess
    token: str
    truth: Truth
    t0: dt.datetime
    versions: dict[str, int]  # each table's latest version once the parts are flushed
    data: Path

    def send(self, signal: str, body: bytes) -> None:
        request = urllib.request.Request(
            f"{self.server.url}/v1/{SIGNALS[signal]}",
            data=body,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/x-protobuf",
            },
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            assert response.status == 200
        self.truth.add(signal, body)

    def sql(self, query: str, **params: str) -> pa.Table:
        query_string = urllib.parse.urlencode({"format": "arrow", **params})
        url = f"{self.server.url}/api/v1/sql?{query_string}"
        request = urllib.request.Request(
            url, data=query.encode(), headers={"Authorization": f"Bearer {self.token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return pa.ipc.open_stream(response.read()).read_all()
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{exc.code} {exc.read().decode()} for {query}") from None

    def get(self, query: str, etag: str | None = None) -> tuple[int, str, pa.Table | None]:
        url = f"{self.server.url}/api/v1/sql?" + urllib.parse.urlencode(
            {"q": query, "format": "arrow"}
        )
        headers = {"Authorization": f"Bearer {self.token}"}
        if etag:
            headers["If-None-Match"] = etag
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers)) as r:
                return r.status, r.headers["ETag"], pa.ipc.open_stream(r.read()).read_all()
        except urllib.error.HTTPError as exc:
            assert exc.code == 304, exc.read().decode()
            return 304, exc.headers["ETag"], None


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("differential") / "data"
    token = TokenStore(data).create("acme", frozenset({"ingest", "query"}))[0]
    t0 = dt.datetime.now(dt.UTC)
    parts = generator.generate(int(t0.timestamp() * 1e9), seed=20261124, parts=PARTS)
    env = {"SHOAL_FLUSH_MAX_AGE_S": "3600", "SHOAL_LOG_LEVEL": "warning"}
    truth = Truth()
    server = ServerProcess(data, env=env, log_path=data.parent / "server.log")
    state = Served(server, token, truth, t0, {}, data)
    try:
        for part in parts.bodies[:-1]:  # each flushed by the stop that follows it
            server.start()
            for signal, bodies in part.items():
                for body in bodies:
                    state.send(signal, body)
            assert server.terminate() == 0
        server.start()
        for signal, bodies in parts.bodies[-1].items():
            for body in bodies:
                state.send(signal, body)
        for signal in SIGNALS:
            state.versions[signal] = DeltaTable(str(data / "tenants" / "acme" / signal)).version()
        yield state
    finally:
        server.kill()


def _check(served: Served, cases: list[templates.Case]) -> None:
    con = served.truth.connect()
    failures = []
    answered = 0  # cases whose true answer has a row with something besides 0 and NULL
    for case in cases:
        want = compare.rows(con.sql(case.duckdb).to_arrow_table())
        answered += any(v not in (0, None) for row in want for v in row)
        try:
            got = compare.rows(served.sql(case.sql))
        except AssertionError as exc:  # an error answer
            failures.append(str(exc))
            continue
        problem = compare.difference(got, want, case.ordered)
        if problem:
            failures.append(f"{case.sql}\n    {problem}")
    assert not failures, f"{len(failures)} of {len(cases)} differ:\n" + "\n".join(failures[:10])
    assert answered >= len(cases) * 2 // 3  # most queries compare real answers, not emptiness


def test_the_data_is_split_between_parquet_and_the_snapshot(served: Served) -> None:
    snapshot = f"part-{PARTS - 1}"
    for signal in SIGNALS:
        parquet = DeltaTable(str(served.data / "tenants" / "acme" / signal)).to_pyarrow_table()
        scopes = set(parquet.column("scope_name").to_pylist())
        assert snapshot not in scopes and len(scopes) == PARTS - 1
        total = served.sql(f"SELECT count(*) AS n FROM {signal}").column(0)[0].as_py()
        unflushed = (
            served.sql(f"SELECT count(*) AS n FROM {signal} WHERE scope_name = '{snapshot}'")
            .column(0)[0]
            .as_py()
        )
        assert total == parquet.num_rows + unflushed and unflushed > 0


def test_generated_queries_answer_as_duckdb_does(served: Served) -> None:
    cases = templates.cases(served.t0, PARTS, DEFAULT_QUERIES, seed=1)
    assert len({c.sql for c in cases}) >= 500
    _check(served, cases)


@pytest.mark.slow
def test_many_more_generated_queries_answer_as_duckdb_does(served: Served) -> None:
    _check(served, templates.cases(served.t0, PARTS, SLOW_QUERIES, seed=2))


def _at_version(served: Served, version: int) -> dict[str, pa.Table]:
    return {
        s: DeltaTable(str(served.data / "tenants" / "acme" / s), version=version).to_pyarrow_table()
        for s in SIGNALS
    }


def test_time_travel_answers_as_delta_rs_reads_each_version_while_ingest_goes_on(
    served: Served,
) -> None:
    versions = range(min(served.versions.values()) + 1)
    truths = {v: served.truth.connect(_at_version(served, v)) for v in versions}
    cases = [
        (case, v)
        for i, case in enumerate(templates.cases(served.t0, PARTS, 120, seed=3))
        for v in (i % len(versions),)
    ]
    extra = generator.generate(int(served.t0.timestamp() * 1e9), seed=7, parts=1)
    stop = threading.Event()

    def ingest() -> int:
        sent = 0
        for signal, bodies in extra.bodies[0].items():
            for body in bodies:
                if stop.is_set():
                    return sent
                served.send(signal, body)
                sent += 1
        return sent

    # the truth first: a DuckDB connection answers one call at a time
    wants = [compare.rows(truths[v].sql(case.duckdb).to_arrow_table()) for case, v in cases]

    def one(item: tuple[tuple[templates.Case, int], list[tuple[object, ...]]]) -> str | None:
        (case, version), want = item
        got = compare.rows(served.sql(case.sql, as_of_version=str(version)))
        problem = compare.difference(got, want, case.ordered)
        return f"as_of_version={version}: {case.sql}\n    {problem}" if problem else None

    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        writer = pool.submit(ingest)
        problems = [p for p in pool.map(one, zip(cases, wants, strict=True)) if p]
        stop.set()
        assert writer.result() > 0  # queries ran while rows arrived
    assert not problems, f"{len(problems)} differ:\n" + "\n".join(problems[:10])


def test_a_304_comes_back_only_when_the_true_answer_did_not_change(served: Served) -> None:
    cases = [c for c in templates.cases(served.t0, PARTS, 80, seed=4) if "now()" not in c.sql]
    before = {}
    for case in cases:
        status, etag, table = served.get(case.sql)
        assert status == 200 and etag and table is not None
        before[case.sql] = (etag, compare.rows(table))
        # nothing changed: the ETag matches
        assert served.get(case.sql, etag)[0] == 304
    # new rows: a few answers change, most do not
    extra = generator.generate(int(served.t0.timestamp() * 1e9), seed=8, parts=1, scale=1)
    for signal, bodies in extra.bodies[0].items():
        for body in bodies[:3]:
            served.send(signal, body)
    con = served.truth.connect()
    changed = not_modified = 0
    for case in cases:
        etag, old = before[case.sql]
        truth = compare.rows(con.sql(case.duckdb).to_arrow_table())
        status, _, table = served.get(case.sql, etag)
        if status == 304:
            not_modified += 1
            assert compare.difference(old, truth, case.ordered) is None, case.sql
        else:
            assert table is not None
            assert compare.difference(compare.rows(table), truth, case.ordered) is None
            changed += compare.difference(old, truth, case.ordered) is not None
    assert changed > 0


# -- the documented series_id recipe ---------------------------------------------------------


def _h(data: str) -> int:
    return int.from_bytes(hashlib.blake2b(data.encode(), digest_size=8).digest(), "little")


def _fmix64(x: int) -> int:
    mask = (1 << 64) - 1
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & mask
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & mask
    return x ^ (x >> 33)


def _set_hash(attributes: dict[str, str], types: dict[str, str]) -> int:
    return sum(_h(f"{k}\0{types.get(k, '')}\0{v}") for k, v in attributes.items()) % (1 << 64)


def test_series_id_follows_the_documented_recipe(served: Served) -> None:
    table = served.sql(
        "SELECT metric_name, attributes, attributes_types, resource_attributes, "
        "resource_attributes_types, series_id FROM metrics ORDER BY series_id LIMIT 50"
    )
    checked = 0
    for row in table.to_pylist():
        point = _set_hash(dict(row["attributes"]), dict(row["attributes_types"]))
        resource = _set_hash(
            dict(row["resource_attributes"]), dict(row["resource_attributes_types"])
        )
        mixed = _fmix64(
            _h(row["metric_name"])
            ^ _fmix64(point ^ 0x5BD1E9955BD1E995)
            ^ _fmix64(resource ^ 0x27D4EB2F165667C5)
        )
        expected = mixed - (1 << 64) if mixed >= 1 << 63 else mixed
        assert row["series_id"] == expected, row["metric_name"]
        checked += 1
    assert checked == 50
    # the first 8 bytes of the 64-byte BLAKE2b, which the document once named, differ
    assert _h("cpu.usage") != int.from_bytes(hashlib.blake2b(b"cpu.usage").digest()[:8], "little")
