"""Loki's live tail over WebSocket on a real server, driven by the websockets client as
Grafana's data source proxy opens it: the entries from before come first, then each
entry the moment it is acknowledged; the connection outlives the HTTP read deadline; a
client slower than the stream is told what it missed (dropped_entries); the token
decides the tenant."""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from loadtest import loki as push
from tests.lokipush.conftest import Loki, push_streams, serve

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def loki(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loki]:
    yield from serve(
        tmp_path_factory.mktemp("tail"),
        {"SHOAL_HTTP_READ_TIMEOUT_S": "1", "SHOAL_LOKI_TAIL_BUFFER_ROWS": "50"},
    )


def send(loki: Loki, app: str, lines: list[str], token: str | None = None) -> None:
    now = time.time_ns()
    entries: list[push.Entry] = [(now + i, line) for i, line in enumerate(lines)]
    push_streams(loki, [({"app": app}, entries)], token)


def tail(loki: Loki, query: str, token: str | None, **params: str) -> ClientConnection:
    url = (
        loki.url.replace("http://", "ws://")
        + "/loki/api/v1/tail?"
        + urllib.parse.urlencode({"query": query, **params})
    )
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return connect(url, additional_headers=headers, open_timeout=10)


def receive(ws: ClientConnection, timeout: float = 10) -> dict[str, Any]:
    message = json.loads(ws.recv(timeout=timeout))
    assert isinstance(message, dict)
    return message


def lines(message: dict[str, Any]) -> list[str]:
    return [v[1] for s in message["streams"] for v in s["values"]]


def test_history_then_each_entry_as_it_is_acknowledged(loki: Loki) -> None:
    send(loki, "live", ["old 1 x", "old 2 x", "old 3 x", "old 4 y"])
    with tail(loki, '{app="live"} |= "x"', loki.token, limit="2") as ws:
        first = receive(ws)
        assert lines(first) == ["old 2 x", "old 3 x"]
        assert first["streams"][0]["stream"] == {"app": "live", "detected_level": "unknown",
                                                 "service_name": "live"}  # fmt: skip
        send(loki, "live", ["new 1 x", "skip y"])
        acknowledged = time.monotonic()
        message = receive(ws)
        assert lines(message) == ["new 1 x"]
        assert time.monotonic() - acknowledged < 5  # no polling interval: it was pushed
        # the connection is a WebSocket's: the 1 s read deadline of requests does not apply
        time.sleep(2.5)
        send(loki, "live", ["new 2 x"])
        assert lines(receive(ws)) == ["new 2 x"]


def test_a_slow_client_is_told_what_it_missed(loki: Loki) -> None:
    with tail(loki, '{app="flood"}', loki.token, limit="1") as ws:
        receive(ws)
        send(loki, "flood", [f"line {i}" for i in range(80)])  # over the 50-row buffer
        send(loki, "flood", ["after"])
        found: list[str] = []
        dropped: list[dict[str, Any]] = []
        while "after" not in found:
            message = receive(ws)
            found += lines(message)
            dropped += message["dropped_entries"] or []
    assert len(dropped) == 80 and not any(line.startswith("line") for line in found)
    assert dropped[0]["labels"] == {"app": "flood", "service_name": "flood"}
    assert int(dropped[0]["timestamp"]) > 0


def test_the_token_decides_the_tenant(loki: Loki) -> None:
    with pytest.raises(InvalidStatus):
        tail(loki, '{app="live"}', None)
    with tail(loki, '{app="live"}', loki.other, **{"X-Scope-OrgID": "acme"}) as ws:
        assert lines(receive(ws)) == []
        send(loki, "live", ["acme only"])
        send(loki, "live", ["other's own"], loki.other)
        assert lines(receive(ws)) == ["other's own"]
    with pytest.raises(InvalidStatus):
        tail(loki, 'count_over_time({app="live"}[1m])', loki.token)
