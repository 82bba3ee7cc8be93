"""What docs/operations.md states, against the code it describes.

docs/configuration.md's table is generated from the settings table (tests/test_config.py
holds it in step); docs/operations.md states defaults in prose tables of its own: the
settings that matter most for ingest, the port table, the memory budget. Each default
stated there is parsed and compared with shoal/config.py's (and the memory budget with
shoal/server/preflight.py's), so a default that changes in the code fails here until the
page says the same. The port table lists every route of the HTTP port, and the roles
table names every door each role opens.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from shoal import config
from shoal.server import preflight

OPERATIONS = Path(__file__).resolve().parents[1] / "docs" / "operations.md"
_UNITS = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "s": 1, "": 1}
_VALUE = re.compile(r"^`?([\w.:]+)`?(?:\s*(KiB|MiB|GiB|s))?$")


def _tables(text: str) -> list[list[list[str]]]:
    """Every markdown table of ``text``: rows of cells, header first, separator dropped."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    return tables


def _table(header: list[str]) -> list[list[str]]:
    for table in _tables(OPERATIONS.read_text()):
        if table[0] == header:
            return table[1:]
    raise AssertionError(f"docs/operations.md has no table headed {header}")


def _quantity(text: str) -> float | str:
    """``20 MiB`` -> 20971520, ``60 s`` -> 60, ``256`` -> 256, ```always``` -> 'always'."""
    found = _VALUE.match(text.strip())
    assert found, f"cannot read {text!r} as a default"
    number, unit = found[1], found[2] or ""
    try:
        return float(number) * _UNITS[unit]
    except ValueError:
        assert not unit, text
        return number


def _product(text: str) -> float:
    """``256 MiB x 4`` -> their product."""
    value = math.prod(float(_quantity(term)) for term in text.split(" x "))
    return value


def test_ingest_settings_table_states_the_defaults() -> None:
    rows = _table(["setting", "default", "effect"])
    checked = 0
    for setting_cell, default_cell, _ in rows:
        names = re.findall(r"`(\w+)`", setting_cell)
        values = [v.strip() for v in default_cell.split(",")]
        assert len(names) == len(values), f"{setting_cell}: {default_cell}"
        for name, stated in zip(names, values, strict=True):
            default = config.SETTINGS_BY_NAME[name].default
            got = _quantity(stated)
            want = default if isinstance(got, str) else float(default)
            assert got == want, f"docs/operations.md says {name} defaults to {stated}: {default}"
            checked += 1
    assert checked >= 8


def _http_paths() -> set[str]:
    """Every path the HTTP port routes, as the docs write them (``<name>`` placeholders)."""
    from shoal.api import app, otlp_http, prometheus, remote_write, sql, tokens

    paths = {"/healthz", "/readyz", "/metrics"}
    assert all(f'"{p}"' in Path(app.__file__).read_text() for p in paths)
    for router in (otlp_http.router, remote_write.router, sql.router, prometheus.router,
                   tokens.router):  # fmt: skip
        for route in router.routes:
            path = str(getattr(route, "path", ""))
            path = re.sub(r"/\{token_id\}$", "", path)  # DELETE /api/v1/tokens/<id>
            paths.add(re.sub(r"\{(\w+)\}", r"<\1>", path))
    return paths


def test_port_table_lists_every_route_of_the_http_port() -> None:
    rows = {row[0]: row[1] for row in _table(["port", "what"])}
    http_row = rows["4318 (`http_port`)"]
    missing = sorted(p for p in _http_paths() if f"`{p}`" not in http_row
                     and f"`POST {p}`" not in http_row)  # fmt: skip
    assert not missing, f"docs/operations.md's port table leaves out {missing}"


# a door, the module that checks its token, and the word the roles table uses for it
DOORS = [
    ("shoal/api/otlp_http.py", "OTLP"),
    ("shoal/api/otlp_grpc.py", "OTLP"),
    ("shoal/api/remote_write.py", "remote write"),
    ("shoal/api/sql.py", "SQL"),
    ("shoal/api/prometheus.py", "PromQL"),
    ("shoal/pgwire/server.py", "PostgreSQL protocol"),
    ("shoal/api/tokens.py", "tokens"),
    ("shoal/api/app.py", "/metrics"),
]


@pytest.mark.parametrize(("module", "word"), DOORS, ids=[d[1] + " " + d[0] for d in DOORS])
def test_roles_table_names_the_doors_each_role_opens(module: str, word: str) -> None:
    lines = (OPERATIONS.parents[1] / module).read_text().splitlines()
    checked = {
        role
        for i, line in enumerate(lines)
        if re.search(r"\.check\(|require_role\(|_principal\(", line)
        for role in re.findall(r'"(ingest|query|metrics|admin)"', line + lines[i + 1])
    }
    assert len(checked) == 1, f"{module} checks roles {checked}"
    role = checked.pop()
    rows = {row[0]: row[1] for row in _table(["role", "may"])}
    assert word in rows[f"`{role}`"], f"docs/operations.md: the `{role}` role's row omits {word}"


def test_port_table_states_the_default_ports() -> None:
    rows = _table(["port", "what"])
    seen = set()
    for port_cell, _ in rows:
        found = re.fullmatch(r"(\d+) \(`(\w+)`\)", port_cell)
        assert found, port_cell
        assert int(found[1]) == config.SETTINGS_BY_NAME[found[2]].default, port_cell
        seen.add(found[2])
    assert seen == {"http_port", "grpc_port", "pg_port"}


# the memory table's rows and the MemoryBudget fields they state
BUDGET_ROWS = {
    "baseline": "baseline",
    "queries": "queries",
    "unflushed rows": "unflushed",
    "queue": "queue",
    "request bodies": "bodies",
    "PromQL cache": "promql_cache",
    "decoding processes": "decoders",
    "series indexes": "series_index",
    "series caches": "series_caches",
    "total": "total",
}


def test_memory_table_states_the_default_budget() -> None:
    budget = preflight.memory_budget(config.default())
    rows = {row[0]: row for row in _table(["part", "from", "defaults"])}
    assert set(rows) == set(BUDGET_ROWS), "the memory table's parts differ from MemoryBudget's"
    for part, field in BUDGET_ROWS.items():
        stated = _product(rows[part][2])
        assert stated == getattr(budget, field), (
            f"docs/operations.md's memory table says {part} is {rows[part][2]}, "
            f"the code's default budget {getattr(budget, field) / 2**20:.0f} MiB"
        )


@pytest.mark.parametrize(
    ("text", "value"),
    [("20 MiB", 20 * 2**20), ("60 s", 60.0), ("256", 256.0), ("`always`", "always")],
)
def test_quantities_read_as_written(text: str, value: float | str) -> None:
    assert _quantity(text) == value


@pytest.mark.parametrize("page", ["README.md", "docs/operations.md", "docs/grafana.md"])
def test_pages_that_create_tokens_warn_that_the_first_ends_anonymous_access(page: str) -> None:
    text = " ".join((OPERATIONS.parents[1] / page).read_text().split())
    assert "first token ends anonymous access" in text, (
        f"{page} does not warn that the first token ends anonymous access"
    )
    assert "tenant `default`" in text and "--tenant default --role query" in text, page
