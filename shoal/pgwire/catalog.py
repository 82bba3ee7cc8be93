"""The parts of ``pg_catalog`` and ``information_schema`` that PostgreSQL clients read.

psql's ``\\d`` and ``\\dt``, Grafana's query builder, JDBC's ``DatabaseMetaData``
and BI tools learn what exists from PostgreSQL's catalog. shoal answers those
queries from small Arrow tables built here out of the tenant's own table
schemas (obtained through the query service, so a tenant's catalog lists only
its tables), in a DataFusion context of their own that holds nothing else:
read-only, no files, a small memory pool. PostgreSQL-only syntax clients use
in catalog queries (``OPERATOR(pg_catalog.~)``, ``COLLATE``, ``::regclass``,
the ``pg_catalog.`` prefix) is rewritten, and the functions they call
(``pg_table_is_visible``, ``format_type``, ``quote_ident``, ...) are defined.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
from datafusion import RuntimeEnvBuilder, SessionConfig, SessionContext, SQLOptions, udf

from shoal.pgwire import types as t
from shoal.pgwire.commands import CommandError
from shoal.pgwire.sqltext import replace_in_code

NAMESPACE_CATALOG, NAMESPACE_PUBLIC, NAMESPACE_INFO = 11, 2200, 13_000
FIRST_TABLE_OID = 16_384
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

TYPE_CATEGORY = {t.BOOL: "B", t.BYTEA: "U", t.TEXT: "S", t.JSON: "U", t.NUMERIC: "N"}
TYPE_CATEGORY |= {t.INT2: "N", t.INT4: "N", t.INT8: "N", t.FLOAT4: "N", t.FLOAT8: "N"}
TYPE_CATEGORY |= {t.DATE: "D", t.TIMESTAMP: "D", t.TIMESTAMPTZ: "D", t.INTERVAL: "T"}

SQL_TYPE_NAMES = {
    t.BOOL: "boolean",
    t.INT2: "smallint",
    t.INT4: "integer",
    t.INT8: "bigint",
    t.FLOAT4: "real",
    t.FLOAT8: "double precision",
    t.NUMERIC: "numeric",
    t.TEXT: "text",
    t.BYTEA: "bytea",
    t.JSON: "json",
    t.JSONB: "jsonb",
    t.DATE: "date",
    t.TIME: "time without time zone",
    t.TIMESTAMP: "timestamp without time zone",
    t.TIMESTAMPTZ: "timestamp with time zone",
    t.INTERVAL: "interval",
    t.VARCHAR: "character varying",
    t.NAME: "name",
    t.OID: "oid",
    t.CHAR: '"char"',
    t.UUID: "uuid",
}
ARRAY_ELEMENT = {array: element for element, array in t.ARRAY_OF.items()}


def uses_catalog(sql: str) -> bool:
    """Whether ``sql`` reads PostgreSQL's catalog (answered here, not by the tenant session)."""
    return bool(_USES_CATALOG.search(sql))


def type_name(oid: int) -> str:
    """``format_type``: the SQL name of a type OID."""
    if oid in ARRAY_ELEMENT:
        return SQL_TYPE_NAMES.get(ARRAY_ELEMENT[oid], "text") + "[]"
    return SQL_TYPE_NAMES.get(oid, "text")


def _table(columns: Mapping[str, tuple[pa.DataType, list[Any]]]) -> pa.Table:
    return pa.table({name: pa.array(values, kind) for name, (kind, values) in columns.items()})


def _empty(**columns: pa.DataType) -> pa.Table:
    return pa.table({name: pa.array([], kind) for name, kind in columns.items()})


I64, S, B = pa.int64(), pa.string(), pa.bool_()


