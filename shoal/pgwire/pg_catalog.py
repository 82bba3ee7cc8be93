"""The parts of ``pg_catalog`` and ``information_schema`` that PostgreSQL clients read.

psql's ``\\d`` and ``\\dt``, Grafana's query builder, JDBC's ``DatabaseMetaData``
and BI tools learn what exists from PostgreSQL's catalog. shoal answers those
queries from small Arrow tables (:mod:`shoal.pgwire.pg_catalog_tables`) built out of
the tenant's own table schemas (obtained through the query service, so a tenant's
catalog lists only its tables), in a DataFusion context of their own that holds
nothing else:
read-only, no files, a small memory pool. PostgreSQL-only syntax clients use
in catalog queries (``OPERATOR(pg_catalog.~)``, ``COLLATE``, ``::regclass``,
the ``pg_catalog.`` prefix) is rewritten, and the functions they call
(``pg_table_is_visible``, ``format_type``, ``quote_ident``, ...) are defined.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa
from datafusion import RuntimeEnvBuilder, SessionConfig, SessionContext, SQLOptions, udf

from shoal.pgwire.pg_catalog_tables import I64, B, S, type_name
from shoal.pgwire.sqltext import SqlTextError, code_pieces, replace_in_code
from shoal.pgwire.statements import CommandError

CATALOG_MEMORY_BYTES = 64 * 1024 * 1024

_CATALOG_TABLES = (
    "pg_namespace|pg_class|pg_attribute|pg_type|pg_database|pg_settings|pg_extension|pg_am|"
    "pg_index|pg_constraint|pg_inherits|pg_description|pg_attrdef|pg_trigger|pg_policy|"
    "pg_statistic_ext|pg_publication|pg_publication_rel|pg_publication_namespace|"
    "pg_collation|pg_proc|pg_roles|pg_user|pg_tables|pg_views|pg_matviews|pg_enum|"
    "pg_range|pg_foreign_table|pg_partitioned_table|pg_sequence|pg_rewrite|pg_tablespace|"
    "pg_authid|pg_shdescription|pg_event_trigger|pg_opclass|pg_operator|pg_cursors"
)
_USES_CATALOG = re.compile(
    rf"\b(?:pg_catalog\s*\.|information_schema\s*\.|(?:{_CATALOG_TABLES})\b)", re.IGNORECASE
)


def uses_catalog(sql: str) -> bool:
    """Whether ``sql`` reads PostgreSQL's catalog (answered here, not by the tenant session):
    a catalog name in its code, not in a string literal or comment."""
    try:
        return any(_USES_CATALOG.search(piece) for piece in code_pieces(sql))
    except SqlTextError:
        return bool(_USES_CATALOG.search(sql))


def _quote_ident(name: str) -> str:
    if re.fullmatch(r"[a-z_][a-z0-9_$]*", name):
        return name
    return '"' + name.replace('"', '""') + '"'


def _parse_ident(text: str) -> list[str]:
    parts = []
    for m in re.finditer(r'"((?:[^"]|"")*)"|([^."]+)', text):
        parts.append(
            m.group(1).replace('""', '"') if m.group(1) is not None else m.group(2).strip().lower()
        )
    return parts


def _map(fn: Callable[..., Any], out: pa.DataType) -> Callable[..., pa.Array]:
    def run(*arrays: pa.Array) -> pa.Array:
        columns = [a.to_pylist() for a in arrays]
        rows = zip(*columns, strict=True) if columns else iter(())
        return pa.array([fn(*row) for row in rows], out)

    return run


def _functions() -> list[Any]:
    def const(value: Any, out: pa.DataType, *inputs: pa.DataType, name: str) -> Any:
        return udf(_map(lambda *_: value, out), list(inputs), out, "stable", name=name)

    def f(fn: Callable[..., Any], inputs: list[pa.DataType], out: pa.DataType, name: str) -> Any:
        return udf(_map(fn, out), inputs, out, "stable", name=name)

    return [
        const(True, B, I64, name="pg_table_is_visible"),
        const(True, B, I64, name="pg_type_is_visible"),
        const("shoal", S, I64, name="pg_get_userbyid"),
        const(0, I64, I64, name="pg_relation_size"),
        const(0, I64, I64, name="pg_total_relation_size"),
        f(lambda oid, mod: None if oid is None else type_name(oid), [I64, I64], S, "format_type"),
        f(lambda code: "UTF8" if code == 6 else "SQL_ASCII", [I64], S, "pg_encoding_to_char"),
        f(lambda n: None if n is None else f"{n} bytes", [I64], S, "pg_size_pretty"),
        f(lambda s: None if s is None else _quote_ident(s), [S], S, "quote_ident"),
        f(lambda s: None if s is None else _parse_ident(s), [S], pa.list_(S), "parse_ident"),
        f(lambda a, d: None if not a or d != 1 else 1, [pa.list_(S), I64], I64, "array_lower"),
        f(lambda a, d: None if not a or d != 1 else len(a), [pa.list_(S), I64], I64, "array_upper"),
        f(
            lambda a, d: None if not a or d != 1 else len(a),
            [pa.list_(S), I64],
            I64,
            "array_length",
        ),
    ]


_FUNCTIONS: list[Any] | None = None

_CATALOG_OIDS = {"pg_class": 1259, "pg_namespace": 2615, "pg_type": 1247, "pg_proc": 1255}
_REGCLASS_LITERAL = re.compile(
    r"'((?:[^']|'')*)'\s*::\s*(?:pg_catalog\s*\.\s*)?regclass\b", re.IGNORECASE
)


def _regclass_literals(sql: str) -> str:
    """``'name'::regclass`` as the relation's OID (a subquery over pg_class for a table)."""

    def oid(m: re.Match[str]) -> str:
        name = m.group(1).replace("''", "'").removeprefix("pg_catalog.").removeprefix("public.")
        if name in _CATALOG_OIDS:
            return str(_CATALOG_OIDS[name])
        quoted = "'" + name.replace("'", "''") + "'"
        return f"(SELECT min(oid) FROM pg_class WHERE relname = {quoted})"

    return _REGCLASS_LITERAL.sub(oid, sql)


