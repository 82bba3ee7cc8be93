"""Fixtures of the Tempo API tests: a data directory with its harness, and a token of
the ``query`` role for each of two tenants."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.auth import TokenStore
from tests.sql.helpers import Harness


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(tmp_path / "data")


@pytest.fixture
def auth(harness: Harness) -> dict[str, dict[str, str]]:
    """Bearer headers of a ``query`` token of tenants ``acme`` and ``other``."""
    store = TokenStore(harness.data_dir)
    out = {}
    for tenant in ("acme", "other"):
        token, _ = store.create(tenant, frozenset({"query"}))
        out[tenant] = {"Authorization": f"Bearer {token}"}
    return out
