"""``python -m loadtest <benchmark>``: shoal's load generators.

python -m loadtest ingest --duration 60 --workers 4 --protocol http
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="bench", required=True, metavar="BENCHMARK")
    from loadtest import ingest

    ingest.add_arguments(sub.add_parser("ingest", help="OTLP ingest throughput and ack latency"))
    args = parser.parse_args(argv)
    if args.bench == "ingest":
        return ingest.main(args)
    parser.error(f"unknown benchmark {args.bench}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
