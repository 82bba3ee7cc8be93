"""Sharing the server's CPU among the stages of ingest (``loadtest.stages``), from stacks
written as ``py-spy record --format raw --threads`` writes them."""

from __future__ import annotations

import pytest

from loadtest.stages import classify, shares, table

BOOT = "Thread._bootstrap (threading.py:1002);Thread.run (threading.py:982)"
FLUSH = f"thread (101): shoal-flusher;{BOOT};Flusher.flush (shoal/storage/flusher.py:185)"
INGEST = (
    f"thread (102): shoal-ingest_0;{BOOT};_worker (concurrent/futures/thread.py:83);"
    "run (shoal/ingest/decoding.py:145)"
)


def stack(*frames: str) -> list[str]:
    return ";".join(frames).split(";")


def test_a_parquet_write_inside_a_flush_counts_as_parquet_encoding() -> None:
    write = stack(
        FLUSH,
        "TableFiles.write (shoal/storage/files.py:118)",
        "write_to (shoal/storage/layout.py:166)",
        "ParquetWriter.write_table (pyarrow/parquet/core.py:1225)",
    )
    assert classify(write) == "flush: Parquet encoding and fsync"
    rest = stack(FLUSH, "TableFiles.write (shoal/storage/files.py:126)")
    assert classify(rest) == "flush: the rest"


def test_a_take_inside_the_series_summary_counts_for_the_summary() -> None:
    summary = stack(
        FLUSH,
        "write_summary (shoal/storage/series.py:119)",
        "summarize (shoal/storage/series_rows.py:133)",
        "take (pyarrow/compute.py:509)",
    )
    assert classify(summary) == "flush: series summaries"


def test_decoding_and_the_wal_payload_are_told_apart() -> None:
    decode = stack(INGEST, "decode_cached_v1 (shoal/promwrite/cached.py:58)")
    payload = stack(INGEST, "rows_bytes (shoal/ingest/records.py:167)")
    snappy = stack(INGEST, "decompress (shoal/promwrite/snappy.py:28)")
    assert classify(decode) == "decoding into rows"
    assert classify(payload) == "WAL payload (Arrow IPC)"
    assert classify(snappy) == "snappy decompression"


def test_a_stack_no_stage_names_counts_for_its_thread_without_its_number() -> None:
    assert classify(stack(INGEST.replace("run (shoal/ingest/decoding.py:145)", "f (x.py:1)"))) == (
        "other: shoal-ingest"
    )


def test_shares_weigh_stacks_by_their_counts_and_leave_waits_out() -> None:
    raw = [
        f"{FLUSH};sort_order (shoal/storage/layout.py:363) 30\n",
        f"{INGEST};decode (shoal/promwrite/decode.py:86) 10\n",
        f"{FLUSH};Condition.wait (threading.py:320) 500\n",  # waiting: not CPU
        f"{INGEST.rsplit(';', 1)[0]} 400\n",  # the pool's thread parked in its queue
        "\n",
        "not a stack\n",
    ]
    found = shares(raw)
    assert found == pytest.approx({"flush: sort order": 0.75, "decoding into rows": 0.25})


def test_no_busy_stack_gives_no_shares() -> None:
    assert shares([f"{FLUSH};Condition.wait (threading.py:320) 5\n"]) == {}


def test_the_table_takes_each_stages_median_and_sums_them() -> None:
    runs = [{"a": 1.0, "b": 0.5}, {"a": 3.0, "b": 0.5}, {"a": 2.0}]
    lines = table(runs).splitlines()
    assert lines[2] == "| a | 2.00 | 80% |"
    assert lines[3] == "| b | 0.50 | 20% |"
    assert lines[-1] == "| total | 2.50 | |"
