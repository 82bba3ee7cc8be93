"""What an operator expects once tokens exist: /metrics protected, nothing about tenants,
paths or versions in unauthenticated answers, authentication before anything else, errors
in the client's format, and the admin token API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from loadtest import payloads
from loadtest.ingest import BASE_NS, ServerProcess
from shoal.auth import Authenticator, TokenStore
from shoal.errors import AuthError
from tests.server.conftest import ServerFactory

SHOAL = str(Path(sys.executable).with_name("shoal"))


def _token(data: Path, tenant: str, roles: str) -> tuple[str, str]:
    """``shoal token create`` as an operator runs it: (token, what it said on stderr)."""
    done = subprocess.run(
        [SHOAL, "token", "create", "--data-dir", str(data), "--tenant", tenant, "--role", roles],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip(), done.stderr


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def secured(start_server: ServerFactory, tmp_path: Path) -> tuple[ServerProcess, dict[str, str]]:
    """A server whose data dir has tokens of each kind for tenant acme."""
    data = tmp_path / "data"
    tokens: dict[str, str] = {}
    tokens["admin"], _ = _token(data, "acme", "admin")
    for roles in ("ingest,query", "metrics"):
        tokens[roles], _ = _token(data, "acme", roles)
    return start_server(data), tokens


def test_first_token_says_the_default_tenant_needs_its_own_token(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _, said = _token(data, "acme", "ingest,query")
    assert "first token" in said and "tenant 'default'" in said
    assert "--tenant default --role query" in said
    _, again = _token(data, "acme", "query")
    assert "first token" not in again


def test_metrics_needs_a_metrics_or_admin_token(
    secured: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, tokens = secured
    # some traffic, so the exposition has tenant-labelled series to hide
    body = payloads.metrics_request(points=10, series=2, start_ns=BASE_NS).SerializeToString()
    sent = httpx.post(
        server.url + "/v1/metrics",
        content=body,
        headers={**_auth(tokens["ingest,query"]), "Content-Type": "application/x-protobuf"},
    )
    assert sent.status_code == 200
    anonymous = httpx.get(server.url + "/metrics")
    assert anonymous.status_code == 401
    assert anonymous.headers["content-type"].startswith("application/json")
    assert "acme" not in anonymous.text and "shoal_ingest" not in anonymous.text
    assert (
        httpx.get(server.url + "/metrics", headers=_auth(tokens["ingest,query"])).status_code == 403
    )
    for role in ("metrics", "admin"):
        scraped = httpx.get(server.url + "/metrics", headers=_auth(tokens[role]))
        assert scraped.status_code == 200
        assert 'tenant="acme"' in scraped.text


def test_metrics_is_open_without_tokens_on_loopback(server: ServerProcess) -> None:
    assert "shoal_ready 1.0" in httpx.get(server.url + "/metrics").text


def test_unauthenticated_answers_name_no_tenant_path_or_version(
    secured: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, _ = secured
    answers = [
        httpx.get(server.url + "/healthz"),
        httpx.get(server.url + "/readyz"),
        httpx.get(server.url + "/-/healthy"),
        httpx.get(server.url + "/-/ready"),
        httpx.get(server.url + "/metrics"),
        httpx.get(server.url + "/api/v1/tokens"),
        httpx.get(server.url + "/api/v1/sql", params={"q": "SELECT 1"}),
        httpx.post(server.url + "/api/v1/sql", content="SELECT * FROM metrics"),
        httpx.post(server.url + "/v1/logs", content=b"\x00garbage"),
        httpx.get(server.url + "/nope"),
        httpx.get(server.url + "/metrics", headers=_auth("shoal_00000000_" + "A" * 43)),
    ]
    for answer in answers:
        text = answer.text + json.dumps(dict(answer.headers))
        assert "acme" not in text, text
        assert str(server.data_dir) not in text and "/tmp" not in text, text
        assert "0.1.0" not in text and "uvicorn" not in text.lower(), text
        assert "server" not in answer.headers
    assert [a.status_code for a in answers] == [200] * 4 + [401] * 5 + [404, 401]


def test_authentication_comes_before_the_content_type_check(
    secured: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, tokens = secured
    # what `curl -d @file` sends: a form content type
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    refused = httpx.post(server.url + "/v1/logs", content=b"{}", headers=form)
    assert refused.status_code == 401
    assert "bearer token" in refused.json()["message"]
    wrong_type = httpx.post(
        server.url + "/v1/logs", content=b"{}", headers={**form, **_auth(tokens["ingest,query"])}
    )
    assert wrong_type.status_code == 415
    assert wrong_type.headers["content-type"] == "application/json"
    assert "application/x-protobuf" in wrong_type.json()["message"]
    # a protobuf client gets a protobuf Status
    proto = httpx.post(
        server.url + "/v1/logs",
        content=b"\x00",
        headers={"Content-Type": "application/x-protobuf"},
    )
    assert proto.status_code == 401
    assert proto.headers["content-type"] == "application/x-protobuf"


def test_admin_token_api_creates_lists_and_revokes(
    secured: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, tokens = secured
    admin = _auth(tokens["admin"])
    url = server.url + "/api/v1/tokens"
    created = httpx.post(
        url, json={"tenant": "beta", "roles": ["ingest"], "name": "edge"}, headers=admin
    )
    assert created.status_code == 201, created.text
    made = created.json()
    assert made["tenant"] == "beta" and made["roles"] == ["ingest"] and "note" not in made
    body = payloads.logs_request(records=5, series=1, start_ns=BASE_NS).SerializeToString()
    proto = {"Content-Type": "application/x-protobuf"}
    sent = httpx.post(
        server.url + "/v1/logs", content=body, headers={**proto, **_auth(made["token"])}
    )
    assert sent.status_code == 200

    listed = httpx.get(url, headers=admin).json()["tokens"]
    assert {t["id"] for t in listed} >= {made["id"]} and len(listed) == 4
    assert all("sha256" not in t and "token" not in t for t in listed)
    # the CLI sees the same tokens
    cli = subprocess.run(
        [SHOAL, "token", "list", "--data-dir", str(server.data_dir)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made["id"] in cli.stdout and "edge" in cli.stdout

    assert httpx.delete(f"{url}/{made['id']}", headers=admin).status_code == 204
    again = httpx.post(
        server.url + "/v1/logs", content=body, headers={**proto, **_auth(made["token"])}
    )
    assert again.status_code == 401
    missing = httpx.delete(f"{url}/{made['id']}", headers=admin)
    assert missing.status_code == 404 and made["id"] in missing.json()["error"]

    for role in ("ingest,query", "metrics"):
        assert httpx.get(url, headers=_auth(tokens[role])).status_code == 403
        assert httpx.post(url, json={"tenant": "x"}, headers=_auth(tokens[role])).status_code == 403
    bad = [
        httpx.post(url, content=b"{nope", headers=admin),
        httpx.post(url, json={"roles": ["ingest"]}, headers=admin),
        httpx.post(url, json={"tenant": "Bad Name!"}, headers=admin),
        httpx.post(url, json={"tenant": "t", "roles": ["root"]}, headers=admin),
    ]
    assert [b.status_code for b in bad] == [400, 400, 400, 400]
    assert all(b.json()["error"] for b in bad)
    assert "invalid roles" in bad[3].json()["error"]


def test_token_api_first_token_carries_the_note(server: ServerProcess) -> None:
    # no tokens, loopback: the anonymous caller acts as default with every role
    created = httpx.post(server.url + "/api/v1/tokens", json={"tenant": "acme"})
    assert created.status_code == 201
    assert "first token" in created.json()["note"]
    assert httpx.get(server.url + "/api/v1/tokens").status_code == 401


def test_a_damaged_token_file_refuses_everyone_without_naming_it(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    store.create("acme", frozenset({"ingest"}))
    auth = Authenticator(store, allow_anonymous=True)
    store.path.write_text("{not json")
    with pytest.raises(AuthError) as raised:
        auth.authenticate(None)
    assert str(tmp_path) not in str(raised.value) and "log" in str(raised.value)
    assert auth.has_tokens
