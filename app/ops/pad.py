"""Pad-12: a tensor extended (or cropped) on its edges, the new elements a constant, the edge's,
a reflection or a mirror of the data."""

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops import loops, raw
from app.ops.declaration import (
    ALL_TYPES,
    INTEGER_TYPES,
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

MODES = ("constant", "edge", "reflect", "symmetric")


def _pads(name: str, array: npt.NDArray[Any], rank: int) -> list[int]:
    if not is_integer_type(array.dtype):
        raise SpecError(name, f"{name} must be of an integer type (T_INT), got {array.dtype.name}")
    if array.ndim != 1 or array.shape[0] != rank:
        raise SpecError(
            name,
            f"{name} must be a 1D tensor of as many elements as data has dimensions ({rank}), "
            f"got a tensor of shape {list(array.shape)}",
        )
    return [int(value) for value in array.tolist()]


def pad_shape(
    shape: tuple[int, ...],
    pads_begin: npt.NDArray[Any],
    pads_end: npt.NDArray[Any],
    mode: str,
) -> tuple[list[int], list[int], tuple[int, ...]]:
    """Check the pads against the spec for ``mode`` and give them, and the output's shape:
    ``max(pads_begin[D] + data.shape[D] + pads_end[D], 0)`` (Python integers)."""
    if mode not in MODES:
        raise SpecError("pad_mode", f"pad_mode must be one of {', '.join(MODES)}, got {mode!r:.40}")
    rank = len(shape)
    begin = _pads("pads_begin", pads_begin, rank)
    end = _pads("pads_end", pads_end, rank)
    for axis, size in enumerate(shape):
        for name, amount in (("pads_begin", begin[axis]), ("pads_end", end[axis])):
            if mode == "reflect" and amount > size - 1:
                raise SpecError(
                    name,
                    f'in "reflect" mode {name}[{axis}] = {amount} must be not greater than '
                    f"data.shape[{axis}] - 1 = {size - 1}",
                )
            if mode == "symmetric" and amount > size:
                raise SpecError(
                    name,
                    f'in "symmetric" mode {name}[{axis}] = {amount} must be not greater than '
                    f"data.shape[{axis}] = {size}",
                )
            if mode == "edge" and amount > 0 and size == 0:
                raise SpecError(
                    name,
                    f'in "edge" mode {name}[{axis}] = {amount} pads an empty dimension, which has '
                    "no edge to copy",
                )
    out = tuple(max(b + size + e, 0) for b, size, e in zip(begin, shape, end, strict=True))
    return begin, end, out


#: One run of an axis: (first output position, count, first data position, step in data: 1
#: forward, -1 reflected, 0 the edge repeated).
Run = tuple[int, int, int, int]


def _runs(length: int, begin: int, size: int, mode: str) -> list[Run]:
    """The output positions along an axis, in at most three runs, with the data positions each
    takes (edge, reflect and symmetric modes), computed on the uncropped data: the pads, never
    more than the data's length in these modes (checked by ``pad_shape``), reflect it once."""
    runs: list[Run] = []

    def add(first: int, last: int, source: int, step: int) -> None:
        """Positions ``[first, last)``, where ``first`` takes ``source``, kept to the output."""
        low, high = max(first, 0), min(last, length)
        if low < high:
            runs.append((low, high - low, source + (low - first) * step, step))

    # Before the data (position p takes data at p - begin < 0), the data, after it.
    shift = {"edge": None, "reflect": 0, "symmetric": 1}[mode]
    if shift is None:
        add(-size - length, begin, 0, 0)
        add(begin + size, length + size, size - 1, 0)
    else:
        add(-size, begin, begin + size - shift, -1)
        add(begin + size, begin + 2 * size, size - 2 + shift, -1)
    add(begin, begin + size, 0, 1)
    return sorted(runs)


def _blocks(
    data_shape: tuple[int, ...], begin: list[int], shape: tuple[int, ...], mode: str
) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...], tuple[int, ...]]]:
    """Each block of the output with the data it copies: the output's slices, the data's slices
    (reversed for a reflection, one element for an edge) and the block's shape, one block for
    each run of each axis combined (at most 3 ** rank, one at a time)."""
    axes = [_runs(length, begin[axis], size, mode)
            for axis, (size, length) in enumerate(zip(data_shape, shape, strict=True))]  # fmt: skip
    for combination in itertools.product(*axes):
        into, taken = [], []
        for first, count, source, step in combination:
            into.append(slice(first, first + count))
            if step == 1:
                taken.append(slice(source, source + count))
            elif step == -1:
                taken.append(slice(source, source - count if source >= count else None, -1))
            else:
                taken.append(slice(source, source + 1))
        # The Ellipsis keeps a view for a scalar too (indexing it by () would copy it out).
        yield (*into, Ellipsis), (*taken, Ellipsis), tuple(run[1] for run in combination)


