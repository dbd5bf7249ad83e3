"""Transpose-1 (app/ops/transpose.py): the spec's rules, every element type to the bit, and
OpenVINO's CPU plugin on generated cases."""

from typing import Any

import numpy as np
import numpy.typing as npt
import openvino.opset1 as ov_opset1
import pytest

from app.ops import loops
from app.ops.declaration import Plan
from app.ops.errors import SpecError
from app.ops.raw import as_raw
from app.ops.transpose import OP, transpose
from app.registry import REGISTRY
from tensor_ops_wire.dtypes import BFLOAT16
from tests.ops.movement_support import (
    BENCHMARK_DTYPES,
    ELEMENT_TYPES,
    BenchmarkCase,
    assert_same_bits,
    constant,
    cpu_plugin,
    from_positions,
    plugin_model,
    sample,
    short,
    square,
)


def run(arg: Any, order: Any) -> Any:
    plan = OP.plan({"arg": np.asarray(arg), "input_order": np.asarray(order)}, {})
    assert isinstance(plan, Plan)
    return plan.run(None)


def test_it_is_collected() -> None:
    assert REGISTRY["transpose"] is OP
    assert OP.output_type_from == "arg"


@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_every_type_to_the_bit(dtype: np.dtype[Any]) -> None:
    arg = sample(dtype, (2, 3, 4), seed=3)
    assert_same_bits(run(arg, np.array([2, 0, 1], np.uint8)), np.transpose(arg, (2, 0, 1)).copy())
    assert_same_bits(run(arg, np.zeros(0, np.int32)), np.transpose(arg).copy())
    assert_same_bits(transpose(arg, [0, 1, 2]), arg.copy())


def test_the_spec_formula_and_examples() -> None:
    arg = np.arange(24).reshape(2, 3, 4)
    out = run(arg, [2, 0, 1])
    assert out.shape == (4, 2, 3)
    # output[i(order[0]), i(order[1]), i(order[2])] = input[i(0), i(1), i(2)]
    for i0, i1, i2 in np.ndindex(2, 3, 4):
        assert out[i2, i0, i1] == arg[i0, i1, i2]
    assert run(arg, np.zeros(0, np.int64)).shape == (4, 3, 2)


@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32", "float64"])
@pytest.mark.parametrize(
    ("shape", "order"),
    [((700, 900), (1, 0)), ((3, 300, 500), (0, 2, 1)), ((30, 40, 500), (2, 0, 1)),
     ((20, 30, 40, 50), (2, 3, 0, 1)), ((20, 30, 40, 50), (0, 3, 1, 2))],
)  # fmt: skip
def test_large_tensors_tile_by_tile(
    dtype: str, shape: tuple[int, ...], order: tuple[int, ...]
) -> None:
    """Past a MiB, a batch of 2-D transposes is copied tile by tile; the other orders whole."""
    arg = sample(np.dtype(dtype), shape, seed=9)
    assert_same_bits(run(arg, np.array(order)), np.transpose(arg, order).copy())


def shifted(arg: npt.NDArray[Any], offset: int) -> npt.NDArray[Any]:
    """``arg``'s copy ``offset`` bytes past an aligned address (as a body's member may be)."""
    if not offset:
        return arg
    buffer = np.zeros(arg.nbytes + offset, np.uint8)
    moved = buffer[offset:].view(arg.dtype).reshape(arg.shape)
    moved[...] = arg
    return moved


