"""The command line's files: tensors read from ``.npy``, ``.npz``, JSON, CSV or the command
line itself, and results written as ``.npy``, JSON, CSV or a table."""

import io
import json
import os
import stat
import sys
import zipfile
import zlib
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt

from tensor_ops_wire.dtypes import BFLOAT16, UnknownDTypeError, dtype_from_name
from tensor_ops_wire.errors import TensorError
from tensor_ops_wire.files import file_kind
from tensor_ops_wire.npy import decode_npy, encode_npy
from tensor_ops_wire.npz import encode_npz

#: JSON and CSV are for small tensors: larger files belong in .npy (exact, and fast).
TEXT_LIMIT = 16 << 20
#: The most a local input may hold, as the service's limit on a request body (and on what an
#: ``.npz`` member inflates to): 256 MiB unless ``TENSOR_OPS_MAX_BODY_BYTES`` (the service's
#: own variable) says otherwise. Nothing larger could be sent.
INPUT_LIMIT = 256 << 20
LIMIT_VARIABLE = "TENSOR_OPS_MAX_BODY_BYTES"
_CHUNK = 1 << 20
#: An input's archive holds a few members (data and its index inputs).
MAX_NPZ_MEMBERS = 64
#: Results up to this many elements print as a table; larger ones as a summary.
TABLE_ELEMENTS = 400


class InputError(Exception):
    """A local input that cannot be read: a usage error (exit status 2)."""


def element_type(name: str | None) -> np.dtype[Any] | None:
    if name is None:
        return None
    try:
        return dtype_from_name(name)
    except UnknownDTypeError as error:
        raise InputError(f"--dtype: {error}") from None


def _from_values(values: Any, dtype: np.dtype[Any] | None, where: str) -> npt.NDArray[Any]:
    try:
        array = np.array(values, dtype=dtype)
    except (ValueError, TypeError, OverflowError) as error:
        raise InputError(f"{where}: not a tensor of numbers ({error})") from None
    if array.dtype.kind not in "biuf" and array.dtype != BFLOAT16:
        raise InputError(f"{where}: holds {array.dtype} values, not numbers or booleans")
    return array


def input_limit() -> int:
    """The most bytes a local input (or an ``.npz`` member, inflated) may hold."""
    raw = os.environ.get(LIMIT_VARIABLE, "").strip()
    if not raw:
        return INPUT_LIMIT
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise InputError(f"{LIMIT_VARIABLE} = {raw[:64]!r}: expected a positive number of bytes")
    return int(raw)


def _too_large(path: str, limit: int, text: bool) -> InputError:
    if text:
        return InputError(
            f"{path}: more than {limit} bytes; JSON and CSV are for small tensors (up to "
            f"{limit >> 20} MiB): save larger ones as .npy"
        )
    return InputError(
        f"{path}: more than {limit} bytes, the service's limit on a request "
        f"({LIMIT_VARIABLE}, {limit >> 20} MiB unless set)"
    )


