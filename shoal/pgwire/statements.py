"""Statements a PostgreSQL client sends that are about the session, not the data.

``SET``, ``RESET``, ``SHOW``, ``BEGIN``/``COMMIT``/``ROLLBACK``, ``DISCARD`` and
``DEALLOCATE`` are answered here without the query engine (tenant SQL refuses
statements: see :func:`shoal.sql.sessions.sql_options`); calls of the session
functions clients use (``version()``, ``current_setting('...')``,
``current_database()``, ...) are replaced by the literal they return before the
query reaches the engine. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import pyarrow as pa

from shoal import __version__ as shoal_version
from shoal.errors import ShoalError
from shoal.pgwire.sqltext import quote_literal, strip_comments
from shoal.sql.lexer import spans

SERVER_VERSION = "16.0"
VERSION_TEXT = (
    f"PostgreSQL {SERVER_VERSION} (shoal {shoal_version}) on x86_64-pc-linux-gnu, "
    "compatible protocol over Apache DataFusion"
)


class CommandError(ShoalError):
    """A session statement shoal refuses; ``code`` is its SQLSTATE."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


REPORTED = ("application_name", "client_encoding", "DateStyle", "IntervalStyle", "TimeZone")
"""Settings whose changes are reported to the client with ParameterStatus."""


def initial_settings(user: str, application_name: str) -> dict[str, str]:
    """The session's settings, keys lower case (PostgreSQL's names are case-insensitive)."""
    return {
        "server_version": f"{SERVER_VERSION} (shoal {shoal_version})",
        "server_version_num": "160000",
        "server_encoding": "UTF8",
        "client_encoding": "UTF8",
        "datestyle": "ISO, MDY",
        "intervalstyle": "postgres",
        "timezone": "UTC",
        "integer_datetimes": "on",
        "standard_conforming_strings": "on",
        "is_superuser": "off",
        "session_authorization": user,
        "application_name": application_name,
        "default_transaction_read_only": "on",
        "transaction_read_only": "on",
        "in_hot_standby": "off",
        "search_path": '"$user", public',
        "max_identifier_length": "63",
        "transaction_isolation": "read committed",
        "default_transaction_isolation": "read committed",
        "lc_collate": "C.UTF-8",
        "lc_ctype": "C.UTF-8",
        "statement_timeout": "0",
        "extra_float_digits": "1",
        "bytea_output": "hex",
        "block_size": "8192",
        "server_encoding_name": "UTF8",
    }


STARTUP_REPORTED = (
    "server_version",
    "server_encoding",
    "client_encoding",
    "DateStyle",
    "IntervalStyle",
    "TimeZone",
    "integer_datetimes",
    "standard_conforming_strings",
    "is_superuser",
    "session_authorization",
    "application_name",
    "default_transaction_read_only",
    "in_hot_standby",
)

_UTC_NAMES = {"utc", "etc/utc", "gmt", "etc/gmt", "z", "zulu", "+00", "+00:00", "0", "universal"}
_READ_ONLY_SETTINGS = {
    "server_version",
    "server_version_num",
    "server_encoding",
    "integer_datetimes",
    "is_superuser",
    "in_hot_standby",
    "max_identifier_length",
    "lc_collate",
    "lc_ctype",
    "block_size",
}


@dataclasses.dataclass
class LocalResult:
    """The answer to a statement handled here: a tag, and rows when it returns any."""

    tag: str
    table: pa.Table | None = None
    transaction: str | None = None  # "begin" or "end" when it opens or closes a transaction
    changed: dict[str, str] = dataclasses.field(default_factory=dict)