def _padded(
    data: npt.NDArray[Any],
    begin: list[int],
    shape: tuple[int, ...],
    mode: str,
    value: npt.NDArray[Any] | None,
    out: npt.NDArray[Any] | None,
) -> npt.NDArray[Any]:
    if out is None:
        out = np.empty(shape, data.dtype)
    target = as_raw(out)
    if not out.size:
        return out
    source = as_raw(data)
    flat = target.flags.c_contiguous and source.flags.c_contiguous
    flat_target, flat_source = target.reshape(-1), source.reshape(-1)
    if mode == "constant":
        fill = np.zeros((), source.dtype) if value is None else as_raw(value.astype(data.dtype))
        if flat and _rows_whole(flat_target, flat_source, data.shape, begin, shape, mode, fill):
            return out
        # The data's part that stays (cropped where a pad is negative), then the new elements.
        inner_out: list[Any] = []
        inner_in: list[Any] = []
        for axis, (size, length) in enumerate(zip(data.shape, shape, strict=True)):
            first = max(begin[axis], 0)
            last = min(begin[axis] + size, length)
            inner_out.append(slice(first, max(first, last)))
            inner_in.append(slice(first - begin[axis], max(first, last) - begin[axis]))
        # Each element written once: an axis's pads span the axes before it only where they
        # keep data (their own pads are filled already), the axes after it whole.
        for axis, kept in enumerate(inner_out):
            before = [*inner_out[:axis], slice(0, kept.start)] + [slice(None)] * (
                len(shape) - axis - 1
            )
            target[tuple(before)] = fill
            after = [*inner_out[:axis], slice(kept.stop, None)] + [slice(None)] * (
                len(shape) - axis - 1
            )
            target[tuple(after)] = fill
        # The Ellipsis keeps a rank-0 tensor's part an array (``target[()]`` is a scalar).
        np.copyto(target[(*inner_out, ...)], source[(*inner_in, ...)], casting="equiv")
        return out
    # Edge, reflect, symmetric: blocks of the output, each a copy of a (reversed, or broadcast)
    # slice of the data: a compiled strided copy between C-ordered arrays, NumPy's otherwise.
    if flat and _rows_whole(flat_target, flat_source, data.shape, begin, shape, mode):
        return out
    for into, taken, block in _blocks(data.shape, begin, shape, mode):
        piece = np.broadcast_to(source[taken], block)
        if flat:
            copy_block(flat_target, target[into], flat_source, piece)
        else:
            np.copyto(target[into], piece, casting="equiv")
    return out


#: The shortest output row (bytes) Pad writes whole, row by row (``_rows_whole``): shorter rows
#: go block by block, each block's rows merged into longer runs where they can.
_WHOLE_ROW_BYTES = 256
#: The shortest output row (bytes) written by non-temporal stores (in an output of
#: ``raw.STREAM_BYTES`` or more). Measured on 64 MiB int8 outputs in reflect mode (each side
#: padded by half), against ``np.copyto`` of the output (11.8 ms): rows of 4 KiB 6.7 ms with
#: them, 9.6 ms without; 2 KiB 7.5 against 9.8 ms; 1 KiB 9.4 against 10.0 ms; 512 bytes 15.2
#: against 10.5 ms.
STREAM_ROW_BYTES = 2 << 10