@pytest.mark.parametrize("dtype", ["int8", "float16", "float32", "int64"])
@pytest.mark.parametrize(
    ("shape", "order"),
    [((1024, 2048), (1, 0)), ((3, 256, 520), (0, 2, 1)), ((8, 16), (1, 0)), ((16, 8), (1, 0)),
     ((2, 3, 8, 24), (0, 2, 3, 1)), ((2, 8, 3, 8), (0, 3, 1, 2)), ((40, 8, 16), (1, 2, 0)),
     ((520, 264), (1, 0)), ((3, 5), (1, 0)), ((15, 17), (1, 0)), ((16, 16), (1, 0)),
     ((4, 33, 47), (0, 2, 1)), ((129, 257), (1, 0)), ((1, 300), (1, 0)), ((37, 4096), (1, 0)),
     ((2, 21, 4096), (0, 2, 1))],
)  # fmt: skip
@pytest.mark.parametrize("offset", [0, 1])
def test_blocks_transposed_in_the_registers(
    dtype: str, shape: tuple[int, ...], order: tuple[int, ...], offset: int
) -> None:
    """A batch of 2-D transposes moves square blocks of a register's elements (16 x 16 bytes,
    8 x 8 of 2 and 4 bytes, 4 x 4 of 8), the rows and columns past the last whole block one
    element at a time: sides that are multiples of the block's and sides that are not, sides
    shorter than a block, tiles' edges, batches, a source at an odd address, rows of a multiple
    of 4 KiB (tiles a line tall, a column of blocks after another): the same bits."""
    arg = shifted(sample(np.dtype(dtype), shape, seed=11), offset)
    assert loops.wait_compiled(120)
    assert_same_bits(transpose(arg, order), np.transpose(arg, order).copy())


@pytest.mark.parametrize("dtype", ["int8", "float16", "float32", "int64"])
@pytest.mark.parametrize(
    "shape",
    [(1, 64, 64), (1, 128, 256), (2, 64, 130), (3, 96, 67), (1, 200, 64), (2, 130, 300),
     (1, 64, 1), (1, 1, 64), (1, 5, 7), (1, 70, 3), (1, 3, 70), (4, 32, 16), (1, 257, 129)],
)  # fmt: skip
@pytest.mark.parametrize("offset", [0, 1, 5])
def test_line_tiles(dtype: str, shape: tuple[int, int, int], offset: int) -> None:
    """The tiles of one cache line a side (``transpose_tiles`` with ``lines`` set): whole
    tiles, the columns past the last whole tile, the rows above the first band (the target at
    ``offset`` elements past a line's start) and below the last, target rows a whole number of
    lines long (streamed) or not (regular stores), batches, sides shorter than a tile, each
    element width: the same bits as NumPy's transpose."""
    assert loops.wait_compiled(120)
    compiled = loops.ready_module()
    assert compiled is not None
    arg = sample(np.dtype(dtype), shape, seed=13)
    buffer = np.zeros(arg.size + 64, arg.dtype)
    out = buffer[offset : offset + arg.size].reshape(shape[0], shape[2], shape[1])
    compiled.transpose_tiles(as_raw(arg).reshape(-1), as_raw(out).reshape(-1), *shape,
                             0, 0, 0, 1)  # fmt: skip
    assert_same_bits(out, np.transpose(arg, (0, 2, 1)).copy())
    assert not buffer[:offset].any() and not buffer[offset + arg.size :].any()


@pytest.mark.parametrize(
    ("dtype", "shape", "order"),
    [("float32", (2, 1024, 1032), (0, 2, 1)), ("int8", (4096, 2100), (1, 0)),
     ("float64", (1024, 1025), (1, 0)), ("bfloat16", (2, 2, 1024, 1040), (0, 1, 3, 2))],
)  # fmt: skip
def test_large_transposes_in_line_tiles(
    dtype: str, shape: tuple[int, ...], order: tuple[int, ...]
) -> None:
    """An output of 8 MiB or more whose rows are whole lines, 512 bytes or more, goes in tiles
    of one line a side, written by non-temporal stores: the same bits."""
    assert loops.wait_compiled(120)
    arg = sample(np.dtype(dtype) if dtype != "bfloat16" else BFLOAT16, shape, seed=14)
    assert_same_bits(run(arg, np.array(order)), np.transpose(arg, order).copy())


@pytest.mark.parametrize("dtype", ["int8", "float16", "float32", "int64"])
@pytest.mark.parametrize(
    ("shape", "order"),
    [((64, 1000), (1, 0)), ((2, 64, 21, 100), (0, 2, 3, 1)), ((3, 16, 999), (0, 2, 1)),
     ((32, 130), (1, 0)), ((8, 16, 16), (0, 2, 1)), ((128, 70), (1, 0)), ((192, 4), (1, 0))],
)  # fmt: skip
@pytest.mark.parametrize("offset", [0, 1])
def test_short_target_rows(
    dtype: str, shape: tuple[int, ...], order: tuple[int, ...], offset: int
) -> None:
    """Target rows a whole number of lines, 64 elements or fewer (NCHW -> NHWC's channels):
    square tiles of 64 elements, a column of blocks after another; sides that are multiples of
    the tile's and sides that are not, longer rows beside them (the other tiles), batches, a
    source at an odd address: the same bits."""
    arg = shifted(sample(np.dtype(dtype), shape, seed=15), offset)
    assert loops.wait_compiled(120)
    assert_same_bits(transpose(arg, order), np.transpose(arg, order).copy())