def _check_setting(name: str, value: str) -> str:
    """The value stored for ``SET name = value``; refuses what shoal cannot honour."""
    lowered = value.strip().lower()
    if name in _READ_ONLY_SETTINGS or name.startswith("datafusion."):
        raise CommandError("55P02", f'parameter "{name}" cannot be changed')
    if name == "client_encoding" and lowered.replace("-", "").replace("_", "") not in {
        "utf8",
        "unicode",
    }:
        raise CommandError("22023", f"client_encoding {value!r} is not supported: shoal sends UTF8")
    if name == "datestyle" and not lowered.startswith("iso"):
        raise CommandError("22023", f"DateStyle {value!r} is not supported: shoal sends ISO dates")
    if name == "timezone":
        if lowered not in _UTC_NAMES:
            raise CommandError(
                "22023",
                f"time zone {value!r} is not supported: shoal sends timestamps in UTC "
                "(timestamptz values carry their offset, so clients convert them)",
            )
        return "UTC"
    if name in {"transaction_read_only", "default_transaction_read_only"} and lowered in {
        "off",
        "false",
        "0",
    }:
        raise CommandError("25006", "shoal is read-only: transactions cannot be read-write")
    if name == "standard_conforming_strings" and lowered not in {"on", "true", "1"}:
        raise CommandError("22023", "standard_conforming_strings is always on")
    if name == "bytea_output" and lowered != "hex":
        raise CommandError("22023", "bytea_output is always hex")
    return value


_SET = re.compile(
    r"^set\s+(?:session\s+|local\s+)?(?:(time\s+zone)\s+(.+)|([\w.]+)\s*(?:=|\s+to\s+)\s*(.+))$",
    re.IGNORECASE | re.DOTALL,
)
_SET_TRANSACTION = re.compile(
    r"^set\s+(?:session\s+characteristics\s+as\s+)?transaction\b", re.IGNORECASE
)


def _unquote(value: str) -> str:
    text = value.strip()
    if text.lower() in {"default", "local"}:
        return "DEFAULT"
    parts = []
    for item in text.split(","):
        item = item.strip()
        if len(item) >= 2 and item[0] == item[-1] and item[0] in "'\"":
            item = item[1:-1].replace(item[0] * 2, item[0])
        parts.append(item)
    return ", ".join(parts)


def _rows(columns: dict[str, list[str]]) -> pa.Table:
    return pa.table({name: pa.array(values, pa.string()) for name, values in columns.items()})


def _display_name(name: str) -> str:
    for shown in STARTUP_REPORTED:
        if shown.lower() == name:
            return shown
    return name


def local_command(
    sql: str, settings: dict[str, str], defaults: dict[str, str]
) -> LocalResult | None:
    """The answer to ``sql`` if it is a session statement, else None. Updates ``settings``."""
    text = strip_comments(sql).rstrip(";").strip()
    words = text.split(None, 2)
    if not words:
        return None
    first = words[0].lower()
    second = words[1].lower() if len(words) > 1 else ""
    if first in {"begin", "start"} and (first == "begin" or second == "transaction"):
        return LocalResult("BEGIN", transaction="begin")
    if first in {"commit", "end"}:
        return LocalResult("COMMIT", transaction="end")
    if first in {"rollback", "abort"}:
        return LocalResult("ROLLBACK", transaction="end")
    if first == "discard":
        return LocalResult("DISCARD " + " ".join(words[1:]).upper())
    if first == "deallocate":
        return LocalResult("DEALLOCATE")
    if first == "set":
        if _SET_TRANSACTION.match(text):
            if re.search(r"read\s+write", text, re.IGNORECASE):
                raise CommandError("25006", "shoal is read-only: transactions cannot be read-write")
            return LocalResult("SET")
        m = _SET.match(text)
        if not m:
            raise CommandError("42601", f"cannot parse SET statement: {text[:200]!r}")
        name = "timezone" if m.group(1) else m.group(3).lower()
        value = _unquote(m.group(2) if m.group(1) else m.group(4))
        if value == "DEFAULT":
            value = defaults.get(name, "")
        else:
            value = _check_setting(name, value)
        settings[name] = value
        shown = _display_name(name)
        changed = {shown: value} if shown in REPORTED else {}
        return LocalResult("SET", changed=changed)
    if first == "reset":
        name = second
        if name == "all":
            settings.clear()
            settings.update(defaults)
        elif name:
            settings[name] = defaults.get(name, "")
        return LocalResult("RESET")
    if first == "show" and len(words) == 2:
        name = second.strip('"')
        if name == "all":
            names = sorted(settings)
            return LocalResult(
                "SHOW",
                _rows(
                    {
                        "name": names,
                        "setting": [settings[n] for n in names],
                        "description": [""] * len(names),
                    }
                ),
            )
        key = "timezone" if name == "time zone" else name
        if key in settings:
            return LocalResult("SHOW", _rows({name: [settings[key]]}))
    if first == "show" and second == "time" and text.lower().split()[-1] == "zone":
        return LocalResult("SHOW", _rows({"TimeZone": [settings["timezone"]]}))
    return None


