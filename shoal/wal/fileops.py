"""The file operations the WAL writer performs, behind a small protocol.

:class:`OsFileOps` is the real thing. Tests pass a wrapper that fails chosen
operations (short writes, ENOSPC, EIO on fsync) to check what the writer does
then. Reading (recovery, replay) uses ordinary file reads and is not routed
through here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol

Buffer = bytes | bytearray | memoryview


class FileOps(Protocol):
    """Every operation that changes WAL files on disk."""

    def open(self, path: str, flags: int, mode: int = 0o644) -> int: ...

    def pwritev(self, fd: int, buffers: Sequence[Buffer], offset: int) -> int:
        """Write ``buffers`` at ``offset``; may write fewer bytes than given."""
        ...

    def fdatasync(self, fd: int) -> None: ...

    def ftruncate(self, fd: int, length: int) -> None: ...

    def close(self, fd: int) -> None: ...

    def rename(self, src: str, dst: str) -> None: ...

    def unlink(self, path: str) -> None: ...

    def fsync_dir(self, path: str) -> None: ...


class OsFileOps:
    """:class:`FileOps` on the operating system's calls."""

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        return os.open(path, flags | os.O_CLOEXEC, mode)

    def pwritev(self, fd: int, buffers: Sequence[Buffer], offset: int) -> int:
        return os.pwritev(fd, buffers, offset)

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)

    def close(self, fd: int) -> None:
        os.close(fd)

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


OS_FILE_OPS = OsFileOps()
