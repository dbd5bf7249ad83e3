"""Each op declared once: kernel, inputs and types, attributes, request model, examples, texts.

Routes, the OpenAPI document, ``/v2`` model metadata and the tests read this table; a new op is
its kernel file and one entry here.
"""

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops.gather import gather, gather_plan, gather_planned, gather_workspace
from app.ops.roll import ROLL_INDEX_TYPES, roll, roll_planned, roll_shifts, roll_workspace
from tensor_ops_wire.dtypes import ELEMENT_TYPES
from tensor_ops_wire.npy import encode_npy_base64

Arrays = Mapping[str, npt.NDArray[Any]]
Attributes = Mapping[str, int]


@dataclass(frozen=True)
class Plan:
    """What an op's planner made of one request's inputs: the output's shape, and how to
    compute it (into ``out`` when given) from the checks already made. The job carries it from
    the checks to the kernel."""

    output_shape: tuple[int, ...]
    run: Callable[[npt.NDArray[Any] | None], npt.NDArray[Any]]


#: Checks the inputs against the spec (raising ``SpecError``) and gives the output's shape, or
#: a ``Plan`` that also computes it from what the checks found (the kernel is then not asked to
#: check again).
Planner = Callable[[Arrays, Attributes], "tuple[int, ...] | Plan"]
#: Computes the output, into ``out`` when given (a response buffer).
Kernel = Callable[[Arrays, Attributes, npt.NDArray[Any] | None], npt.NDArray[Any]]
#: The bytes the kernel holds beyond its inputs and output (its temporaries), for admission.
Workspace = Callable[[Arrays, Attributes], int]


def _no_workspace(arrays: Arrays, attributes: Attributes) -> int:
    return 0


ALL_TYPES: tuple[str, ...] = tuple(e.numpy for e in ELEMENT_TYPES)
INTEGER_TYPES: tuple[str, ...] = tuple(e.numpy for e in ELEMENT_TYPES if e.dtype.kind in "iu")


@dataclass(frozen=True)
class Input:
    """One input of an op: its name, the element types the spec allows, and its description."""

    name: str
    description: str
    #: The spec's type constraint in words, shown in the OpenAPI schema.
    constraint: str
    #: The element types (NumPy names) the spec allows.
    element_types: tuple[str, ...]
    #: The ranks the spec allows, in words (V2 model metadata shows it).
    rank: str = "any"

    @property
    def type_words(self) -> str:
        """The allowed types in words: "type int32 or int64", "an integer type (T_AXIS)"."""
        if self.element_types == INTEGER_TYPES:
            return f"an integer type ({self.constraint.split(':', 1)[0]})"
        if self.element_types == ALL_TYPES:
            return "a supported type"
        return "type " + " or ".join(self.element_types)

    @property
    def is_index(self) -> bool:
        """Indices, shifts, axes: integers, sent as int64 in JSON form."""
        return self.element_types != ALL_TYPES


@dataclass(frozen=True)
class Attribute:
    """An integer attribute of an op (Gather's ``batch_dims``), with its default."""

    name: str
    default: int
    description: str


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one object per op
class Op:
    """One op, as every transport and the docs see it."""

    name: str
    #: The spec's name and version: "Roll-7".
    spec: str
    summary: str
    description: str
    #: The model's docstring in the OpenAPI document.
    request_doc: str
    inputs: tuple[Input, ...]
    plan: Planner
    kernel: Kernel
    workspace: Workspace = _no_workspace
    attributes: tuple[Attribute, ...] = ()
    #: name -> {"summary", "value" (a JSON request), "x-expected-output"}: the spec's examples.
    examples: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @functools.cached_property
    def input_names(self) -> tuple[str, ...]:
        return tuple(item.name for item in self.inputs)

    def attribute_defaults(self) -> dict[str, int]:
        return {attribute.name: attribute.default for attribute in self.attributes}


def _example(summary: str, request: dict[str, Any], output: Any) -> dict[str, Any]:
    return {"summary": summary, "value": request, "x-expected-output": output}


#: The spec's T for ``data``, in words: both ops take, and give back, any element type.
DATA_CONSTRAINT = (
    "T: any supported type (bool, int8-64, uint8-64, float16, bfloat16, float32, float64). "
    "JSON form takes its type from `dtype`, or as NumPy infers it; npy form from its header."
)


def _data(verb: str) -> Input:
    return Input("data", f"The tensor to {verb} (input 1, type T).", DATA_CONSTRAINT, ALL_TYPES)


