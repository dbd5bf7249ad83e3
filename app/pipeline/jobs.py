"""A request's inputs checked against the limits and the op's spec: a job, its output sized."""

import functools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from app import tracing
from app.errors import Fault, ServiceError, from_spec
from app.metrics import ELEMENTS
from app.ops import SpecError
from app.ops.declaration import LIMIT_SCALAR, MAX_OUTPUTS, limit_elements, limit_words
from app.registry import Arrays, Op, Plan, SplitPlan
from tensor_ops_wire.dtypes import shown
from tensor_ops_wire.npy import MAX_NBYTES, MAX_RANK, numpy_can_hold

#: The widest element of any supported type (int64, uint64, float64), in bytes.
WIDEST_ITEMSIZE = 8


@functools.cache
def type_name(dtype: np.dtype[Any]) -> str:
    """``dtype.name``, which NumPy works out in Python each time it is asked (a few
    microseconds, three times a request)."""
    return dtype.name


@functools.cache
def _elements(op: str) -> Any:
    # The labelled child looked up once per op, not once a request; its value itself, which
    # ``Counter.inc`` adds to after its checks (a count of elements is never negative).
    return ELEMENTS.labels(op)._value


@dataclass(frozen=True)
class Limits:
    """The size limits a request is held to."""

    max_rank: int
    max_output_bytes: int
    max_dimension: int

    @classmethod
    def of(cls, settings: Any) -> "Limits":
        return cls(settings.max_rank, settings.max_output_bytes, settings.max_dimension)


def check_shape(
    shape: Sequence[int],
    field: str,
    limits: Limits,
    *,
    itemsize: int = 1,
    output: bool = False,
) -> None:
    """Refuse (413) a shape of more dimensions, or a longer dimension, than the limits allow, or
    one no NumPy array can have: more than 64 dimensions, or nonzero dimensions spanning more
    bytes than NumPy can index at ``itemsize`` bytes an element, a 0 beside them or not (NumPy
    refuses an empty ``(0, 2**62)`` int16 array as it does a full one).

    Every input's shape and the output's, before the output exists, go through here; all of it
    is in Python integers. ``output`` says the shape is the output's (located at the body), and
    ``itemsize`` is then the widest its answer may take.
    """
    if not shape:
        return  # a scalar: no dimension to pass a limit (the rank limit is at least 1)
    if (
        len(shape) == 1
        and limits.max_rank >= 1
        and shape[0] <= limits.max_dimension
        and shape[0] * itemsize <= MAX_NBYTES
    ):
        return  # one dimension within every limit, its bytes as numpy_can_hold counts them
    what = "the output" if output else field
    loc = ("body",) if output else ("body", field)
    rank_limit = min(limits.max_rank, MAX_RANK)
    if len(shape) > rank_limit:
        hint = (
            "(raise it with TENSOR_OPS_MAX_RANK)"
            if rank_limit < MAX_RANK
            else "(NumPy holds no more dimensions)"
        )
        raise ServiceError(
            Fault.TOO_LARGE,
            loc,
            f"{what} {'would have' if output else 'has'} rank {len(shape)}, above the limit of "
            f"{rank_limit} {hint}",
        )
    longest = max(shape, default=0)
    if longest > limits.max_dimension:
        raise ServiceError(
            Fault.TOO_LARGE,
            loc,
            f"{what} {'would have' if output else 'has'} a dimension of {longest}, above the "
            f"limit of {limits.max_dimension} (raise it with TENSOR_OPS_MAX_DIMENSION)",
        )
    if not numpy_can_hold(shape, itemsize):
        elements = (
            f"at {itemsize} bytes an element, the widest an answer may carry it in"
            if output
            else f"at {itemsize} bytes an element"
        )
        raise ServiceError(
            Fault.TOO_LARGE,
            loc,
            f"{what} {'would span' if output else 'spans'} more than {MAX_NBYTES} bytes, more "
            f"than NumPy can index (shape {shown(shape)}: its nonzero dimensions {elements})",
        )


