"""The token check at the HTTP door, as a FastAPI dependency (the check itself is
:class:`shoal.auth.Authenticator`'s)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Request

from shoal.auth import ROLES, Authenticator, Principal


def require_role(role: str) -> Callable[[Request], Awaitable[Principal]]:
    """A FastAPI dependency: the request's principal, which must hold ``role``.

    A coroutine, so FastAPI runs it on the event loop: the check is a dict
    lookup, one SHA-256 and one ``stat``, far cheaper than the hop to a worker
    thread that FastAPI makes for a plain function.
    """
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")

    async def dependency(request: Request) -> Principal:
        return request_principal(request, role)

    return dependency


def request_principal(request: Request, role: str) -> Principal:
    """The principal of ``request``'s bearer token, which must hold ``role``."""
    authenticator: Authenticator = request.app.state.authenticator
    return authenticator.check(request.headers.get("authorization"), role)
