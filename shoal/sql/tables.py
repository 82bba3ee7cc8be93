"""Which of a tenant's tables a query's text can read, and the ETag of its answer.

A query's view holds only the tables its text can refer to (:func:`names_in`), so
that a query of ``logs`` never waits on, or pins, the ``metrics`` table's files. Its
answer's ETag changes whenever one of those tables changes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from shoal.sql.lexer import identifiers
from shoal.storage.view import TableInput, TenantView

_CATALOG_WORDS = frozenset({"information_schema", "show", "describe", "desc"})


def readable(sql: str) -> set[str] | None:
    """The names of the tables ``sql`` can read, lower-cased: every name it uses (as a
    word or a quoted identifier); None, every table, for a query that lists tables
    (``information_schema``, ``SHOW``, ``DESCRIBE``)."""
    words = identifiers(sql)
    return None if words & _CATALOG_WORDS else words


def names_in(sql: str, names: Iterable[str]) -> set[str]:
    """Those of ``names`` that ``sql`` can read (:func:`readable`)."""
    words = readable(sql)
    return set(names) if words is None else {n for n in names if n.lower() in words}


def tables_named_in(view: TenantView, sql: str) -> list[TableInput]:
    """The tables of ``view`` that ``sql`` can read, by name."""
    wanted = names_in(sql, view.tables)
    return [t for name, t in sorted(view.tables.items()) if name in wanted]


def etag(view: TenantView, sql: str, variant: str) -> str:
    """A strong ETag for ``sql`` over ``view``, answered in ``variant`` (format etc.).

    It changes when any table the query can read gets a new Delta version, a new
    committed LSN or new unflushed rows."""
    h = hashlib.sha256()
    h.update(view.tenant.encode())
    h.update(b"\0" + variant.encode() + b"\0" + sql.encode())
    if view.as_of is not None:
        h.update(b"\0as_of=" + view.as_of.tag().encode())
    for t in tables_named_in(view, sql):
        h.update(f"\0{t.name}:{t.version}:{t.committed_lsn}:{t.max_batch_lsn}".encode())
    return '"' + h.hexdigest()[:32] + '"'
