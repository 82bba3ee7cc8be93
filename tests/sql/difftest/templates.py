"""Query templates of the differential suite, written once in shoal's dialect.

:func:`duckdb_dialect` turns a query into DuckDB's where the two differ (regular
expression operators, ``date_bin``); the templates avoid the differences that have no
plain translation (integer division, casts of fractions to integers). Each template
draws its time range and filters from pools that cover relative and literal bounds,
map lookups, string functions, LIKE/ILIKE/regexp, IN lists, IS NULL, CASE and casts,
and the parts of the data (``scope_name``: only flushed rows, only snapshot rows, both).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
import re
from collections.abc import Callable

from tests.sql.difftest.generator import RELATIVE_MINUTES


@dataclasses.dataclass(frozen=True)
class Case:
    sql: str
    ordered: bool = False  # compare as a list (a total ORDER BY), else as a multiset

    @property
    def duckdb(self) -> str:
        return duckdb_dialect(self.sql)


_REGEX = re.compile(r"([\w.]+(?:\['[^']*'\])?) (!?)~(\*?) ('(?:[^']|'')*')")


def duckdb_dialect(sql: str) -> str:
    def regex(m: re.Match[str]) -> str:
        flags = ", 'i'" if m.group(3) else ""
        call = f"regexp_matches({m.group(1)}, {m.group(4)}{flags})"
        return f"NOT {call}" if m.group(2) else call

    return _REGEX.sub(regex, sql).replace("date_bin(", "time_bucket(")


class Pools:
    """Time ranges and filters, given the data's reference time ``t0``."""

    def __init__(self, t0: dt.datetime, parts: int) -> None:
        hour = t0.replace(minute=0, second=0, microsecond=0)

        def lit(h: int) -> str:
            return f"'{(hour - dt.timedelta(hours=h)).isoformat(sep=' ')}'"

        self.snapshot_part = f"part-{parts - 1}"
        self.time = [
            *(f"{{t}}timestamp >= now() - INTERVAL '{n} minutes'" for n in RELATIVE_MINUTES),
            f"{{t}}timestamp >= {lit(2)}",
            f"{{t}}timestamp < {lit(3)}",
            f"{{t}}timestamp >= {lit(5)} AND {{t}}timestamp < {lit(1)}",
            f"{{t}}timestamp BETWEEN {lit(4)} AND {lit(2)}",
            f"{{t}}timestamp > now() - INTERVAL '{RELATIVE_MINUTES[2]} minutes' "
            f"AND {{t}}timestamp < now() - INTERVAL '{RELATIVE_MINUTES[0]} minutes'",
            "true",
        ]
        self.parts = [
            "true",
            f"{{t}}scope_name = '{self.snapshot_part}'",  # only rows still in the snapshot
            f"{{t}}scope_name <> '{self.snapshot_part}'",  # only flushed rows
        ]
        self.metric_filters = [
            "attributes['room'] = 'lab'",
            "attributes['room'] IS NULL",
            "attributes['room'] IN ('lab', 'hall')",
            "attributes['http.route'] LIKE '/cart%'",
            "attributes['http.route'] LIKE '/a'",
            "attributes['http.route'] ~ '^/(a|b)$'",
            "lower(service_name) = 'cart'",
            "upper(metric_name) = 'CPU.USAGE'",
            "strpos(metric_name, 'http') > 0",
            "metric_name IN ('cpu.usage', 'room.temperature')",
            "metric_name ~ '^http'",
            "metric_name !~ 'temp'",
            "service_name ILIKE 'CHECK%'",
            "value > 0.5",
            "value IS NULL",
            "resource_attributes['host.name'] IN ('h1', 'h3')",
            "resource_attributes['deployment.environment'] = 'staging'",
            "CAST(attributes['status'] AS BIGINT) >= 500",
            "attributes['status'] = '404'",
            "array_length(bucket_counts) = 5",
            "metric_type = 'sum'",
            "NOT (service_name = 'cart')",
            "COALESCE(attributes['room'], 'none') = 'none'",
            "CASE WHEN value > 0.5 THEN 'hi' ELSE 'lo' END = 'hi'",
            "attributes['state'] IS DISTINCT FROM 'idle'",
            "character_length(metric_name) > 10",
        ]
        self.log_filters = [
            "body LIKE '%failed%'",
            "body ILIKE 'get %'",
            "body ~ 'attempt [23]'",
            "body ~* '^CACHE'",
            "strpos(body, 'cache') > 0",
            "split_part(body, ' ', 1) = 'GET'",
            "severity_number >= 13",
            "upper(severity_text) = 'INFO'",
            "severity_text IN ('WARN', 'ERROR')",
            "attributes['user.id'] IS NULL",
            "CAST(attributes['user.id'] AS BIGINT) < 10",
            "attributes['http.route'] = '/search'",
            "trace_id IS NOT NULL",
            "service_name <> 'search'",
        ]
        self.span_filters = [
            "parent_span_id IS NULL",
            "attributes['db.system'] = 'redis'",
            "attributes['db.system'] IS NULL",
            "name LIKE 'GET%'",
            "name ~ '^(db|cache)'",
            "upper(name) = 'DB.QUERY'",
            "duration_ns > 100000000",
            "status_code = 2",
            "kind IN (2, 3)",
            "resource_attributes['host.name'] = 'h2'",
        ]