def _read_stream(read: Any, path: str, limit: int, text: bool) -> bytes:
    """Up to ``limit`` bytes from ``read(n)``, counted as they are read (a size from ``stat``
    can lie: a file that grows, ``/proc``); one byte more is an error."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = read(min(_CHUNK, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > limit:
            raise _too_large(path, limit, text)
        chunks.append(chunk)


def _read_bytes(path: str, text: bool = False) -> bytes:
    """The bytes of a local input: ``-`` (standard input) or a regular file, at most the
    service's limit (``input_limit``; JSON and CSV: ``TEXT_LIMIT``, if less). A FIFO, a device
    (``/dev/zero``), a directory are refused before anything is read."""
    limit = min(TEXT_LIMIT, input_limit()) if text else input_limit()
    if path == "-":
        try:
            return _read_stream(sys.stdin.buffer.read, "standard input", limit, text)
        except OSError as error:
            raise InputError(f"standard input: {error.strerror or error}") from None
    try:
        # Without blocking: a FIFO with no writer would otherwise wait for one.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise InputError(f"{path}: {error.strerror or error}") from None
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise InputError(f"{path}: is {file_kind(mode)}; a local input must be a regular file")
        return _read_stream(lambda size: os.read(descriptor, size), path, limit, text)
    except OSError as error:
        raise InputError(f"{path}: {error.strerror or error}") from None
    finally:
        os.close(descriptor)


def read_tensor(spec: str, name: str, dtype: np.dtype[Any] | None = None) -> npt.NDArray[Any]:
    """The tensor ``spec`` names: ``-`` (a ``.npy`` on standard input), a ``.npy``, ``.npz``
    (the member called ``name``, or ``file.npz:member``), ``.json`` or ``.csv`` file, or a JSON
    literal (``'[[1, 2], [3, 4]]'``, ``3``)."""
    path, _, member = spec.partition(".npz:")
    if member or spec.endswith(".npz"):
        return _npz_member(path + ".npz" if member else spec, member or name, dtype)
    if spec == "-" or spec.endswith(".npy"):
        raw = _read_bytes(spec)
        try:
            array = decode_npy(bytearray(raw))
        except TensorError as error:
            raise InputError(f"{spec}: {error}") from None
        return _typed(array, dtype, spec)
    if spec.endswith(".json"):
        text = _read_bytes(spec, text=True)
        try:
            values = json.loads(text)
        except ValueError as error:
            raise InputError(f"{spec}: not JSON ({error})") from None
        return _from_values(values, dtype, spec)
    if spec.endswith(".csv"):
        csv = _read_bytes(spec, text=True).decode("utf-8", "replace")
        try:
            table = np.loadtxt(io.StringIO(csv), delimiter=",", dtype=dtype or np.float64, ndmin=1)
        except ValueError as error:
            raise InputError(f"{spec}: not a CSV table of numbers ({error})") from None
        return table
    try:
        values = json.loads(spec)
    except ValueError:
        if Path(spec).exists():
            raise InputError(
                f"{spec}: name the file's format by its extension (.npy, .npz, .json, .csv)"
            ) from None
        raise InputError(
            f"{name}: {spec!r:.80} is neither a file (.npy, .npz, .json, .csv) nor a JSON "
            "number or list"
        ) from None
    return _from_values(values, dtype, name)


def _typed(array: npt.NDArray[Any], dtype: np.dtype[Any] | None, where: str) -> npt.NDArray[Any]:
    """A decoded file's array under ``--dtype``: only bfloat16 changes it (2-byte elements
    viewed as bfloat16, as the service reads them); any other type must be the file's own."""
    if dtype is None or dtype == array.dtype:
        return array
    if dtype == BFLOAT16:
        if array.dtype.itemsize != 2:
            raise InputError(f"{where}: --dtype bfloat16 needs 2-byte elements, not {array.dtype}")
        return array.view(BFLOAT16)
    raise InputError(
        f"{where}: holds {array.dtype}, not {dtype}; --dtype sets the type of JSON and CSV "
        "input (and bfloat16 for 2-byte .npy data)"
    )


def _archive(path: str) -> tuple[zipfile.ZipFile, dict[str, zipfile.ZipInfo]]:
    """The ``.npz`` at ``path`` (read as any input: a regular file within the limit) and its
    members by name (``data.npy`` is ``data``)."""
    raw = _read_bytes(path)
    try:
        archive = zipfile.ZipFile(io.BytesIO(raw))
        members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError) as error:
        raise InputError(f"{path}: not a readable .npz ({error})") from None
    if len(members) > MAX_NPZ_MEMBERS:
        raise InputError(f"{path}: holds {len(members)} members, more than an input's archive")
    return archive, {info.filename.removesuffix(".npy"): info for info in members}


