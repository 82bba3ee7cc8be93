"""Where the tables live: under the data directory, in another directory, or in a bucket.

Setting ``storage_url`` names the root that holds ``<tenant>/<table>/`` Delta tables:
empty is ``<data_dir>/tenants`` (as before), ``file:///path`` another local or mounted
directory, ``s3://bucket/prefix`` an S3-compatible bucket. Everything goes through
delta-rs (the Delta log) and pyarrow's filesystems (data, coverage and series files);
credentials and region come from the standard AWS variables and profiles, read by
those libraries themselves, so shoal never holds a secret, and nothing here prints one.

delta-rs 1.6 commits on S3 with a conditional put (``If-None-Match: *`` on the new log
entry): two writers racing for one version cannot both win, without a lock table.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from pathlib import Path
from urllib.parse import urlsplit

from pyarrow import fs as pafs

from shoal.errors import StorageError

SECRET_VARIABLES = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")


def redact(text: str) -> str:
    """``text`` with the values of the AWS credential variables blanked out."""
    for name in SECRET_VARIABLES:
        value = os.environ.get(name, "")
        if len(value) >= 4 and value in text:
            text = text.replace(value, "***")
    return text


class RedactingFilter(logging.Filter):
    """A logging filter that blanks credentials out of every record's text (a library's
    error message could quote a request it made); installed by the command line."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if record.exc_info and record.exc_info[1] is not None:
            exc_text = logging.Formatter().formatException(record.exc_info)
            if redact(exc_text) != exc_text:
                record.exc_info = None
                clean += "\n" + redact(exc_text)
        if clean != message:
            record.msg, record.args = clean, None
        return True


@dataclasses.dataclass(frozen=True)
class StorageLocation:
    """The root of every tenant's tables (see the module docstring)."""

    kind: str
    """``local`` (a directory) or ``s3``."""
    root: str
    """The directory (absolute), or ``bucket/prefix`` without a trailing slash."""
    endpoint: str = ""
    timeout_s: float = 30.0
    region: str = ""
    """Empty: from ``AWS_REGION`` / ``AWS_DEFAULT_REGION`` (else ``us-east-1``)."""

    @classmethod
    def parse(
        cls, url: str, data_dir: str | os.PathLike[str], endpoint: str = "", timeout_s: float = 30
    ) -> StorageLocation:
        """The location of setting ``storage_url`` (already checked by the settings)."""
        text = url.strip()
        if not text:
            return cls("local", str(Path(data_dir).absolute() / "tenants"))
        if text.startswith("file://"):
            return cls("local", str(Path(text[len("file://") :]).absolute()))
        if text.startswith("s3://"):
            root = text[len("s3://") :].strip("/")
            if not root:
                raise StorageError("storage_url names no bucket: s3://bucket/prefix")
            return cls("s3", root, endpoint.strip(), timeout_s)
        raise StorageError("storage_url is neither s3://bucket/prefix nor file:///path")

    @classmethod
    def local(cls, root: str | os.PathLike[str]) -> StorageLocation:
        return cls("local", str(Path(root).absolute()))

    @property
    def is_local(self) -> bool:
        return self.kind == "local"

    @property
    def url(self) -> str:
        """The root as a URL (no secret is ever part of it)."""
        return f"file://{self.root}" if self.is_local else f"s3://{self.root}"

    def __str__(self) -> str:
        return self.root if self.is_local else self.url

    def join(self, *parts: str) -> str:
        """A path under the root, in the filesystem's own spelling (no scheme)."""
        return "/".join([self.root, *parts])

    def uri(self, *parts: str) -> str:
        """A path under the root as delta-rs and readers name it (a local path, or s3://)."""
        path = self.join(*parts)
        return path if self.is_local else f"s3://{path}"

    def strip(self, uri: str) -> str:
        """The filesystem path of a :meth:`uri`."""
        return uri[len("s3://") :] if uri.startswith("s3://") else uri

    def __reduce__(self) -> tuple[type[StorageLocation], tuple[str, str, str, float, str]]:
        """Pickled (shipped to a Spark task in another process or on another host) with
        the endpoint and region this process uses, never a credential: the task reads
        those from its own environment or profile, as the libraries do."""
        return (
            StorageLocation,
            (self.kind, self.root, self._endpoint(), self.timeout_s, self._region()),
        )

    def _endpoint(self) -> str:
        return "" if self.is_local else self.endpoint or os.environ.get("AWS_ENDPOINT_URL", "")

    def _region(self) -> str:
        if self.is_local:
            return ""
        env = os.environ
        return self.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION", "")

    def input(self, name: str) -> tuple[pafs.FileSystem, str]:
        """The filesystem and path of an input file named by a local path or an
        ``s3://bucket/key`` URL (a bucket reached like this location's, same endpoint)."""
        if name.startswith("s3://"):
            bucket = name[len("s3://") :].split("/", 1)[0]
            other = dataclasses.replace(self, kind="s3", root=bucket, endpoint=self._endpoint())
            return other.filesystem, name[len("s3://") :]
        if "://" in name and not name.startswith("file://"):
            raise StorageError(f"{name}: an input is a local path or an s3:// URL")
        path = name[len("file://") :] if name.startswith("file://") else name
        return pafs.LocalFileSystem(), str(Path(path).absolute())

    def storage_options(self) -> dict[str, str]:
        """delta-rs's options: the endpoint and timeouts (credentials from the environment)."""
        if self.is_local:
            return {}
        options = {"timeout": f"{max(1, round(self.timeout_s))}s"}
        endpoint = self._endpoint()
        if endpoint:
            options["AWS_ENDPOINT_URL"] = endpoint
            if endpoint.startswith("http://"):
                options["AWS_ALLOW_HTTP"] = "true"
        if self.region or not self._region():
            options["AWS_REGION"] = self.region or "us-east-1"
        return options

    @functools.cached_property
    def filesystem(self) -> pafs.FileSystem:
        """pyarrow's filesystem of the root (credentials: the AWS SDK's default chain)."""
        if self.is_local:
            return pafs.LocalFileSystem()
        kwargs: dict[str, object] = {
            "connect_timeout": min(self.timeout_s, 10.0),
            "request_timeout": self.timeout_s,
            "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=3),
        }
        endpoint = self._endpoint()
        if endpoint:
            parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
            kwargs["endpoint_override"] = parts.netloc
            kwargs["scheme"] = parts.scheme or "https"
        kwargs["region"] = self._region() or "us-east-1"
        try:
            return pafs.S3FileSystem(**kwargs)
        except Exception as exc:  # pyarrow's message names options, never their values
            raise StorageError(f"cannot reach object storage {self.url}: {exc}") from None