_REWRITES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"OPERATOR\s*\(\s*pg_catalog\s*\.\s*([~!*<>=]+)\s*\)", re.IGNORECASE), r"\1"),
    (
        re.compile(
            r"\bCOLLATE\s+(?:pg_catalog\s*\.\s*)?(?:\"?default\"?|\"C\"|C)\b", re.IGNORECASE
        ),
        "",
    ),
    (
        re.compile(
            r"::\s*(?:pg_catalog\s*\.\s*)?(?:regclass|regtype|regproc|regnamespace|oid)\b",
            re.IGNORECASE,
        ),
        "::bigint",
    ),
    (re.compile(r"::\s*(?:pg_catalog\s*\.\s*)?name\b", re.IGNORECASE), "::text"),
    (re.compile(r"\bpg_catalog\s*\.\s*", re.IGNORECASE), ""),
    (re.compile(r"\binformation_schema\s*\.\s*(\w+)", re.IGNORECASE), r"information_schema_\1"),
]


_CONSTANT_CALLS = {
    "pg_get_expr": "CAST(NULL AS VARCHAR)",
    "obj_description": "CAST(NULL AS VARCHAR)",
    "col_description": "CAST(NULL AS VARCHAR)",
    "shobj_description": "CAST(NULL AS VARCHAR)",
    "pg_get_indexdef": "CAST(NULL AS VARCHAR)",
    "pg_get_constraintdef": "CAST(NULL AS VARCHAR)",
    "pg_get_viewdef": "CAST(NULL AS VARCHAR)",
    "pg_get_statisticsobjdef_columns": "CAST(NULL AS VARCHAR)",
    "pg_relation_is_publishable": "FALSE",
    "has_table_privilege": "TRUE",
    "has_schema_privilege": "TRUE",
    "has_column_privilege": "TRUE",
}
_CALL = re.compile(rf"(?<![\w.])({'|'.join(_CONSTANT_CALLS)})\s*\(", re.IGNORECASE)