# ---------------------------------------------------------------------------------------------
# Roll-7

_ROLL_INDEX = tuple(dtype.name for dtype in ROLL_INDEX_TYPES)
_MATRIX = [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]]


def _plan_roll(arrays: Arrays, attributes: Attributes) -> Plan:
    data = arrays["data"]
    net = roll_shifts(data.shape, arrays["shift"], arrays["axes"])
    return Plan(data.shape, functools.partial(roll_planned, data, net))


def _roll(arrays: Arrays, attributes: Attributes, out: npt.NDArray[Any] | None) -> Any:
    return roll(arrays["data"], arrays["shift"], arrays["axes"], out)


def _roll_workspace(arrays: Arrays, attributes: Attributes) -> int:
    data = arrays["data"]
    return roll_workspace(data.shape, data.dtype.itemsize, arrays["shift"], arrays["axes"])


ROLL = Op(
    name="roll",
    spec="Roll-7",
    summary="Roll-7: shift elements along axes, wrapping around",
    description="Roll-7 over `data`: the output has the shape and type of `data`, its elements "
    "shifted by `shift` along `axes` (repeated axes add their shifts; negative axes count from "
    "the end). Send JSON (tensors as nested arrays or base64 .npy) or an .npz archive.",
    request_doc="Roll-7: shift the elements of `data` by `shift` along `axes`.",
    inputs=(
        _data("roll"),
        Input(
            "shift",
            "Places to shift by (input 2, type T_IND_1).",
            "T_IND: int32 or int64, a scalar or a 1D tensor. JSON form is int64; npy form must be "
            "int32 or int64.",
            _ROLL_INDEX,
        ),
        Input(
            "axes",
            "Axes to shift along (input 3, type T_IND_2).",
            "T_IND: int32 or int64, a scalar or a 1D tensor. JSON form is int64; npy form must be "
            "int32 or int64.",
            _ROLL_INDEX,
        ),
    ),
    plan=_plan_roll,
    kernel=_roll,
    workspace=_roll_workspace,
    examples={
        "example_1": _example(
            "Roll-7 Example 1: shift = 1, axes = 0",
            {"data": _MATRIX, "shift": 1, "axes": 0},
            [[10, 11, 12], [1, 2, 3], [4, 5, 6], [7, 8, 9]],
        ),
        "example_2": _example(
            "Roll-7 Example 2: shift = [-1, 2], axes = [0, 1]",
            {"data": _MATRIX, "shift": [-1, 2], "axes": [0, 1]},
            [[5, 6, 4], [8, 9, 7], [11, 12, 10], [2, 3, 1]],
        ),
        "example_3": _example(
            "Roll-7 Example 3: shift = [1, 2, 1], axes = [0, 1, 0] (axis 0 rolled by 1 + 1)",
            {"data": _MATRIX, "shift": [1, 2, 1], "axes": [0, 1, 0]},
            [[8, 9, 7], [11, 12, 10], [2, 3, 1], [5, 6, 4]],
        ),
        "example_1_npy": _example(
            "Roll-7 Example 1 with data as base64 .npy (int64, shape (4, 3)); the output comes "
            "back so",
            {"data": encode_npy_base64(np.array(_MATRIX, dtype=np.int64)), "shift": 1, "axes": 0},
            [[10, 11, 12], [1, 2, 3], [4, 5, 6], [7, 8, 9]],
        ),
    },
)

# ---------------------------------------------------------------------------------------------
# Gather-8

_BATCHES = [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]
_FOUR_D = [
    [[[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16], [17, 18, 19, 20]]],
    [[[21, 22, 23, 24], [25, 26, 27, 28], [29, 30, 31, 32], [33, 34, 35, 36], [37, 38, 39, 40]]],
]


def _plan_gather(arrays: Arrays, attributes: Attributes) -> Plan:
    data, indices = arrays["data"], arrays["indices"]
    plan = gather_plan(
        data.shape, indices.shape, indices.dtype, arrays["axis"], attributes["batch_dims"]
    )
    return Plan(plan.output_shape, functools.partial(gather_planned, data, indices, plan))


def _gather_workspace(arrays: Arrays, attributes: Attributes) -> int:
    return gather_workspace(arrays["indices"].shape, arrays["indices"].dtype)


def _gather(arrays: Arrays, attributes: Attributes, out: npt.NDArray[Any] | None) -> Any:
    return gather(arrays["data"], arrays["indices"], arrays["axis"], attributes["batch_dims"], out)


