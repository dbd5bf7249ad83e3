"""SpaceToDepth-1: blocks of the spatial dimensions' values moved into the depth dimension."""

import itertools
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops.declaration import (
    Arrays,
    Attribute,
    Attributes,
    Op,
    Plan,
    data_input,
    example,
    narrowed_by_the_cpu_plugin,
)
from app.ops.errors import SpecError
from app.ops.raw import as_raw, copy_gathered

MODES = ("blocks_first", "depth_first")
#: Up to this many blocks, each is one strided copy (the writes stay contiguous); past it, the
#: whole permuted view is one copy (a block then holds few elements, a copy's call costs more).
_BLOCKS_COPIED_ONE_BY_ONE = 256


def space_to_depth_shape(shape: tuple[int, ...], block_size: int, mode: str) -> tuple[int, ...]:
    """Check SpaceToDepth-1's rules and give the output's shape ``[N, C * block_size ^ K,
    D1 / block_size, ..., DK / block_size]``, in Python integers (nothing allocated)."""
    if mode not in MODES:
        raise SpecError("mode", f'mode must be "blocks_first" or "depth_first", got {mode!r:.40}')
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise SpecError("block_size", f"block_size must be a positive integer, got {block_size}")
    if len(shape) < 3:
        raise SpecError("data", f"data must be a tensor of rank >= 3, got rank {len(shape)}")
    for axis, size in enumerate(shape[2:], start=2):
        if size % block_size:
            raise SpecError(
                "block_size",
                f"the spatial dimensions must be evenly divided by block_size ({block_size}); "
                f"dimension {axis} of data is {size}",
            )
    # block_size ** K is a Python integer: a depth no array can hold is admission's to refuse.
    depth = shape[1] * block_size ** (len(shape) - 2)
    return (shape[0], depth, *(size // block_size for size in shape[2:]))


def space_to_depth(
    data: npt.ArrayLike, mode: str, block_size: int = 1, out: npt.NDArray[Any] | None = None
) -> npt.NDArray[Any]:
    """SpaceToDepth-1 of ``data`` (``[N, C, D1, ..., DK]``); into ``out`` when given."""
    data = np.asarray(data)
    shape = space_to_depth_shape(data.shape, block_size, mode)
    return _moved(data, shape, block_size, mode, out)


def _moved(
    data: npt.NDArray[Any],
    shape: tuple[int, ...],
    block_size: int,
    mode: str,
    out: npt.NDArray[Any] | None,
) -> npt.NDArray[Any]:
    if out is None:
        out = np.empty(shape, data.dtype)
    if not math.prod(shape):
        return out
    if block_size == 1:
        # The identity, in both modes: copied as it is, not through the view of about twice
        # the data's dimensions below, which NumPy cannot make past rank 33 (TENSOR_OPS_MAX_RANK
        # allows 64).
        np.copyto(as_raw(out), as_raw(data), casting="equiv")
        return out
    batch, channels, *sizes = data.shape
    reduced = shape[2:]
    spatial = len(sizes)
    blocks = (block_size,) * spatial
    # x' of the spec: [N, C, D1 / bs, bs, D2 / bs, bs, ...] (a view when data is C-ordered).
    source = as_raw(data).reshape(
        batch, channels, *itertools.chain(*((size, block_size) for size in reduced))
    )
    # The output's depth split as the mode gathers it: [bs, ..., bs, C] or [C, bs, ..., bs].
    split = (*blocks, channels) if mode == "blocks_first" else (channels, *blocks)
    target = as_raw(out).reshape(batch, *split, *reduced)
    first, rest = (
        [3 + 2 * axis for axis in range(spatial)],
        [2 + 2 * axis for axis in range(spatial)],
    )
    order = [0, *first, 1, *rest] if mode == "blocks_first" else [0, 1, *first, *rest]
    if data.flags.c_contiguous and out.flags.c_contiguous:
        # The compiled copy: each input line read once while in the cache.
        copy_gathered(target, as_raw(data).reshape(-1), source.transpose(order))
        return out
    if block_size**spatial > _BLOCKS_COPIED_ONE_BY_ONE:
        np.copyto(target, source.transpose(order), casting="equiv")
        return out
    # One block (b1, ..., bK) at a time: every block_size-th element of each spatial dimension
    # from b1, ..., bK, written contiguously as C (or every bs^K-th) channels of the output.
    lead: tuple[Any, ...] = (slice(None),) * (1 if mode == "blocks_first" else 2)
    for block in itertools.product(range(block_size), repeat=spatial):
        spread: list[Any] = [slice(None), slice(None)]
        for b in block:
            spread += [slice(None), b]
        np.copyto(target[(*lead, *block)], source[tuple(spread)], casting="equiv")
    return out


def _plan(arrays: Arrays, attributes: Attributes) -> Plan:
    data = arrays["data"]
    block_size, mode = attributes["block_size"], attributes["mode"]
    shape = space_to_depth_shape(data.shape, block_size, mode)
    return Plan(shape, lambda out: _moved(data, shape, block_size, mode, out))


def _spec_formula(data: npt.NDArray[Any], block_size: int, mode: str) -> npt.NDArray[Any]:
    """The spec's reshape, transpose, reshape, written out (the examples' expected outputs)."""
    n, c, *sizes = data.shape
    k = len(sizes)
    reduced = [size // block_size for size in sizes]
    x1 = data.reshape(n, c, *itertools.chain(*((size, block_size) for size in reduced)))
    first, rest = [3 + 2 * i for i in range(k)], [2 + 2 * i for i in range(k)]
    order = [0, *first, 1, *rest] if mode == "blocks_first" else [0, 1, *first, *rest]
    return x1.transpose(order).reshape(n, c * block_size**k, *reduced)


_EXAMPLE = np.arange(5 * 7 * 4 * 6).reshape(5, 7, 4, 6)
_SMALL = np.arange(1 * 2 * 2 * 4).reshape(1, 2, 2, 4)

OP = Op(
    name="space_to_depth",
    spec="SpaceToDepth-1",
    summary="SpaceToDepth-1: move blocks of the spatial dimensions into the depth",
    description="SpaceToDepth-1 over `data` of shape [N, C, D1, ..., DK] (rank >= 3): the output "
    "[N, C * block_size^K, D1 / block_size, ..., DK / block_size] of the type of `data`. `mode` "
    "(required) says how the output depth is gathered: `blocks_first` from [block_size, ..., "
    "block_size, C], `depth_first` from [C, block_size, ..., block_size]. Every spatial "
    "dimension must be divided by block_size.",
    request_doc="SpaceToDepth-1: blocks of `data`'s spatial dimensions moved into its depth.",
    inputs=(data_input("rearrange ([N, C, D1, ..., DK], rank >= 3)"),),
    attributes=(
        Attribute(
            "mode",
            None,
            "How the output depth is gathered from block coordinates and the old depth: "
            "`blocks_first` ([block_size, ..., block_size, C]) or `depth_first` ([C, "
            "block_size, ..., block_size]).",
            choices=MODES,
        ),
        Attribute(
            "block_size",
            1,
            "The size of the value block to be moved: a positive integer that evenly divides "
            "every spatial dimension.",
        ),
    ),
    plan=_plan,
    examples={
        "example_1": example(
            "SpaceToDepth-1's example: [5, 7, 4, 6], block_size 2, blocks_first gives "
            "[5, 28, 2, 3]",
            {"data": _EXAMPLE.tolist(), "block_size": 2, "mode": "blocks_first"},
            _spec_formula(_EXAMPLE, 2, "blocks_first").tolist(),
        ),
        "example_blocks_first": example(
            "The same, small: [1, 2, 2, 4], block_size 2, blocks_first",
            {"data": _SMALL.tolist(), "block_size": 2, "mode": "blocks_first"},
            [
                [
                    [[0, 2]],
                    [[8, 10]],
                    [[1, 3]],
                    [[9, 11]],
                    [[4, 6]],
                    [[12, 14]],
                    [[5, 7]],
                    [[13, 15]],
                ]
            ],
        ),
        "example_depth_first": example(
            "The same, small: [1, 2, 2, 4], block_size 2, depth_first",
            {"data": _SMALL.tolist(), "block_size": 2, "mode": "depth_first"},
            [
                [
                    [[0, 2]],
                    [[1, 3]],
                    [[4, 6]],
                    [[5, 7]],
                    [[8, 10]],
                    [[9, 11]],
                    [[12, 14]],
                    [[13, 15]],
                ]
            ],
        ),
    },
    decisions=(
        "SpaceToDepth-1, a spatial dimension not divided by block_size: refused naming "
        "block_size (the rule is in block_size's description).",
        "SpaceToDepth-1, empty dimensions: allowed (0 is divided by any block_size); the output "
        "is empty, of the shape the formula gives.",
        "SpaceToDepth-1, data of rank < 3: refused naming data (the spec asks rank >= 3).",
    ),
    disagreements=narrowed_by_the_cpu_plugin("SpaceToDepth-1"),
)
