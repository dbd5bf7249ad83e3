"""The API key file: one ``<sha256 hex of a key> [label]`` a line, ``#`` starting a comment.

Standard library only: ``python -m app`` checks the file before it starts any worker, in a
process that must stay small.
"""

import re
from dataclasses import dataclass
from pathlib import Path

#: A label is a metrics label value and a log field: short and plain.
_LABEL = re.compile(r"[A-Za-z0-9._:@-]{1,64}")
_HASH = re.compile(r"[0-9a-fA-F]{64}")


class KeyFileError(ValueError):
    """The key file cannot be read, or a line of it is not ``<sha256 hex> [label]``."""


@dataclass(frozen=True)
class Key:
    """One stored key: the SHA-256 digest of the key, and the name logs and metrics give it."""

    digest: bytes
    label: str


def parse_keys(text: str, source: str = "the key file") -> tuple[Key, ...]:
    """The keys of a key file's text; a line that is not ``<sha256 hex> [label]`` is refused
    with its number (its content is never quoted: it may hold a key pasted by mistake)."""
    keys: list[Key] = []
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
        keys.append(Key(bytes.fromhex(fields[0]), label))
    return tuple(keys)


def read_keys(path: Path) -> tuple[Key, ...]:
    """The keys of the file at ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise KeyFileError(f"{path}: cannot be read: {error}") from None
    return parse_keys(text, str(path))
