"""The files of one table directory, on local disk or in a bucket, by relative path.

Everything a table keeps beside its Delta log (data files, coverage, series summaries)
is written and read here. On local disk the rules of docs/storage.md hold exactly:
data and coverage files are fsynced, and so is every directory they are created in
(delta-rs's local store does not). On object storage a PUT is durable and atomic once
answered, and there are no directories to create or sync: those steps do nothing.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from shoal.storage.durable import fsync_dir, fsync_file, make_dirs_durable
from shoal.storage.location import StorageLocation


class Place:
    """One table's directory: ``<root>/<tenant>/<table>`` of a :class:`StorageLocation`."""

    def __init__(self, location: StorageLocation, *parts: str) -> None:
        self.location = location
        self.parts = parts
        self.local = location.is_local
        self.base = location.join(*parts)
        """The directory in the filesystem's own spelling."""
        self.uri = location.uri(*parts)
        """The directory as delta-rs (and a reader's ScanFile) names it."""
        self.fs = location.filesystem
        self.storage_options = location.storage_options()
        self.written: Callable[[str, pa.Buffer], None] | None = None
        """Told of each data file uploaded to a bucket, by its :meth:`full` name and
        bytes (the server's read cache keeps a copy); never pickled."""

    def __repr__(self) -> str:
        return f"Place({self.uri})"

    def __reduce__(self) -> tuple[type[Place], tuple[StorageLocation | str, ...]]:
        """Pickled as its location and parts (a Spark task opens its own filesystem)."""
        return (Place, (self.location, *self.parts))

    @property
    def root(self) -> Path:
        """The directory on local disk (only for a local place)."""
        if not self.local:
            raise ValueError(f"{self.uri} is not on local disk")
        return Path(self.base)

    def path(self, rel: str | os.PathLike[str]) -> str:
        """A file's path in the filesystem (on local disk an absolute path stays as it is)."""
        text = os.fspath(rel)
        if self.local and os.path.isabs(text):
            return text
        return f"{self.base}/{text}"

    def full(self, rel: str) -> str:
        """What a :class:`~shoal.storage.types.ScanFile` names a file by."""
        return os.path.join(self.base, rel) if self.local else f"{self.uri}/{rel}"

    def rel(self, full: str) -> str:
        """The relative path of a :meth:`full` name."""
        if self.local:
            return os.path.relpath(full, self.base)
        prefix = self.uri + "/"
        if not full.startswith(prefix):
            raise ValueError(f"{full} is not under {self.uri}")
        return full[len(prefix) :]

    # -- reading ---------------------------------------------------------------------

    def exists(self, rel: str) -> bool:
        if self.local:
            return os.path.exists(self.path(rel))
        return bool(self.fs.get_file_info(self.path(rel)).type != pafs.FileType.NotFound)

    def is_dir(self, rel: str = "") -> bool:
        path = self.path(rel) if rel else self.base
        if self.local:
            return os.path.isdir(path)
        return bool(self.fs.get_file_info(path).type == pafs.FileType.Directory)

    def read(self, rel: str) -> bytes:
        """A file's bytes; FileNotFoundError when it does not exist."""
        if self.local:
            return Path(self.path(rel)).read_bytes()
        try:
            with self.fs.open_input_stream(self.path(rel)) as fh:
                return bytes(fh.read())
        except FileNotFoundError:
            raise
        except OSError as exc:
            if "not found" in str(exc).lower() or "NoSuchKey" in str(exc):
                raise FileNotFoundError(self.path(rel)) from None
            raise

    def parquet(self, rel: str | os.PathLike[str]) -> pq.ParquetFile:
        """A Parquet file of the place, opened for reading."""
        if self.local:
            return pq.ParquetFile(self.path(rel))
        return pq.ParquetFile(self.fs.open_input_file(self.path(rel)))

    def open_input(self, rel: str | os.PathLike[str]) -> pa.NativeFile:
        """A file opened to be read whole: on local disk the file itself; in a bucket its
        bytes, fetched with one GET (cheaper than a range request per column chunk)."""
        if self.local:
            return pa.OSFile(self.path(rel), "rb")
        return pa.BufferReader(self.read(os.fspath(rel)))

    def read_table(self, rel: str, columns: list[str] | None = None) -> pa.Table:
        return self.parquet(rel).read(columns=columns)

    def size(self, rel: str) -> int:
        if self.local:
            return os.path.getsize(self.path(rel))
        return int(self.fs.get_file_info(self.path(rel)).size)

    def listdir(self, rel_dir: str) -> list[tuple[str, float]]:
        """``(name, mtime in seconds)`` of the files directly in ``rel_dir`` (none if absent)."""
        if self.local:
            if not os.path.isdir(self.path(rel_dir)):
                return []
            return [(e.name, e.stat().st_mtime) for e in os.scandir(self.path(rel_dir))]
        selector = pafs.FileSelector(self.path(rel_dir), allow_not_found=True)
        return [
            (info.base_name, info.mtime.timestamp() if info.mtime is not None else 0.0)
            for info in self.fs.get_file_info(selector)
            if info.type == pafs.FileType.File
        ]

    # -- writing ---------------------------------------------------------------------

    def ensure_dir(self, rel_dir: str) -> None:
        """Create a directory (and fsync what was created); nothing to do in a bucket."""
        if self.local:
            make_dirs_durable(Path(self.path(rel_dir)), Path(self.base))

    def sync_dir(self, rel_dir: str) -> None:
        """fsync a directory's entries; nothing to do in a bucket."""
        if self.local:
            fsync_dir(self.path(rel_dir))

    def write_parquet(
        self, rel: str, table: pa.Table, *, keep: bool = False, **options: Any
    ) -> int:
        """Write ``table`` as a Parquet file (fsynced on local disk); returns its size.

        In a bucket the file is encoded in memory and sent with one PUT (or a
        multipart upload for a large one), which lands whole or not at all; with
        ``keep`` (a data file) its bytes then go to :attr:`written`."""
        if self.local:
            pq.write_table(table, self.path(rel), **options)
            fsync_file(self.path(rel))
            return os.path.getsize(self.path(rel))
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, **options)
        data = sink.getvalue()
        self._put(rel, data)
        if keep and self.written is not None:
            self.written(self.full(rel), data)
        return int(data.size)

    def write(
        self,
        rel: str,
        data: bytes,
        *,
        fsync: bool = True,
        halfway: Callable[[], None] | None = None,
    ) -> None:
        """Write a file in place (fsynced unless told not to); ``halfway`` runs when half
        of it is written on local disk (a crash point of the tests)."""
        if not self.local:
            self._put(rel, data)
            return
        half = len(data) // 2
        with open(self.path(rel), "wb") as fh:
            fh.write(data[:half])
            fh.flush()
            if halfway is not None:
                halfway()
            fh.write(data[half:])
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())

    def replace(self, rel: str, data: bytes) -> None:
        """Write a file whole or not at all (derived data: no fsync)."""
        if not self.local:
            self._put(rel, data)
            return
        path = Path(self.path(rel))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)

    def copy_in(self, source: str | os.PathLike[str], rel: str) -> int:
        """Copy a local file into the place byte for byte (fsynced locally); its size."""
        if self.local:
            target = self.path(rel)
            shutil.copyfile(source, target)
            fsync_file(target)
            fsync_dir(os.path.dirname(target))
            return os.path.getsize(target)
        with open(source, "rb") as src, self.fs.open_output_stream(self.path(rel)) as out:
            shutil.copyfileobj(src, out, 8 << 20)
        return os.path.getsize(source)

    def open_output(self, rel: str) -> pa.NativeFile:
        """A new file written as a stream (its directory created first on local disk);
        in a bucket an upload that lands whole when the stream is closed. Call
        :meth:`seal` after closing it."""
        if self.local:
            self.ensure_dir(rel.rsplit("/", 1)[0] if "/" in rel else "")
            return pa.OSFile(self.path(rel), "wb")
        return self.fs.open_output_stream(self.path(rel))

    def seal(self, rel: str) -> None:
        """Make a file written with :meth:`open_output` durable: fsync it and its
        directory on local disk; in a bucket the closed upload already is."""
        if self.local:
            fsync_file(self.path(rel))
            fsync_dir(os.path.dirname(self.path(rel)))

    def delete(self, rel: str) -> None:
        """Delete a file; FileNotFoundError when it does not exist."""
        if self.local:
            os.unlink(self.path(rel))
            return
        if not self.exists(rel):
            raise FileNotFoundError(self.path(rel))
        self.fs.delete_file(self.path(rel))

    def _put(self, rel: str, data: bytes | pa.Buffer) -> None:
        with self.fs.open_output_stream(self.path(rel)) as out:
            out.write(data)