def _replace_constant_calls(sql: str) -> str:
    """Calls of catalog functions whose answer never varies here, replaced by that answer
    (their arguments, up to the matching parenthesis, dropped)."""
    out: list[str] = []
    pos = 0
    while (m := _CALL.search(sql, pos)) is not None:
        depth, i = 1, m.end()
        while i < len(sql) and depth:
            if sql[i] == "'":
                close = sql.find("'", i + 1)
                i = len(sql) if close < 0 else close
            elif sql[i] == "(":
                depth += 1
            elif sql[i] == ")":
                depth -= 1
            i += 1
        out.append(sql[pos : m.start()])
        out.append(_CONSTANT_CALLS[m.group(1).lower()])
        pos = i
    out.append(sql[pos:])
    return "".join(out)


_SUBQUERY = re.compile(r"\(\s*SELECT\b", re.IGNORECASE)


def _depths(text: str, start: int = 0) -> Iterator[tuple[int, int]]:
    """Each index of ``text`` from ``start`` outside single-quoted strings, with the
    parenthesis depth once that character is counted."""
    depth, i = 0, start
    while i < len(text):
        c = text[i]
        if c == "'":
            close = text.find("'", i + 1)
            i = len(text) if close < 0 else close
        else:
            depth += (c == "(") - (c == ")")
            yield i, depth
        i += 1


def _balanced_end(sql: str, start: int) -> int:
    """The index just past the parenthesis closing the first one from ``start``."""
    for i, depth in _depths(sql, start):
        if depth == 0 and sql[i] == ")":
            return i + 1
    return len(sql)


def _empty_subqueries(sql: str, empty: frozenset[str]) -> str:
    """Scalar subqueries that read only always-empty catalog tables, replaced by NULL
    (DataFusion plans a correlated scalar subquery only when it is aggregated)."""
    out: list[str] = []
    pos = 0
    while (m := _SUBQUERY.search(sql, pos)) is not None:
        end = _balanced_end(sql, m.start())
        inner = sql[m.start() : end]
        # an inner join or a comma join with an empty table is empty (a LEFT JOIN is not)
        inner_tables = re.findall(r"(?<!LEFT )\b(?:FROM|JOIN)\s+(\w+)|,\s*(\w+)", inner, re.I)
        tables = {a or b for a, b in inner_tables} & empty
        preceding = sql[max(0, m.start() - 12) : m.start()].lower()
        aggregated = re.match(r"\(\s*SELECT\s+(?:count|sum|max|min|array_agg)\s*\(", inner, re.I)
        if tables and "exists" not in preceding and " in" not in preceding:
            out.append(sql[pos : m.start()])
            out.append("0" if aggregated else "NULL")
            pos = end
        else:
            out.append(sql[pos : m.end()])
            pos = m.end()
    out.append(sql[pos:])
    return "".join(out)


_SEARCH_PATH_SCHEMAS = re.compile(
    r"\(\s*SELECT\s+CASE\s+WHEN\s+trim\s*\(\s*s\s*\[\s*i\s*\]\s*\)", re.IGNORECASE
)


def _search_path_schemas(sql: str) -> str:
    """The subquery that lists the schemas of the search path one per row (unnesting
    ``string_to_array(current_setting('search_path'), ',')`` with ``generate_series``, as
    Grafana's table list does) replaced by the one schema shoal has."""
    while (m := _SEARCH_PATH_SCHEMAS.search(sql)) is not None:
        sql = sql[: m.start()] + "('public')" + sql[_balanced_end(sql, m.start()) :]
    return sql


def rewrite(sql: str, empty: frozenset[str] = frozenset()) -> str:
    """``sql`` in the dialect the catalog context understands."""
    sql = _regclass_literals(sql)
    for pattern, replacement in _REWRITES:
        sql = replace_in_code(sql, pattern, replacement)
    sql = _search_path_schemas(sql)
    return _empty_subqueries(_replace_constant_calls(sql), empty)


