"""Tokens: hashed at rest, the token alone decides the tenant, roles enforced."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import httpx
import pytest
from fastapi import Depends, FastAPI

from shoal.api.access import require_role
from shoal.auth import (
    ROLES,
    Authenticator,
    Principal,
    TokenStore,
    grpc_principal,
    parse_roles,
)
from shoal.errors import AuthError, ConfigError, PermissionDeniedError


def test_token_is_stored_hashed_and_authenticates(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    token, record = store.create("acme", frozenset({"ingest"}), name="collector")
    raw = store.path.read_text()
    secret = token.split("_", 2)[2]
    assert secret not in raw and token not in raw
    assert json.loads(raw)["tokens"][0]["tenant"] == "acme"
    assert oct(store.path.stat().st_mode & 0o777) == "0o600"
    auth = Authenticator(store, allow_anonymous=True)
    principal = auth.authenticate(f"Bearer {token}")
    assert principal == Principal("acme", frozenset({"ingest"}))
    assert record.id in token


def test_once_a_token_exists_one_is_required(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    auth = Authenticator(store, allow_anonymous=True)
    assert auth.authenticate(None) == Principal("default", ROLES)
    token, _ = store.create("acme", frozenset({"ingest", "query"}))
    with pytest.raises(AuthError, match="missing bearer token"):
        auth.authenticate(None)
    assert auth.authenticate(f"Bearer {token}").tenant == "acme"


def test_without_anonymous_access_a_token_is_always_required(tmp_path: Path) -> None:
    auth = Authenticator(TokenStore(tmp_path), allow_anonymous=False)
    with pytest.raises(AuthError):
        auth.authenticate(None)


@pytest.mark.parametrize(
    "header",
    ["Bearer nope", "Basic abc", "Bearer", "Bearer shoal_00000000_" + "A" * 43, "token x"],
)
def test_bad_tokens_are_refused(tmp_path: Path, header: str) -> None:
    store = TokenStore(tmp_path)
    store.create("acme", frozenset({"ingest"}))
    with pytest.raises(AuthError):
        Authenticator(store, allow_anonymous=True).authenticate(header)


def test_a_wrong_secret_with_a_valid_id_is_refused(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    token, _ = store.create("acme", frozenset({"ingest"}))
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    with pytest.raises(AuthError, match="invalid"):
        Authenticator(store, allow_anonymous=True).authenticate(f"Bearer {forged}")


def test_revocation_takes_effect_without_restart(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    token, record = store.create("acme", frozenset({"ingest"}))
    keep, _ = store.create("other", frozenset({"ingest"}))
    auth = Authenticator(store, allow_anonymous=True)
    assert auth.authenticate(f"Bearer {token}").tenant == "acme"
    assert store.revoke(record.id)
    # make sure the modification time moves even on coarse clocks
    st = store.path.stat()
    os.utime(store.path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    with pytest.raises(AuthError):
        auth.authenticate(f"Bearer {token}")
    assert auth.authenticate(f"Bearer {keep}").tenant == "other"
    assert not store.revoke(record.id)


def test_roles_are_enforced_and_validated(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    token, _ = store.create("acme", parse_roles("ingest"))
    auth = Authenticator(store, allow_anonymous=True)
    with pytest.raises(PermissionDeniedError):
        auth.check(f"Bearer {token}", "query")
    with pytest.raises(ConfigError):
        parse_roles("ingest,root")
    with pytest.raises(ConfigError):
        store.create("Bad Tenant!", frozenset({"ingest"}))


def test_require_role_dependency_and_grpc_metadata(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    query_token, _ = store.create("acme", frozenset({"query"}))
    ingest_token, _ = store.create("acme", frozenset({"ingest"}))
    app = FastAPI()
    app.state.authenticator = Authenticator(store, allow_anonymous=True)

    @app.exception_handler(AuthError)
    async def denied(request: object, exc: Exception) -> object:
        from fastapi.responses import JSONResponse

        status = 403 if isinstance(exc, PermissionDeniedError) else 401
        return JSONResponse({"error": str(exc)}, status_code=status)

    @app.get("/who")
    def who(principal: Principal = Depends(require_role("query"))) -> dict[str, str]:  # noqa: B008
        return {"tenant": principal.tenant}

    async def get(headers: dict[str, str]) -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.get("/who", headers=headers)

    ok = asyncio.run(get({"Authorization": f"Bearer {query_token}"}))
    assert ok.json() == {"tenant": "acme"}
    assert asyncio.run(get({"Authorization": f"Bearer {ingest_token}"})).status_code == 403
    assert asyncio.run(get({})).status_code == 401

    auth = app.state.authenticator
    metadata = (("user-agent", "x"), ("authorization", f"Bearer {ingest_token}"))
    assert grpc_principal(auth, metadata, "ingest").tenant == "acme"
    with pytest.raises(AuthError):
        grpc_principal(auth, (), "ingest")