def _function(names: str, args: str = r"\(\s*\)") -> re.Pattern[str]:
    return re.compile(rf"(?<![\w.\"])(?:pg_catalog\s*\.\s*)?(?:{names})\s*{args}", re.IGNORECASE)


_VERSION = _function("version")
_CURRENT_SETTING = _function(
    "current_setting", r"\(\s*'((?:[^']|'')*)'\s*(?:,\s*(?:true|false)\s*)?\)"
)
_CURRENT_DATABASE = _function("current_database")
_CURRENT_SCHEMA = _function("current_schema", r"(?:\(\s*\))?")
_CURRENT_USER = _function("current_user|session_user|current_role", r"(?:\(\s*\))?")
_BACKEND_PID = _function("pg_backend_pid")


def _replace(sql: str, pattern: re.Pattern[str], make: Callable[[re.Match[str]], str]) -> str:
    """Replace matches of ``pattern`` that start in code (not inside quotes or comments)."""
    code_starts = [(s, e) for s, e, code in spans(sql) if code]
    out: list[str] = []
    last = 0
    for m in pattern.finditer(sql):
        if m.start() < last or not any(s <= m.start() < e for s, e in code_starts):
            continue
        out.append(sql[last : m.start()])
        out.append(make(m))
        last = m.end()
        if _is_select_item(sql, m.start(), m.end()):
            # a whole select item keeps the name PostgreSQL gives it (version, ...)
            name = re.sub(r"^(?:pg_catalog\s*\.\s*)?(\w+).*$", r"\1", m.group(0), flags=re.S)
            out.append(f' AS "{name.lower()}"')
    out.append(sql[last:])
    return "".join(out)


_ITEM_BEFORE = re.compile(r"(?:\bselect|,)\s*$", re.IGNORECASE)
_ITEM_AFTER = re.compile(r"^\s*(?:,|\bfrom\b|;|$)", re.IGNORECASE)


def _is_select_item(sql: str, start: int, end: int) -> bool:
    """Whether ``sql[start:end]`` is a whole, unaliased item of a select list."""
    return bool(_ITEM_BEFORE.search(sql[max(0, start - 16) : start])) and bool(
        _ITEM_AFTER.match(sql[end : end + 8])
    )


def rewrite_functions(sql: str, settings: dict[str, str], user: str, pid: int) -> str:
    """``sql`` with session-function calls replaced by the literals they return."""
    lowered = sql.lower()
    if "version" in lowered:
        sql = _replace(sql, _VERSION, lambda m: quote_literal(VERSION_TEXT))
    if "current_setting" in lowered:

        def setting(m: re.Match[str]) -> str:
            value = settings.get(m.group(1).replace("''", "'").lower())
            return "CAST(NULL AS VARCHAR)" if value is None else quote_literal(value)

        sql = _replace(sql, _CURRENT_SETTING, setting)
    if "current_database" in lowered:
        sql = _replace(sql, _CURRENT_DATABASE, lambda m: "'shoal'")
    if "current_schema" in lowered:
        sql = _replace(sql, _CURRENT_SCHEMA, lambda m: "'public'")
    if "_user" in lowered or "current_role" in lowered:
        sql = _replace(sql, _CURRENT_USER, lambda m: quote_literal(user))
    if "pg_backend_pid" in lowered:
        sql = _replace(sql, _BACKEND_PID, lambda m: str(pid))
    return sql
