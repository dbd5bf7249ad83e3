"""The API key file: one ``<sha256 hex of a key> [label]`` a line, ``#`` starting a comment.

Standard library only: ``python -m app`` checks the file before it starts any worker, in a
process that must stay small.

What a file must be:

- a regular file (a FIFO, a device such as ``/dev/zero``, a directory are refused without
  being read: opened without blocking, looked at with ``fstat`` first), of at most
  ``MAX_FILE_BYTES`` (16 MiB), counted while it is read, not taken from ``stat``;
- UTF-8, each line a hash and an optional label;
- at least one key, for ``python -m app``: a file of none (empty, or comments only) would
  lock every client out, so the start is refused (exit status 2). ``parse_keys`` itself returns
  no keys for it; ``app.access.ApiKeys`` built on it warns that everyone is locked out, and a
  running service that finds its file so keeps the keys it has, with a warning in the log (a
  file rewritten in place is empty for a moment; to shut everyone out, write the hash of a key
  nobody holds, or stop the service);
- each hash once: the same hash again with the same label is harmless and read once; with
  another label it is refused, with both line numbers (a key has one name in logs and metrics).
"""

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from tensor_ops_wire.files import file_kind

#: A label is a metrics label value and a log field: short and plain.
_LABEL = re.compile(r"[A-Za-z0-9._:@-]{1,64}")
_HASH = re.compile(r"[0-9a-fA-F]{64}")
#: The most a key file (or a TLS file the settings name) may hold: a million keys are 70 MB of
#: lines; anything near this is a mistake (or a device) rather than a list of keys.
MAX_FILE_BYTES = 16 << 20
_CHUNK = 1 << 16


class KeyFileError(ValueError):
    """The key file cannot be read, or a line of it is not ``<sha256 hex> [label]``."""


@dataclass(frozen=True)
class Key:
    """One stored key: the SHA-256 digest of the key, and the name logs and metrics give it."""

    digest: bytes
    label: str


def parse_keys(text: str, source: str = "the key file") -> tuple[Key, ...]:
    """The keys of a key file's text; a line that is not ``<sha256 hex> [label]`` is refused
    with its number (its content is never quoted: it may hold a key pasted by mistake), as is a
    hash given twice under different labels. A text of no key gives an empty tuple."""
    keys: list[Key] = []
    seen: dict[bytes, tuple[int, str]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) > 2 or not _HASH.fullmatch(fields[0]):
            raise KeyFileError(
                f"{source}, line {number}: expected '<sha256 of the key, 64 hex digits> [label]'"
                ' (make one with: printf %s "$KEY" | sha256sum)'
            )
        label = fields[1] if len(fields) == 2 else f"sha256:{fields[0][:8].lower()}"
        if not _LABEL.fullmatch(label):
            raise KeyFileError(
                f"{source}, line {number}: a label is 1 to 64 of A-Z a-z 0-9 . _ : @ -"
            )
        digest = bytes.fromhex(fields[0])
        if digest in seen:
            first, first_label = seen[digest]
            if first_label != label:
                raise KeyFileError(
                    f"{source}, line {number}: the same key hash as line {first}, under another "
                    "label; a key has one label (remove one of the lines)"
                )
            continue
        seen[digest] = (number, label)
        keys.append(Key(digest, label))
    return tuple(keys)


def regular_file_problem(path: Path, limit: int = MAX_FILE_BYTES) -> str | None:
    """Why ``path`` cannot be read as a settings file (missing, unreadable, not a regular file,
    larger than ``limit``), in words; None when it can. Nothing is read, nothing blocks."""
    try:
        descriptor = _open(path)
    except OSError as error:
        return f"cannot be read: {error.strerror or error}"
    try:
        info = os.fstat(descriptor)
    except OSError as error:
        return f"cannot be read: {error.strerror or error}"
    finally:
        os.close(descriptor)
    if not stat.S_ISREG(info.st_mode):
        return f"is {file_kind(info.st_mode)}, not a regular file"
    if info.st_size > limit:
        return f"holds {info.st_size} bytes, more than the {limit} a file here may hold"
    return None


def _open(path: Path) -> int:
    # O_NONBLOCK: opening a FIFO without a writer would otherwise wait for one, forever.
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
    return os.open(path, flags)


def read_regular(path: Path, limit: int = MAX_FILE_BYTES) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file at ``path`` (at most ``limit``, counted as they are read)
    and the ``fstat`` of the very file read; ``KeyFileError`` for anything else."""
    try:
        descriptor = _open(path)
    except OSError as error:
        raise KeyFileError(f"{path}: cannot be read: {error.strerror or error}") from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise KeyFileError(f"{path}: is {file_kind(info.st_mode)}, not a regular file")
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(descriptor, _CHUNK)
            if not chunk:
                break
            total += len(chunk)
            if total > limit:
                raise KeyFileError(f"{path}: holds more than the {limit} bytes a key file may")
            chunks.append(chunk)
    except OSError as error:
        raise KeyFileError(f"{path}: cannot be read: {error.strerror or error}") from None
    finally:
        os.close(descriptor)
    return b"".join(chunks), info


def keys_of(raw: bytes, path: Path) -> tuple[Key, ...]:
    """The keys of a key file's bytes (read from ``path``)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise KeyFileError(f"{path}: cannot be read: {error}") from None
    return parse_keys(text, str(path))


def read_keys(path: Path) -> tuple[Key, ...]:
    """The keys of the file at ``path`` (a regular file of at most ``MAX_FILE_BYTES``)."""
    return keys_of(read_regular(path)[0], path)


def no_keys_message(path: Path) -> str:
    """What is said of a key file that holds no key."""
    return (
        f"{path}: holds no key (empty, or comments only), so every request that needs one "
        "would be refused; add a line '<sha256 of the key> [label]'"
    )