@dataclass(slots=True)
class Job:
    """A request checked against the spec, its output sized but not yet computed.

    Not frozen, though nothing changes it after ``make_job`` but its kernel's time: a frozen
    class sets each field through ``object.__setattr__``, a microsecond of a small request.
    """

    op: Op
    arrays: Arrays
    attributes: Mapping[str, Any]
    output_shape: tuple[int, ...]
    output_dtype: np.dtype[Any]
    #: How the outputs are computed from the checks already made: the op's plan, a SplitPlan
    #: (every output's shape in order) for an op of several outputs (Split-1).
    plan: Plan | SplitPlan
    #: What the kernel holds beyond inputs and output while it runs.
    workspace_bytes: int = 0
    #: Nanoseconds the kernel took, once ``output`` has run (Triton's "compute_infer").
    kernel_ns: int = field(default=0, compare=False, repr=False)
    #: Each output's element type, in order, where they differ from ``output_dtype`` (Unique-10's
    #: indices and counts); None: every output has ``output_dtype``.
    types: tuple[np.dtype[Any], ...] | None = None
    #: The plan of an op of several outputs (``plan`` itself); None for an op of one output,
    #: described by ``output_shape`` alone. A field, not a property: every answer reads it
    #: several times.
    split: SplitPlan | None = field(init=False, default=None, compare=False, repr=False)
    #: The elements of every output (fields, worked out once: an answer reads them several
    #: times).
    output_count: int = field(init=False, default=0, compare=False, repr=False)
    #: The bytes of every output (for a bounded plan, the most they may take).
    output_bytes: int = field(init=False, default=0, compare=False, repr=False)

    def __post_init__(self) -> None:
        plan = self.plan
        if isinstance(plan, SplitPlan):
            self.split = plan
            shapes = plan.output_shapes
            self.output_count = sum(math.prod(shape) for shape in shapes)
            if self.types is None:
                self.output_bytes = self.output_count * self.output_dtype.itemsize
            else:
                self.output_bytes = sum(
                    math.prod(shape) * dtype.itemsize
                    for shape, dtype in zip(shapes, self.types, strict=True)
                )
        else:
            self.output_count = math.prod(self.output_shape)
            self.output_bytes = self.output_count * self.output_dtype.itemsize

    @property
    def output_dtypes(self) -> tuple[np.dtype[Any], ...]:
        """Every output's element type, in order."""
        if self.types is not None:
            return self.types
        return (self.output_dtype,) * (1 if self.split is None else len(self.split.output_shapes))

    @property
    def sizing_dtype(self) -> np.dtype[Any]:
        """The type an answer's text is sized by: the output's, or the widest of several."""
        if self.types is None:
            return self.output_dtype
        return max(self.types, key=lambda dtype: dtype.itemsize)

    @property
    def output_names(self) -> tuple[str, ...]:
        """The names of the outputs this request gets: ``output``, or ``output_0``, ..."""
        if self.split is None:
            return ("output",)
        return tuple(f"output_{index}" for index in range(len(self.split.output_shapes)))

    @property
    def output_shapes(self) -> tuple[tuple[int, ...], ...]:
        """Every output's shape, in order (one for an op of one output)."""
        if self.split is None:
            return (self.output_shape,)
        return self.split.output_shapes

    def outputs(self) -> list[npt.NDArray[Any]]:
        """Every output, computed, each in its own native-order C-contiguous array (an op of
        one output: its ``output()``)."""
        split = self.split
        if split is None:
            return [self.output()]
        started = time.perf_counter_ns()
        results = []
        ready: list[npt.NDArray[Any] | None] = [None] * len(split.output_shapes)
        try:
            if split.into is None:
                parts = split.run()
            else:
                # Each output's array made before it runs: the plan may write an output straight
                # into its own (np.empty touches no page the plan does not write).
                ready = [
                    np.empty(bound, dtype.newbyteorder("="))
                    for bound, dtype in zip(split.output_shapes, self.output_dtypes, strict=True)
                ]
                parts = split.into(ready)
        except SpecError as error:  # a check left to the kernel refuses as the plan's would
            raise from_spec(error) from None
        for part, dtype, bound, made in zip(
            parts, self.output_dtypes, split.output_shapes, ready, strict=True
        ):
            if part.shape != bound and not (
                split.bounded and _within(part.shape, bound)
            ):  # a planner's promise broken: a bug, never the client's fault
                raise RuntimeError(f"{self.op.spec} made {part.shape} where it planned {bound}")
            if part is made:  # written in place, whole
                results.append(part)
                continue
            result = np.empty(part.shape, dtype.newbyteorder("="))
            np.copyto(result, part, casting="equiv")
            results.append(result)
        self.kernel_ns = time.perf_counter_ns() - started
        _elements(self.op.name).inc(sum(result.size for result in results))
        return results

    def output(
        self, out: npt.NDArray[Any] | None = None, *, checked_first: bool = False
    ) -> npt.NDArray[Any]:
        """Run the kernel, into ``out`` if given (a response buffer), and count its elements.

        The kernels move bits, so they write in the input's byte order; a big-endian input
        is computed aside and converted into ``out``.

        A check the plan left to the kernel (``Plan.check``) refuses as the plan's own would:
        a ``ServiceError`` located at the input. ``checked_first``: such checks are made before
        a byte of ``out`` is written (a client's own memory, left as it was when refused).
        """
        started = time.perf_counter_ns()
        plan = self.plan
        if checked_first and isinstance(plan, Plan) and plan.check is not None:
            try:
                plan.check()
            except SpecError as error:
                raise from_spec(error) from None
        if out is not None and self.output_dtype.byteorder == ">":
            np.copyto(out, self._compute(None), casting="equiv")
            result = out
        else:
            result = self._compute(out)
        # The one field set after the checks, read by the pipeline's statistics.
        self.kernel_ns = time.perf_counter_ns() - started
        _elements(self.op.name).inc(result.size)
        return result

    def _compute(self, out: npt.NDArray[Any] | None) -> npt.NDArray[Any]:
        plan = self.plan
        # An op of several outputs computes through ``outputs()``, never here.
        assert isinstance(plan, Plan), f"{self.op.spec} has several outputs"
        try:
            return plan.run(out)
        except SpecError as error:  # a check the plan left to the kernel (Plan.check)
            raise from_spec(error) from None


