"""Bearer tokens, tenants and roles.

Tokens live in ``<data_dir>/auth/tokens.json``. Only a SHA-256 hash of each
token's secret is stored; a presented token is found by its public id and its
secret compared with :func:`hmac.compare_digest`. A token reads
``shoal_<id>_<secret>``: the id (8 hex digits) names the token in listings and
revocations, the secret is 32 random bytes in URL-safe base64.

The token alone decides the tenant. With no tokens configured and anonymous
access allowed (a loopback bind, or ``--insecure``), a request without a token
acts as tenant ``default`` with every role. Once any token exists, every
request needs one.

Roles: ``ingest`` sends OTLP, ``query`` runs SQL, ``metrics`` reads ``/metrics``
(a Prometheus scrape), ``admin`` manages every tenant's tokens over HTTP and
reads ``/metrics`` too: it is an operator's role, not a tenant's.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import fcntl
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from shoal.errors import AuthError, ConfigError, PermissionDeniedError

logger = logging.getLogger(__name__)

ROLES = frozenset({"ingest", "query", "metrics", "admin"})
IMPLIED_ROLES: dict[str, frozenset[str]] = {"admin": frozenset({"metrics"})}
"""Roles a role grants besides itself."""
DEFAULT_TENANT = "default"
_TENANT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_TOKEN_RE = re.compile(r"^shoal_([0-9a-f]{8})_([A-Za-z0-9_-]{43})$")


@dataclasses.dataclass(frozen=True)
class Principal:
    """Who a request acts as: a tenant and the roles its token grants."""

    tenant: str
    roles: frozenset[str]

    def require(self, role: str) -> Principal:
        if role not in self.roles and not any(
            role in IMPLIED_ROLES.get(held, ()) for held in self.roles
        ):
            raise PermissionDeniedError(f"this token lacks the {role!r} role")
        return self


@dataclasses.dataclass(frozen=True)
class TokenRecord:
    """One stored token: everything but its secret."""

    id: str
    tenant: str
    roles: frozenset[str]
    name: str
    sha256: str
    created: str

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tenant": self.tenant,
            "roles": sorted(self.roles),
            "name": self.name,
            "sha256": self.sha256,
            "created": self.created,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> TokenRecord:
        return cls(
            id=str(raw["id"]),
            tenant=str(raw["tenant"]),
            roles=frozenset(str(r) for r in raw["roles"]),
            name=str(raw.get("name", "")),
            sha256=str(raw["sha256"]),
            created=str(raw.get("created", "")),
        )


def validate_tenant(tenant: str) -> str:
    if not _TENANT_RE.match(tenant):
        raise ConfigError(
            f"invalid tenant name {tenant!r}: use 1-63 characters of a-z, 0-9, '_' and '-', "
            "starting with a letter or digit"
        )
    return tenant


def parse_roles(text: str | Iterable[str]) -> frozenset[str]:
    items = text.split(",") if isinstance(text, str) else list(text)
    roles = frozenset(r.strip() for r in items if r.strip())
    unknown = roles - ROLES
    if not roles or unknown:
        raise ConfigError(
            f"invalid roles {sorted(unknown) if unknown else '(none)'}: "
            f"choose from {', '.join(sorted(ROLES))}"
        )
    return roles


def _hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def first_token_note(tenant: str) -> str:
    """What an operator must know when the first token is created: anonymous access ends."""
    note = (
        "this is the first token: from now on every request needs a token, and requests "
        f"without one no longer act as tenant {DEFAULT_TENANT!r}"
    )
    if tenant != DEFAULT_TENANT:
        note += (
            f"; data sent so far without a token belongs to tenant {DEFAULT_TENANT!r} and "
            f"stays readable only with a token for it (shoal token create --tenant "
            f"{DEFAULT_TENANT} --role query)"
        )
    return note


class TokenStore:
    """The token file: read, create, revoke. Writes are atomic (temp file + rename)."""

    _process_lock = threading.Lock()

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.path = Path(data_dir) / "auth" / "tokens.json"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One writer at a time: threads of this process, and other processes (the CLI)."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with self._process_lock:
            fd = os.open(self.path.parent / "tokens.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    def load(self) -> list[TokenRecord]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        try:
            raw = json.loads(text)
            return [TokenRecord.from_json(item) for item in raw.get("tokens", [])]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"token file {self.path} is damaged: {exc}") from None

    def _save(self, records: list[TokenRecord]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_suffix(".tmp")
        body = json.dumps({"tokens": [r.to_json() for r in records]}, indent=2) + "\n"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def create(self, tenant: str, roles: frozenset[str], name: str = "") -> tuple[str, TokenRecord]:
        """Create a token; returns the token text (shown once) and its stored record."""
        validate_tenant(tenant)
        roles = parse_roles(roles)
        with self._locked():
            return self._create(tenant, roles, name)

    def _create(self, tenant: str, roles: frozenset[str], name: str) -> tuple[str, TokenRecord]:
        records = self.load()
        taken = {r.id for r in records}
        token_id = secrets.token_hex(4)
        while token_id in taken:
            token_id = secrets.token_hex(4)
        secret = base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode("ascii")
        record = TokenRecord(
            id=token_id,
            tenant=tenant,
            roles=roles,
            name=name,
            sha256=_hash_secret(secret),
            created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        )
        self._save([*records, record])
        return f"shoal_{token_id}_{secret}", record

    def revoke(self, token_id: str) -> bool:
        with self._locked():
            return self._revoke(token_id)

    def _revoke(self, token_id: str) -> bool:
        records = self.load()
        if not any(r.id == token_id for r in records):
            return False
        kept = [r for r in records if r.id != token_id]
        if len(kept) == len(records):
            return False
        self._save(kept)
        return True


class Authenticator:
    """Turns an ``Authorization`` header into a :class:`Principal`.

    The token file is re-read when its modification time changes, so tokens
    created or revoked with ``shoal token`` take effect without a restart.
    """

    def __init__(self, store: TokenStore, allow_anonymous: bool) -> None:
        self._store = store
        self._allow_anonymous = allow_anonymous
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._by_id: dict[str, TokenRecord] = {}
        self._damaged = False
        self._reload()

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self._store.path)
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def _reload(self) -> None:
        stamp = self._file_stamp()
        with self._lock:
            if stamp == self._stamp and (stamp is not None or not self._by_id):
                return
            try:
                records = self._store.load() if stamp is not None else []
            except ConfigError as exc:
                # Fail closed, and keep the path and the cause out of client answers.
                if not self._damaged:
                    logger.error("refusing every token until it is fixed: %s", exc)
                self._damaged = True
                self._stamp = stamp
                return
            self._damaged = False
            self._by_id = {r.id: r for r in records}
            self._stamp = stamp
            logger.info("loaded %d token(s) from %s", len(records), self._store.path)

    @property
    def has_tokens(self) -> bool:
        self._reload()
        return bool(self._by_id) or self._damaged

    @property
    def store(self) -> TokenStore:
        return self._store

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal for a header value; raises :class:`AuthError`."""
        self._reload()
        if self._damaged:
            raise AuthError("the server cannot read its tokens; its log says why")
        if not authorization:
            if not self._by_id and self._allow_anonymous:
                return Principal(DEFAULT_TENANT, ROLES)
            raise AuthError("missing bearer token (Authorization: Bearer <token>)")
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise AuthError("expected 'Authorization: Bearer <token>'")
        match = _TOKEN_RE.match(token.strip())
        record = self._by_id.get(match.group(1)) if match else None
        # Compare even when the id is unknown so timing does not reveal valid ids.
        expected = record.sha256 if record else "0" * 64
        presented = _hash_secret(match.group(2)) if match else "1" * 64
        if not hmac.compare_digest(expected, presented) or record is None:
            raise AuthError("invalid or revoked token")
        return Principal(record.tenant, record.roles)

    def check(self, authorization: str | None, role: str) -> Principal:
        return self.authenticate(authorization).require(role)


def grpc_principal(
    authenticator: Authenticator, metadata: Iterable[tuple[str, str | bytes]] | None, role: str
) -> Principal:
    """The same check for gRPC: reads the ``authorization`` metadata entry."""
    value: str | None = None
    for key, item in metadata or ():
        if key.lower() == "authorization":
            value = item.decode("ascii", "replace") if isinstance(item, bytes) else item
            break
    return authenticator.check(value, role)
