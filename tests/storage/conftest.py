from __future__ import annotations

from pathlib import Path

import pytest

from shoal.storage.store import TableStore


@pytest.fixture
def store(tmp_path: Path) -> TableStore:
    return TableStore(tmp_path / "data", checkpoint_interval=100)