def _within(shape: tuple[int, ...], bound: tuple[int, ...]) -> bool:
    return len(shape) == len(bound) and all(a <= b for a, b in zip(shape, bound, strict=True))


class KernelSpanJob(Job):
    """A job whose kernel runs in a "kernel" span (tracing on)."""

    def output(
        self, out: npt.NDArray[Any] | None = None, *, checked_first: bool = False
    ) -> npt.NDArray[Any]:
        with tracing.kernel_span():
            return super().output(out, checked_first=checked_first)


def with_kernel_span(job: Job) -> Job:
    """``job``, its kernel run in a span of its own."""
    return KernelSpanJob(
        job.op,
        job.arrays,
        job.attributes,
        job.output_shape,
        job.output_dtype,
        job.plan,
        job.workspace_bytes,
        types=job.types,
    )


def check_declared_limits(
    op: Op, arrays: Arrays, attributes: Mapping[str, Any], rank_limit: int
) -> None:
    """Refuse an index-like input longer than its declared limit (``Input.limit``), or a count
    attribute above its own (``Attribute.limit``), before the op's plan reads either: a plan
    may then make a list or a shape of each element, or of each count, and costs no more than
    a few of them. 413 for a length or count past a limit (the rank limit, MAX_OUTPUTS); 422
    for more than one value where the spec takes a single one. Located at the input or the
    attribute, the message saying how many were given and the limit."""
    for item in op.inputs:
        if not item.limit:
            continue
        array = arrays.get(item.name)
        if array is None:
            continue  # optional and left out
        most = limit_elements(item.limit, rank_limit)
        if array.size <= most:
            continue
        if item.limit == LIMIT_SCALAR:
            # The spec's own words for a single value (the rank it declares), as its plan says.
            kind = "a scalar" if item.rank == "0" else "a scalar or a 1D tensor with one element"
            raise ServiceError(
                Fault.SPEC_VIOLATION,
                ("body", item.name),
                f"{item.name} must be {kind}, got {array.size} elements (shape "
                f"{shown(array.shape)})",
            )
        raise ServiceError(
            Fault.TOO_LARGE,
            ("body", item.name),
            f"{item.name} has {array.size} elements (shape {shown(array.shape)}); it holds at "
            f"most {most}: {limit_words(item.limit, rank_limit)}",
        )
    for attribute in op.attributes:
        if not attribute.limit:
            continue
        value = attributes.get(attribute.name)
        most = limit_elements(attribute.limit, rank_limit)
        if isinstance(value, int) and value > most:
            raise ServiceError(
                Fault.TOO_LARGE,
                ("body", attribute.name),
                f"{attribute.name} = {value} is above the limit of {most}: "
                f"{limit_words(attribute.limit, rank_limit)}",
            )


