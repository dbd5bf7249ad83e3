"""Case files for test harnesses: ``write_case`` one from NumPy arrays, ``read_case`` it back."""

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy.typing as npt

from tensor_ops_wire.cases import case_pieces, decode_case
from tensor_ops_wire.errors import TensorError
from tensor_ops_wire.npy import MAX_NBYTES
from tensor_ops_wire.verdict import type_name


@dataclass
class Case:
    """One case: the op, its inputs and attributes, the candidate's outputs (what a device
    computed), and the tolerance to judge them by (None: bit-equal)."""

    op: str
    inputs: dict[str, npt.NDArray[Any]]
    outputs: dict[str, npt.NDArray[Any]]
    attributes: dict[str, Any] = field(default_factory=dict)
    tolerance: Any = None
    #: The file it was read from, when it was.
    path: Path | None = None
    #: What the device did instead of answering (crashed, refused the model...), or None.
    device_error: str | None = None
    #: The op's version (``"8"``), or None: the newest the service has.
    version: str | None = None

    @property
    def dtype(self) -> str:
        """The element type the case is about, by NumPy's name: its data's (``data``,
        Transpose's ``arg``, Concat's ``data_0``; else its first input's), "" with no input."""
        return case_dtype(self.inputs)


#: The largest case file read: the service's default request body limit (256 MiB).
CASE_LIMIT = 256 << 20

#: What the ops call the input whose element type is the output's (shared/api.md section 9).
_DATA_NAMES = ("data", "arg", "data_0")


class CaseError(ValueError):
    """A file that is not a readable case file."""


def write_case(
    path: str | os.PathLike[str],
    op: str,
    inputs: Mapping[str, npt.ArrayLike],
    outputs: Mapping[str, npt.ArrayLike] | None = None,
    attributes: Mapping[str, Any] | None = None,
    *,
    tolerance: Mapping[str, Any] | str | None = None,
    device_error: str | None = None,
    version: str | int | None = None,
) -> Path:
    """Write one case file (a single ``.npz``, no pickle; docs/verify.md gives its layout):
    ``inputs`` and the candidate ``outputs`` by their names, ``attributes``, ``tolerance``,
    ``version`` (the op's opset version; None: the newest) and ``device_error`` in its JSON
    ``meta`` member. Every element type is kept, bfloat16 included. The folder is made if need
    be. Returns the path.

    A device that crashed or refused the model has no outputs: give ``device_error`` (what it
    said) and ``outputs`` None; ``tensor-ops verify`` reports it as the device's failure.

    >>> x = np.arange(6.0)
    >>> inputs = {"data": x, "shift": 1, "axes": 0}
    >>> write_case("roll-1.npz", "roll", inputs, {"output": np.roll(x, 1)})
    PosixPath('roll-1.npz')
    >>> read_case("roll-1.npz").outputs["output"]
    array([5., 0., 1., 2., 3., 4.])
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    pieces = case_pieces(
        op,
        inputs,
        outputs or {},
        attributes,
        tolerance,
        device_error=device_error,
        version=None if version is None else str(version),
    )
    with target.open("wb") as file:  # the arrays' data written from their memory, not joined
        for piece in pieces.buffers:
            file.write(piece)
    return target


def read_case(path: str | os.PathLike[str], *, limit: int = CASE_LIMIT) -> Case:
    """The case a file holds (``CaseError`` when it is not one, or is no regular file, or is
    larger than ``limit`` bytes: a FIFO or a device is never waited on nor read whole)."""
    source = Path(path)
    body = _case_bytes(source, limit)
    try:
        wire = decode_case(body, max_bytes=MAX_NBYTES)
    except TensorError as error:
        where = f" ({error.field})" if error.field else ""
        raise CaseError(f"{source}: not a case file{where}: {error.message}") from None
    if wire.op is None:
        raise CaseError(f"{source}: not a case file: its meta member names no op")
    return Case(
        wire.op,
        wire.inputs,
        wire.outputs,
        wire.attributes,
        wire.tolerance,
        source,
        wire.device_error,
        wire.version,
    )


def _case_bytes(source: Path, limit: int) -> bytes:
    # O_NONBLOCK: opening a FIFO does not wait for a writer; fstat then says what was opened.
    try:
        handle = os.open(source, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_BINARY", 0))
    except OSError as error:
        raise CaseError(f"{source}: {error.strerror or error}") from None
    with os.fdopen(handle, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise CaseError(f"{source}: not a regular file")
        if info.st_size > limit:
            raise CaseError(f"{source}: {info.st_size} bytes, more than the case limit ({limit})")
        body = file.read(limit + 1)
    if len(body) > limit:
        raise CaseError(f"{source}: more than the case limit ({limit} bytes)")
    return body


def case_dtype(inputs: Mapping[str, npt.NDArray[Any]]) -> str:
    """The element type a case's inputs are about (see ``Case.dtype``)."""
    for name in _DATA_NAMES:
        if name in inputs:
            return type_name(inputs[name].dtype)
    first = next(iter(inputs.values()), None)
    return "" if first is None else type_name(first.dtype)