Template = Callable[[random.Random, Pools], Case]


def _where(rng: random.Random, pools: Pools, filters: list[str], alias: str = "") -> str:
    prefix = f"{alias}." if alias else ""
    time = rng.choice(pools.time).format(t=prefix)
    part = rng.choice(pools.parts).format(t=prefix)
    condition = rng.choice(filters)
    if alias:
        condition = re.sub(
            r"\b(attributes|resource_attributes|metric_name|service_name|value|body|name|"
            r"severity_number|severity_text|trace_id|parent_span_id|duration_ns|status_code|"
            r"kind|metric_type|bucket_counts)\b",
            lambda m: f"{alias}.{m.group(1)}",
            condition,
        )
    # each condition parenthesised: `x IS DISTINCT FROM 'a' AND y` would bind the AND first
    return " AND ".join(f"({c})" for c in (time, part, condition) if c != "true") or "true"


def _m(rng: random.Random, pools: Pools, alias: str = "") -> str:
    return _where(rng, pools, pools.metric_filters, alias)


def _l(rng: random.Random, pools: Pools, alias: str = "") -> str:
    return _where(rng, pools, pools.log_filters, alias)


def _s(rng: random.Random, pools: Pools, alias: str = "") -> str:
    return _where(rng, pools, pools.span_filters, alias)


