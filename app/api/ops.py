"""The ops as every transport sees them: input names, and a checked job that computes the output."""

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from app.api.errors import ApiError, spec_error
from app.metrics import ELEMENTS
from app.ops import SpecError, gather, gather_plan, roll, roll_shifts

Arrays = Mapping[str, npt.NDArray[Any]]


@dataclass(frozen=True)
class Limits:
    """The size limits a request is held to."""

    max_rank: int
    max_output_bytes: int
    max_dimension: int

    @classmethod
    def of(cls, settings: Any) -> "Limits":
        return cls(settings.max_rank, settings.max_output_bytes, settings.max_dimension)


def check_shape(shape: tuple[int, ...] | list[int], field: str, limits: Limits) -> None:
    """Refuse (413) a tensor of more dimensions, or a longer dimension, than the limits allow."""
    if len(shape) > limits.max_rank:
        raise ApiError(
            413,
            ["body", field],
            f"{field} has rank {len(shape)}, above the limit of {limits.max_rank} "
            "(raise it with TENSOR_OPS_MAX_RANK)",
            "too_large",
        )
    longest = max(shape, default=0)
    if longest > limits.max_dimension:
        raise ApiError(
            413,
            ["body", field],
            f"{field} has a dimension of {longest}, above the limit of {limits.max_dimension} "
            "(raise it with TENSOR_OPS_MAX_DIMENSION)",
            "too_large",
        )


@dataclass(frozen=True)
class Job:
    """A request checked against the spec, its output sized but not yet computed."""

    op: str
    #: The kernel call; it writes into the array it is given, or into a new one for None.
    compute: Callable[[npt.NDArray[Any] | None], npt.NDArray[Any]]
    output_shape: tuple[int, ...]
    output_dtype: np.dtype[Any]

    @property
    def output_bytes(self) -> int:
        return math.prod(self.output_shape) * self.output_dtype.itemsize

    def output(self, out: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
        """Run the kernel, into ``out`` if given (a response buffer), and count its elements.

        The kernels move bits, so they write in the input's byte order; a big-endian input
        is computed aside and converted into ``out``.
        """
        if out is not None and self.output_dtype.byteorder == ">":
            np.copyto(out, self.compute(None), casting="equiv")
            result = out
        else:
            result = self.compute(out)
        ELEMENTS.labels(self.op).inc(result.size)
        return result


@dataclass(frozen=True)
class Op:
    """One op: its inputs in order, which of them are indices, and how to make its job."""

    name: str
    inputs: tuple[str, ...]
    #: The element types each index input may have (the spec's T_IND..., by NumPy name).
    index_types: Mapping[str, tuple[str, ...]]
    make_job: Callable[[Arrays, int, Limits], Job]
    takes_batch_dims: bool


def check_output_bytes(shape: tuple[int, ...], dtype: np.dtype[Any], limits: Limits) -> None:
    """Refuse (413) an output larger than the limit, before it exists."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > limits.max_output_bytes:
        raise ApiError(
            413,
            ["body"],
            f"the output would be {nbytes} bytes (shape {shape}, {dtype.name}), above the limit "
            f"of {limits.max_output_bytes} bytes (raise it with TENSOR_OPS_MAX_OUTPUT_BYTES)",
            "too_large",
        )


def roll_job(arrays: Arrays, batch_dims: int, limits: Limits) -> Job:
    """Roll-7 over ``data``, ``shift``, ``axes`` (``batch_dims`` is not one of its attributes)."""
    del batch_dims
    data, shift, axes = arrays["data"], arrays["shift"], arrays["axes"]
    try:
        roll_shifts(data.shape, shift, axes)
    except SpecError as error:
        raise spec_error(error) from None
    check_output_bytes(data.shape, data.dtype, limits)
    return Job("roll", lambda out: roll(data, shift, axes, out), data.shape, data.dtype)


def gather_job(arrays: Arrays, batch_dims: int, limits: Limits) -> Job:
    """Gather-8 over ``data``, ``indices``, ``axis`` with ``batch_dims``."""
    data, indices, axis = arrays["data"], arrays["indices"], arrays["axis"]
    try:
        plan = gather_plan(data.shape, indices.shape, indices.dtype, axis, batch_dims)
    except SpecError as error:
        raise spec_error(error) from None
    check_output_bytes(plan.output_shape, data.dtype, limits)
    return Job(
        "gather",
        lambda out: gather(data, indices, axis, batch_dims, out),
        plan.output_shape,
        data.dtype,
    )


_ANY_INTEGER = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")

OPS: dict[str, Op] = {
    "roll": Op(
        "roll",
        ("data", "shift", "axes"),
        {"shift": ("int32", "int64"), "axes": ("int32", "int64")},
        roll_job,
        takes_batch_dims=False,
    ),
    "gather": Op(
        "gather",
        ("data", "indices", "axis"),
        {"indices": _ANY_INTEGER, "axis": _ANY_INTEGER},
        gather_job,
        takes_batch_dims=True,
    ),
}
