"""``shoal sql "SELECT ..."``: run a query and print the result.

Against a running server (``url`` and ``token`` settings, ``--url`` and
``--token`` flags) the query goes to ``POST /api/v1/sql``. With ``--local``
it runs in this process, read-only, over the committed Parquet files of a
data dir (rows not yet flushed from the server's WAL are not visible).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any, BinaryIO, TextIO

import httpx
import pyarrow as pa

from shoal.commands import load_config, open_store
from shoal.config import Config
from shoal.errors import QueryError
from shoal.sql.encoders import column_values


def _query_text(args: argparse.Namespace) -> str:
    text: str = sys.stdin.read() if args.query == "-" else args.query
    return text


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def print_table(table: pa.Table, out: TextIO, max_width: int = 60) -> None:
    """An aligned text table, one line per row, long cells cut with an ellipsis."""
    names = table.schema.names
    columns = [
        [_cell(v) for c in table.column(i).chunks for v in column_values(c)]
        for i in range(table.num_columns)
    ]
    cells = [
        [c if len(c) <= max_width else c[: max_width - 1] + "…" for c in col] for col in columns
    ]
    widths = [max([len(n), *(len(c) for c in col)]) for n, col in zip(names, cells, strict=True)]
    out.write(" | ".join(n.ljust(w) for n, w in zip(names, widths, strict=True)).rstrip() + "\n")
    out.write("-+-".join("-" * w for w in widths) + "\n")
    for row in zip(*cells, strict=True):
        out.write(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")
    out.write(f"({table.num_rows} row{'s' if table.num_rows != 1 else ''})\n")


def _binary_stdout() -> BinaryIO | None:
    """Standard output for Arrow bytes; None (after saying why) when it is a terminal."""
    if sys.stdout.isatty():
        sys.stderr.write(
            "shoal: error: --format arrow writes a binary Arrow IPC stream; redirect it "
            "to a file or a pipe\n"
        )
        return None
    sys.stdout.flush()
    return sys.stdout.buffer


def _remote(config: Config, args: argparse.Namespace, sql: str) -> int:
    url = str(args.url or config.url).rstrip("/") + "/api/v1/sql"
    token = args.token or config.token
    headers = {"Content-Type": "text/plain; charset=utf-8"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    fmt = "arrow" if args.format == "table" else args.format
    out = _binary_stdout() if args.format == "arrow" else None
    if args.format == "arrow" and out is None:
        return 2
    timeout = float(config.query_timeout_s) + 10.0
    try:
        response = httpx.post(
            url, params={"format": fmt}, content=sql.encode(), headers=headers, timeout=timeout
        )
    except httpx.HTTPError as exc:
        sys.stderr.write(f"shoal: error: cannot reach {url}: {exc}\n")
        return 2
    if response.status_code != 200:
        try:
            message = response.json().get("error", response.text)
        except ValueError:
            message = response.text
        sys.stderr.write(f"shoal: error: {response.status_code}: {message}\n")
        return 1
    if out is not None:
        out.write(response.content)
        out.flush()
        return 0
    if fmt != "arrow":
        sys.stdout.write(response.text)
        if not response.text.endswith("\n"):
            sys.stdout.write("\n")
        return 0
    reader = pa.ipc.open_stream(response.content)
    batches: list[pa.RecordBatch] = []
    note: str | None = None
    while True:
        try:
            batch, meta = reader.read_next_batch_with_custom_metadata()
        except StopIteration:
            break
        if meta is not None:
            for key in (b"shoal.truncated", b"shoal.error"):
                if key in meta:
                    note = meta[key].decode()
        batches.append(batch)
    print_table(pa.Table.from_batches(batches, schema=reader.schema), sys.stdout)
    truncated = response.headers.get("x-shoal-truncated")
    if note or truncated:
        sys.stderr.write(f"shoal: {note or truncated}\n")
    return 0


def _local(config: Config, args: argparse.Namespace, sql: str) -> int:
    from shoal.sql.service import QueryService, limits_from_config
    from shoal.storage.reader import TenantReader

    out = _binary_stdout() if args.format == "arrow" else None
    if args.format == "arrow" and out is None:
        return 2
    store = open_store(config)
    service = QueryService(TenantReader(store, None), limits_from_config(config))
    try:
        table, result = _run_local(service, args.tenant, sql)
    finally:
        service.shutdown()
    if out is not None:
        with pa.ipc.new_stream(out, table.schema) as writer:
            writer.write_table(table)
        out.flush()
    elif args.format == "table":
        print_table(table, sys.stdout)
    else:
        _write_format(table, args.format, sys.stdout)
    if result:
        sys.stderr.write(f"shoal: {result}\n")
    return 0


def _run_local(service: Any, tenant: str, sql: str) -> tuple[pa.Table, str | None]:
    async def go() -> tuple[pa.Table, str | None]:
        table, result = await service.run(tenant, sql)
        return table, result.truncation_message

    return asyncio.run(go())


def _write_format(table: pa.Table, fmt: str, out: TextIO) -> None:
    from shoal.sql.encoders import ENCODERS, StreamStatus

    async def batches() -> Any:
        for b in table.to_batches():
            yield b

    async def go() -> None:
        async for chunk in ENCODERS[fmt](table.schema, batches(), StreamStatus()):
            out.write(chunk.decode())

    asyncio.run(go())
    if fmt == "json":
        out.write("\n")


def run(args: argparse.Namespace) -> int:
    config = load_config(args)
    sql = _query_text(args)
    try:
        if args.local:
            return _local(config, args, sql)
        return _remote(config, args, sql)
    except QueryError as exc:
        sys.stderr.write(f"shoal: query error: {exc}\n")
        return 1


__all__: Sequence[str] = ["print_table", "run"]