def _constant_runs(length: int, begin: int, size: int) -> list[Run]:
    """``_runs`` of the constant mode: the data's part that stays (step 1), and the constant
    before and after it (step 2; its source position unused), the constant alone when no data
    stays."""
    first, last = max(begin, 0), min(begin + size, length)
    if last <= first:
        return [(0, length, 0, 2)]
    runs = [(first, last - first, first - begin, 1)]
    if first:
        runs.insert(0, (0, first, 0, 2))
    if last < length:
        runs.append((last, length - last, 0, 2))
    return runs


def _rows_whole(
    target: npt.NDArray[Any],
    source: npt.NDArray[Any],
    data_shape: tuple[int, ...],
    begin: list[int],
    shape: tuple[int, ...],
    mode: str,
    fill: npt.NDArray[Any] | None = None,
) -> bool:
    """Every mode by the compiled loop that writes each output row whole (its last axis's runs
    in turn, the constant mode's ``fill`` too), front to back, when the rows are long (at least
    ``_WHOLE_ROW_BYTES``) and the loops are compiled; whether it did. ``target`` and ``source``
    are the flat raw output and data. Block by block, a row is written in three visits far
    apart: a large output then costs 1.2-2x a plain copy of it, and non-temporal stores
    (outputs of ``raw.STREAM_BYTES`` or more) want one long stream of whole lines."""
    compiled = loops.ready_module()
    item = target.itemsize
    if compiled is None or not shape or item > 8 or shape[-1] * item < _WHOLE_ROW_BYTES:
        return False
    sizes = enumerate(zip(data_shape, shape, strict=True))
    bits = 0
    if fill is None:
        axes = [_runs(length, begin[axis], size, mode) for axis, (size, length) in sizes]
    else:
        axes = [_constant_runs(length, begin[axis], size) for axis, (size, length) in sizes]
        # The constant's bits as the int64 the loop takes them in (its low bytes).
        bits = int(np.asarray(fill).astype(np.uint64).view(np.int64))
    inner = [(first, count, bits if step == 2 else source, step)
             for first, count, source, step in axes[-1]]  # fmt: skip
    segments = np.array([[run[i] for run in inner] for i in (0, 2, 1, 3)], np.int64).reshape(-1)
    # A row of the constant alone (an outer axis's constant run).
    constant = np.array([0, bits, shape[-1], 2], np.int64)
    out_strides = [int(np.prod(shape[axis + 1 :], dtype=np.int64)) for axis in range(len(shape))]
    data_strides = [int(np.prod(data_shape[axis + 1 :], dtype=np.int64))
                    for axis in range(len(shape))]  # fmt: skip
    stream = int(target.nbytes >= raw.STREAM_BYTES and shape[-1] * item >= STREAM_ROW_BYTES)
    # One call per combination of the outer axes' runs (at most 3 ** (rank - 1)), in the
    # output's order: each a block of whole rows.
    for combination in itertools.product(*axes[:-1]):
        filled = any(run[3] == 2 for run in combination)
        table = np.array(
            [run[1] for run in combination]
            + [0 if filled else run[3] * data_strides[axis] for axis, run in enumerate(combination)]
            + [out_strides[axis] for axis in range(len(combination))],
            dtype=np.int64,
        )
        out_start = sum(run[0] * out_strides[axis] for axis, run in enumerate(combination))
        source_start = 0
        if not filled:
            source_start = sum(run[2] * data_strides[axis] for axis, run in enumerate(combination))
        pieces = constant if filled else segments
        compiled.pad_rows(source, target, table, pieces, source_start, out_start, stream)
    return True


#: What the modes hold while they copy, per dimension of data: an axis's runs, one block's
#: slices, views and the copy's table (Python objects and a few int64s; no array the size of an
#: axis, the data or the output).
WORKSPACE_PER_DIMENSION = 8192


def _workspace(arrays: Arrays, attributes: Attributes) -> int:
    """The few objects the modes hold, per dimension of data."""
    return WORKSPACE_PER_DIMENSION * (arrays["data"].ndim + 1)


