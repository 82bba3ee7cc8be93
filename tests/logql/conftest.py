"""The Loki tests' server (tests/lokipush/conftest.py) for the LogQL API tests."""

from tests.lokipush.conftest import loki

__all__ = ["loki"]
