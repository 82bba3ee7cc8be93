"""Every SQL example in docs/query.md runs, over flushed and unflushed rows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shoal.sql.service import QueryService

from .helpers import Harness, log_rows, metric_rows

DOC = Path(__file__).resolve().parents[2] / "docs" / "query.md"


def _examples() -> list[str]:
    text = DOC.read_text()
    section = text[text.index("## Examples") :]
    section = section[: section.index("\n## ", 1)]
    statements = []
    for block in re.findall(r"```sql\n(.*?)```", section, re.S):
        for statement in block.split(";"):
            lines = [ln for ln in statement.splitlines() if not ln.strip().startswith("--")]
            if "".join(lines).strip():
                statements.append("\n".join(lines).strip())
    return statements


EXAMPLES = _examples()


def test_the_document_has_examples() -> None:
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize("sql", EXAMPLES, ids=[f"example{i + 1}" for i in range(len(EXAMPLES))])
def test_each_example_runs(harness: Harness, sql: str) -> None:
    harness.ingest("t", "metrics", metric_rows(500, seed=1))
    harness.flush("t", "metrics")
    harness.ingest("t", "metrics", metric_rows(50, seed=2))
    harness.ingest("t", "logs", log_rows(20, "hello"))
    service: QueryService = harness.service()
    try:
        table = service.run_sync("t", sql)
    finally:
        service.shutdown()
    assert table.num_columns >= 2
