"""SpaceToBatch-2: the spatial dimensions, zero padded, cut in blocks interleaved with the batch."""

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

#: Up to this many blocks, each is one strided copy from data (and the padding around it is
#: zeroed); past it, data is padded into a temporary of the output's size, moved in one copy.
_BLOCKS_COPIED_ONE_BY_ONE = 256


def block_input(name: str, values: npt.NDArray[Any], rank: int) -> list[int]:
    """``values`` checked as a 1-D tensor of an integer type with ``rank`` elements (the shape
    is checked before anything is listed), as Python integers."""
    if not is_integer_type(values.dtype):
        raise SpecError(name, f"{name} must be of an integer type (T2), got {values.dtype.name}")
    if values.shape != (rank,):
        raise SpecError(
            name,
            f"{name} must be a 1-D tensor of shape [N], N = {rank} the rank of data; got shape "
            f"{list(values.shape)}",
        )
    return [int(value) for value in values.tolist()]


def space_to_batch_layout(
    shape: tuple[int, ...],
    block_shape: npt.NDArray[Any],
    pads_begin: npt.NDArray[Any],
    pads_end: npt.NDArray[Any],
) -> tuple[tuple[int, ...], list[int], list[int]]:
    """Check SpaceToBatch-2's rules; give the output's shape ``[batch * B_1 * ... * B_{N-1},
    (D_1 + P_1) / B_1, ...]`` in Python integers (a shape no array can hold is admission's to
    refuse, before anything exists), the blocks and the pads at the beginning."""
    rank = len(shape)
    if rank < 2:
        raise SpecError("data", f"data must be a tensor of rank >= 2, got rank {rank}")
    blocks = block_input("block_shape", block_shape, rank)
    begins = block_input("pads_begin", pads_begin, rank)
    ends = block_input("pads_end", pads_end, rank)
    for axis, block in enumerate(blocks):
        if block < 1:
            raise SpecError(
                "block_shape", f"block_shape values must be >= 1, got {block} at index {axis}"
            )
    if blocks[0] != 1:
        raise SpecError("block_shape", f"block_shape[0] is expected to be 1, got {blocks[0]}")
    for name, pads in (("pads_begin", begins), ("pads_end", ends)):
        for axis, pad in enumerate(pads):
            if pad < 0:
                raise SpecError(
                    name, f"{name} values must be non-negative, got {pad} at index {axis}"
                )
        if pads[0]:
            raise SpecError(name, f"{name}[0] is expected to be 0, got {pads[0]}")
    reduced = []
    for axis in range(1, rank):
        padded = shape[axis] + begins[axis] + ends[axis]
        if padded % blocks[axis]:
            raise SpecError(
                "block_shape",
                f"block_shape[{axis}] = {blocks[axis]} must divide data_shape[{axis}] + "
                f"pads_begin[{axis}] + pads_end[{axis}] = {padded}",
            )
        reduced.append(padded // blocks[axis])
    return (shape[0] * math.prod(blocks), *reduced), blocks[1:], begins[1:]


def space_to_batch(
    data: npt.ArrayLike,
    block_shape: npt.ArrayLike,
    pads_begin: npt.ArrayLike,
    pads_end: npt.ArrayLike,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """SpaceToBatch-2 of ``data``; into ``out`` when given."""
    data = np.asarray(data)
    layout = space_to_batch_layout(
        data.shape, np.asarray(block_shape), np.asarray(pads_begin), np.asarray(pads_end)
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
    batch, sizes, reduced = data.shape[0], data.shape[1:], out.shape[1:]
    # The output is x'' of the spec: [B_1, ..., B_{N-1}, batch, (D_1 + P_1) / B_1, ...].
    target = as_raw(out).reshape(*blocks, batch, *reduced)
    source = as_raw(data)
    padless = all(b == 0 for b in begins) and all(
        q * b == size for q, b, size in zip(reduced, blocks, sizes, strict=True)
    )
    if padless and data.flags.c_contiguous and out.flags.c_contiguous:
        # No padding: one compiled permuted copy, each input line read once.
        count = len(blocks)
        split = source.reshape(batch, *itertools.chain(*zip(reduced, blocks, strict=True)))
        order = [2 + 2 * axis for axis in range(count)] + [0]
        order += [1 + 2 * axis for axis in range(count)]
        copy_gathered(target, source.reshape(-1), split.transpose(order))
        return
    if math.prod(blocks) > _BLOCKS_COPIED_ONE_BY_ONE:
        padded = np.zeros((batch, *(q * b for q, b in zip(reduced, blocks, strict=True))),
                          source.dtype)  # fmt: skip
        inner = tuple(slice(b, b + s) for b, s in zip(begins, sizes, strict=True))
        padded[(slice(None), *inner)] = source
        split = padded.reshape(batch, *itertools.chain(*zip(reduced, blocks, strict=True)))
        count = len(blocks)
        order = [2 + 2 * axis for axis in range(count)] + [0]
        order += [1 + 2 * axis for axis in range(count)]
        np.copyto(target, split.transpose(order), casting="equiv")
        return
    for block in itertools.product(*(range(b) for b in blocks)):
        into = target[block]
        taken, placed = [slice(None)], [slice(None)]
        for b, pad, size, step, length in zip(block, begins, sizes, blocks, reduced, strict=True):
            # Data index d lands at d + pad = q * step + b: d = first, first + step, ...
            first = (b - pad) % step
            count = max(0, -(-(size - first) // step))
            start = (first + pad) // step
            taken.append(slice(first, first + (count - 1) * step + 1 if count else first, step))
            placed.append(slice(start, start + count))
            # The padding on either side of the data along this axis is zero.
            into[(*[slice(None)] * len(placed[:-1]), slice(0, start))] = 0
            into[(*[slice(None)] * len(placed[:-1]), slice(start + count, length))] = 0
        np.copyto(into[tuple(placed)], source[tuple(taken)], casting="equiv")


def _plan(arrays: Arrays, attributes: Attributes) -> Plan:
    data = arrays["data"]
    layout = space_to_batch_layout(
        data.shape, arrays["block_shape"], arrays["pads_begin"], arrays["pads_end"]
    )
    return Plan(layout[0], lambda out: _moved(data, *layout, out))


def _workspace(arrays: Arrays, attributes: Attributes) -> int:
    """Past _BLOCKS_COPIED_ONE_BY_ONE blocks, the padded data: the output's bytes."""
    data = arrays["data"]
    try:
        shape, blocks, _ = space_to_batch_layout(
            data.shape, arrays["block_shape"], arrays["pads_begin"], arrays["pads_end"]
        )
    except SpecError:
        return 0
    if math.prod(blocks) <= _BLOCKS_COPIED_ONE_BY_ONE:
        return 0
    return math.prod(shape) * data.dtype.itemsize


def _spec_formula(
    data: npt.NDArray[Any], blocks: list[int], begins: list[int], ends: list[int]
) -> npt.NDArray[Any]:
    """The spec's zero pad, reshape, transpose, reshape, written out (the examples' outputs)."""
    x = np.pad(data, list(zip(begins, ends, strict=True)))
    count = data.ndim - 1
    x1 = x.reshape(x.shape[0], *itertools.chain(*((x.shape[a] // blocks[a], blocks[a])
                                                   for a in range(1, data.ndim))))  # fmt: skip
    order = [2 + 2 * a for a in range(count)] + [0] + [1 + 2 * a for a in range(count)]
    return x1.transpose(order).reshape(x.shape[0] * math.prod(blocks), *x1.shape[1::2])


_EXAMPLE = np.arange(1, 2 * 6 * 10 * 3 * 3 + 1).reshape(2, 6, 10, 3, 3)
_EXAMPLE_ARGS = ([1, 2, 4, 3, 1], [0, 0, 1, 0, 0], [0, 0, 1, 0, 0])
_SMALL = [[1, 2, 3], [4, 5, 6]]


def _index_input(name: str, position: int, text: str) -> Input:
    return Input(
        name,
        f"{text} (input {position}, type T2).",
        "T2: any integer type, a 1-D tensor of shape [N], N the rank of data. JSON form is int64.",
        INTEGER_TYPES,
        rank="1",
        limit="rank",  # one element an axis: counted on its shape before it is read
    )


OP = Op(
    name="space_to_batch",
    spec="SpaceToBatch-2",
    summary="SpaceToBatch-2: cut zero-padded spatial dimensions into blocks moved to the batch",
    description="SpaceToBatch-2 over `data` [batch, D_1, ..., D_{N-1}] (rank >= 2): the spatial "
    "dimensions, zero padded by `pads_begin` and `pads_end`, are divided into a grid of "
    "`block_shape` blocks interleaved with the batch dimension; the output is [batch * B_1 * "
    "... * B_{N-1}, (D_1 + P_1) / B_1, ...] of the type of `data`. block_shape[0] must be 1 and "
    "the pads of the batch axis 0.",
    request_doc="SpaceToBatch-2: `data`'s zero-padded spatial dimensions moved into the batch "
    "by blocks of `block_shape`.",
    inputs=(
        data_input("divide into blocks ([batch, D_1, ..., D_{N-1}], rank >= 2)"),
        _index_input("block_shape", 2, "The block sizes, all >= 1, block_shape[0] = 1"),
        _index_input(
            "pads_begin",
            3,
            "The zero padding at the beginning of each axis, all >= 0, pads_begin[0] = 0",
        ),
        _index_input(
            "pads_end", 4, "The zero padding at the end of each axis, all >= 0, pads_end[0] = 0"
        ),
    ),
    plan=_plan,
    workspace=_workspace,
    examples={
        "example_1": example(
            "SpaceToBatch-2's example: [2, 6, 10, 3, 3], block_shape [1, 2, 4, 3, 1], pads "
            "[0, 0, 1, 0, 0] both sides, gives [48, 3, 3, 1, 3]",
            {
                "data": _EXAMPLE.tolist(),
                "block_shape": _EXAMPLE_ARGS[0],
                "pads_begin": _EXAMPLE_ARGS[1],
                "pads_end": _EXAMPLE_ARGS[2],
            },
            _spec_formula(_EXAMPLE, *_EXAMPLE_ARGS).tolist(),
        ),
        "example_padded": example(
            "SpaceToBatch-2 of [2, 3], block_shape [1, 2], one zero before along axis 1",
            {"data": _SMALL, "block_shape": [1, 2], "pads_begin": [0, 1], "pads_end": [0, 0]},
            [[0, 2], [0, 5], [1, 3], [4, 6]],
        ),
    },
    decisions=(
        "SpaceToBatch-2, block_shape[0], pads_begin[0] and pads_end[0] other than 1, 0 and 0: "
        'refused (the spec says they are expected to be; B_0 "is ignored" in the description '
        "but multiplies the batch in the output's shape: requiring 1 makes both readings agree).",
        "SpaceToBatch-2, block_shape[i] not dividing data_shape[i] + pads_begin[i] + pads_end[i]:"
        " refused naming block_shape.",
        "SpaceToBatch-2, block_shape, pads_begin and pads_end of another length than data's "
        "rank, or not 1-D: refused naming the input, before any value is read.",
        "SpaceToBatch-2, empty dimensions: allowed; an empty output has the shape the formula "
        "gives (a shape past the limits is refused 413 before anything is allocated).",
    ),
    disagreements=(
        "SpaceToBatch-2 on the CPU plugin: some of the zero padding comes back filled with "
        "copies of data (about 5% of generated padded cases, 8 of 150 from rank 3 to 5). "
        "Reproducer: int32 data [[[[1], [2]]]] (shape [1, 1, 2, 1]), block_shape [1, 1, 1, 2], "
        "pads_begin [0, 0, 1, 0], pads_end [0, 0, 0, 1]: the spec gives [[[[0], [1], [2]]], "
        "[[[0], [0], [0]]]], the plugin [[[[0], [1], [2]]], [[[0], [2], [0]]]]; the service "
        "pads with zero bits.",
        *narrowed_by_the_cpu_plugin("SpaceToBatch-2"),
    ),
)