def _plan(arrays: Arrays, attributes: Attributes) -> Plan:
    data = arrays["data"]
    mode = attributes["pad_mode"]
    begin, _, shape = pad_shape(data.shape, arrays["pads_begin"], arrays["pads_end"], mode)
    value = arrays.get("pad_value")
    if value is not None:
        if mode != "constant":
            raise SpecError(
                "pad_value",
                f'pad_value takes effect in "constant" mode only and must not be given in '
                f'"{mode}" mode',
            )
        if value.ndim != 0:
            raise SpecError(
                "pad_value",
                f"pad_value must be a scalar, got a tensor of shape {list(value.shape)}",
            )
        if value.dtype.newbyteorder("=") != data.dtype.newbyteorder("="):
            raise SpecError(
                "pad_value",
                f"pad_value must be of the type of data (T), {data.dtype.name}, got "
                f"{value.dtype.name}",
            )
    return Plan(shape, lambda out: _padded(data, begin, shape, mode, value, out))


def pad(
    data: npt.ArrayLike,
    pads_begin: npt.ArrayLike,
    pads_end: npt.ArrayLike,
    pad_value: npt.ArrayLike | None = None,
    pad_mode: str = "constant",
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """Pad-12: ``data`` extended by ``pads_begin`` and ``pads_end`` (cropped where negative)."""
    arrays = {"data": np.asarray(data), "pads_begin": np.asarray(pads_begin),
              "pads_end": np.asarray(pads_end)}  # fmt: skip
    if pad_value is not None:
        arrays["pad_value"] = np.asarray(pad_value)
    return _plan(arrays, {"pad_mode": pad_mode}).run(out)


_DATA = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]
_POSITIVE = {"data": _DATA, "pads_begin": [0, 1], "pads_end": [2, 3]}
_MIXED = {"data": _DATA, "pads_begin": [2, -1], "pads_end": [-1, 3]}
# fmt: off
_EXAMPLES: list[tuple[str, str, dict[str, Any], Any]] = [
    ("positive_constant", "Pad-12, positive pads, constant mode",
     {**_POSITIVE, "pad_mode": "constant"},
     [[0, 1, 2, 3, 4, 0, 0, 0], [0, 5, 6, 7, 8, 0, 0, 0], [0, 9, 10, 11, 12, 0, 0, 0],
      [0] * 8, [0] * 8]),
    ("positive_edge", "Pad-12, positive pads, edge mode", {**_POSITIVE, "pad_mode": "edge"},
     [[1, 1, 2, 3, 4, 4, 4, 4], [5, 5, 6, 7, 8, 8, 8, 8], [9, 9, 10, 11, 12, 12, 12, 12],
      [9, 9, 10, 11, 12, 12, 12, 12], [9, 9, 10, 11, 12, 12, 12, 12]]),
    ("positive_reflect", "Pad-12, positive pads, reflect mode",
     {**_POSITIVE, "pad_mode": "reflect"},
     [[2, 1, 2, 3, 4, 3, 2, 1], [6, 5, 6, 7, 8, 7, 6, 5], [10, 9, 10, 11, 12, 11, 10, 9],
      [6, 5, 6, 7, 8, 7, 6, 5], [2, 1, 2, 3, 4, 3, 2, 1]]),
    ("positive_symmetric", "Pad-12, positive pads, symmetric mode",
     {**_POSITIVE, "pad_mode": "symmetric"},
     [[1, 1, 2, 3, 4, 4, 3, 2], [5, 5, 6, 7, 8, 8, 7, 6], [9, 9, 10, 11, 12, 12, 11, 10],
      [9, 9, 10, 11, 12, 12, 11, 10], [5, 5, 6, 7, 8, 8, 7, 6]]),
    ("negative", "Pad-12, negative pads (every mode): cropping",
     {"data": _DATA, "pads_begin": [-1, -1], "pads_end": [-1, -1], "pad_mode": "reflect"},
     [[6, 7]]),
    ("mixed_constant", "Pad-12, mixed pads, constant mode, pad_value 15",
     {**_MIXED, "pad_value": 15, "pad_mode": "constant"},
     [[15] * 6, [15] * 6, [2, 3, 4, 15, 15, 15], [6, 7, 8, 15, 15, 15]]),
    ("mixed_edge", "Pad-12, mixed pads, edge mode", {**_MIXED, "pad_mode": "edge"},
     [[2, 3, 4, 4, 4, 4], [2, 3, 4, 4, 4, 4], [2, 3, 4, 4, 4, 4], [6, 7, 8, 8, 8, 8]]),
    ("mixed_reflect", "Pad-12, mixed pads, reflect mode", {**_MIXED, "pad_mode": "reflect"},
     [[10, 11, 12, 11, 10, 9], [6, 7, 8, 7, 6, 5], [2, 3, 4, 3, 2, 1], [6, 7, 8, 7, 6, 5]]),
    ("mixed_symmetric", "Pad-12, mixed pads, symmetric mode",
     {**_MIXED, "pad_mode": "symmetric"},
     [[6, 7, 8, 8, 7, 6], [2, 3, 4, 4, 3, 2], [2, 3, 4, 4, 3, 2], [6, 7, 8, 8, 7, 6]]),
]
# fmt: on

