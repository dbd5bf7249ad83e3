"""Tile-1: a tensor repeated along each dimension the number of times ``repeats`` gives."""

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops import raw
from app.ops.declaration import (
    INTEGER_TYPES,
    Arrays,
    Attributes,
    Input,
    Op,
    Plan,
    data_input,
    example,
    narrowed_by_the_cpu_plugin,
)
from app.ops.errors import SpecError
from app.ops.raw import as_raw, is_integer_type


def tile_shape(data_shape: tuple[int, ...], repeats: npt.NDArray[Any]) -> tuple[int, ...]:
    """Check ``repeats`` against the spec and give the output's shape: data's shape and repeats
    promoted to the same length (ones prepended to the shorter), multiplied. Python integers:
    a shape no array could hold is the caller's to refuse, before anything is allocated."""
    if not is_integer_type(repeats.dtype):
        raise SpecError(
            "repeats", f"repeats must be of an integer type (T2), got {repeats.dtype.name}"
        )
    if repeats.ndim != 1:
        raise SpecError(
            "repeats",
            f"repeats must be a 1D tensor (one factor a dimension), got a tensor of shape "
            f"{list(repeats.shape)}",
        )
    factors = [int(value) for value in repeats.tolist()]
    for position, factor in enumerate(factors):
        if factor < 0:
            raise SpecError(
                "repeats",
                f"repeats[{position}] = {factor}: a replication factor must be 0 or more",
            )
    rank = max(len(data_shape), len(factors))
    shape = (1,) * (rank - len(data_shape)) + tuple(data_shape)
    factors = [1] * (rank - len(factors)) + factors
    return tuple(size * factor for size, factor in zip(shape, factors, strict=True))


def tile(
    data: npt.ArrayLike, repeats: npt.ArrayLike, out: npt.NDArray[Any] | None = None
) -> npt.NDArray[Any]:
    """Tile-1: ``data`` repeated along each dimension by ``repeats``; into ``out`` if given."""
    data = np.asarray(data)
    shape = tile_shape(data.shape, np.asarray(repeats))
    return _tiled(data, shape, out)


def _tiled(
    data: npt.NDArray[Any], shape: tuple[int, ...], out: npt.NDArray[Any] | None
) -> npt.NDArray[Any]:
    if out is None:
        out = np.empty(shape, data.dtype)
    if not math.prod(shape):
        return out
    rank = len(shape)
    sizes = (1,) * (rank - data.ndim) + data.shape
    # The output seen as (repeats_0, size_0, repeats_1, size_1, ...): data broadcast over the
    # repeats' axes is one copy, with nothing made in between. Parts of one element are left
    # out (they place nothing), so data of more than 32 dimensions (TENSOR_OPS_MAX_RANK allows
    # 64) stays within NumPy's 64 (each part left is at least 2, and the output is < 2**63).
    split: list[int] = []
    spread: list[int] = []
    for length, size in zip(shape, sizes, strict=True):
        for part, seen in ((length // size, 1), (size, size)):  # no 0 size: the output is empty
            if part != 1:
                split.append(part)
                spread.append(seen)
    target, source = as_raw(out), as_raw(data)
    view = np.broadcast_to(source.reshape(spread), split)
    if raw.streams_runs(split, spread, out):
        raw.copy_view(target, target.reshape(split), source, view)
    else:
        np.copyto(target.reshape(split), view, casting="equiv")
    return out


def _plan(arrays: Arrays, attributes: Attributes) -> Plan:
    data = arrays["data"]
    shape = tile_shape(data.shape, arrays["repeats"])
    return Plan(shape, lambda out: _tiled(data, shape, out))


OP = Op(
    name="tile",
    spec="Tile-1",
    summary="Tile-1: repeat a tensor along each dimension",
    description="Tile-1 over `data`: the output's rank is the larger of data's rank and the "
    "length of `repeats`, the shorter promoted by prepending ones; each dimension is data's "
    "times its factor. The output has the type of `data`, and its size is checked before "
    "anything is allocated.",
    request_doc="Tile-1: `data` repeated `repeats` times along each dimension.",
    inputs=(
        data_input("tile"),
        Input(
            "repeats",
            "The replication factor of each dimension (input 2, type T2).",
            "T2: any integer type, a 1D tensor of factors of 0 or more. JSON form is int64.",
            INTEGER_TYPES,
            rank="1",
            limit="rank",
        ),
    ),
    plan=_plan,
    examples={
        "example_1": example(
            "Tile-1: as many repeats as data has dimensions",
            {"data": [[1, 2], [3, 4]], "repeats": [2, 3]},
            [[1, 2, 1, 2, 1, 2], [3, 4, 3, 4, 3, 4], [1, 2, 1, 2, 1, 2], [3, 4, 3, 4, 3, 4]],
        ),
        "example_2": example(
            "Tile-1: more repeats than dimensions: data promoted to (1, 3)",
            {"data": [1, 2, 3], "repeats": [2, 1]},
            [[1, 2, 3], [1, 2, 3]],
        ),
        "example_3": example(
            "Tile-1: fewer repeats than dimensions: repeats promoted to [1, 2]",
            {"data": [[1, 2], [3, 4]], "repeats": [2]},
            [[1, 2, 1, 2], [3, 4, 3, 4]],
        ),
    },
    decisions=(
        "Tile-1, an empty repeats: promoted to data's rank by ones, so the output is data.",
        "Tile-1, a factor of 0: the output has an empty dimension there.",
        "Tile-1, repeats as a scalar: refused; the factors are one per dimension, a 1D tensor.",
        "Tile-1, the spec's Example 2 writes its first output dimension `<dim>5/dim>`: read as 5.",
    ),
    disagreements=(
        *narrowed_by_the_cpu_plugin("Tile-1"),
        "Tile-1 with an empty repeats: the CPU plugin returns uninitialised memory (data [1, 2], "
        "repeats of shape (0,)); by the spec the output is data.",
    ),
)
