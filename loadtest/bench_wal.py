"""WAL throughput, latency and replay speed beside the disk's raw limit.

``python -m loadtest.bench_wal [--seconds S] [--dir DIR] [--only KIB:APPENDERS ...]
[--kind threads|server] [--no-replay]`` (``make bench-wal``).

For each record size (1, 16, 64 KiB) and number of concurrent appenders
(1, 8, 64), it runs, side by side in the same run and directory:

* raw: a loop of ``os.write`` + ``os.fdatasync`` of batches of
  ``appenders x frame size`` bytes (what one perfect group commit writes);
* wal: ``appenders`` threads each appending records under policy ``always``
  and waiting for each acknowledgement (``Future.result()``).

Then, for 8 and 64 appenders, the same with server-style appenders: that
many concurrent tasks on one asyncio event loop, each appending and awaiting
its acknowledgement the way the server's ingest path does (the record's tag
carries the request's asyncio future; ``on_durable`` resolves a whole group
with one ``call_soon_threadsafe``; a done-callback on the WAL future watches
for failures).

Then it times replay of a 64 MiB log. Targets: 64 appenders x 16 KiB reach
at least 80% of the raw bandwidth; one appender's p99 latency is at most 2x
the raw fdatasync p99.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from shoal.wal import InMemoryWalMetrics, Wal
from shoal.wal.codec import FRAME_HEADER_SIZE

KiB = 1024
MiB = 1024 * KiB
SIZES = (1 * KiB, 16 * KiB, 64 * KiB)
APPENDERS = (1, 8, 64)
ROUNDS = 4  # raw and WAL alternate this many times per configuration


@dataclass
class Result:
    records: int
    payload_bytes: int
    seconds: float
    latencies: list[float]
    groups: int = 0

    @property
    def rate(self) -> float:
        return self.records / self.seconds

    @property
    def mbps(self) -> float:
        return self.payload_bytes / self.seconds / MiB

    def pct(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000.0


def raw_loop(directory: Path, record: int, batch_records: int, seconds: float) -> Result:
    """os.write + os.fdatasync of equal batches; latency is one write+fdatasync."""
    path = directory / "raw.bin"
    frame = record + FRAME_HEADER_SIZE
    batch = os.urandom(frame) * batch_records
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    latencies: list[float] = []
    written = 0
    in_file = 0
    try:
        start = time.perf_counter()
        deadline = start + seconds
        now = start
        while now < deadline:
            os.write(fd, batch)
            os.fdatasync(fd)
            after = time.perf_counter()
            latencies.append(after - now)
            now = after
            written += batch_records
            in_file += len(batch)
            if in_file > 64 * MiB:  # start a new file, as the WAL rotates segments
                os.close(fd)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                in_file = 0
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink()
    return Result(written, written * record, elapsed, latencies)


def wal_run(directory: Path, record: int, appenders: int, seconds: float) -> Result:
    target = directory / "wal"
    metrics = InMemoryWalMetrics()
    wal = Wal.open(target, fsync="always", metrics=metrics)
    payload = os.urandom(record)
    latencies: list[list[float]] = [[] for _ in range(appenders)]
    stop = threading.Event()
    barrier = threading.Barrier(appenders + 1)

    def worker(index: int) -> None:
        mine = latencies[index]
        barrier.wait()
        clock = time.perf_counter
        while not stop.is_set():
            t0 = clock()
            wal.append(payload).result()
            mine.append(clock() - t0)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(appenders)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    wal.shutdown(30)
    shutil.rmtree(target)
    all_lat = [x for xs in latencies for x in xs]
    return Result(len(all_lat), len(all_lat) * record, elapsed, all_lat, metrics.groups)


def server_style_run(directory: Path, record: int, appenders: int, seconds: float) -> Result:
    """``appenders`` asyncio tasks appending and awaiting acks as the server does."""
    target = directory / "wal"
    metrics = InMemoryWalMetrics()
    loops: list[asyncio.AbstractEventLoop] = []

    def settle(items: list[tuple[asyncio.Future[int], int]]) -> None:
        for ack, lsn in items:
            if not ack.done():
                ack.set_result(lsn)

    def on_durable(group: Sequence[tuple[int, object]]) -> None:
        items = [(cast("asyncio.Future[int]", tag), lsn) for lsn, tag in group]
        loops[0].call_soon_threadsafe(settle, items)

    wal = Wal.open(target, fsync="always", metrics=metrics, on_durable=on_durable)
    payload = os.urandom(record)
    latencies: list[float] = []

    async def main() -> float:
        loop = asyncio.get_running_loop()
        loops.append(loop)
        clock = time.perf_counter

        def watch(ack: asyncio.Future[int]) -> Callable[[Future[int]], None]:
            def done(fut: Future[int]) -> None:
                error = fut.exception()
                if error is not None:
                    loop.call_soon_threadsafe(ack.set_exception, error)

            return done

        async def worker(stop: float) -> None:
            while clock() < stop:
                t0 = clock()
                ack: asyncio.Future[int] = loop.create_future()
                wal.append(payload, tag=ack).add_done_callback(watch(ack))
                await ack
                latencies.append(clock() - t0)

        start = clock()
        await asyncio.gather(*(worker(start + seconds) for _ in range(appenders)))
        return clock() - start

    try:
        elapsed = asyncio.run(main())
    finally:
        wal.shutdown(30)
        shutil.rmtree(target)
    n = len(latencies)
    return Result(n, n * record, elapsed, latencies, metrics.groups)


def _merge(parts: list[Result]) -> Result:
    return Result(
        sum(p.records for p in parts),
        sum(p.payload_bytes for p in parts),
        sum(p.seconds for p in parts),
        [x for p in parts for x in p.latencies],
        sum(p.groups for p in parts),
    )


def _alternate(
    directory: Path,
    record: int,
    appenders: int,
    seconds: float,
    run: Callable[[Path, int, int, float], Result] = wal_run,
) -> tuple[Result, Result]:
    """Raw and WAL in alternating slices, so load from elsewhere hits both alike."""
    raws: list[Result] = []
    wals: list[Result] = []
    for _ in range(ROUNDS):
        raws.append(raw_loop(directory, record, appenders, seconds / ROUNDS))
        wals.append(run(directory, record, appenders, seconds / ROUNDS))
    return _merge(raws), _merge(wals)


def replay_bench(directory: Path, record: int, total: int) -> tuple[float, int]:
    """Seconds to replay ``total`` bytes of ``record``-sized records, and the count."""
    target = directory / "replay"
    payload = os.urandom(record)
    count = total // (record + FRAME_HEADER_SIZE)
    wal = Wal.open(target, fsync="never")
    futures = [wal.append(payload) for _ in range(count)]
    futures[-1].result()
    wal.shutdown(60)
    wal = Wal.open(target)  # recovery scan happens here, not timed below
    try:
        start = time.perf_counter()
        n = sum(1 for _ in wal.replay())
        elapsed = time.perf_counter() - start
    finally:
        wal.shutdown(10)
        shutil.rmtree(target)
    assert n == count
    return elapsed, n


def open_bench(directory: Path, record: int, total: int) -> float:
    """Seconds for Wal.open (recovery scan) of ``total`` bytes."""
    target = directory / "open"
    payload = os.urandom(record)
    wal = Wal.open(target, fsync="never")
    futures = [wal.append(payload) for _ in range(total // (record + FRAME_HEADER_SIZE))]
    futures[-1].result()
    wal.shutdown(60)
    start = time.perf_counter()
    wal = Wal.open(target)
    elapsed = time.perf_counter() - start
    wal.shutdown(10)
    shutil.rmtree(target)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench_wal", description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    parser.add_argument("--dir", default=None, help="directory on the disk to test")
    parser.add_argument(
        "--only",
        action="append",
        type=_config,
        metavar="KIB:APPENDERS",
        help="run only this record size and appender count (repeatable), e.g. 16:64",
    )
    parser.add_argument(
        "--kind", choices=("threads", "server"), help="run only this kind of appenders"
    )
    parser.add_argument("--no-replay", action="store_true", help="skip the replay timings")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="shoal-bench-wal-", dir=args.dir))
    try:
        print(f"# WAL benchmark in {base}, {os.cpu_count()} cores, {args.seconds:g} s per run")
        header = (
            f"{'record':>7} {'apps':>4} | {'wal rec/s':>10} {'wal MB/s':>9} "
            f"{'raw MB/s':>9} {'wal/raw':>7} | {'grp':>5} | {'wal p50':>8} {'wal p99':>8} "
            f"{'raw p50':>8} {'raw p99':>8}  (ms)"
        )
        print(header)
        print("-" * len(header))
        verdicts: list[str] = []
        configs = [("threads", r, a) for r in SIZES for a in APPENDERS]
        configs += [("server", r, a) for r in SIZES for a in APPENDERS if a > 1]
        if args.only:
            configs = [c for c in configs if (c[1], c[2]) in args.only]
        if args.kind:
            configs = [c for c in configs if c[0] == args.kind]
        server_header = False
        for mode, record, appenders in configs:
            if mode == "server" and not server_header:
                server_header = True
                print("-- server-style appenders (asyncio tasks, acks via on_durable) --")
            run = wal_run if mode == "threads" else server_style_run
            raw, wal = _alternate(base, record, appenders, args.seconds, run)
            ratio = wal.mbps / raw.mbps
            group = wal.records / max(1, wal.groups)
            print(
                f"{record // KiB:>5}Ki {appenders:>4} | {wal.rate:>10.0f} {wal.mbps:>9.1f} "
                f"{raw.mbps:>9.1f} {ratio:>7.0%} | {group:>5.1f} | {wal.pct(0.5):>8.3f} "
                f"{wal.pct(0.99):>8.3f} {raw.pct(0.5):>8.3f} {raw.pct(0.99):>8.3f}",
                flush=True,
            )
            if record == 16 * KiB and appenders == 64:
                ok = ratio >= 0.8
                verdicts.append(
                    f"64 {mode} appenders x 16 KiB: {ratio:.0%} of raw bandwidth "
                    f"(target >= 80%): {'met' if ok else 'MISSED'}"
                )
            if appenders == 1:
                limit = 2 * raw.pct(0.99)
                ok = wal.pct(0.99) <= limit
                verdicts.append(
                    f"1 appender x {record // KiB} KiB: p99 {wal.pct(0.99):.3f} ms vs "
                    f"2 x raw p99 {limit:.3f} ms: {'met' if ok else 'MISSED'}"
                )
        print()
        for line in verdicts:
            print(line)
        print()
        for record in () if args.no_replay else (1 * KiB, 16 * KiB):
            seconds, n = replay_bench(base, record, 64 * MiB)
            opened = open_bench(base, record, 64 * MiB)
            print(
                f"replay 64 MiB of {record // KiB} KiB records: {n} records in {seconds:.3f} s "
                f"({64 / seconds:.0f} MiB/s); open (recovery scan) {opened:.3f} s"
            )
        lat = sorted(_fsync_samples(base))
        print(
            f"raw 4 KiB write+fdatasync: p50 {statistics.median(lat):.3f} ms, "
            f"p99 {lat[int(0.99 * len(lat))]:.3f} ms"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


def _config(text: str) -> tuple[int, int]:
    """``16:64`` -> (16 KiB, 64 appenders)."""
    kib, sep, appenders = text.partition(":")
    try:
        value = (int(kib) * KiB, int(appenders))
    except ValueError:
        value = (0, 0)
    if not sep or value[0] not in SIZES or value[1] not in APPENDERS:
        sizes = ", ".join(str(size // KiB) for size in SIZES)
        counts = ", ".join(str(n) for n in APPENDERS)
        raise argparse.ArgumentTypeError(
            f"expected KIB:APPENDERS with KIB in {sizes} and APPENDERS in {counts}, got {text!r}"
        )
    return value


def _fsync_samples(directory: Path, n: int = 200) -> list[float]:
    path = directory / "fsync.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    block = os.urandom(4096)
    samples = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            os.write(fd, block)
            os.fdatasync(fd)
            samples.append((time.perf_counter() - t0) * 1000.0)
    finally:
        os.close(fd)
        path.unlink()
    return samples


if __name__ == "__main__":
    raise SystemExit(main())
