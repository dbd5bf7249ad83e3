"""ScatterUpdate-3: a copy of ``data`` with the slices along ``axis`` at ``indices`` replaced by
``updates``."""

import functools
import math
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from app.ops.declaration import (
    ALL_TYPES,
    INTEGER_TYPES,
    Arrays,
    Attributes,
    Input,
    Op,
    Plan,
    data_input,
    example,
)
from app.ops.errors import SpecError
from app.ops.index_rules import MARKS_PER_VALUE, check_in_bounds, last_occurrences
from app.ops.raw import as_raw, into_c_ordered, is_integer_type

# Slices are put this many at a time (the bound of the positions and selected updates held).
_CHUNK = 1 << 20
# Slices of at least this many bytes are moved whole by a fancy assignment; shorter ones as one
# element each of a type of their width, by flat positions.
_LARGE_SLICE = 256
_UNITS = {size: np.dtype(f"u{size}") for size in (1, 2, 4, 8)}
# Repeated indices are looked for by marks (one byte a slot) up to this many slots an index.


class ScatterUpdatePlan(NamedTuple):
    """The normalised axis of one ScatterUpdate; the output has the shape of data."""

    axis: int
    output_shape: tuple[int, ...]


def _same_type(left: np.dtype[Any], right: np.dtype[Any]) -> bool:
    return left.newbyteorder("=") == right.newbyteorder("=")


def scatter_update_plan(
    data: npt.NDArray[Any],
    indices: npt.NDArray[Any],
    updates: npt.NDArray[Any],
    axis: npt.ArrayLike,
) -> ScatterUpdatePlan:
    """Check the inputs of a ScatterUpdate against the spec, before any data is touched."""
    if not is_integer_type(indices.dtype):
        raise SpecError(
            "indices", f"indices must be of an integer type (T_IND), got {indices.dtype.name}"
        )
    if not _same_type(updates.dtype, data.dtype):
        raise SpecError(
            "updates",
            f"updates must be of the type of data (T_NUMERIC), got {updates.dtype.name} "
            f"for data of {data.dtype.name}",
        )
    axis = np.asarray(axis)
    if not is_integer_type(axis.dtype):
        raise SpecError("axis", f"axis must be of an integer type (T_AXIS), got {axis.dtype.name}")
    if axis.shape not in ((), (1,)):
        raise SpecError(
            "axis",
            f"axis must be a scalar or a 1D tensor with one element, got shape {axis.shape}",
        )
    rank = data.ndim
    value = int(axis.item())
    if not -rank <= value < rank:
        allowed = f"[{-rank}, {rank - 1}]" if rank else "none: data must not be a scalar"
        raise SpecError(
            "axis",
            f"axis = {value} is out of range for data of rank {rank} (allowed values: {allowed})",
        )
    normal = value + rank if value < 0 else value
    expected = data.shape[:normal] + indices.shape + data.shape[normal + 1 :]
    if updates.shape != expected:
        raise SpecError(
            "updates",
            f"updates must be of rank rank(indices) + rank(data) - 1 = {len(expected)} and shape "
            f"data.shape[:axis] + indices.shape + data.shape[axis + 1:] = {expected}, got "
            f"shape {updates.shape}",
        )
    length = data.shape[normal]

    def refusal(place: list[int], value: int) -> SpecError:
        kind = "negative" if value < 0 else "points to a non-existing element"
        return SpecError(
            "indices",
            f"indices{place} = {value} is {kind}: all index values must be within bounds "
            f"[0, s - 1] along the axis of size s = {length}",
        )

    check_in_bounds(indices, length, refusal)
    return ScatterUpdatePlan(normal, data.shape)


