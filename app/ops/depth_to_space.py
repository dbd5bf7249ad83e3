"""DepthToSpace-1: the depth (channel) dimension's values moved into blocks of the spatial ones."""

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
#: Up to this many blocks, each is one strided copy (the reads stay contiguous); past it, the
#: whole permuted view is one copy (a block then holds few elements, a copy's call costs more).
_BLOCKS_COPIED_ONE_BY_ONE = 256


def depth_to_space_shape(shape: tuple[int, ...], block_size: int, mode: str) -> tuple[int, ...]:
    """Check DepthToSpace-1's rules and give the output's shape ``[N, C / block_size ^ K,
    D1 * block_size, ..., DK * block_size]``, in Python integers (nothing allocated)."""
    if mode not in MODES:
        raise SpecError("mode", f'mode must be "blocks_first" or "depth_first", got {mode!r:.40}')
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise SpecError("block_size", f"block_size must be a positive integer, got {block_size}")
    if len(shape) < 3:
        raise SpecError("data", f"data must be a tensor of rank >= 3, got rank {len(shape)}")
    spatial = len(shape) - 2
    channels = shape[1]
    # block_size ** K is a Python integer: no overflow, and it is only compared.
    blocks = block_size**spatial
    if channels % blocks:
        raise SpecError(
            "block_size",
            f"the depth dimension size ({channels}) must be evenly divided by block_size ^ "
            f"(len(input.shape) - 2) = {block_size}^{spatial} = {_shown(blocks)}",
        )
    return (shape[0], channels // blocks, *(size * block_size for size in shape[2:]))


def _shown(number: int) -> str:
    return str(number) if number < 10**30 else f"about 10^{len(str(number)) - 1}"


def depth_to_space(
    data: npt.ArrayLike, mode: str, block_size: int = 1, out: npt.NDArray[Any] | None = None
) -> npt.NDArray[Any]:
    """DepthToSpace-1 of ``data`` (``[N, C, D1, ..., DK]``); into ``out`` when given."""
    data = np.asarray(data)
    shape = depth_to_space_shape(data.shape, block_size, mode)
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
    batch, depth, *_ = shape
    sizes = data.shape[2:]
    spatial = len(sizes)
    blocks = (block_size,) * spatial
    # The input's depth split as the mode says: [bs, ..., bs, C'] or [C', bs, ..., bs].
    split = (*blocks, depth) if mode == "blocks_first" else (depth, *blocks)
    source = as_raw(data).reshape(batch, *split, *sizes)
    # The output seen as [N, C', D1, bs, D2, bs, ..., DK, bs]: a view, since out is C-ordered.
    target = as_raw(out).reshape(batch, depth, *itertools.chain(*((s, block_size) for s in sizes)))
    first_block = 1 if mode == "blocks_first" else 2
    # x'' of the spec: source axes [0, C', D1, b1, D2, b2, ...].
    depth_axis = 1 + spatial if mode == "blocks_first" else 1
    order = [0, depth_axis]
    for axis in range(spatial):
        order += [2 + spatial + axis, first_block + axis]
    if data.flags.c_contiguous and out.flags.c_contiguous:
        # The compiled copy: each block's lines written whole while in the cache.
        copy_gathered(target, as_raw(data).reshape(-1), source.transpose(order))
        return out
    if block_size**spatial > _BLOCKS_COPIED_ONE_BY_ONE:
        np.copyto(target, source.transpose(order), casting="equiv")
        return out
    # One block (b1, ..., bK) at a time: its [N, C', D1, ..., DK] values, read contiguously,
    # go to every block_size-th element of each spatial dimension, from b1, ..., bK.
    lead: tuple[Any, ...] = (slice(None),) * first_block
    for block in itertools.product(range(block_size), repeat=spatial):
        spread: list[Any] = [slice(None), slice(None)]
        for b in block:
            spread += [slice(None), b]
        np.copyto(target[tuple(spread)], source[(*lead, *block)], casting="equiv")
    return out


def _plan(arrays: Arrays, attributes: Attributes) -> Plan:
    data = arrays["data"]
    block_size, mode = attributes["block_size"], attributes["mode"]
    shape = depth_to_space_shape(data.shape, block_size, mode)
    return Plan(shape, lambda out: _moved(data, shape, block_size, mode, out))


def _spec_formula(data: npt.NDArray[Any], block_size: int, mode: str) -> npt.NDArray[Any]:
    """The spec's reshape, transpose, reshape, written out (the examples' expected outputs)."""
    n, c, *sizes = data.shape
    k = len(sizes)
    depth = c // block_size**k
    if mode == "blocks_first":
        x1 = data.reshape(n, *(block_size,) * k, depth, *sizes)
        order = [0, k + 1, *itertools.chain(*((k + 2 + i, 1 + i) for i in range(k)))]
    else:
        x1 = data.reshape(n, depth, *(block_size,) * k, *sizes)
        order = [0, 1, *itertools.chain(*((k + 2 + i, 2 + i) for i in range(k)))]
    return x1.transpose(order).reshape(n, depth, *(size * block_size for size in sizes))


_EXAMPLE = np.arange(5 * 28 * 2 * 3).reshape(5, 28, 2, 3)
_SMALL = np.arange(1 * 8 * 1 * 2).reshape(1, 8, 1, 2)

OP = Op(
    name="depth_to_space",
    spec="DepthToSpace-1",
    summary="DepthToSpace-1: move the depth dimension's values into spatial blocks",
    description="DepthToSpace-1 over `data` of shape [N, C, D1, ..., DK] (rank >= 3): the output "
    "[N, C / block_size^K, D1 * block_size, ..., DK * block_size] of the type of `data`. `mode` "
    "(required) says how the depth is split: `blocks_first` as [block_size, ..., block_size, "
    "new_depth], `depth_first` as [new_depth, block_size, ..., block_size]. C must be divided by "
    "block_size^K.",
    request_doc="DepthToSpace-1: `data`'s depth moved into block_size blocks of its spatial "
    "dimensions.",
    inputs=(data_input("rearrange ([N, C, D1, ..., DK], rank >= 3)"),),
    attributes=(
        Attribute(
            "mode",
            None,
            "How the input depth is split to block coordinates and the new depth: `blocks_first` "
            "([block_size, ..., block_size, new_depth]) or `depth_first` ([new_depth, "
            "block_size, ..., block_size]).",
            choices=MODES,
        ),
        Attribute(
            "block_size",
            1,
            "The size of the value block to be moved: a positive integer; C must be evenly "
            "divided by block_size ^ (rank - 2).",
        ),
    ),
    plan=_plan,
    examples={
        "example_1": example(
            "DepthToSpace-1's example: [5, 28, 2, 3], block_size 2, blocks_first gives "
            "[5, 7, 4, 6]",
            {"data": _EXAMPLE.tolist(), "block_size": 2, "mode": "blocks_first"},
            _spec_formula(_EXAMPLE, 2, "blocks_first").tolist(),
        ),
        "example_depth_first": example(
            "The same, small, in both modes: [1, 8, 1, 2], block_size 2, depth_first",
            {"data": _SMALL.tolist(), "block_size": 2, "mode": "depth_first"},
            [[[[0, 2, 1, 3], [4, 6, 5, 7]], [[8, 10, 9, 11], [12, 14, 13, 15]]]],
        ),
        "example_blocks_first": example(
            "The same, small: [1, 8, 1, 2], block_size 2, blocks_first",
            {"data": _SMALL.tolist(), "block_size": 2, "mode": "blocks_first"},
            [[[[0, 4, 1, 5], [8, 12, 9, 13]], [[2, 6, 3, 7], [10, 14, 11, 15]]]],
        ),
    },
    decisions=(
        "DepthToSpace-1, C not divided by block_size ^ K: refused naming block_size (the rule "
        "is in block_size's description).",
        "DepthToSpace-1, empty dimensions: allowed (C = 0 is divided by any block_size^K); the "
        "output is empty, of the shape the formula gives.",
        "DepthToSpace-1, data of rank < 3: refused naming data (the spec asks rank >= 3).",
    ),
    disagreements=narrowed_by_the_cpu_plugin("DepthToSpace-1"),
)
