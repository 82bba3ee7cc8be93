"""The layering of docs/architecture.md, checked on the source: every import points to a
lower layer, no module imports in a circle, modules stay small, frameworks stay where
they belong."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "shoal"
DOC = PKG.parent / "docs" / "architecture.md"
WEB = {"fastapi", "starlette", "grpc", "uvicorn", "prometheus_client"}
SHARED = {"arrays", "config", "errors", "schema", "text"}
"""Parts every layer may use (the table's lowest layers, named in no "may import" cell
above them)."""
MAX_LINES = 500
ONE_TABLE_OR_CODEC = {
    "config.py": "the settings, one table",
    "otlp/json_fast.py": "OTLP/JSON's fast decoder, one codec",
}


def _imports(path: Path) -> set[str]:
    """The shoal modules (and other top-level modules) ``path`` imports, any level."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{a.name}" for a in node.names}
            submodules = {m for m in submodules if _is_module(m)}
            # ``from shoal.x import y``, y a module, is an import of y (the package's own
            # __init__ runs first whatever is imported from it)
            found.update(submodules or {node.module})
    return found


def _is_module(dotted: str) -> bool:
    if not dotted.startswith("shoal."):
        return False
    path = PKG.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _modules(sub: str | None = None) -> list[Path]:
    base = PKG / sub if sub else PKG
    return sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]


def _package(path: Path) -> str:
    """The part of shoal ``path`` belongs to: its subpackage, or its top-level module."""
    return path.relative_to(PKG).parts[0].removesuffix(".py")


def _part(module: str) -> str | None:
    """The part of shoal a dotted module name (``shoal.x.y``) is in, if it is one."""
    parts = module.split(".")
    if parts[0] != "shoal" or len(parts) < 2:
        return None
    name = parts[1]
    return name if (PKG / name).is_dir() or (PKG / f"{name}.py").is_file() else None


def _layers() -> dict[str, tuple[int, set[str]]]:
    """The package table of docs/architecture.md: part -> (layer, what it may import)."""
    table: dict[str, tuple[int, set[str]]] = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].isdigit() or not cells[1].startswith("`shoal."):
            continue
        allowed = {a.strip() for a in cells[3].split(",")} - {"stdlib", "everything below"}
        for name in re.findall(r"`shoal\.(\w+)`", cells[1]):
            table[name] = (int(cells[0]), allowed if "everything below" not in cells[3] else {"*"})
    return table


LAYERS = _layers()


def test_the_table_names_every_part_of_the_package() -> None:
    parts = {_package(p) for p in _modules()} - {"__init__"}
    assert parts == set(LAYERS), (
        f"docs/architecture.md's table lacks {sorted(parts - set(LAYERS))} "
        f"and names {sorted(set(LAYERS) - parts)}, which do not exist"
    )


@pytest.mark.parametrize("part", sorted(LAYERS))
def test_imports_point_to_lower_layers_the_table_allows(part: str) -> None:
    layer, allowed = LAYERS[part]
    for path in _modules(part):
        for module in _imports(path):
            used = _part(module)
            if used is None or used == part:
                continue
            assert LAYERS[used][0] < layer, (
                f"{path.relative_to(PKG)} imports {module}: layer {LAYERS[used][0]} is not "
                f"below {part}'s layer {layer} (docs/architecture.md)"
            )
            assert "*" in allowed or used in allowed | SHARED, (
                f"{path.relative_to(PKG)} imports {module}, which docs/architecture.md does "
                f"not let {part} import"
            )


@pytest.mark.parametrize("part", sorted(LAYERS))
def test_the_table_allows_only_what_is_imported(part: str) -> None:
    """A "may import" the code does not use is a stale sentence of the table."""
    _, allowed = LAYERS[part]
    used = {_part(m) for p in _modules(part) for m in _imports(p)} - {None, part}
    for name in allowed - {"*"} - SHARED:
        assert name in used, f"docs/architecture.md lets {part} import {name}, which it does not"


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _graph() -> dict[str, set[str]]:
    """Module -> the shoal modules it imports (``from pkg import module`` included)."""
    names = {_module_name(p): p for p in _modules()}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        graph[name] = {m for m in _imports(path) if m in names and m != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_in_a_circle() -> None:
    assert _cycles(_graph()) == []


def test_the_circle_check_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_modules_stay_small() -> None:
    for path in _modules():
        rel = str(path.relative_to(PKG))
        lines = len(path.read_text().splitlines())
        if rel in ONE_TABLE_OR_CODEC:
            continue
        assert lines <= MAX_LINES, f"{rel} has {lines} lines: split it by concern"


def test_the_exceptions_to_the_size_rule_are_still_needed() -> None:
    for rel in ONE_TABLE_OR_CODEC:
        assert len((PKG / rel).read_text().splitlines()) > MAX_LINES, f"{rel} fits now"


@pytest.mark.parametrize("part", ["wal", "rows", "otlp", "promwrite", "storage", "ingest"])
def test_core_layers_import_no_web_or_metrics_framework(part: str) -> None:
    for path in _modules(part):
        bad = {m for m in _imports(path) if m.split(".")[0] in WEB}
        assert not bad, f"{path.relative_to(PKG)} imports {sorted(bad)}"


def test_the_token_check_loads_no_web_framework() -> None:
    """``shoal token`` and the PostgreSQL listener use auth without FastAPI."""
    bad = {m for m in _imports(PKG / "auth.py") if m.split(".")[0] in WEB}
    assert not bad


def test_only_the_pipeline_imports_pyspark() -> None:
    for path in _modules():
        if path.is_relative_to(PKG / "pipeline"):
            continue
        bad = {m for m in _imports(path) if m.split(".")[0] == "pyspark"}
        assert not bad, f"{path.relative_to(PKG)} imports pyspark"


def test_layer_rules_are_not_vacuous() -> None:
    # The checks above must be looking at real code and a real table.
    assert len(LAYERS) >= 15 and LAYERS["api"][0] > LAYERS["ingest"][0] > LAYERS["wal"][0]
    assert len(_modules("wal")) > 1
    assert any("pyarrow" in _imports(p) for p in _modules("otlp"))
    assert sum(len(v) for v in _graph().values()) > 300
