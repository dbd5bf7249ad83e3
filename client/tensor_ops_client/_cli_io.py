"""The command line's files: tensors read from ``.npy``, ``.npz``, JSON, CSV or the command
line itself, and results written as ``.npy``, JSON, CSV or a table."""

import io
import json
import sys
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt

from tensor_ops_wire.dtypes import BFLOAT16, UnknownDTypeError, dtype_from_name
from tensor_ops_wire.errors import TensorError
from tensor_ops_wire.npy import decode_npy, encode_npy

#: JSON and CSV are for small tensors: larger files belong in .npy (exact, and fast).
TEXT_LIMIT = 16 << 20
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


def _read_bytes(path: str, limit: int | None = None) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    file = Path(path)
    try:
        size = file.stat().st_size
        if limit is not None and size > limit:
            raise InputError(
                f"{path}: {size} bytes; JSON and CSV are for small tensors (up to {limit >> 20} "
                "MiB): save larger ones as .npy"
            )
        return file.read_bytes()
    except OSError as error:
        raise InputError(f"{path}: {error.strerror or error}") from None


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
        text = _read_bytes(spec, TEXT_LIMIT)
        try:
            values = json.loads(text)
        except ValueError as error:
            raise InputError(f"{spec}: not JSON ({error})") from None
        return _from_values(values, dtype, spec)
    if spec.endswith(".csv"):
        csv = _read_bytes(spec, TEXT_LIMIT).decode("utf-8", "replace")
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


def _npz_member(path: str, member: str, dtype: np.dtype[Any] | None) -> npt.NDArray[Any]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            if member not in archive.files:
                raise InputError(
                    f"{path}: has no member {member!r} (it holds {', '.join(archive.files)})"
                )
            array: npt.NDArray[Any] = archive[member]
    except InputError:
        raise
    except (OSError, ValueError) as error:
        raise InputError(f"{path}: not a readable .npz ({error})") from None
    return _typed(array, dtype, f"{path}:{member}")


def npz_members(path: str) -> set[str]:
    """The member names of an ``.npz`` archive (empty when it cannot be read)."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            return set(archive.files)
    except (OSError, ValueError):
        return set()


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
