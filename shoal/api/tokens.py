"""The token API for ``admin`` tokens: create, list and revoke tokens over HTTP.

``POST /api/v1/tokens`` with JSON ``{"tenant": "acme", "roles": ["ingest", "query"],
"name": "collector"}`` answers 201 with the token (shown once) and its record;
``GET /api/v1/tokens`` lists every token without secrets or hashes;
``DELETE /api/v1/tokens/{id}`` revokes one (204, or 404 for an unknown id).
An ``admin`` token manages the tokens of every tenant: it is an operator's role.
Changes take effect at once, in this server and in ``shoal token list``.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse

from shoal.api.access import require_role
from shoal.auth import (
    Authenticator,
    Principal,
    TokenRecord,
    first_token_note,
    parse_roles,
)
from shoal.errors import ConfigError

logger = logging.getLogger(__name__)

router = APIRouter()

AdminPrincipal = Annotated[Principal, Depends(require_role("admin"))]
MAX_BODY_BYTES = 16 * 1024


def _public(record: TokenRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "tenant": record.tenant,
        "roles": sorted(record.roles),
        "name": record.name,
        "created": record.created,
    }


def _bad(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


@router.get("/api/v1/tokens")
async def list_tokens(request: Request, principal: AdminPrincipal) -> Response:
    authenticator: Authenticator = request.app.state.authenticator
    records = authenticator.store.load()
    return JSONResponse({"tokens": [_public(r) for r in records]})


@router.post("/api/v1/tokens")
async def create_token(request: Request, principal: AdminPrincipal) -> Response:
    authenticator: Authenticator = request.app.state.authenticator
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        return _bad(f"body over {MAX_BODY_BYTES} bytes", 413)
    try:
        doc = json.loads(body or b"null")
    except ValueError as exc:
        return _bad(f'body is not valid JSON ({exc}); send {{"tenant": "...", "roles": [...]}}')
    if not isinstance(doc, dict) or not isinstance(doc.get("tenant"), str):
        return _bad('send a JSON object: {"tenant": "NAME", "roles": ["ingest", "query"]}')
    roles_raw = doc.get("roles", ["ingest", "query"])
    name = doc.get("name", "")
    if isinstance(roles_raw, str):
        roles_raw = roles_raw.split(",")
    if not isinstance(roles_raw, list) or not all(isinstance(r, str) for r in roles_raw):
        return _bad('"roles" must be a list of role names')
    if not isinstance(name, str):
        return _bad('"name" must be a string')
    store = authenticator.store
    try:
        first = not store.load()
        token, record = store.create(doc["tenant"], parse_roles(roles_raw), name)
    except ConfigError as exc:
        return _bad(str(exc))
    logger.info(
        "token %s created over HTTP for tenant %s with roles %s by a token of tenant %s",
        record.id, record.tenant, ",".join(sorted(record.roles)), principal.tenant,
    )  # fmt: skip
    answer: dict[str, Any] = {"token": token, **_public(record)}
    if first:
        answer["note"] = first_token_note(record.tenant)
    return JSONResponse(answer, status_code=201)


@router.delete("/api/v1/tokens/{token_id}")
async def revoke_token(token_id: str, request: Request, principal: AdminPrincipal) -> Response:
    authenticator: Authenticator = request.app.state.authenticator
    if not authenticator.store.revoke(token_id):
        return _bad(f"no token with id {token_id!r}", 404)
    logger.info("token %s revoked over HTTP by a token of tenant %s", token_id, principal.tenant)
    return Response(status_code=204)
