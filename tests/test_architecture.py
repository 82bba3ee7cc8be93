"""Layer rules of docs/architecture.md, checked on the source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "shoal"
WEB = {"fastapi", "starlette", "grpc", "uvicorn", "prometheus_client"}
CORE = ("wal", "otlp", "storage", "promql", "promwrite")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _modules(sub: str | None = None) -> list[Path]:
    base = PKG / sub if sub else PKG
    return sorted(base.rglob("*.py"))


@pytest.mark.parametrize("layer", CORE)
def test_core_layers_import_no_web_or_metrics_framework(layer: str) -> None:
    for path in _modules(layer):
        bad = {m for m in _imports(path) if m.split(".")[0] in WEB}
        assert not bad, f"{path.relative_to(PKG)} imports {sorted(bad)}"


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        ("wal", {"shoal.otlp", "shoal.storage", "shoal.sql", "shoal.api", "shoal.server"}),
        ("otlp", {"shoal.wal", "shoal.storage", "shoal.sql", "shoal.api", "shoal.server"}),
        ("storage", {"shoal.wal", "shoal.otlp", "shoal.sql", "shoal.api", "shoal.server"}),
        ("query", {"shoal.otlp", "shoal.api", "shoal.server", "shoal.pipeline"}),
        ("promql", {"shoal.api", "shoal.server", "shoal.pipeline"}),
        ("api", {"shoal.server", "shoal.pipeline"}),
        ("pipeline", {"shoal.otlp", "shoal.sql", "shoal.api", "shoal.server"}),
        ("pgwire", {"shoal.api", "shoal.server", "shoal.pipeline"}),
        (
            "promwrite",
            {"shoal.wal", "shoal.storage", "shoal.sql", "shoal.api", "shoal.server"},
        ),
    ],
)
def test_dependencies_point_one_way(layer: str, forbidden: set[str]) -> None:
    for path in _modules(layer):
        bad = {m for m in _imports(path) if any(m == f or m.startswith(f + ".") for f in forbidden)}
        assert not bad, f"{path.relative_to(PKG)} imports {sorted(bad)}"


@pytest.mark.parametrize("module", ["schema.py", "ack.py", "text.py", "errors.py"])
def test_the_seam_modules_import_no_other_layer(module: str) -> None:
    used = {m for m in _imports(PKG / module) if m.startswith("shoal.")}
    assert used <= {"shoal.errors"}, f"{module} imports {sorted(used)}"


def test_only_the_pipeline_imports_pyspark() -> None:
    for path in _modules():
        if path.is_relative_to(PKG / "pipeline"):
            continue
        bad = {m for m in _imports(path) if m.split(".")[0] == "pyspark"}
        assert not bad, f"{path.relative_to(PKG)} imports pyspark"


def test_layer_rules_are_not_vacuous() -> None:
    # The checks above must be looking at real code.
    assert len(_modules("wal")) > 1
    assert any("pyarrow" in _imports(p) for p in _modules("otlp"))


def _documented_layers() -> dict[str, set[str]]:
    """The package table of docs/architecture.md: package -> the packages it may import."""
    doc = (PKG.parent / "docs" / "architecture.md").read_text()
    table: dict[str, set[str]] = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`shoal."):
            continue
        allowed = {a.split(" ")[0] for a in cells[2].split(", ")}
        for name in cells[0].replace("`", "").split(", "):
            table[name.removeprefix("shoal.")] = allowed
    return table


@pytest.mark.parametrize(
    "layer",
    ["wal", "otlp", "storage", "query", "promql", "promwrite", "api", "pgwire", "pipeline"],
)
def test_the_documented_table_matches_the_imports(layer: str) -> None:
    allowed = _documented_layers()[layer] | {layer, "config", "errors"} - {"stdlib"}
    for path in _modules(layer):
        used = {m.split(".")[1] for m in _imports(path) if m.startswith("shoal.")}
        extra = used - allowed
        assert not extra, f"{path.relative_to(PKG)} imports {sorted(extra)}, not in the table"
    for name in _documented_layers()[layer] - {"errors", "config", "stdlib"}:
        assert any(m.startswith(f"shoal.{name}") for p in _modules(layer) for m in _imports(p)), (
            f"docs/architecture.md lets {layer} import {name}, which it does not"
        )
