"""Whether this process is one of several workers of one service, however they were started.

A shared memory region is registered with one process: when several serve the same clients,
a request may reach another, which would not know the region (or know another client's region
of the same name). ``TENSOR_OPS_WORKERS`` says how many ``python -m app`` starts, but
``uvicorn --workers``, gunicorn and other supervisors start workers the settings never hear of.
What all of them share is the listening socket: the supervisor binds it and each worker
inherits it. So each process takes a shared lock on a file named after each socket it was
handed at start-up (its inode: the same for every process that holds it) and keeps it for its
life; a process that can turn its lock exclusive, without waiting, is the only one holding it.
A process started alone binds its socket after start-up (uvicorn binds in the serving process
then), holds none then, and is alone. Two signals more, for supervisors that start workers
some other way: ``multiprocessing``'s parent (uvicorn's ``--workers`` and ``--reload`` spawn
them so) and the settings' count.
"""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing
import os
import socket
import tempfile
from pathlib import Path


def _inherited_sockets() -> list[int]:
    """The inodes of the TCP sockets this process holds bound and not connected (listening,
    or about to): those a supervisor handed it."""
    inodes: list[int] = []
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
            if not target.startswith("socket:["):
                continue
            duplicate = os.dup(int(name))
        except (OSError, ValueError):
            continue
        try:
            sock = socket.socket(fileno=duplicate)
        except OSError:
            os.close(duplicate)
            continue
        with sock:
            try:
                if sock.family not in (socket.AF_INET, socket.AF_INET6, socket.AF_UNIX):
                    continue
                if sock.type != socket.SOCK_STREAM or not sock.getsockname():
                    continue
                try:
                    sock.getpeername()
                    continue  # a connection, not a listener
                except OSError:
                    pass
            except OSError:
                continue
            inodes.append(int(target[len("socket:[") : -1]))
    return inodes


class Siblings:
    """This process's locks on its inherited listening sockets (``Siblings.claim`` at
    start-up), and the test of whether another process holds one of them too."""

    def __init__(self, workers: int, directory: Path | None = None) -> None:
        self.workers = workers
        self.directory = directory or Path(tempfile.gettempdir())
        self._locks: list[int] = []

    def claim(self) -> None:
        """Take a shared lock for each inherited listening socket (once, at start-up)."""
        for inode in _inherited_sockets():
            path = self.directory / f"tensor-ops-listener-{inode}.lock"
            try:
                descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:
                continue
            try:
                fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                os.close(descriptor)
                continue
            self._locks.append(descriptor)

    def reason(self) -> str | None:
        """Why this process is one of several workers (None: it is alone)."""
        if self.workers > 1:
            return f"TENSOR_OPS_WORKERS = {self.workers}"
        if multiprocessing.parent_process() is not None:
            return "this process was started by a supervisor's multiprocessing (uvicorn --workers)"
        for descriptor in self._locks:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                with contextlib.suppress(OSError):
                    fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return "another process serves the same listening socket (several workers)"
            fcntl.flock(descriptor, fcntl.LOCK_SH)
        return None

    def close(self) -> None:
        for descriptor in self._locks:
            with contextlib.suppress(OSError):
                os.close(descriptor)
        self._locks.clear()