OP = Op(
    name="pad",
    spec="Pad-12",
    summary="Pad-12: extend or crop a tensor on its edges",
    description="Pad-12 over `data`: `pads_begin[D]` and `pads_end[D]` elements added at each "
    "end of dimension D (removed where negative); the output's dimension D is "
    "`max(pads_begin[D] + data.shape[D] + pads_end[D], 0)`. The new elements are `pad_value` "
    "(0 when left out) in `constant` mode, the edge's in `edge` mode, a reflection without or "
    "with the edge in `reflect` and `symmetric` modes. Sized before anything is allocated.",
    request_doc="Pad-12: `data` padded by `pads_begin` and `pads_end` as `pad_mode` says.",
    inputs=(
        data_input("pad"),
        Input(
            "pads_begin",
            "Elements to add at the beginning of each axis; negative: to crop (input 2).",
            "T_INT: any integer type, a 1D tensor of data's rank. JSON form is int64.",
            INTEGER_TYPES,
            rank="1",
            limit="rank",
        ),
        Input(
            "pads_end",
            "Elements to add at the end of each axis; negative: to crop (input 3).",
            "T_INT: any integer type, a 1D tensor of data's rank. JSON form is int64.",
            INTEGER_TYPES,
            rank="1",
            limit="rank",
        ),
        Input(
            "pad_value",
            "The new elements' value in constant mode (input 4, optional: 0).",
            "T: a scalar of data's type; in JSON form it takes data's type. Constant mode only.",
            ALL_TYPES,
            rank="0",
            optional=True,
            limit="scalar",
        ),
    ),
    attributes=(
        Attribute(
            "pad_mode",
            None,
            "How the new elements are made: constant, edge, reflect or symmetric (required).",
            choices=MODES,
        ),
    ),
    plan=_plan,
    workspace=_workspace,
    examples={name: example(*case) for name, *case in _EXAMPLES},
    decisions=(
        "Pad-12 with negative pads beside positive ones: each output element is data at the "
        "position the pads map it to on the uncropped data (the spec's mixed examples: reflect "
        "reads rows the other end crops), then the crop applies.",
        "Pad-12, pad_value given in a mode other than constant: refused; the spec says it "
        "should not be set with other values of pad_mode.",
        "Pad-12, pad_value of another type than data's (npy form): refused; in JSON form it "
        "takes data's type (a fraction for integer data is refused).",
        "Pad-12, edge mode padding an empty dimension: refused, there is no edge to copy.",
        "Pad-12, the reflect and symmetric bounds (pads not greater than data.shape[D] - 1 and "
        "data.shape[D]) apply to positive pads; a negative pad crops.",
    ),
    disagreements=narrowed_by_the_cpu_plugin("Pad-12"),
)


# ------------------------------------------------------------------------------------------------
# The older version: Pad-1 (pads not negative: no cropping)