def scatter_update(
    data: npt.ArrayLike,
    indices: npt.ArrayLike,
    updates: npt.ArrayLike,
    axis: npt.ArrayLike,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """ScatterUpdate-3: ``data`` with ``data[..., indices[m, ..., p], ...] = updates[..., m, ...,
    p, ...]`` along ``axis``.

    ``indices`` (any integer type and shape) must be within ``[0, s - 1]`` along the axis of size
    ``s`` (anything else is refused); ``updates`` has data's type and the shape ``data.shape[:axis]
    + indices.shape + data.shape[axis + 1:]``. Where indices repeat, the update that comes last
    in indices' row-major order is the one kept.
    """
    data, indices, updates = np.asarray(data), np.asarray(indices), np.asarray(updates)
    plan = scatter_update_plan(data, indices, updates, axis)
    return scatter_update_planned(data, indices, updates, plan, out)


def scatter_update_planned(
    data: npt.NDArray[Any],
    indices: npt.NDArray[Any],
    updates: npt.NDArray[Any],
    plan: ScatterUpdatePlan,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """``scatter_update`` with the inputs already checked (``plan`` is their plan)."""
    return into_c_ordered(
        out,
        plan.output_shape,
        data.dtype,
        lambda target: _scatter_update_into(data, indices, updates, plan, target),
    )


def _scatter_update_into(
    data: npt.NDArray[Any],
    indices: npt.NDArray[Any],
    updates: npt.NDArray[Any],
    plan: ScatterUpdatePlan,
    out: npt.NDArray[Any],
) -> None:
    """Scatter into ``out`` (C-contiguous, not empty): data copied, then the updates put."""
    target, source = as_raw(out), as_raw(updates)
    np.copyto(target, as_raw(data))
    if updates.size == 0:
        return
    if data.dtype.itemsize > 1 and updates.dtype.isnative != out.dtype.isnative:
        source = source.byteswap()
    shape = data.shape
    axis = plan.axis
    outer = math.prod(shape[:axis])
    inner = math.prod(shape[axis + 1 :])
    flat = indices.reshape(-1).astype(np.int64)
    targets, keep = last_occurrences(flat, shape[axis])
    unit_bytes = inner * data.dtype.itemsize
    if unit_bytes >= _LARGE_SLICE:
        # Long slices: a fancy assignment of whole slices moves them at memcpy's speed.
        view = target.reshape(outer, shape[axis], inner)
        rows = source.reshape(outer, indices.size, inner)
        step = max(1, _CHUNK // max(1, targets.size * inner))
        for first in range(0, outer, step):
            part = rows[first : first + step]
            view[first : first + step, targets, :] = part if keep is None else part[:, keep, :]
        return
    # Short slices: each is one element of a type of its width (an unsigned integer, or raw
    # bytes), and the slices are put by flat positions, a chunk of rows at a time: the
    # positions of the first chunk serve every chunk, each put into its own part of the output.
    unit = _UNITS.get(unit_bytes) or np.dtype(f"V{unit_bytes}")
    length = shape[axis]
    into = target.reshape(-1).view(unit).reshape(outer, length)
    taken = np.ascontiguousarray(source).reshape(-1).view(unit).reshape(outer, indices.size)
    rows_per_chunk = max(1, _CHUNK // max(1, targets.size))
    rows_per_chunk = min(rows_per_chunk, outer)
    positions = (
        np.arange(rows_per_chunk, dtype=np.int64)[:, None] * np.int64(length) + targets[None, :]
    ).reshape(-1)
    for first in range(0, outer, rows_per_chunk):
        last = min(outer, first + rows_per_chunk)
        part = taken[first:last]
        if keep is not None:
            part = part[:, keep]
        region = into[first:last].reshape(-1)
        region[positions[: (last - first) * targets.size]] = part.reshape(-1)


def scatter_update_workspace(arrays: Arrays) -> int:
    """The most bytes ``scatter_update`` holds beyond inputs and output: the indices as int64,
    their sort (order, sorted values, a mask: 25 bytes an index), the updates byte-swapped when
    they come in the other byte order, and a chunk of selected updates when indices repeat."""
    indices, updates = arrays["indices"], arrays["updates"]
    swapped = updates.nbytes if not updates.dtype.isnative else 0
    chunk = min(updates.nbytes, max(_CHUNK, updates.size // max(1, indices.size)) * 8)
    return indices.size * (33 + MARKS_PER_VALUE) + swapped + chunk


# ------------------------------------------------------------------------------------------------
# The declaration


def _plan_scatter_update(arrays: Arrays, attributes: Attributes) -> Plan:
    data, indices, updates = arrays["data"], arrays["indices"], arrays["updates"]
    plan = scatter_update_plan(data, indices, updates, arrays["axis"])
    return Plan(
        plan.output_shape,
        functools.partial(scatter_update_planned, data, indices, updates, plan),
    )


def _scatter_update_workspace(arrays: Arrays, attributes: Attributes) -> int:
    return scatter_update_workspace(arrays)


OP = Op(
    name="scatter_update",
    spec="ScatterUpdate-3",
    summary="ScatterUpdate-3: a copy of data with slices along an axis replaced",
    description="ScatterUpdate-3 over `data`: the output is a copy of `data` with "
    "`data[..., indices[m, ..., p], ...] = updates[..., m, ..., p, ...]` along `axis`; `updates` "
    "has the shape `data.shape[:axis] + indices.shape + data.shape[axis + 1:]`. Indices must be "
    "within [0, s - 1]; where they repeat, the last one (row-major) wins. Send JSON (tensors as "
    "nested arrays or base64 .npy) or an .npz archive.",
    request_doc="ScatterUpdate-3: a copy of `data` updated with `updates` at `indices` along "
    "`axis`.",
    inputs=(
        data_input("copy and update"),
        Input(
            "indices",
            "Indices along axis of the slices to update (input 2, type T_IND).",
            "T_IND: any integer type, any shape (a scalar too); all index values within bounds "
            "[0, s - 1] along the axis of size s. JSON form is int64.",
            INTEGER_TYPES,
        ),
        Input(
            "updates",
            "The new slices (input 3, type T_NUMERIC, the type of data).",
            "T_NUMERIC: the type of data, rank rank(indices) + rank(data) - 1, shape "
            "data.shape[:axis] + indices.shape + data.shape[axis + 1:]. JSON form takes its "
            "type from `dtype`, like data.",
            ALL_TYPES,
        ),
        Input(
            "axis",
            "The axis to scatter along (input 4, type T_AXIS).",
            "T_AXIS: any integer type, a scalar or a 1D tensor of one element, in [-r, r - 1] "
            "(r = rank of data). JSON form is int64.",
            INTEGER_TYPES,
            rank="0 or 1",
            limit="scalar",
        ),
    ),
    plan=_plan_scatter_update,
    workspace=_scatter_update_workspace,
    examples={
        "example_2": example(
            "ScatterUpdate-3 Example 2: axis = 1, indices [0, 2] (float32)",
            {
                "data": [
                    [-1.0, 1.0, -1.0, 3.0, 4.0],
                    [-1.0, 6.0, -1.0, 8.0, 9.0],
                    [-1.0, 11.0, 1.0, 13.0, 14.0],
                ],
                "indices": [0, 2],
                "updates": [[1.0, 1.0], [1.0, 1.0], [1.0, 2.0]],
                "axis": [1],
                "dtype": "float32",
            },
            [[1.0, 1.0, 1.0, 3.0, 4.0], [1.0, 6.0, 1.0, 8.0, 9.0], [1.0, 11.0, 2.0, 13.0, 14.0]],
        ),
        "scalar_index": example(
            "ScatterUpdate-3 with a 0D index: data[indices, ...] = updates[...] (axis 0)",
            {"data": [[1, 2], [3, 4], [5, 6]], "indices": 1, "updates": [7, 8], "axis": 0},
            [[1, 2], [7, 8], [5, 6]],
        ),
        "rank_one": example(
            "ScatterUpdate-3 on a 1D tensor: data[indices[i]] = updates[i] (axis 0)",
            {"data": [1, 2, 3, 4], "indices": [1, 3], "updates": [9, 8], "axis": 0},
            [1, 9, 3, 8],
        ),
        "repeated_indices": example(
            "ScatterUpdate-3 with a repeated index: the last update in indices' order is kept",
            {
                "data": [0, 0, 0, 0],
                "indices": [[3, 1], [3, 0]],
                "updates": [[5, 6], [7, 8]],
                "axis": 0,
            },
            [8, 6, 0, 7],
        ),
    },
    decisions=(
        "ScatterUpdate-3 repeated indices: the spec leaves the order of updating undefined; the "
        "update that comes last in indices' row-major order is the one kept (as applying the "
        "formula index by index in that order).",
        "ScatterUpdate-3 element types: T_NUMERIC is read as every supported type (bool "
        "included: the op only copies elements); updates must be of data's type.",
        "ScatterUpdate-3 Example 1 is shapes only (1000x256x10x15 data, 125x20 indices, axis "
        "1): it is a test, not a runnable /docs example (its updates would be 200 MB of JSON).",
        "ScatterUpdate-3 negative or out-of-bounds indices: the spec raises an exception; they "
        "are refused with a 422 naming `indices`, before anything is copied.",
    ),
    disagreements=(
        "ScatterUpdate-3 negative indices: the spec raises an exception; OpenVINO's CPU plugin "
        "crashes its process instead (`free(): invalid next size (fast)`): data int32 [1, 2, 3, "
        "4], indices int64 [-1], updates [-9], axis 0. The service refuses them with a 422.",
    ),
)
