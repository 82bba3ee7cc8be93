"""Child process for the crash test: append from several threads under group
commit and print ``<lsn> <thread> <seq>`` for each acknowledged record, until
killed. Usage: ``python crash_writer.py DIR RUN THREADS``."""

from __future__ import annotations

import hashlib
import sys
import threading

from shoal.wal import Wal

SEGMENT_BYTES = 64 * 1024


def payload_of(run: int, thread: int, seq: int) -> bytes:
    """The payload a given (run, thread, seq) appends: self-describing, varied size."""
    head = f"{run}:{thread}:{seq}:".encode()
    size = (seq * 7919 + thread * 104729) % 3000
    body = hashlib.sha256(head).digest() * (size // 32 + 1)
    return head + body[:size]


def main() -> None:
    directory, run, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    wal = Wal.open(directory, segment_bytes=SEGMENT_BYTES)
    lock = threading.Lock()
    out = sys.stdout
    out.write("ready\n")
    out.flush()

    def worker(thread: int) -> None:
        seq = 0
        while True:
            lsn = wal.append(payload_of(run, thread, seq)).result()
            with lock:
                out.write(f"{lsn} {thread} {seq}\n")
                out.flush()
            seq += 1

    workers = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


if __name__ == "__main__":
    main()