def _top_level(text: str) -> Iterator[int]:
    """The indexes of ``text`` outside parentheses and single-quoted strings."""
    return (i for i, depth in _depths(text) if depth == 0 and text[i] not in "()")


def _word_starts(text: str, i: int) -> bool:
    return i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")


def _top_level_split(text: str) -> list[str]:
    """``text`` split at commas outside parentheses and quotes."""
    parts, start = [], 0
    for i in _top_level(text):
        if text[i] == ",":
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _top_level_from(text: str) -> int:
    """The index of the outermost query's FROM keyword, or -1."""
    for i in _top_level(text):
        if re.match(r"FROM\b", text[i : i + 5], re.I) and _word_starts(text, i):
            return i
    return -1


def _top_level_unions(text: str) -> list[str]:
    """``text`` split at UNION [ALL] outside parentheses and quotes."""
    parts: list[str] = []
    start = 0
    for i in _top_level(text):
        if i < start:
            continue
        m = re.match(r"UNION(?:\s+ALL)?\b", text[i:], re.I)
        if m and _word_starts(text, i):
            parts.append(text[start:i])
            start = i + m.end()
    parts.append(text[start:])
    return parts


def _empty_branch(text: str, empty: frozenset[str]) -> list[str] | None:
    head = re.match(r"\s*SELECT\s+(?:DISTINCT\s+)?", text, re.I)
    at = _top_level_from(text)
    if head is None or at < 0:
        return None
    rest = text[at:]
    table = re.match(r"FROM\s+(\w+)", rest, re.I)
    if table is None or table.group(1) not in empty:
        return None
    if re.search(r"\b(?:LEFT|RIGHT|FULL)\b", rest, re.I):
        return None
    names: list[str] = []
    for item in _top_level_split(text[head.end() : at]):
        alias = re.search(r"\bAS\s+\"?(\w+)\"?\s*$", item.strip(), re.I)
        name = alias.group(1) if alias else "?column?"
        names.append(name if name not in names else f"{name}_{len(names)}")
    return names


def empty_answer(sql: str, empty: frozenset[str]) -> pa.Table | None:
    """For a query the catalog context cannot plan whose every branch reads (in its
    outermost FROM, with inner joins only) an always-empty catalog table: its empty
    answer, one text column per select item. None when that does not apply."""
    branches = [_empty_branch(b, empty) for b in _top_level_unions(rewrite(sql, empty))]
    if not branches or any(b is None for b in branches):
        return None
    names = branches[0]
    assert names is not None
    return pa.table({name: pa.array([], S) for name in names})


def run(sql: str, tables: Mapping[str, pa.Table]) -> pa.Table:
    """Run a catalog query over ``tables`` (blocking; call it in a worker thread)."""
    global _FUNCTIONS
    if _FUNCTIONS is None:
        _FUNCTIONS = _functions()
    runtime = (
        RuntimeEnvBuilder().with_fair_spill_pool(CATALOG_MEMORY_BYTES).with_disk_manager_disabled()
    )
    ctx = SessionContext(SessionConfig().with_information_schema(False), runtime)
    for fn in _FUNCTIONS:
        ctx.register_udf(fn)
    for name, table in tables.items():
        batches = table.to_batches() or [
            pa.record_batch([pa.array([], f.type) for f in table.schema], schema=table.schema)
        ]
        ctx.register_record_batches(name, [batches])
    options = SQLOptions().with_allow_ddl(False).with_allow_dml(False).with_allow_statements(False)
    empty = frozenset(name for name, table in tables.items() if table.num_rows == 0)
    try:
        frame = ctx.sql_with_options(rewrite(sql, empty), options)
        return frame.to_arrow_table()
    except Exception as exc:
        answer = empty_answer(sql, empty)
        if answer is not None:
            return answer
        raise CommandError("42000", f"catalog query failed: {exc}") from None
