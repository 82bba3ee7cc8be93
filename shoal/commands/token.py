"""``shoal token create|list|revoke``: manage bearer tokens in <data_dir>/auth/tokens.json."""

from __future__ import annotations

import argparse
import sys

from shoal.auth import TokenStore, first_token_note, parse_roles
from shoal.commands import load_config


def _store(args: argparse.Namespace) -> TokenStore:
    return TokenStore(load_config(args).data_path)


def create(args: argparse.Namespace) -> int:
    """Create a token and print it once (only its hash is stored)."""
    store = _store(args)
    first = not store.load()
    token, record = store.create(args.tenant, parse_roles(args.role), args.name)
    sys.stdout.write(token + "\n")
    sys.stderr.write(
        f"created token {record.id} for tenant {record.tenant!r} with roles "
        f"{','.join(sorted(record.roles))}; it is shown only this once\n"
    )
    if first:
        sys.stderr.write(f"note: {first_token_note(record.tenant)}\n")
    return 0


def list_tokens(args: argparse.Namespace) -> int:
    """List tokens: id, tenant, roles, name, creation time (never a secret)."""
    records = _store(args).load()
    if not records:
        sys.stdout.write("no tokens (loopback requests act as tenant 'default')\n")
        return 0
    sys.stdout.write(f"{'ID':<10} {'TENANT':<20} {'ROLES':<20} {'CREATED':<26} NAME\n")
    for r in records:
        roles = ",".join(sorted(r.roles))
        sys.stdout.write(f"{r.id:<10} {r.tenant:<20} {roles:<20} {r.created:<26} {r.name}\n")
    return 0


def revoke(args: argparse.Namespace) -> int:
    """Revoke a token by id; a running server stops accepting it at once."""
    if _store(args).revoke(args.token_id):
        sys.stdout.write(f"revoked {args.token_id}\n")
        return 0
    sys.stderr.write(f"shoal: error: no token with id {args.token_id!r}\n")
    return 1
