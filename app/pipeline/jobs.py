"""A request's inputs checked against the limits and the op's spec: a job, its output sized."""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from app.errors import Fault, ServiceError, from_spec
from app.metrics import ELEMENTS
from app.ops import SpecError
from app.registry import Arrays, Op


@dataclass(frozen=True)
class Limits:
    """The size limits a request is held to."""

    max_rank: int
    max_output_bytes: int
    max_dimension: int

    @classmethod
    def of(cls, settings: Any) -> "Limits":
        return cls(settings.max_rank, settings.max_output_bytes, settings.max_dimension)


def check_shape(shape: Sequence[int], field: str, limits: Limits, root: str = "body") -> None:
    """Refuse (413) a tensor of more dimensions, or a longer dimension, than the limits allow."""
    if len(shape) > limits.max_rank:
        raise ServiceError(
            Fault.TOO_LARGE,
            (root, field),
            f"{field} has rank {len(shape)}, above the limit of {limits.max_rank} "
            "(raise it with TENSOR_OPS_MAX_RANK)",
        )
    longest = max(shape, default=0)
    if longest > limits.max_dimension:
        raise ServiceError(
            Fault.TOO_LARGE,
            (root, field),
            f"{field} has a dimension of {longest}, above the limit of {limits.max_dimension} "
            "(raise it with TENSOR_OPS_MAX_DIMENSION)",
        )


@dataclass(frozen=True)
class Job:
    """A request checked against the spec, its output sized but not yet computed."""

    op: Op
    arrays: Arrays
    attributes: Mapping[str, int]
    output_shape: tuple[int, ...]
    output_dtype: np.dtype[Any]

    @property
    def output_count(self) -> int:
        return math.prod(self.output_shape)

    @property
    def output_bytes(self) -> int:
        return self.output_count * self.output_dtype.itemsize

    def output(self, out: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
        """Run the kernel, into ``out`` if given (a response buffer), and count its elements.

        The kernels move bits, so they write in the input's byte order; a big-endian input
        is computed aside and converted into ``out``.
        """
        if out is not None and self.output_dtype.byteorder == ">":
            np.copyto(out, self.op.kernel(self.arrays, self.attributes, None), casting="equiv")
            result = out
        else:
            result = self.op.kernel(self.arrays, self.attributes, out)
        ELEMENTS.labels(self.op.name).inc(result.size)
        return result


def make_job(
    op: Op, arrays: Arrays, attributes: Mapping[str, int], limits: Limits, root: str = "body"
) -> Job:
    """Check ``arrays`` (every input of ``op``, decoded) against the spec; size the output.

    Spec violations are 422 located at the input that broke the rule; an output past the limit
    is 413, refused before it exists. Both ops keep the element type of ``data``.
    """
    for item in op.inputs:
        array = arrays[item.name]
        check_shape(array.shape, item.name, limits, root)
        if array.dtype.name not in item.element_types:
            raise ServiceError(
                Fault.TENSOR_TYPE,
                (root, item.name),
                f"{item.name} must be of {item.type_words}, got {array.dtype.name}",
            )
    try:
        shape = op.plan(arrays, attributes)
    except SpecError as error:
        raise from_spec(error, root) from None
    dtype = arrays["data"].dtype
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > limits.max_output_bytes:
        raise ServiceError(
            Fault.TOO_LARGE,
            (root,),
            f"the output would be {nbytes} bytes (shape {shape}, {dtype.name}), above the limit "
            f"of {limits.max_output_bytes} bytes (raise it with TENSOR_OPS_MAX_OUTPUT_BYTES)",
        )
    return Job(op, arrays, attributes, tuple(shape), dtype)
