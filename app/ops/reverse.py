"""Reverse-1: the elements of a tensor reversed along the axes given by index or by mask."""

from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops.declaration import (
    INTEGER_TYPES,
    JSON_INFERRED,
    Arrays,
    Attribute,
    Attributes,
    Input,
    Op,
    Plan,
    data_input,
    example,
    narrowed_by_the_cpu_plugin,
)
from app.ops.errors import SpecError
from app.ops.raw import as_raw, copy_block, is_integer_type


def reverse_axes(rank: int, axis: npt.NDArray[Any], mode: str) -> tuple[int, ...]:
    """Check ``axis`` against the spec for ``mode`` and give the axes to reverse, normalised and
    in order (each once)."""
    if mode not in ("index", "mask"):
        raise SpecError("mode", f'mode must be "index" or "mask", got {mode!r:.40}')
    if axis.ndim != 1:
        raise SpecError(
            "axis", f"axis must be a 1D tensor, got a tensor of shape {list(axis.shape)}"
        )
    if mode == "mask":
        if axis.dtype.kind != "b":
            raise SpecError(
                "axis", f'in "mask" mode axis must be of boolean type, got {axis.dtype.name}'
            )
        if axis.shape[0] != rank:
            raise SpecError(
                "axis",
                f'in "mask" mode axis must have as many elements as data has dimensions ({rank}), '
                f"got {axis.shape[0]}",
            )
        return tuple(int(index) for index in np.flatnonzero(axis))
    if not is_integer_type(axis.dtype):
        raise SpecError(
            "axis", f'in "index" mode axis must be of an integer type, got {axis.dtype.name}'
        )
    if axis.shape[0] > rank:
        raise SpecError(
            "axis",
            f'in "index" mode axis may hold from 0 to {rank} (the rank of data) axes, '
            f"got {axis.shape[0]}",
        )
    found: set[int] = set()
    for position, value in enumerate(axis.tolist()):
        if not -rank <= value < rank:
            raise SpecError(
                "axis",
                f"axis[{position}] = {value} is out of range for data of rank {rank} "
                f"(expected [{-rank}, {rank - 1}])",
            )
        found.add(value % rank)
    return tuple(sorted(found))


def reverse(
    data: npt.ArrayLike,
    axis: npt.ArrayLike,
    mode: str,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """Reverse-1: ``data`` reversed along ``axis`` (indices in "index" mode, a boolean mask of
    data's rank in "mask" mode); into ``out`` when given."""
    data = np.asarray(data)
    axes = reverse_axes(data.ndim, np.asarray(axis), mode)
    return _reversed(data, axes, out)


def _reversed(
    data: npt.NDArray[Any], axes: tuple[int, ...], out: npt.NDArray[Any] | None
) -> npt.NDArray[Any]:
    if out is None:
        out = np.empty(data.shape, data.dtype)
    source, target = as_raw(data), as_raw(out)
    if not axes or not data.size:
        np.copyto(target, source, casting="equiv")
    elif source.flags.c_contiguous and target.flags.c_contiguous:
        # The compiled strided copy: rows reversed at a copy's speed, and the axes that walk on
        # from one another merged (reversed along every axis, the data is one reversed row).
        copy_block(target.reshape(-1), target, source.reshape(-1), np.flip(source, axes))
    else:
        np.copyto(target, np.flip(source, axes), casting="equiv")
    return out


def _plan(arrays: Arrays, attributes: Attributes) -> Plan:
    data = arrays["data"]
    axes = reverse_axes(data.ndim, arrays["axis"], attributes["mode"])
    return Plan(data.shape, lambda out: _reversed(data, axes, out))


_CUBE = [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]

OP = Op(
    name="reverse",
    spec="Reverse-1",
    summary="Reverse-1: reverse the elements along axes, given by index or by mask",
    description="Reverse-1 over `data`: the output has the shape and type of `data`, its "
    "elements reversed along the axes `axis` names: their indices in `index` mode, a boolean "
    "mask of data's rank in `mask` mode (`mode` is required). No axis: the data passes through.",
    request_doc="Reverse-1: `data` reversed along the axes `axis` gives, as indices or a mask.",
    inputs=(
        data_input("reverse"),
        Input(
            "axis",
            "The axes to reverse (input 2): indices (type T2) in index mode, a mask (type T3) of "
            "data's rank in mask mode.",
            "T2: any integer type, a 1D tensor of 0 to rank(data) axes in [-rank, rank - 1] "
            "(index mode); T3: boolean, a 1D tensor of rank(data) elements (mask mode). JSON form: "
            "integers are int64, booleans bool.",
            (*INTEGER_TYPES, "bool"),
            rank="1",
            json_form=JSON_INFERRED,
            limit="rank",
        ),
    ),
    attributes=(
        Attribute(
            "mode",
            None,
            "How `axis` is read: `index` (the axes' indices) or `mask` (one boolean an axis).",
            choices=("index", "mask"),
        ),
    ),
    plan=_plan,
    examples={
        "example_index": example(
            "Reverse-1, index mode: axis [1] of a (2, 2, 2) tensor",
            {"data": _CUBE, "axis": [1], "mode": "index"},
            [[[3, 4], [1, 2]], [[7, 8], [5, 6]]],
        ),
        "example_mask": example(
            "Reverse-1, mask mode: axes 0 and 2",
            {"data": _CUBE, "axis": [True, False, True], "mode": "mask"},
            [[[6, 5], [8, 7]], [[2, 1], [4, 3]]],
        ),
        "example_none": example(
            "Reverse-1 with no axis: the data passes through",
            {"data": [[1, 2], [3, 4]], "axis": [], "mode": "index"},
            [[1, 2], [3, 4]],
        ),
    },
    decisions=(
        "Reverse-1, negative axes in index mode: an axis in [-rank, -1] counts from the end, as "
        "OpenVINO normalises axes; the spec does not say.",
        "Reverse-1, an axis given twice in index mode: the axis is reversed once (the axes are a "
        "set, as in OpenVINO's reference), not twice.",
        "Reverse-1, axis as a scalar: refused; the spec asks for a 1D tensor in either mode.",
        "Reverse-1, the type of axis must fit the mode: an integer type in index mode, boolean in "
        "mask mode (T2 and T3); the other is refused naming axis.",
    ),
    disagreements=narrowed_by_the_cpu_plugin("Reverse-1"),
)