def _member_bytes(archive: zipfile.ZipFile, info: zipfile.ZipInfo, where: str) -> bytes:
    """A member inflated, at most the service's limit: its declared size is checked before,
    and what it inflates to counted while it inflates (zipfile stops at the declared size and
    checks the CRC, so a header that lies is an error, never a bomb)."""
    limit = input_limit()
    if info.file_size > limit:
        raise InputError(
            f"{where}: inflates to {info.file_size} bytes, more than the service's limit of "
            f"{limit} ({LIMIT_VARIABLE}, {limit >> 20} MiB unless set)"
        )
    try:
        with archive.open(info) as member:
            return _read_stream(member.read, where, limit, False)
    except (
        zipfile.BadZipFile,
        zlib.error,
        EOFError,
        OSError,
        ValueError,
        NotImplementedError,
    ) as error:
        raise InputError(f"{where}: not a readable .npz member ({error})") from None


def _npz_member(path: str, member: str, dtype: np.dtype[Any] | None) -> npt.NDArray[Any]:
    archive, members = _archive(path)
    with archive:
        if member not in members:
            raise InputError(f"{path}: has no member {member!r} (it holds {', '.join(members)})")
        where = f"{path}:{member}"
        raw = _member_bytes(archive, members[member], where)
    try:
        array = decode_npy(bytearray(raw))
    except TensorError as error:
        raise InputError(f"{where}: {error}") from None
    return _typed(array, dtype, where)


def npz_members(path: str) -> set[str]:
    """The member names of an ``.npz`` archive (empty when it cannot be read)."""
    try:
        archive, members = _archive(path)
    except InputError:
        return set()
    archive.close()
    return set(members)


def json_form(array: npt.NDArray[Any]) -> str:
    values = array.astype(np.float32) if array.dtype == BFLOAT16 else array
    return json.dumps(
        {"data": values.tolist(), "dtype": array.dtype.name, "shape": list(array.shape)},
        allow_nan=True,
    )


def write_output(array: npt.NDArray[Any], path: str) -> None:
    """``array`` to ``path``: ``.json`` (the service's JSON form), ``.csv`` (rank 1 or 2) or
    ``.npy`` (anything else)."""
    target = Path(path)
    try:
        if path.endswith(".json"):
            target.write_text(json_form(array) + "\n")
        elif path.endswith(".csv"):
            if array.ndim > 2:
                raise InputError(f"{path}: CSV holds rank 1 or 2, the output has rank {array.ndim}")
            values = array.astype(np.float32) if array.dtype == BFLOAT16 else array
            np.savetxt(target, np.atleast_1d(values), delimiter=",", fmt="%s")
        else:
            target.write_bytes(encode_npy(array).data)
    except OSError as error:
        raise InputError(f"{path}: {error.strerror or error}") from None


def write_npz(arrays: dict[str, npt.NDArray[Any]], path: str) -> None:
    """``arrays`` to ``path`` as an ``.npz`` archive, one ``<name>.npy`` member each."""
    try:
        Path(path).write_bytes(encode_npz(arrays))
    except OSError as error:
        raise InputError(f"{path}: {error.strerror or error}") from None


def print_table(array: npt.NDArray[Any], out: TextIO) -> None:
    """A small result as a table (rank 0 to 2), anything else as a NumPy summary."""
    from rich.console import Console  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    console = Console(file=out, highlight=False)
    shown = array.astype(np.float32) if array.dtype == BFLOAT16 else array
    title = f"{array.dtype.name} {list(array.shape)}"
    if array.ndim <= 2 and array.size <= TABLE_ELEMENTS and array.size > 0:
        rows = np.atleast_2d(shown)
        table = Table(show_header=True, header_style="bold")
        table.add_column("", style="dim", justify="right")
        for column in range(rows.shape[1]):
            table.add_column(str(column), justify="right")
        for index, row in enumerate(rows):
            table.add_row(str(index), *(str(value) for value in row.tolist()))
        console.print(title)
        console.print(table)
        return
    console.print(title)
    console.print(np.array2string(shown, threshold=TABLE_ELEMENTS, edgeitems=3), markup=False)
    if array.size > TABLE_ELEMENTS:
        console.print("(a summary: write all of it with -o out.npy)", style="dim")
