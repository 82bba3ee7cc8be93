"""Fixtures for the query tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shoal.sql.service import QueryService

from .helpers import Harness


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(tmp_path / "data")


@pytest.fixture
def service(harness: Harness) -> Iterator[QueryService]:
    svc = harness.service()
    yield svc
    svc.shutdown()