def test_rank_0_and_empty_dimensions() -> None:
    assert run(np.int8(5), np.zeros(0, np.int64)).tolist() == 5
    assert run(np.zeros((0, 3, 1)), [1, 2, 0]).shape == (3, 1, 0)


def test_into_a_given_output_and_from_strided_data() -> None:
    arg = np.arange(48, dtype=np.float64).reshape(4, 12)[:, ::2]
    out = np.empty((6, 4))
    assert transpose(arg, [1, 0], out) is out
    assert out.tolist() == arg.T.tolist()


@pytest.mark.parametrize(
    ("order", "words"),
    [
        ([0, 1], "n elements"),
        ([0, 0, 1], "every integer"),
        ([0, 1, 3], "every integer"),
        ([-1, 0, 1], "every integer"),
        (1, "1D tensor"),
        ([[0, 1, 2]], "1D tensor"),
        ([0.0, 1.0, 2.0], "integer type"),
    ],
)
def test_refusals_name_the_field(order: Any, words: str) -> None:
    with pytest.raises(SpecError) as refused:
        run(np.zeros((2, 2, 2)), np.asarray(order))
    assert refused.value.field == "input_order"
    assert words in refused.value.message


def _cases() -> list[tuple[tuple[int, ...], list[int]]]:
    rng = np.random.default_rng(11)
    cases = []
    for index in range(60):
        rank = int(rng.integers(1, 7))
        shape = tuple(int(size) for size in rng.integers(0 if index % 9 == 0 else 1, 5, rank))
        order = [] if index % 7 == 0 else [int(axis) for axis in rng.permutation(rank)]
        cases.append((shape, order))
    return cases


@pytest.mark.parametrize(("shape", "order"), _cases())
def test_openvino_cpu_plugin_agrees(shape: tuple[int, ...], order: list[int]) -> None:
    if 0 in shape:
        pytest.skip("empty tensors are not given to the CPU plugin (reported to crash it)")
    dtype = ELEMENT_TYPES[sum(shape) % len(ELEMENT_TYPES)]
    arg = sample(dtype, shape, seed=len(order) + sum(shape))
    order_array = np.array(order, np.int64)
    moved = cpu_plugin(lambda p: ov_opset1.transpose(p, constant(order_array)), shape)()
    assert_same_bits(run(arg, order_array), from_positions(arg, moved))


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """Transpose of a matrix of ``nbytes`` and NCHW -> NHWC of a batch of ``nbytes``, float32
    and int8."""
    found = []
    for dtype in BENCHMARK_DTYPES:
        arg = square(nbytes, dtype)
        name = short(dtype)
        found.append(_transpose_case(f"2-D, {name}", arg, np.array([1, 0])))
        side = int((nbytes // arg.itemsize // 64) ** 0.5)
        batch = np.arange(64 * side * side).astype(dtype).reshape(1, 64, side, side)
        found.append(_transpose_case(f"NCHW->NHWC, {name}", batch, np.array([0, 2, 3, 1])))
    return found


def _transpose_case(label: str, arg: npt.NDArray[Any], order: npt.NDArray[Any]) -> BenchmarkCase:
    def model() -> Any:
        return plugin_model(lambda p: ov_opset1.transpose(p, constant(order)), arg)

    return BenchmarkCase("transpose", label, {"arg": arg, "input_order": order}, {},
                         arg.dtype, 2 * arg.nbytes, model)  # fmt: skip


def test_a_thin_matrix_is_copied_whole() -> None:
    """A 2-D transpose with a side thinner than a tile is one copy, not thousands of tiles."""
    arg = sample(np.dtype(np.int8), (2, 1 << 21), seed=12)
    assert_same_bits(run(arg, np.array([1, 0])), arg.T.copy())
