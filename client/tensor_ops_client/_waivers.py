"""Waivers: the known issues a plugin team lives with, so a verify run gates on regressions.

A TOML file of ``[[waiver]]`` tables (shared/api.md section 10), each with ``reason``
(required) and any of ``op``, ``dtype`` (NumPy's name, or any name the service takes),
``cause`` (a cause of ``tensor_ops_wire.verdict.CAUSES``) and ``version``; a key left out
matches anything. A case not equal whose every mismatched element is matched (its op, element
type, version and cause) is waived; a wrong shape, type or output name is never waived.
"""

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensor_ops_client._verdict import Verdict
from tensor_ops_wire.dtypes import UnknownDTypeError, dtype_from_name, element_type_of
from tensor_ops_wire.verdict import CAUSES

_KEYS = frozenset({"reason", "op", "dtype", "cause", "version"})
#: The largest waiver file read (a list of known issues, not a data set).
WAIVER_FILE_LIMIT = 1 << 20


class WaiverError(ValueError):
    """A waiver file that cannot be used; the message names the entry and key."""


@dataclass
class Waiver:
    """One known issue, and how many mismatched elements it matched."""

    reason: str
    op: str | None = None
    dtype: str | None = None
    cause: str | None = None
    version: str | None = None
    matched: int = 0

    def matches(self, op: str, dtypes: tuple[str, ...], version: str | None, cause: str) -> bool:
        return (
            (self.op is None or self.op == op)
            and (self.dtype is None or self.dtype in dtypes)
            and (self.version is None or self.version == version)
            and (self.cause is None or self.cause == cause)
        )

    def words(self) -> str:
        """The waiver as the report lists a stale one: its keys, then its reason."""
        keys = [
            f"{key}={value}"
            for key, value in (
                ("op", self.op),
                ("dtype", self.dtype),
                ("cause", self.cause),
                ("version", self.version),
            )
            if value is not None
        ]
        return f"{' '.join(keys) or 'any case'}: {self.reason}"


def read_waivers(path: Path) -> list[Waiver]:
    """The waivers of a TOML file; ``WaiverError`` saying which entry and key is wrong."""
    try:
        text = path.read_bytes()[: WAIVER_FILE_LIMIT + 1]
    except OSError as error:
        raise WaiverError(f"{path}: {error.strerror or error}") from None
    if len(text) > WAIVER_FILE_LIMIT:
        raise WaiverError(f"{path}: larger than {WAIVER_FILE_LIMIT} bytes")
    try:
        document = tomllib.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise WaiverError(f"{path}: not TOML: {error}") from None
    unknown = sorted(set(document) - {"waiver"})
    if unknown:
        raise WaiverError(f"{path}: {unknown[0]!r} is no table of a waiver file; use [[waiver]]")
    entries = document.get("waiver", [])
    if not isinstance(entries, list):
        raise WaiverError(f"{path}: waiver must be an array of tables ([[waiver]])")
    return [_waiver(entry, f"{path}: waiver {number}") for number, entry in enumerate(entries, 1)]


def _waiver(entry: Any, where: str) -> Waiver:
    if not isinstance(entry, dict):
        raise WaiverError(f"{where}: must be a table")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise WaiverError(f"{where}: {unknown[0]!r} is no key; keys: {', '.join(sorted(_KEYS))}")
    for key, value in entry.items():
        if key == "version" and isinstance(value, int) and not isinstance(value, bool):
            entry[key] = str(value)
        elif not isinstance(value, str):
            raise WaiverError(f"{where}: {key} must be a string")
    reason = entry.get("reason", "").strip()
    if not reason:
        raise WaiverError(f"{where}: reason is required (why the issue is known)")
    cause = entry.get("cause")
    # ignored_<input>: tensor-ops conform's cause of a run-time input the device ignored.
    if cause is not None and cause not in CAUSES and not cause.startswith("ignored_"):
        raise WaiverError(f"{where}: cause {cause!r} is none of {', '.join(CAUSES)}")
    dtype = entry.get("dtype")
    if dtype is not None:
        try:
            dtype = element_type_of(dtype_from_name(dtype)).numpy
        except UnknownDTypeError as error:
            raise WaiverError(f"{where}: dtype: {error}") from None
    return Waiver(reason, entry.get("op"), dtype, cause, entry.get("version"))


def waive(
    waivers: list[Waiver], op: str, dtype: str, version: str | None, verdict: Verdict
) -> list[str] | None:
    """The reasons that waive every mismatch of ``verdict`` (a case not equal), or None when
    some mismatch (or a wrong shape, type or output) is not waived. Each waiver counts the
    elements it matched, whether or not the whole case is waived (a stale one matched none)."""
    waived = bool(waivers)
    used: list[int] = []
    for output in verdict.outputs:
        if output.equal:
            continue
        causes = output.raw.get("causes") or {}
        if not (output.shape_equal and output.dtype_equal) or not causes:
            waived = False
            continue
        if sum(causes.values()) != output.mismatches:
            waived = False
        dtypes = (dtype, output.expected_dtype or dtype)
        for cause, count in causes.items():
            found = next(
                (i for i, w in enumerate(waivers) if w.matches(op, dtypes, version, cause)), None
            )
            if found is None:
                waived = False
                continue
            waivers[found].matched += int(count)
            used.append(found)
    if not waived:
        return None
    return list(dict.fromkeys(waivers[index].reason for index in used))