def _check_inputs(
    op: Op, arrays: Arrays, attributes: Mapping[str, Any], limits: Limits, rank_limit: int
) -> None:
    """``make_job``'s checks of the inputs' shapes and types and of the declared limits."""
    items = op.inputs if op.variadic is None else [op.input_for(name) for name in arrays]
    names = op.input_names if op.variadic is None else tuple(arrays)
    for item, name in zip(items, names, strict=True):
        assert item is not None  # the transports admit only the op's inputs
        array = arrays.get(name)
        if array is None:
            continue  # an optional input left out: the planner takes its default
        shape = array.shape
        # An array NumPy made can be held; only the limits remain, checked inline (the full
        # check, which says what is wrong, runs when they are passed).
        if len(shape) > rank_limit or (shape and max(shape) > limits.max_dimension):
            check_shape(shape, name, limits, itemsize=array.dtype.itemsize)
        if type_name(array.dtype) not in item.element_types:
            raise ServiceError(
                Fault.TENSOR_TYPE,
                ("body", name),
                f"{name} must be of {item.type_words}, got {array.dtype.name}",
            )
    check_declared_limits(op, arrays, attributes, rank_limit)


def make_job(
    op: Op,
    arrays: Arrays,
    attributes: Mapping[str, Any],
    limits: Limits,
    *,
    inputs_checked: bool = False,
) -> Job:
    """Check ``arrays`` (every input of ``op``, decoded) against the spec; size the output.

    Spec violations are 422 located at the input that broke the rule; an output past a limit
    (its bytes, its rank, NumPy's own) is 413, refused before it exists. Both ops keep the
    element type of ``data``.

    ``inputs_checked``: the checks that read only the inputs' shapes and types and the
    attributes (the limits, the element types, the declared limits) passed before for these
    very shapes, types, attributes and limits (a gRPC head kept, ``app/grpc/heads.py``), and
    are not made again; the plan, which reads the values, and the output's checks are.
    """
    rank_limit = min(limits.max_rank, MAX_RANK)
    if not inputs_checked:
        _check_inputs(op, arrays, attributes, limits, rank_limit)
    try:
        planned = op.plan(arrays, attributes)
    except SpecError as error:
        raise from_spec(error) from None
    plan: Plan | SplitPlan = planned
    dtype = arrays[op.output_type_from].dtype
    # The output can have more dimensions than any input (Gather: data.rank - 1 + indices.rank)
    # and dimensions whose product no array can hold even when one of them is 0. An answer may
    # carry it in a wider type than its own (JSON carries bfloat16 as float32): the shape must
    # hold at the widest element of any supported type.
    widest = max(dtype.itemsize, WIDEST_ITEMSIZE)
    if isinstance(planned, SplitPlan):
        if len(planned.output_shapes) > MAX_OUTPUTS:
            raise ServiceError(
                Fault.TOO_LARGE,
                ("body",),
                f"the request would make {len(planned.output_shapes)} outputs, more than the "
                f"{MAX_OUTPUTS} an answer carries",
            )
        shapes: tuple[tuple[int, ...], ...] = tuple(tuple(item) for item in planned.output_shapes)
        shape = shapes[0] if shapes else ()
        plan = SplitPlan(shapes, planned.run, planned.bounded, planned.into)
    else:
        # A tuple whatever sequence the planner gave (the codecs' estimates are cached by shape).
        shape = tuple(planned.output_shape)
        shapes = (shape,)
    types = op.output_types(arrays, attributes, len(shapes)) if op.outputs else None
    if types is not None:
        dtype = types[0]
    nbytes = 0
    for index, each in enumerate(shapes):
        check_shape(each, "output", limits, itemsize=widest, output=True)
        nbytes += math.prod(each) * (dtype if types is None else types[index]).itemsize
    if nbytes > limits.max_output_bytes:
        several = isinstance(plan, SplitPlan)
        what = f"the {len(shapes)} outputs" if several else "the output"
        shown_shape = list(shapes) if several else shape
        raise ServiceError(
            Fault.TOO_LARGE,
            ("body",),
            f"{what} would be {nbytes} bytes (shape {shown_shape}, {dtype.name}), above the "
            f"limit of {limits.max_output_bytes} bytes (raise it with "
            "TENSOR_OPS_MAX_OUTPUT_BYTES)",
        )
    workspace = op.workspace(arrays, attributes)
    return Job(op, arrays, attributes, shape, dtype, plan, workspace, types=types)
