"""An S3-compatible server on loopback for the tests and benchmarks: moto's server mode.

``python -m loadtest.s3server --port N --bucket NAME`` serves moto's S3 (from PyPI,
``moto[server]``) with three additions in front of it, as WSGI middleware:

* conditional writes are atomic: moto checks ``If-None-Match: *`` / ``If-Match`` and
  then writes, two steps another request can fall between; here a lock makes every
  conditional PUT one step, as S3 does (delta-rs commits with ``If-None-Match: *``);
* request counts per method (``GET /_shoal/stats``), what a benchmark reports;
* a fault mode (``POST /_shoal/fault`` with JSON ``{"status": 503, "delay_s": 0,
  "methods": ["PUT"], "keys": "substring"}``; ``{}`` clears it): matching requests wait
  ``delay_s`` and, with a ``status``, are answered with that S3 error instead of being
  served (403 is ``InvalidAccessKeyId``, what refused credentials get); with
  ``"after": true`` they are served first and their answer held back ``delay_s`` (a
  write that landed while its client timed out or died waiting). An unreachable
  store is the process stopped (SIGSTOP) and resumed: its state stays.

:class:`S3Server` starts it as a child process and talks to its control paths.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ACCESS_KEY = "shoal-test-key"
SECRET_KEY = "shoal-test-secret-do-not-log"
"""The test credentials: the secret is looked for in logs, errors and /metrics."""

_ERRORS = {
    403: ("InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist."),
    500: ("InternalError", "We encountered an internal error. Please try again."),
    503: ("SlowDown", "Please reduce your request rate."),
}

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
App = Callable[[Environ, StartResponse], Iterable[bytes]]


class Front:
    """The middleware of the module docstring."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.write_lock = threading.Lock()
        self.counts: collections.Counter[str] = collections.Counter()
        self.count_lock = threading.Lock()
        self.fault: dict[str, Any] = {}

    def __call__(self, environ: Environ, start: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD", "GET")
        if path.startswith("/_shoal/"):
            return self._control(path, method, environ, start)
        fault = self.fault
        if fault and self._matches(fault, method, path) and fault.get("after"):
            served = list(self._serve(method, environ, start))  # done; the answer comes late
            time.sleep(float(fault.get("delay_s", 0)))
            return served
        if fault and self._matches(fault, method, path):
            time.sleep(float(fault.get("delay_s", 0)))
            status = int(fault.get("status", 0))
            if status:
                with self.count_lock:
                    self.counts["faulted"] += 1
                code, message = _ERRORS.get(status, ("InternalError", "injected"))
                body = (
                    f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                    f"<Message>{message}</Message></Error>"
                ).encode()
                start(f"{status} Error", [("Content-Type", "application/xml")])
                return [body]
        return self._serve(method, environ, start)

    def _serve(self, method: str, environ: Environ, start: StartResponse) -> Iterable[bytes]:
        with self.count_lock:
            self.counts[method] += 1
        conditional = method == "PUT" and (
            "HTTP_IF_NONE_MATCH" in environ or "HTTP_IF_MATCH" in environ
        )
        if not conditional:
            return self.app(environ, start)
        with self.write_lock:
            return list(self.app(environ, start))

    @staticmethod
    def _matches(fault: dict[str, Any], method: str, path: str) -> bool:
        methods = fault.get("methods")
        if methods and method not in methods:
            return False
        keys = fault.get("keys")
        return not keys or keys in path

    def _control(
        self, path: str, method: str, environ: Environ, start: StartResponse
    ) -> Iterable[bytes]:
        if path == "/_shoal/stats":
            with self.count_lock:
                body = json.dumps(dict(self.counts)).encode()
        elif path == "/_shoal/fault" and method == "POST":
            size = int(environ.get("CONTENT_LENGTH") or 0)
            self.fault = json.loads(environ["wsgi.input"].read(size) or b"{}")
            body = b"{}"
        elif path == "/_shoal/reset" and method == "POST":
            with self.count_lock:
                self.counts.clear()
            body = b"{}"
        else:
            start("404 Not Found", [("Content-Type", "text/plain")])
            return [b"no such control path"]
        start("200 OK", [("Content-Type", "application/json")])
        return [body]


def serve(host: str, port: int, buckets: list[str]) -> None:
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    front = Front(DomainDispatcherApplication(create_backend_app))
    server = make_server(host, port, front, threaded=True, request_handler=MotoRequestHandler)
    endpoint = f"http://{host}:{server.server_port}"
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for bucket in buckets:
        client.create_bucket(Bucket=bucket)
    with front.count_lock:
        front.counts.clear()
    print(f"listening {server.server_port}", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    server.shutdown()


class S3Server:
    """The server above as a child process (see the module docstring)."""

    def __init__(self, port: int, buckets: Iterable[str] = ("shoal",), log: Path | None = None):
        self.port = port
        self.buckets = list(buckets)
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The standard AWS variables a client of this server needs."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def start(self, timeout: float = 60.0) -> S3Server:
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL
        args = [sys.executable, "-m", "loadtest.s3server", "--port", str(self.port)]
        for bucket in self.buckets:
            args += ["--bucket", bucket]
        root = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=out, env=env)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = b""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith(b"listening") or self.proc.poll() is not None:
                break
        if not line.startswith(b"listening"):
            self.stop()
            raise RuntimeError(f"the S3 server did not start: {line!r}")
        return self

    def _post(self, path: str, payload: dict[str, Any]) -> None:
        request = urllib.request.Request(
            self.endpoint + path, data=json.dumps(payload).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            resp.read()

    def fault(self, **fault: Any) -> None:
        """Set the fault mode (no arguments clears it)."""
        self._post("/_shoal/fault", fault)

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(self.endpoint + "/_shoal/stats", timeout=10) as resp:
            return dict(json.loads(resp.read()))

    def reset_stats(self) -> None:
        self._post("/_shoal/reset", {})

    def pause(self) -> None:
        """Unreachable: the process stops answering (its connections hang)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--bucket", action="append", default=[])
    args = parser.parse_args(argv)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    serve(args.host, args.port, args.bucket or ["shoal"])


if __name__ == "__main__":
    main()
