"""BatchToSpace-2: the batch dimension moved into blocks of the spatial ones, then cropped."""

import itertools
import math
from typing import Any

import numpy as np
import numpy.typing as npt

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
from app.ops.raw import as_raw, copy_gathered, is_integer_type, without_still_axes

#: Up to this many blocks, each is one strided copy into the output; past it, the uncropped
#: output is one permuted copy (into a temporary of data's size when something is cropped).
_BLOCKS_COPIED_ONE_BY_ONE = 256


def _listed(name: str, values: npt.NDArray[Any], rank: int) -> list[int]:
    """``values`` checked as a 1-D tensor of an integer type with ``rank`` elements (the shape
    is checked before anything is listed), as Python integers."""
    if not is_integer_type(values.dtype):
        raise SpecError(name, f"{name} must be of an integer type (T_INT), got {values.dtype.name}")
    if values.shape != (rank,):
        raise SpecError(
            name,
            f"{name} must be a 1D tensor of shape [N], N = {rank} the rank of data; got shape "
            f"{list(values.shape)}",
        )
    return [int(value) for value in values.tolist()]


def batch_to_space_layout(
    shape: tuple[int, ...],
    block_shape: npt.NDArray[Any],
    crops_begin: npt.NDArray[Any],
    crops_end: npt.NDArray[Any],
) -> tuple[tuple[int, ...], list[int], list[int]]:
    """Check BatchToSpace-2's rules; give the output's shape ``[batch / (B_0 * ... * B_{N-1}),
    D_1 * B_1 - CB_1 - CE_1, ...]`` in Python integers, the blocks and the crops at the
    beginning of the spatial axes."""
    rank = len(shape)
    if rank < 2:
        raise SpecError(
            "data", f"data must be a tensor of rank greater than or equal to 2, got rank {rank}"
        )
    blocks = _listed("block_shape", block_shape, rank)
    begins = _listed("crops_begin", crops_begin, rank)
    ends = _listed("crops_end", crops_end, rank)
    for axis, block in enumerate(blocks):
        if block < 1:
            raise SpecError(
                "block_shape",
                f"block_shape values must be greater than or equal to 1, got {block} at index "
                f"{axis}",
            )
    if blocks[0] != 1:
        raise SpecError("block_shape", f"block_shape[0] is expected to be 1, got {blocks[0]}")
    for name, crops in (("crops_begin", begins), ("crops_end", ends)):
        for axis, crop in enumerate(crops):
            if crop < 0:
                raise SpecError(
                    name,
                    f"{name} values must be greater than or equal to 0, got {crop} at index {axis}",
                )
        if crops[0]:
            raise SpecError(name, f"{name}[0] is expected to be 0, got {crops[0]}")
    product = math.prod(blocks)
    if shape[0] % product:
        raise SpecError(
            "block_shape",
            f"the batch axis of data ({shape[0]}) must be evenly divisible by the cumulative "
            f"product of block_shape elements ({product})",
        )
    sizes = []
    for axis in range(1, rank):
        full = shape[axis] * blocks[axis]
        if begins[axis] + ends[axis] > full:
            raise SpecError(
                "crops_end",
                f"crops_begin[{axis}] + crops_end[{axis}] = {begins[axis] + ends[axis]} must "
                f"be <= block_shape[{axis}] * input_shape[{axis}] = {full}",
            )
        sizes.append(full - begins[axis] - ends[axis])
    return (shape[0] // product, *sizes), blocks[1:], begins[1:]


def batch_to_space(
    data: npt.ArrayLike,
    block_shape: npt.ArrayLike,
    crops_begin: npt.ArrayLike,
    crops_end: npt.ArrayLike,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """BatchToSpace-2 of ``data``; into ``out`` when given."""
    data = np.asarray(data)
    layout = batch_to_space_layout(
        data.shape, np.asarray(block_shape), np.asarray(crops_begin), np.asarray(crops_end)
    )
    return _moved(data, *layout, out)


def _moved(
    data: npt.NDArray[Any],
    shape: tuple[int, ...],
    blocks: list[int],
    begins: list[int],
    out: npt.NDArray[Any] | None,
) -> npt.NDArray[Any]:
    if out is None:
        out = np.empty(shape, data.dtype)
    if math.prod(shape):
        _move(*without_still_axes(data, out, blocks, begins))
    return out


def _move(
    data: npt.NDArray[Any], out: npt.NDArray[Any], blocks: list[int], begins: list[int]
) -> None:
    shape = out.shape
    batch, sizes = shape[0], data.shape[1:]
    # x' of the spec: [B_1, ..., B_{N-1}, batch / prod(B), D_1, ..., D_{N-1}].
    source = as_raw(data).reshape(*blocks, batch, *sizes)
    target = as_raw(out)
    count = len(blocks)
    full = (batch, *(size * block for size, block in zip(sizes, blocks, strict=True)))
    if full == shape and data.flags.c_contiguous and out.flags.c_contiguous:
        # Nothing cropped: one compiled permuted copy, each output line written whole.
        order = [count, *list(itertools.chain(*((count + 1 + a, a) for a in range(count))))]
        split = target.reshape(batch, *itertools.chain(*zip(sizes, blocks, strict=True)))
        copy_gathered(split, as_raw(data).reshape(-1), source.transpose(order))
        return
    if math.prod(blocks) > _BLOCKS_COPIED_ONE_BY_ONE:
        cropped = full != shape
        whole = np.empty(full, target.dtype) if cropped else target
        order = [count, *list(itertools.chain(*((count + 1 + a, a) for a in range(count))))]
        split = whole.reshape(batch, *itertools.chain(*zip(sizes, blocks, strict=True)))
        np.copyto(split, source.transpose(order), casting="equiv")
        if cropped:
            kept = tuple(slice(b, b + s) for b, s in zip(begins, shape[1:], strict=True))
            np.copyto(target, whole[(slice(None), *kept)], casting="equiv")
        return
    for block in itertools.product(*(range(b) for b in blocks)):
        taken, placed = [slice(None)], [slice(None)]
        for b, crop, size, step, length in zip(block, begins, sizes, blocks, shape[1:],
                                               strict=True):  # fmt: skip
            # Data index d lands at p = d * step + b; the output keeps crop <= p < crop + length.
            first = max(0, -(-(crop - b) // step))
            last = min(size, -(-(crop + length - b) // step))
            if last <= first:
                break
            taken.append(slice(first, last))
            start = first * step + b - crop
            placed.append(slice(start, start + (last - first - 1) * step + 1, step))
        else:
            np.copyto(target[tuple(placed)], source[block][tuple(taken)], casting="equiv")


def _plan(arrays: Arrays, attributes: Attributes) -> Plan:
    data = arrays["data"]
    layout = batch_to_space_layout(
        data.shape, arrays["block_shape"], arrays["crops_begin"], arrays["crops_end"]
    )
    return Plan(layout[0], lambda out: _moved(data, *layout, out))


def _workspace(arrays: Arrays, attributes: Attributes) -> int:
    """Past _BLOCKS_COPIED_ONE_BY_ONE blocks with something cropped, the uncropped output:
    data's bytes."""
    data = arrays["data"]
    try:
        shape, blocks, _ = batch_to_space_layout(
            data.shape, arrays["block_shape"], arrays["crops_begin"], arrays["crops_end"]
        )
    except SpecError:
        return 0
    if math.prod(blocks) <= _BLOCKS_COPIED_ONE_BY_ONE or math.prod(shape) == data.size:
        return 0
    return int(data.nbytes)


def _spec_formula(
    data: npt.NDArray[Any], blocks: list[int], begins: list[int], ends: list[int]
) -> npt.NDArray[Any]:
    """The spec's four steps written out (the examples' expected outputs)."""
    count = data.ndim - 1
    batch = data.shape[0] // math.prod(blocks)
    x1 = data.reshape(*blocks[1:], batch, *data.shape[1:])
    order = [count, *list(itertools.chain(*((count + 1 + a, a) for a in range(count))))]
    x3 = x1.transpose(order).reshape(
        batch, *(data.shape[a] * blocks[a] for a in range(1, data.ndim))
    )
    kept = (slice(None), *(slice(begins[a], x3.shape[a] - ends[a]) for a in range(1, data.ndim)))
    return x3[kept]


_EXAMPLE_1 = np.arange(1, 21).reshape(10, 2)
_EXAMPLE_2 = np.arange(1, 48 * 3 * 3 * 1 * 3 + 1).reshape(48, 3, 3, 1, 3)
_ARGS_2 = ([1, 2, 4, 3, 1], [0, 0, 1, 0, 0], [0, 0, 1, 0, 0])


def _index_input(name: str, position: int, text: str) -> Input:
    return Input(
        name,
        f"{text} (input {position}, type T_INT).",
        "T_INT: any integer type, a 1D tensor of shape [N], N the rank of data. JSON form is "
        "int64.",
        INTEGER_TYPES,
        rank="1",
        limit="rank",  # one element an axis: counted on its shape before it is read
    )


OP = Op(
    name="batch_to_space",
    spec="BatchToSpace-2",
    summary="BatchToSpace-2: move the batch dimension into spatial blocks, then crop",
    description="BatchToSpace-2 over `data` [batch, D_1, ..., D_{N-1}] (rank >= 2): the batch "
    "is divided into `block_shape` blocks moved into the spatial dimensions, which are then "
    "cropped by `crops_begin` and `crops_end`; the output is [batch / (B_1 * ... * B_{N-1}), "
    "D_1 * B_1 - CB_1 - CE_1, ...] of the type of `data`. block_shape[0] must be 1 and the "
    "crops of the batch axis 0.",
    request_doc="BatchToSpace-2: `data`'s batch moved into `block_shape` blocks of its spatial "
    "dimensions, cropped.",
    inputs=(
        data_input("move ([batch, D_1, ..., D_{N-1}], rank >= 2)"),
        _index_input("block_shape", 2, "The block sizes, all >= 1, block_shape[0] = 1"),
        _index_input(
            "crops_begin",
            3,
            "The amount to crop from the beginning of each axis, all >= 0, crops_begin[0] = 0",
        ),
        _index_input(
            "crops_end",
            4,
            "The amount to crop from the ending of each axis, all >= 0, crops_end[0] = 0",
        ),
    ),
    plan=_plan,
    workspace=_workspace,
    examples={
        "example_2d": example(
            "BatchToSpace-2's example with a 2D input tensor: [10, 2], block_shape [1, 5], "
            "crops_begin [0, 2], crops_end [0, 0] gives [2, 8]",
            {
                "data": _EXAMPLE_1.tolist(),
                "block_shape": [1, 5],
                "crops_begin": [0, 2],
                "crops_end": [0, 0],
            },
            [[9, 13, 17, 2, 6, 10, 14, 18], [11, 15, 19, 4, 8, 12, 16, 20]],
        ),
        "example_5d": example(
            "BatchToSpace-2's example with a 5D input tensor: [48, 3, 3, 1, 3], block_shape "
            "[1, 2, 4, 3, 1], crops [0, 0, 1, 0, 0] both sides, gives [2, 6, 10, 3, 3]",
            {
                "data": _EXAMPLE_2.tolist(),
                "block_shape": _ARGS_2[0],
                "crops_begin": _ARGS_2[1],
                "crops_end": _ARGS_2[2],
            },
            _spec_formula(_EXAMPLE_2, *_ARGS_2).tolist(),
        ),
    },
    decisions=(
        "BatchToSpace-2, block_shape[0], crops_begin[0] and crops_end[0] other than 1, 0 and 0: "
        "refused (the spec says they are expected to be).",
        "BatchToSpace-2, a batch not divisible by the product of block_shape: refused naming "
        "block_shape; crops_begin[i] + crops_end[i] past block_shape[i] * input_shape[i]: "
        "refused naming crops_end.",
        "BatchToSpace-2, block_shape, crops_begin and crops_end of another length than data's "
        "rank, or not 1D: refused naming the input, before any value is read.",
        "BatchToSpace-2, empty dimensions: allowed (a batch of 0 is divisible by any product); "
        "the output has the shape the formula gives (a shape no array can hold is refused 413).",
    ),
    disagreements=narrowed_by_the_cpu_plugin("BatchToSpace-2"),
)