GATHER = Op(
    name="gather",
    spec="Gather-8",
    summary="Gather-8: take slices along an axis at given indices",
    description="Gather-8 over `data`: the output shape is "
    "`data.shape[:axis] + indices.shape[batch_dims:] + data.shape[axis + 1:]`; indices "
    "outside `[-data.shape[axis], data.shape[axis] - 1]` give zeros. Send JSON (tensors as "
    "nested arrays or base64 .npy) or an .npz archive.",
    request_doc="Gather-8: the slices of `data` along `axis` at `indices`, batch by batch.",
    inputs=(
        _data("gather from"),
        Input(
            "indices",
            "Indices to gather (input 2, type T_IND).",
            "T_IND: any integer type, any shape (a scalar too). Values outside "
            "[-data.shape[axis], data.shape[axis] - 1] give zeros. JSON form is int64.",
            INTEGER_TYPES,
        ),
        Input(
            "axis",
            "The axis to gather along (input 3, type T_AXIS).",
            "T_AXIS: any integer type, a scalar or a 1D tensor of one element, in "
            "[-data.rank, data.rank - 1]. JSON form is int64.",
            INTEGER_TYPES,
            rank="0 or 1",
        ),
    ),
    attributes=(
        Attribute(
            "batch_dims",
            0,
            "Leading dimensions of data and indices that are batches; "
            "in [-min(data.rank, indices.rank), min(data.rank, indices.rank)] and <= axis.",
        ),
    ),
    plan=_plan_gather,
    kernel=_gather,
    workspace=_gather_workspace,
    examples={
        "example_1": _example(
            "Gather-8 Example 1: default batch_dims",
            {"data": [1, 2, 3, 4, 5], "indices": [0, 0, 4], "axis": 0, "batch_dims": 0},
            [1, 1, 5],
        ),
        "example_2": _example(
            "Gather-8 Example 2: batch_dims = 1",
            {"data": _BATCHES, "indices": [[0, 0, 4], [4, 0, 0]], "axis": 1, "batch_dims": 1},
            [[1, 1, 5], [10, 6, 6]],
        ),
        "example_3": _example(
            "Gather-8 Example 3: batch_dims = 2",
            {
                "data": [
                    [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]],
                    [[11, 12, 13, 14, 15], [16, 17, 18, 19, 20]],
                ],
                "indices": [[[0, 0, 4], [4, 0, 0]], [[1, 2, 4], [4, 3, 2]]],
                "axis": 2,
                "batch_dims": 2,
            },
            [[[1, 1, 5], [10, 6, 6]], [[12, 13, 15], [20, 19, 18]]],
        ),
        "example_4": _example(
            "Gather-8 Example 4: axis > batch_dims",
            {"data": _FOUR_D, "indices": [[1, 2, 4], [4, 3, 2]], "axis": 2, "batch_dims": 1},
            [
                [[[5, 6, 7, 8], [9, 10, 11, 12], [17, 18, 19, 20]]],
                [[[37, 38, 39, 40], [33, 34, 35, 36], [29, 30, 31, 32]]],
            ],
        ),
        "example_5": _example(
            "Gather-8 Example 5: negative batch_dims (-1 means indices.rank - 1 = 1)",
            {"data": _BATCHES, "indices": [[0, 0, 4], [4, 0, 0]], "axis": 1, "batch_dims": -1},
            [[1, 1, 5], [10, 6, 6]],
        ),
        "example_6": _example(
            "Gather-8 Example 6: negative indices",
            {"data": [1, 2, 3, 4, 5], "indices": [0, -2, -1], "axis": 0, "batch_dims": 0},
            [1, 4, 5],
        ),
        "example_7": _example(
            "Gather-8 Example 7: indices out of range give zeros",
            {"data": [1, 2, 3, 4, 5], "indices": [3, 10, -20], "axis": 0, "batch_dims": 0},
            [4, 0, 0],
        ),
        "example_7_float32": _example(
            "Gather-8 Example 7 with float32 data (dtype given by name)",
            {
                "data": [1.5, 2.5, 3.5, 4.5, 5.5],
                "indices": [3, 10, -20],
                "axis": 0,
                "dtype": "float32",
            },
            [4.5, 0.0, 0.0],
        ),
    },
)

#: Every op the service offers, by name (the route /name and the V2 model name).
REGISTRY: dict[str, Op] = {op.name: op for op in (ROLL, GATHER)}


def attribute_names() -> frozenset[str]:
    """The attributes of every op: a transport that names one for an op without it refuses it."""
    return frozenset(item.name for op in REGISTRY.values() for item in op.attributes)