TEMPLATES: list[Template] = [
    # -- metrics ----------------------------------------------------------------------
    lambda r, p: Case(f"SELECT count(*) AS n FROM metrics WHERE {_m(r, p)}"),
    lambda r, p: Case(
        "SELECT metric_name, count(*) AS n, sum(value) AS s, min(value) AS lo, "
        f"max(value) AS hi, avg(value) AS a FROM metrics WHERE {_m(r, p)} GROUP BY metric_name"
    ),
    lambda r, p: Case(
        "SELECT service_name, attributes['room'] AS room, count(*) AS n, avg(value) AS a "
        f"FROM metrics WHERE metric_name = 'room.temperature' AND {_m(r, p)} "
        f"GROUP BY 1, 2 HAVING count(*) > {r.randrange(0, 6)}"
    ),
    lambda r, p: Case(
        f"SELECT date_bin(INTERVAL '{r.choice((5, 15, 60))} minutes', timestamp) AS t, "
        f"count(*) AS n, max(value) AS m FROM metrics WHERE {_m(r, p)} GROUP BY 1"
    ),
    lambda r, p: Case(
        "SELECT date_trunc('hour', timestamp) AS h, metric_name, "
        f"count(DISTINCT series_id) AS s FROM metrics WHERE {_m(r, p)} GROUP BY 1, 2"
    ),
    lambda r, p: Case(
        "SELECT DISTINCT service_name, resource_attributes['host.name'] AS host "
        f"FROM metrics WHERE {_m(r, p)}"
    ),
    lambda r, p: Case(
        "SELECT metric_name, timestamp, value, series_id FROM metrics "
        f"WHERE {_m(r, p)} ORDER BY value DESC, timestamp, series_id LIMIT {r.randrange(1, 40)}",
        ordered=True,
    ),
    lambda r, p: Case(
        "WITH w AS (SELECT series_id, max(value) AS m FROM metrics "
        f"WHERE {_m(r, p)} GROUP BY series_id) "
        f"SELECT count(*) AS n, sum(m) AS s FROM w WHERE m > {r.choice((0.2, 0.5, 10, 100))}"
    ),
    lambda r, p: Case(
        f"SELECT count(*) AS n FROM metrics WHERE {_m(r, p)} "
        f"AND series_id IN (SELECT series_id FROM metrics WHERE {_m(r, p)})"
    ),
    lambda r, p: Case(
        f"SELECT metric_name, count(*) AS n FROM metrics WHERE {_m(r, p)} AND value > "
        "(SELECT avg(value) FROM metrics WHERE metric_name = 'cpu.usage') GROUP BY metric_name"
    ),
    lambda r, p: Case(
        "SELECT series_id, timestamp, value, "
        "row_number() OVER (PARTITION BY series_id ORDER BY timestamp) AS rn, "
        "sum(value) OVER (PARTITION BY series_id ORDER BY timestamp "
        "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS running "
        f"FROM metrics WHERE metric_name = 'cpu.usage' AND {_m(r, p)}"
    ),
    lambda r, p: Case(
        "SELECT series_id, timestamp, "
        "value - lag(value) OVER (PARTITION BY series_id ORDER BY timestamp) AS d "
        f"FROM metrics WHERE metric_name = 'http.server.requests' AND {_m(r, p)}"
    ),
    lambda r, p: Case(
        "SELECT attributes['http.route'] AS route, sum(count) AS c, sum(sum) AS s, "
        f"count(*) AS n FROM metrics WHERE metric_type = 'histogram' AND {_m(r, p)} GROUP BY 1"
    ),
    lambda r, p: Case(
        "SELECT metric_name, stddev(value) AS sd, var_samp(value) AS v, median(value) AS md, "
        "bool_or(value > 0.9) AS any_hi, count(value) AS nv "
        f"FROM metrics WHERE {_m(r, p)} GROUP BY 1"
    ),
    lambda r, p: Case(
        "SELECT CASE WHEN value < 0.3 THEN 'low' WHEN value < 0.7 THEN 'mid' ELSE 'high' END "
        f"AS band, count(*) AS n FROM metrics WHERE metric_name = 'cpu.usage' AND {_m(r, p)} "
        "GROUP BY 1"
    ),
    lambda r, p: Case(
        "SELECT EXTRACT(hour FROM timestamp) AS h, CAST(floor(value) AS BIGINT) AS v, "
        f"count(*) AS n FROM metrics WHERE metric_name = 'room.temperature' AND {_m(r, p)} "
        "GROUP BY 1, 2"
    ),
    lambda r, p: Case(
        "SELECT service_name, count(DISTINCT metric_name) AS names, min(metric_name) AS first, "
        f"sum(value_int) AS ints FROM metrics WHERE {_m(r, p)} GROUP BY service_name"
    ),
    lambda r, p: Case(
        "SELECT count(*) AS n, max(value) AS m FROM metrics "
        f"WHERE timestamp < now() - INTERVAL '{r.randrange(2, 30)} days' AND {_m(r, p)}"
    ),
    lambda r, p: Case(
        "SELECT metric_name, value FROM metrics "
        f"WHERE metric_name = 'no.such.metric' AND {_m(r, p)}"
    ),
    # -- logs -------------------------------------------------------------------------
    lambda r, p: Case(f"SELECT severity_text, count(*) AS n FROM logs WHERE {_l(r, p)} GROUP BY 1"),
    lambda r, p: Case(f"SELECT max(timestamp) AS t, count(*) AS n FROM logs WHERE {_l(r, p)}"),
    lambda r, p: Case(
        f"SELECT timestamp, body, severity_number FROM logs WHERE {_l(r, p)} "
        f"ORDER BY timestamp DESC, body LIMIT {r.randrange(1, 30)}",
        ordered=True,
    ),
    lambda r, p: Case(
        "SELECT attributes['user.id'] AS u, count(*) AS n FROM logs "
        f"WHERE attributes['user.id'] IS NOT NULL AND {_l(r, p)} "
        f"GROUP BY 1 HAVING count(*) >= {r.randrange(1, 4)}"
    ),
    lambda r, p: Case(
        "SELECT date_bin(INTERVAL '15 minutes', timestamp) AS t, severity_text, "
        f"count(*) AS n FROM logs WHERE {_l(r, p)} GROUP BY 1, 2"
    ),
    lambda r, p: Case(
        "SELECT service_name, split_part(body, ' ', 1) AS verb, count(*) AS n, "
        f"min(length(body)) AS shortest FROM logs WHERE {_l(r, p)} GROUP BY 1, 2"
    ),
    lambda r, p: Case(
        f"SELECT count(*) AS n FROM logs WHERE {_l(r, p)} AND trace_id IN "
        f"(SELECT trace_id FROM spans WHERE {_s(r, p)})"
    ),
    # -- spans ------------------------------------------------------------------------
    lambda r, p: Case(
        "SELECT name, count(*) AS n, avg(duration_ns) AS a, max(duration_ns) AS m "
        f"FROM spans WHERE {_s(r, p)} GROUP BY name"
    ),
    lambda r, p: Case(
        "SELECT pa.name AS parent, ch.name AS child, count(*) AS n FROM spans ch "
        "JOIN spans pa ON ch.parent_span_id = pa.span_id AND ch.trace_id = pa.trace_id "
        f"WHERE {_s(r, p, 'ch')} GROUP BY 1, 2"
    ),
    lambda r, p: Case(
        "SELECT s.name, count(*) AS n FROM logs l JOIN spans s ON l.trace_id = s.trace_id "
        f"WHERE s.parent_span_id IS NULL AND {_l(r, p, 'l')} GROUP BY 1"
    ),
    lambda r, p: Case(
        f"SELECT 'logs' AS src, count(*) AS n FROM logs WHERE {_l(r, p)} "
        f"UNION ALL SELECT 'spans' AS src, count(*) AS n FROM spans WHERE {_s(r, p)} "
        f"UNION ALL SELECT 'metrics' AS src, count(*) AS n FROM metrics WHERE {_m(r, p)}"
    ),
    lambda r, p: Case(
        "SELECT trace_id, count(*) AS n, max(duration_ns) AS longest FROM spans "
        f"WHERE {_s(r, p)} GROUP BY trace_id HAVING count(*) > {r.randrange(1, 8)}"
    ),
    lambda r, p: Case(
        f"SELECT status_code, kind, count(*) AS n FROM spans WHERE {_s(r, p)} GROUP BY 1, 2"
    ),
    lambda r, p: Case(
        f"SELECT name, duration_ns, span_id FROM spans WHERE {_s(r, p)} "
        f"ORDER BY duration_ns DESC, span_id LIMIT {r.randrange(1, 25)}",
        ordered=True,
    ),
    lambda r, p: Case(
        "SELECT service_name, name, duration_ns, "
        "rank() OVER (PARTITION BY service_name ORDER BY duration_ns DESC) AS rk "
        f"FROM spans WHERE parent_span_id IS NULL AND {_s(r, p)}"
    ),
    lambda r, p: Case(
        "SELECT DISTINCT attributes['db.system'] AS db, kind FROM spans "
        f"WHERE parent_span_id IS NOT NULL AND {_s(r, p)}"
    ),
]


def cases(t0: dt.datetime, parts: int, n: int, seed: int) -> list[Case]:
    """``n`` queries: every template in turn, each draw with its own filters."""
    rng = random.Random(seed)
    pools = Pools(t0, parts)
    return [TEMPLATES[i % len(TEMPLATES)](rng, pools) for i in range(n)]
