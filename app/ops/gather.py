"""Gather-8: take slices of a tensor along one axis at the given indices, batch by batch."""

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops.errors import SpecError
from app.ops.raw import as_raw, is_integer_type

# Up to this many batches, each is gathered by its own take.
_LOOPED_BATCHES = 4096


@dataclass(frozen=True)
class GatherPlan:
    """The normalised attributes of one Gather and the shape of its output."""

    axis: int
    batch_dims: int
    output_shape: tuple[int, ...]


def gather_plan(
    data_shape: tuple[int, ...],
    indices_shape: tuple[int, ...],
    indices_dtype: np.dtype[Any],
    axis: npt.ArrayLike,
    batch_dims: int = 0,
) -> GatherPlan:
    """Check the inputs of a Gather against the spec, before any data is touched.

    Returns the normalised ``axis`` and ``batch_dims`` and the output shape
    ``data.shape[:axis] + indices.shape[batch_dims:] + data.shape[axis + 1:]``, so that a caller
    can size (or refuse) the output before it exists.
    """
    if not is_integer_type(indices_dtype):
        raise SpecError(
            "indices", f"indices must be of an integer type (T_IND), got {indices_dtype.name}"
        )
    axis = np.asarray(axis)
    if not is_integer_type(axis.dtype):
        raise SpecError("axis", f"axis must be of an integer type (T_AXIS), got {axis.dtype.name}")
    if axis.shape not in ((), (1,)):
        raise SpecError(
            "axis",
            f"axis must be a scalar or a 1D tensor with one element, got shape {axis.shape}",
        )
    if isinstance(batch_dims, bool) or not isinstance(batch_dims, int | np.integer):
        raise SpecError("batch_dims", f"batch_dims must be an integer, got {batch_dims!r}")
    batch_dims = int(batch_dims)
    data_rank = len(data_shape)
    indices_rank = len(indices_shape)

    axis_value = int(axis.reshape(-1)[0])
    if not -data_rank <= axis_value < data_rank:
        allowed = (
            f"[{-data_rank}, {data_rank - 1}]" if data_rank else "none: data must not be a scalar"
        )
        raise SpecError(
            "axis",
            f"axis = {axis_value} is out of range for data of rank {data_rank} "
            f"(allowed values: {allowed})",
        )
    normal_axis = axis_value + data_rank if axis_value < 0 else axis_value

    limit = min(data_rank, indices_rank)
    if not -limit <= batch_dims <= limit:
        raise SpecError(
            "batch_dims",
            f"batch_dims = {batch_dims} is out of range [{-limit}, {limit}] "
            f"(min(data.rank, indices.rank) = min({data_rank}, {indices_rank}))",
        )
    normal_batch_dims = batch_dims + indices_rank if batch_dims < 0 else batch_dims
    if normal_batch_dims > normal_axis:
        raise SpecError(
            "batch_dims",
            f"batch_dims = {batch_dims} (normalised: {normal_batch_dims}) must not be greater "
            f"than axis = {axis_value} (normalised: {normal_axis})",
        )
    if data_shape[:normal_batch_dims] != indices_shape[:normal_batch_dims]:
        raise SpecError(
            "indices",
            f"the first batch_dims = {normal_batch_dims} dimensions of data and indices must be "
            f"equal, got data of shape {data_shape} and indices of shape {indices_shape}",
        )
    output_shape = (
        data_shape[:normal_axis] + indices_shape[normal_batch_dims:] + data_shape[normal_axis + 1 :]
    )
    return GatherPlan(normal_axis, normal_batch_dims, output_shape)


def gather(
    data: npt.ArrayLike,
    indices: npt.ArrayLike,
    axis: npt.ArrayLike,
    batch_dims: int = 0,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """Gather-8: the slices of ``data`` along ``axis`` at ``indices``, per batch.

    ``indices`` may be of any integer type and shape (a scalar too); values in
    ``[-data.shape[axis], data.shape[axis] - 1]`` select a slice, negative ones counting from the
    end, and any value outside that range yields a slice of zeros. ``axis`` is a scalar or a
    one-element 1D tensor of any integer type. The first ``batch_dims`` dimensions of ``data`` and
    ``indices`` are batches gathered independently; a negative ``batch_dims`` counts from
    ``indices.rank``. ``out``, if given, is a C-contiguous array of the output's shape and
    ``data``'s item size that receives the output.
    """
    data = np.asarray(data)
    indices = np.asarray(indices)
    plan = gather_plan(data.shape, indices.shape, indices.dtype, axis, batch_dims)
    if out is None:
        out = np.empty(plan.output_shape, dtype=data.dtype)
    if out.size:
        _gather_into(as_raw(data), indices, plan, as_raw(out))
    return out


def _gather_into(
    source: npt.NDArray[Any],
    indices: npt.NDArray[Any],
    plan: GatherPlan,
    out: npt.NDArray[Any],
) -> None:
    axis, batch = plan.axis, plan.batch_dims
    length = source.shape[axis]
    if length == 0:
        # Every index is outside the empty range [0, -1], so every output element is a zero.
        out.fill(0)
        return
    batches = math.prod(source.shape[:batch])
    outer = math.prod(source.shape[batch:axis])
    inner = math.prod(source.shape[axis + 1 :])
    count = math.prod(indices.shape[batch:])
    positions, valid = _normalise_indices(indices.reshape(batches, count), length)
    source4 = source.reshape(batches, outer, length, inner)
    out4 = out.reshape(batches, outer, count, inner)
    if batches <= _LOOPED_BATCHES:
        # Each batch is one take into its part of the output (no temporary, no index mesh).
        for batch_index in range(batches):
            np.take(
                source4[batch_index],
                positions[batch_index],
                axis=1,
                out=out4[batch_index],
                mode="clip",
            )
    else:
        # Many small batches: three broadcast index arrays pick (batch, outer, position) for
        # each output row; NumPy iterates their broadcast without building it.
        out4[...] = source4[
            np.arange(batches)[:, None, None],
            np.arange(outer)[None, :, None],
            positions[:, None, :],
        ]
    if valid is not None:
        # Out-of-range indices give zeros: a mask broadcast over the slices, no index arrays.
        np.copyto(out4, 0, where=~valid[:, None, :, None])


def gather_workspace(indices_shape: tuple[int, ...], indices_dtype: np.dtype[Any]) -> int:
    """The most bytes ``gather`` holds beyond its inputs and output: the indices as int64
    positions, and three masks of one byte an index (unsigned ones also a copy of their own)."""
    count = math.prod(indices_shape)
    extra = indices_dtype.itemsize if indices_dtype.kind == "u" else 0
    return count * (8 + 3 + extra)


def _normalise_indices(
    indices: npt.NDArray[Any], length: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_] | None]:
    """Map indices to positions in ``[0, length)``; also return which were in range (None: all).

    The common case, every index already in ``[0, length)``, costs two reductions and no copy.
    """
    if indices.size == 0 or (indices.min() >= 0 and indices.max() < length):
        return indices.astype(np.int64, copy=False), None
    # In place where it can be: the int64 positions and one-byte masks are all it holds.
    if indices.dtype.kind == "u":
        # Unsigned values are compared as they are: 2**64 - 1 is far out of range, not -1.
        valid = indices < np.array(length, dtype=indices.dtype)
        positions = np.where(valid, indices, 0).astype(np.int64)
    else:
        positions = indices.astype(np.int64)  # a copy: it is changed below
        np.add(positions, length, out=positions, where=positions < 0)
        valid = positions >= 0
        valid &= positions < length
    if valid.all():
        return positions, None
    np.copyto(positions, 0, where=~valid)
    return positions, valid
