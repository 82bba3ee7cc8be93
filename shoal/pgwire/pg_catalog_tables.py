"""The catalog tables (``pg_catalog`` and ``information_schema``) of one tenant, as Arrow.

Built from the tenant's table schemas; every other catalog table clients read
exists with the columns they select and no rows. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from shoal.pgwire import types as t

NAMESPACE_CATALOG, NAMESPACE_PUBLIC, NAMESPACE_INFO = 11, 2200, 13_000
FIRST_TABLE_OID = 16_384

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


def type_name(oid: int) -> str:
    """``format_type``: the SQL name of a type OID."""
    if oid in ARRAY_ELEMENT:
        return SQL_TYPE_NAMES.get(ARRAY_ELEMENT[oid], "text") + "[]"
    return SQL_TYPE_NAMES.get(oid, "text")


def _table(columns: Mapping[str, tuple[pa.DataType, list[Any]]]) -> pa.Table:
    return pa.table({name: pa.array(values, kind) for name, (kind, values) in columns.items()})


I64, S, B = pa.int64(), pa.string(), pa.bool_()
_TYPES = {"int8": I64, "float8": pa.float64(), "text": S, "bool": B}

EMPTY_TABLES = {
    "pg_extension": "oid int8, extname text, extversion text, extnamespace int8",
    "pg_index": (
        "indexrelid int8, indrelid int8, indisprimary bool, indisunique bool, "
        "indisclustered bool, indisvalid bool, indisreplident bool, indimmediate bool, "
        "indkey text, indnatts int8"
    ),
    "pg_constraint": (
        "oid int8, conname text, conrelid int8, contype text, conkey text, confrelid int8"
    ),
    "pg_inherits": "inhrelid int8, inhparent int8, inhseqno int8, inhdetachpending bool",
    "pg_description": "objoid int8, classoid int8, objsubid int8, description text",
    "pg_attrdef": "oid int8, adrelid int8, adnum int8, adbin text",
    "pg_trigger": (
        "oid int8, tgrelid int8, tgname text, tgisinternal bool, tgenabled text, tgparentid int8"
    ),
    "pg_policy": (
        "oid int8, polname text, polrelid int8, polpermissive bool, polroles int8[], "
        "polqual text, polwithcheck text, polcmd text"
    ),
    "pg_statistic_ext": (
        "oid int8, stxrelid int8, stxname text, stxnamespace int8, stxkind text[], "
        "stxstattarget int8, stxkeys int8[]"
    ),
    "pg_publication": (
        "oid int8, pubname text, puballtables bool, pubinsert bool, pubupdate bool, "
        "pubdelete bool, pubtruncate bool, pubviaroot bool"
    ),
    "pg_publication_rel": "oid int8, prpubid int8, prrelid int8, prqual text, prattrs int8[]",
    "pg_publication_namespace": "oid int8, pnpubid int8, pnnspid int8",
    "pg_collation": "oid int8, collname text, collnamespace int8",
    "pg_proc": "oid int8, proname text, pronamespace int8, prorettype int8, prokind text",
    "pg_views": "schemaname text, viewname text, definition text",
    "pg_matviews": "schemaname text, matviewname text, definition text",
    "pg_enum": "oid int8, enumtypid int8, enumlabel text, enumsortorder float8",
    "pg_range": "rngtypid int8, rngsubtype int8",
    "pg_foreign_table": "ftrelid int8, ftserver int8",
    "pg_partitioned_table": "partrelid int8, partstrat text",
    "pg_sequence": "seqrelid int8",
    "pg_rewrite": "oid int8, ev_class int8, rulename text",
    "pg_tablespace": "oid int8, spcname text",
    "pg_authid": "oid int8, rolname text",
    "pg_shdescription": "objoid int8, classoid int8, description text",
    "pg_event_trigger": "oid int8, evtname text",
    "pg_opclass": "oid int8, opcname text",
    "pg_operator": "oid int8, oprname text",
    "pg_cursors": "name text, statement text",
    "information_schema_views": "table_catalog text, table_schema text, table_name text",
}
"""The catalog tables clients read that hold no rows here: their columns, as ``name type``
(``int8``, ``float8``, ``text``, ``bool``, or an array of one: ``int8[]``)."""


def _empty(columns: str) -> pa.Table:
    """A table with no rows and ``columns`` (as in :data:`EMPTY_TABLES`)."""
    fields = []
    for column in columns.split(","):
        name, kind = column.split()
        element = _TYPES[kind.removesuffix("[]")]
        fields.append(pa.field(name, pa.list_(element) if kind.endswith("[]") else element))
    return pa.schema(fields).empty_table()


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
    }
    return tables | {name: _empty(columns) for name, columns in EMPTY_TABLES.items()}


# -- functions -------------------------------------------------------------------------