def build_tables(
    schemas: Mapping[str, pa.Schema], settings: Mapping[str, str]
) -> dict[str, pa.Table]:
    """The catalog tables for a tenant whose tables have ``schemas``."""
    names = sorted(schemas)
    oids = {name: FIRST_TABLE_OID + i for i, name in enumerate(names)}
    pg_class: dict[str, list[Any]] = {key: [] for key in ("oid", "relname", "relnatts")}
    attribute: dict[str, list[Any]] = {
        key: [] for key in ("attrelid", "attname", "atttypid", "attnum", "attnotnull", "attlen")
    }
    info_columns: dict[str, list[Any]] = {
        key: []
        for key in (
            "table_name",
            "column_name",
            "ordinal_position",
            "is_nullable",
            "data_type",
            "udt_name",
        )
    }
    for name in names:
        pg_class["oid"].append(oids[name])
        pg_class["relname"].append(name)
        pg_class["relnatts"].append(len(schemas[name]))
        for position, field in enumerate(schemas[name], start=1):
            kind = t.pg_type(field.type)
            attribute["attrelid"].append(oids[name])
            attribute["attname"].append(field.name)
            attribute["atttypid"].append(kind.oid)
            attribute["attnum"].append(position)
            attribute["attnotnull"].append(not field.nullable)
            attribute["attlen"].append(kind.size)
            info_columns["table_name"].append(name)
            info_columns["column_name"].append(field.name)
            info_columns["ordinal_position"].append(position)
            info_columns["is_nullable"].append("YES" if field.nullable else "NO")
            data_type = "ARRAY" if kind.oid in ARRAY_ELEMENT else type_name(kind.oid)
            info_columns["data_type"].append(data_type)
            udt = t.TYPE_NAMES.get(kind.oid) or "_" + t.TYPE_NAMES.get(
                ARRAY_ELEMENT.get(kind.oid, 0), "text"
            )
            info_columns["udt_name"].append(udt)
    n_tables, n_columns = len(names), len(attribute["attname"])
    type_oids = sorted(set(t.TYPE_NAMES) | set(ARRAY_ELEMENT))
    tables = {
        "pg_namespace": _table(
            {
                "oid": (I64, [NAMESPACE_CATALOG, NAMESPACE_PUBLIC, NAMESPACE_INFO]),
                "nspname": (S, ["pg_catalog", "public", "information_schema"]),
                "nspowner": (I64, [10, 10, 10]),
                "nspacl": (S, [None, None, None]),
            }
        ),
        "pg_class": _table(
            {
                "oid": (I64, pg_class["oid"]),
                "relname": (S, pg_class["relname"]),
                "relnamespace": (I64, [NAMESPACE_PUBLIC] * n_tables),
                "relkind": (S, ["r"] * n_tables),
                "relowner": (I64, [10] * n_tables),
                "relam": (I64, [2] * n_tables),
                "reltype": (I64, [0] * n_tables),
                "reloftype": (I64, [0] * n_tables),
                "relnatts": (I64, pg_class["relnatts"]),
                "relchecks": (I64, [0] * n_tables),
                "relhasindex": (B, [False] * n_tables),
                "relhasrules": (B, [False] * n_tables),
                "relhastriggers": (B, [False] * n_tables),
                "relhassubclass": (B, [False] * n_tables),
                "relrowsecurity": (B, [False] * n_tables),
                "relforcerowsecurity": (B, [False] * n_tables),
                "relispartition": (B, [False] * n_tables),
                "relpersistence": (S, ["p"] * n_tables),
                "relreplident": (S, ["d"] * n_tables),
                "reltablespace": (I64, [0] * n_tables),
                "reltoastrelid": (I64, [0] * n_tables),
                "relpages": (I64, [0] * n_tables),
                "reltuples": (pa.float64(), [-1.0] * n_tables),
                "relacl": (S, [None] * n_tables),
                "reloptions": (pa.list_(S), [None] * n_tables),
                "relpartbound": (S, [None] * n_tables),
            }
        ),
        "pg_attribute": _table(
            {
                "attrelid": (I64, attribute["attrelid"]),
                "attname": (S, attribute["attname"]),
                "atttypid": (I64, attribute["atttypid"]),
                "atttypmod": (I64, [-1] * n_columns),
                "attnum": (I64, attribute["attnum"]),
                "attlen": (I64, attribute["attlen"]),
                "attnotnull": (B, attribute["attnotnull"]),
                "atthasdef": (B, [False] * n_columns),
                "attisdropped": (B, [False] * n_columns),
                "attidentity": (S, [""] * n_columns),
                "attgenerated": (S, [""] * n_columns),
                "attcollation": (I64, [0] * n_columns),
                "attndims": (I64, [0] * n_columns),
                "attstattarget": (I64, [-1] * n_columns),
                "attstorage": (S, ["x"] * n_columns),
                "attcompression": (S, [""] * n_columns),
                "attfdwoptions": (S, [None] * n_columns),
                "attoptions": (S, [None] * n_columns),
                "attislocal": (B, [True] * n_columns),
            }
        ),
        "pg_type": _table(
            {
                "oid": (I64, type_oids),
                "typname": (
                    S,
                    [
                        t.TYPE_NAMES.get(o) or "_" + t.TYPE_NAMES[ARRAY_ELEMENT[o]]
                        for o in type_oids
                    ],
                ),
                "typnamespace": (I64, [NAMESPACE_CATALOG] * len(type_oids)),
                "typowner": (I64, [10] * len(type_oids)),
                "typlen": (I64, [t.SIZES.get(o, -1) for o in type_oids]),
                "typtype": (S, ["b"] * len(type_oids)),
                "typcategory": (
                    S,
                    ["A" if o in ARRAY_ELEMENT else TYPE_CATEGORY.get(o, "U") for o in type_oids],
                ),
                "typelem": (I64, [ARRAY_ELEMENT.get(o, 0) for o in type_oids]),
                "typarray": (I64, [t.ARRAY_OF.get(o, 0) for o in type_oids]),
                "typbasetype": (I64, [0] * len(type_oids)),
                "typtypmod": (I64, [-1] * len(type_oids)),
                "typnotnull": (B, [False] * len(type_oids)),
                "typrelid": (I64, [0] * len(type_oids)),
                "typcollation": (I64, [0] * len(type_oids)),
                "typdelim": (S, [","] * len(type_oids)),
                "typinput": (S, [(t.TYPE_NAMES.get(o) or "array") + "_in" for o in type_oids]),
            }
        ),
        "pg_database": _table(
            {
                "oid": (I64, [16_383]),
                "datname": (S, ["shoal"]),
                "datdba": (I64, [10]),
                "encoding": (I64, [6]),
                "datcollate": (S, ["C.UTF-8"]),
                "datctype": (S, ["C.UTF-8"]),
                "datistemplate": (B, [False]),
                "datallowconn": (B, [True]),
                "datconnlimit": (I64, [-1]),
                "dattablespace": (I64, [1663]),
                "datacl": (pa.list_(S), [None]),
                "daticulocale": (S, [None]),
                "datlocprovider": (S, ["c"]),
            }
        ),
        "pg_settings": _table(
            {
                "name": (S, sorted(settings)),
                "setting": (S, [settings[k] for k in sorted(settings)]),
                "unit": (S, [None] * len(settings)),
                "category": (S, [""] * len(settings)),
                "short_desc": (S, [""] * len(settings)),
                "context": (S, ["user"] * len(settings)),
                "vartype": (S, ["string"] * len(settings)),
                "source": (S, ["session"] * len(settings)),
            }
        ),
        "pg_am": _table({"oid": (I64, [2]), "amname": (S, ["heap"]), "amtype": (S, ["t"])}),
        "pg_roles": _table(
            {"oid": (I64, [10]), "rolname": (S, ["shoal"]), "rolsuper": (B, [False])}
        ),
        "pg_user": _table(
            {"usesysid": (I64, [10]), "usename": (S, ["shoal"]), "usesuper": (B, [False])}
        ),
        "pg_tables": _table(
            {
                "schemaname": (S, ["public"] * n_tables),
                "tablename": (S, names),
                "tableowner": (S, ["shoal"] * n_tables),
                "tablespace": (S, [None] * n_tables),
                "hasindexes": (B, [False] * n_tables),
                "hasrules": (B, [False] * n_tables),
                "hastriggers": (B, [False] * n_tables),
                "rowsecurity": (B, [False] * n_tables),
            }
        ),
        "pg_extension": _empty(oid=I64, extname=S, extversion=S, extnamespace=I64),
        "pg_index": _empty(
            indexrelid=I64,
            indrelid=I64,
            indisprimary=B,
            indisunique=B,
            indisclustered=B,
            indisvalid=B,
            indisreplident=B,
            indimmediate=B,
            indkey=S,
            indnatts=I64,
        ),
        "pg_constraint": _empty(
            oid=I64, conname=S, conrelid=I64, contype=S, conkey=S, confrelid=I64
        ),
        "pg_inherits": _empty(inhrelid=I64, inhparent=I64, inhseqno=I64, inhdetachpending=B),
        "pg_description": _empty(objoid=I64, classoid=I64, objsubid=I64, description=S),
        "pg_attrdef": _empty(oid=I64, adrelid=I64, adnum=I64, adbin=S),
        "pg_trigger": _empty(
            oid=I64, tgrelid=I64, tgname=S, tgisinternal=B, tgenabled=S, tgparentid=I64
        ),
        "pg_policy": _empty(
            oid=I64,
            polname=S,
            polrelid=I64,
            polpermissive=B,
            polroles=pa.list_(I64),
            polqual=S,
            polwithcheck=S,
            polcmd=S,
        ),
        "pg_statistic_ext": _empty(
            oid=I64,
            stxrelid=I64,
            stxname=S,
            stxnamespace=I64,
            stxkind=pa.list_(S),
            stxstattarget=I64,
            stxkeys=pa.list_(I64),
        ),
        "pg_publication": _empty(
            oid=I64,
            pubname=S,
            puballtables=B,
            pubinsert=B,
            pubupdate=B,
            pubdelete=B,
            pubtruncate=B,
            pubviaroot=B,
        ),
        "pg_publication_rel": _empty(
            oid=I64, prpubid=I64, prrelid=I64, prqual=S, prattrs=pa.list_(I64)
        ),
        "pg_publication_namespace": _empty(oid=I64, pnpubid=I64, pnnspid=I64),
        "pg_collation": _empty(oid=I64, collname=S, collnamespace=I64),
        "pg_proc": _empty(oid=I64, proname=S, pronamespace=I64, prorettype=I64, prokind=S),
        "pg_views": _empty(schemaname=S, viewname=S, definition=S),
        "pg_matviews": _empty(schemaname=S, matviewname=S, definition=S),
        "pg_enum": _empty(oid=I64, enumtypid=I64, enumlabel=S, enumsortorder=pa.float64()),
        "pg_range": _empty(rngtypid=I64, rngsubtype=I64),
        "pg_foreign_table": _empty(ftrelid=I64, ftserver=I64),
        "pg_partitioned_table": _empty(partrelid=I64, partstrat=S),
        "pg_sequence": _empty(seqrelid=I64),
        "pg_rewrite": _empty(oid=I64, ev_class=I64, rulename=S),
        "pg_tablespace": _empty(oid=I64, spcname=S),
        "pg_authid": _empty(oid=I64, rolname=S),
        "pg_shdescription": _empty(objoid=I64, classoid=I64, description=S),
        "pg_event_trigger": _empty(oid=I64, evtname=S),
        "pg_opclass": _empty(oid=I64, opcname=S),
        "pg_operator": _empty(oid=I64, oprname=S),
        "pg_cursors": _empty(name=S, statement=S),
        "information_schema_schemata": _table(
            {
                "catalog_name": (S, ["shoal"] * 3),
                "schema_name": (S, ["public", "information_schema", "pg_catalog"]),
                "schema_owner": (S, ["shoal"] * 3),
            }
        ),
        "information_schema_tables": _table(
            {
                "table_catalog": (S, ["shoal"] * n_tables),
                "table_schema": (S, ["public"] * n_tables),
                "table_name": (S, names),
                "table_type": (S, ["BASE TABLE"] * n_tables),
                "is_insertable_into": (S, ["NO"] * n_tables),
            }
        ),
        "information_schema_columns": _table(
            {
                "table_catalog": (S, ["shoal"] * n_columns),
                "table_schema": (S, ["public"] * n_columns),
                "table_name": (S, info_columns["table_name"]),
                "column_name": (S, info_columns["column_name"]),
                "ordinal_position": (I64, info_columns["ordinal_position"]),
                "column_default": (S, [None] * n_columns),
                "is_nullable": (S, info_columns["is_nullable"]),
                "data_type": (S, info_columns["data_type"]),
                "udt_name": (S, info_columns["udt_name"]),
                "character_maximum_length": (I64, [None] * n_columns),
                "numeric_precision": (I64, [None] * n_columns),
                "numeric_scale": (I64, [None] * n_columns),
                "datetime_precision": (I64, [None] * n_columns),
            }
        ),
        "information_schema_views": _empty(table_catalog=S, table_schema=S, table_name=S),
    }
    return tables