def _plan_pad_1(arrays: Arrays, attributes: Attributes) -> Plan:
    for name in ("pads_begin", "pads_end"):
        pads = arrays[name]
        # Looked at only as the 1D integer tensor of data's rank that Pad-12's checks demand
        # (anything else is theirs to refuse): its least value, read without a copy.
        well_formed = pads.ndim == 1 and pads.size == arrays["data"].ndim > 0
        if well_formed and is_integer_type(pads.dtype) and pads.min() < 0:
            raise SpecError(
                name,
                f"Pad-1: {name} must not be negative (T_INT: a non-negative integer type), got "
                f"{int(pads.min())}; cropping by negative pads is Pad-12's",
            )
    return _plan(arrays, attributes)


def _pads_input(name: str, where: str, position: int) -> Input:
    return Input(
        name,
        f"Elements to add at the {where} of each axis (input {position}).",
        "T_INT: any integer type, non-negative values, a 1D tensor of data's rank. JSON form is "
        "int64.",
        INTEGER_TYPES,
        rank="1",
        limit="rank",
    )


OP_1 = Op(
    name="pad",
    spec="Pad-1",
    summary="Pad-1: extend a tensor on its edges",
    description="Pad-1 over `data`: `pads_begin[D]` and `pads_end[D]` (not negative) elements "
    "added at each end of dimension D; the output's dimension D is "
    "`pads_begin[D] + data.shape[D] + pads_end[D]`. The new elements are `pad_value` (0 when "
    "left out) in `constant` mode, the edge's in `edge` mode, a reflection without or with the "
    "edge in `reflect` and `symmetric` modes.",
    request_doc="Pad-1: `data` padded by `pads_begin` and `pads_end` as `pad_mode` says.",
    inputs=(
        data_input("pad"),
        _pads_input("pads_begin", "beginning", 2),
        _pads_input("pads_end", "end", 3),
        OP.inputs[3],
    ),
    attributes=OP.attributes,
    plan=_plan_pad_1,
    workspace=_workspace,
    examples={
        f"example_{mode}": example(
            f"Pad-1, the spec's example in {mode} mode", {**_POSITIVE, "pad_mode": mode}, answer
        )
        for mode, answer in (
            (
                "constant",
                [
                    [0, 1, 2, 3, 4, 0, 0, 0],
                    [0, 5, 6, 7, 8, 0, 0, 0],
                    [0, 9, 10, 11, 12, 0, 0, 0],
                    [0] * 8,
                    [0] * 8,
                ],
            ),
            (
                "edge",
                [
                    [1, 1, 2, 3, 4, 4, 4, 4],
                    [5, 5, 6, 7, 8, 8, 8, 8],
                    [9, 9, 10, 11, 12, 12, 12, 12],
                    [9, 9, 10, 11, 12, 12, 12, 12],
                    [9, 9, 10, 11, 12, 12, 12, 12],
                ],
            ),
            (
                "reflect",
                [
                    [2, 1, 2, 3, 4, 3, 2, 1],
                    [6, 5, 6, 7, 8, 7, 6, 5],
                    [10, 9, 10, 11, 12, 11, 10, 9],
                    [6, 5, 6, 7, 8, 7, 6, 5],
                    [2, 1, 2, 3, 4, 3, 2, 1],
                ],
            ),
            (
                "symmetric",
                [
                    [1, 1, 2, 3, 4, 4, 3, 2],
                    [5, 5, 6, 7, 8, 8, 7, 6],
                    [9, 9, 10, 11, 12, 12, 11, 10],
                    [9, 9, 10, 11, 12, 12, 11, 10],
                    [5, 5, 6, 7, 8, 8, 7, 6],
                ],
            ),
        )
    },
    decisions=(
        "Pad-1, a negative pad: refused (422, naming the input); T_INT is a non-negative integer "
        "type, and cropping is Pad-12's.",
        "Pad-1, pad_value given in a mode other than constant: refused, as Pad-12's (the spec "
        "says it should not be set with other values of pad_mode).",
    ),
    disagreements=(
        "Pad-1 on the CPU plugin: a negative pad crops (as Pad-12's); the spec allows none, and "
        "the service refuses it.",
        *narrowed_by_the_cpu_plugin("Pad-1"),
    ),
)

#: The older version served beside Pad-12 (the registry collects it).
OLDER: tuple[Op, ...] = (OP_1,)