# -- functions -------------------------------------------------------------------------


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


def _balanced_end(sql: str, start: int) -> int:
    """The index just past the parenthesis closing the one at ``start``."""
    depth, i = 0, start
    while i < len(sql):
        c = sql[i]
        if c == "'":
            close = sql.find("'", i + 1)
            i = len(sql) if close < 0 else close
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
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
    for pattern, replacement in _REWRITES:
        sql = replace_in_code(sql, pattern, replacement)
    sql = _search_path_schemas(sql)
    return _empty_subqueries(_replace_constant_calls(sql), empty)


def _top_level_split(text: str) -> list[str]:
    """``text`` split at commas outside parentheses and quotes."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c == "'":
            close = text.find("'", i + 1)
            i = len(text) if close < 0 else close
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


def _top_level_from(text: str) -> int:
    """The index of the outermost query's FROM keyword, or -1."""
    depth, i = 0, 0
    while i < len(text):
        c = text[i]
        if c == "'":
            close = text.find("'", i + 1)
            i = len(text) if close < 0 else close
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif (
            depth == 0
            and re.match(r"\bFROM\b", text[i : i + 5], re.I)
            and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"))
        ):
            return i
        i += 1
    return -1


def _top_level_unions(text: str) -> list[str]:
    """``text`` split at UNION [ALL] outside parentheses and quotes."""
    parts: list[str] = []
    depth, start, i = 0, 0, 0
    while i < len(text):
        c = text[i]
        if c == "'":
            close = text.find("'", i + 1)
            i = len(text) if close < 0 else close
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif (
            depth == 0
            and (m := re.match(r"UNION(?:\s+ALL)?\b", text[i:], re.I))
            and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"))
        ):
            parts.append(text[start:i])
            start = i = i + m.end()
            continue
        i += 1
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
