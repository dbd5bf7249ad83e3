"""The loops' NumPy stand-ins (app/ops/numpy_loops.py), which answer while numba compiles, write
the bits the compiled loops write: every op of the registry whose kernel reaches a loop, run both
ways on every example of its spec, and Roll's and Gather's whole corpus (tests/cases.py: every
element type, index types and their extremes, empty and strided inputs, up to 8 rolled axes)."""

import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from app import registry
from app.ops import col2im as col2im_module
from app.ops import gather, loops, numpy_loops, raw, roll
from app.ops import gather_tree as gather_tree_module
from app.ops.depth_to_space import depth_to_space
from app.ops.extract_image_patches import extract_image_patches
from app.ops.gather_tree import gather_tree
from app.ops.space_to_depth import space_to_depth
from app.pipeline.jobs import Job, Limits, make_job
from app.settings import Settings
from tests.cases import GATHER_CASES, ROLL_CASES
from tests.ops.test_col2im import reference as col2im_reference
from tests.ops.test_gather_tree import beams
from tests.support import assert_same_bits
from tests.transports.test_every_op import example_arrays

Array = npt.NDArray[Any]
LIMITS = Limits.of(Settings())
STAND_INS = (
    "take",
    "take_slices",
    "roll_rows",
    "gather_tree",
    "first_fraction",
    "col2im_reach",
    "col2im",
    "scatter_put",
    "scatter_reduce",
)


@pytest.fixture(autouse=True)
def compiled_loops() -> None:
    assert loops.wait_compiled(), "the numba loops did not compile"


@pytest.fixture
def stand_in_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the stand-ins called, in order, while the test runs."""
    calls: list[str] = []

    def counted(name: str, loop: Callable[..., Any]) -> Callable[..., Any]:
        def call(*arguments: Any) -> Any:
            calls.append(name)
            return loop(*arguments)  # first_fraction answers a position

        return call

    for name in STAND_INS:
        monkeypatch.setattr(numpy_loops, name, counted(name, getattr(numpy_loops, name)))
    yield calls


def outputs(run: Callable[[], Any]) -> list[Array]:
    """What ``run`` answers, as a list of arrays (an op of several outputs gives several)."""
    result = run()
    if isinstance(result, np.ndarray):
        return [result]
    return [np.asarray(item) for item in result]


def answers(job: Job) -> list[Array]:
    """A job's outputs: one, or each of an op of several."""
    return [job.output()] if job.split is None else job.outputs()


def both_ways(run: Callable[[], Any], calls: list[str]) -> tuple[list[Array], list[Array], int]:
    """``run``'s outputs by the compiled loops and by the stand-ins, and how many stand-in calls
    the second made (none may be made by the first)."""
    compiled = outputs(run)
    assert calls == [], "a stand-in ran while the compiled loops were ready"
    with loops.numpy_stand_ins():
        stood_in = outputs(run)
    return compiled, stood_in, len(calls)


EXAMPLES = [(op, name) for op in registry.REGISTRY.values() for name in op.examples]


@pytest.mark.parametrize(("op", "example"), EXAMPLES, ids=[f"{o.name}-{n}" for o, n in EXAMPLES])
def test_every_example_of_every_op_has_the_same_bits_both_ways(
    op: Any, example: str, stand_in_calls: list[str]
) -> None:
    arrays, given = example_arrays(op, op.examples[example]["value"])
    attributes = {**op.attribute_defaults(), **given}

    def run() -> Any:
        return answers(make_job(op, arrays, attributes, LIMITS))

    compiled, stood_in, _ = both_ways(run, stand_in_calls)
    assert len(compiled) == len(stood_in)
    for first, second in zip(compiled, stood_in, strict=True):
        assert first.shape == second.shape
        assert_same_bits(second, first)


def test_the_ops_whose_kernels_reach_a_loop_ran_their_stand_ins(
    stand_in_calls: list[str],
) -> None:
    """Each op whose examples reach a compiled loop reached its stand-in as often under
    ``numpy_stand_ins``: the test above compared the two ways, not one way twice."""
    reached: dict[str, int] = {}
    for op in registry.REGISTRY.values():
        for example in op.examples.values():
            arrays, given = example_arrays(op, example["value"])
            attributes = {**op.attribute_defaults(), **given}
            with loops.numpy_stand_ins():
                before = len(stand_in_calls)
                answers(make_job(op, arrays, attributes, LIMITS))
                reached[op.name] = reached.get(op.name, 0) + len(stand_in_calls) - before
    with_loops = {name for name, count in reached.items() if count}
    # Roll, the Gather family, GatherTree, Col2Im and ScatterElementsUpdate run their compiled
    # loops; the others none.
    expected = {"roll", "gather", "gather_tree", "col2im", "scatter_elements_update"}
    assert expected <= with_loops, reached
    assert set(stand_in_calls) == set(STAND_INS)


@pytest.mark.parametrize("case", ROLL_CASES, ids=[case.name for case in ROLL_CASES])
def test_roll_corpus_has_the_same_bits_both_ways(case: Any, stand_in_calls: list[str]) -> None:
    def run() -> Array:
        return roll(case.data, case.shift, case.axes)

    ((compiled,), (stood_in,), _) = both_ways(run, stand_in_calls)
    assert_same_bits(stood_in, compiled)


@pytest.mark.parametrize("case", GATHER_CASES, ids=[case.name for case in GATHER_CASES])
def test_gather_corpus_has_the_same_bits_both_ways(case: Any, stand_in_calls: list[str]) -> None:
    def run() -> Array:
        return gather(case.data, case.indices, case.axis, case.batch_dims)

    ((compiled,), (stood_in,), _) = both_ways(run, stand_in_calls)
    assert_same_bits(stood_in, compiled)
    assert compiled.shape == stood_in.shape


GATHER_TREE_TYPES = [
    "int8",
    "uint8",
    "int32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
]


@pytest.mark.parametrize("dtype", GATHER_TREE_TYPES)
@pytest.mark.parametrize("shape", [(7, 5, 3), (1, 2, 4), (9, 1, 1), (4, 3, 0)])
def test_gather_tree_beams_have_the_same_bits_both_ways(
    dtype: str, shape: tuple[int, int, int], stand_in_calls: list[str]
) -> None:
    """Random beams of each kind of T (signed, unsigned, the four floats: parent ids read from
    their bits), lengths 0 to past MAX_TIME, end tokens met or not; -0.0 ids equal to an
    end_token of 0 in the float types."""
    step_ids, parent_ids, max_seq_len, end = beams(np.dtype(dtype), shape, seed=len(dtype))
    if step_ids.dtype.kind == "f" or dtype == "bfloat16":
        step_ids[0, ..., :1] = -step_ids[0, ..., :1] * 0  # -0.0 (or 0.0) ids
        end = np.array(0, step_ids.dtype)

    def run() -> Array:
        return gather_tree(step_ids, parent_ids, max_seq_len, end)

    ((compiled,), (stood_in,), calls) = both_ways(run, stand_in_calls)
    assert_same_bits(stood_in, compiled)
    assert compiled.shape == shape
    assert calls >= (1 if compiled.size else 0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_the_first_fraction_is_found_both_ways(dtype: str) -> None:
    """Every kind of value that is not an integer (a half, a tiny fraction, NaN, both
    infinities) is found at its place by the compiled scan and the stand-in alike; integers
    (zeros of both signs, the largest exact ones) are not."""
    kind = np.dtype(dtype)
    integers = np.array([0.0, -0.0, 1.0, -3.0, 2.0**7, 2.0**8, -(2.0**10)], np.float64)
    fractions = [0.5, -1.25, 2.0**-9, float("nan"), float("inf"), float("-inf")]
    reading = gather_tree_module._FLOAT_BITS[kind.name]
    for fraction in fractions:
        for place in (0, 5, 9000):
            values = np.resize(integers, 10000).astype(kind)
            values[place] = fraction
            raw = values.view(f"u{kind.itemsize}")
            compiled = loops.first_fraction(raw, *reading)
            with loops.numpy_stand_ins():
                stood_in = loops.first_fraction(raw, *reading)
            assert (compiled, stood_in) == (place, place), (fraction, place)
    clean = np.resize(integers, 10000).astype(kind).view(f"u{kind.itemsize}")
    assert loops.first_fraction(clean, *reading) == -1
    with loops.numpy_stand_ins():
        assert loops.first_fraction(clean, *reading) == -1


PATCH_CASES = [
    ((1, 2, 7, 9), [3, 2], [2, 3], [1, 2], "valid"),
    ((2, 3, 6, 5), [2, 2], [1, 1], [2, 1], "same_upper"),
    ((1, 1, 5, 5), [4, 3], [3, 2], [1, 1], "same_lower"),
    ((1, 2, 4, 4), [1, 1], [5, 5], [1, 1], "valid"),
]


@pytest.mark.parametrize("dtype", ["uint8", "float16", ">f4", "float64"])
@pytest.mark.parametrize(("shape", "sizes", "strides", "rates", "auto_pad"), PATCH_CASES)
def test_image_patches_have_the_same_bits_both_ways(
    dtype: str,
    shape: tuple[int, ...],
    sizes: list[int],
    strides: list[int],
    rates: list[int],
    auto_pad: str,
) -> None:
    """ExtractImagePatches' compiled copy (rows taken in the order they lie in the image,
    raw.copy_gathered) against NumPy's copy of the same view, while the loops compile: padded
    and not, rates and strides, big-endian data, a non-C-ordered image (NumPy's copy then)."""
    data = np.random.default_rng(1).integers(0, 250, shape).astype(dtype)
    for image in (data, data[..., ::-1]):
        compiled = extract_image_patches(image, sizes, strides, rates, auto_pad)
        with loops.numpy_stand_ins():
            stood_in = extract_image_patches(image, sizes, strides, rates, auto_pad)
        assert_same_bits(stood_in, compiled)
        assert compiled.dtype == image.dtype


@pytest.mark.parametrize("dtype", ["uint8", "int16", ">f4", "float64"])
@pytest.mark.parametrize("mode", ["blocks_first", "depth_first"])
@pytest.mark.parametrize(("shape", "block_size"), [((2, 8, 3, 5), 2), ((1, 9, 4, 2), 3),
                                                   ((1, 4, 3), 2), ((1, 32, 2, 1, 3), 2),
                                                   ((1, 32, 2, 37), 4), ((2, 4, 3, 41), 2)])  # fmt: skip
def test_depth_and_space_blocks_have_the_same_bits_both_ways(
    dtype: str, mode: str, shape: tuple[int, ...], block_size: int
) -> None:
    """DepthToSpace and back by the compiled permuted copy (raw.copy_permuted: rows read or
    written a block apart, a block's rows written interleaved) against NumPy's copy of the same
    views: 1 to 3 spatial axes, blocks of 2, 3 and 4, rows shorter and longer than a vector,
    big-endian data, a non-C-ordered input (NumPy's copy then)."""
    data = np.random.default_rng(2).integers(0, 250, shape).astype(dtype)
    for image in (data, data[:, ::-1]):
        compiled = depth_to_space(image, mode, block_size)
        back = space_to_depth(compiled, mode, block_size)
        with loops.numpy_stand_ins():
            stood_in = depth_to_space(image, mode, block_size)
            stood_in_back = space_to_depth(stood_in, mode, block_size)
        assert_same_bits(stood_in, compiled)
        assert_same_bits(stood_in_back, back)
        assert_same_bits(back, image)


#: Col2Im cases: (N, C, output_size, kernel_size, strides, dilations, pads_begin, pads_end,
#: whether the blocks land whole by one permuted copy: no pixel reached twice, and every kernel
#: element reaches the same blocks).
COL2IM_CASES = [
    (2, 3, [6, 8], [2, 2], [2, 2], [1, 1], [0, 0], [0, 0], True),
    (1, 2, [7, 9], [2, 3], [3, 4], [1, 1], [0, 0], [0, 0], True),  # gaps between blocks
    (1, 1, [9, 8], [2, 2], [6, 4], [3, 2], [0, 0], [0, 0], True),  # dilated, interleaved
    (1, 2, [4, 6], [2, 2], [2, 2], [1, 1], [2, 2], [2, 2], True),  # pads cut whole blocks off
    (1, 1, [5, 5], [1, 1], [1, 1], [0, 0], [0, 0], [0, 0], True),  # 1x1 kernel, dilation 0
    (1, 2, [4, 4], [2, 2], [2, 2], [1, 1], [1, 1], [1, 1], False),  # pads cut one element
    (1, 2, [5, 5], [2, 2], [1, 1], [1, 1], [0, 0], [0, 0], False),  # blocks overlap
]


@pytest.mark.parametrize("dtype", ["uint8", "float16", ">f4", "float64"])
@pytest.mark.parametrize("case", COL2IM_CASES)
def test_col2im_blocks_have_the_same_bits_both_ways(
    dtype: str, case: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Col2Im where each value lands in one pixel: one compiled permuted copy of the blocks
    into the output's strided view (raw.copy_permuted) against NumPy's copy of the same views,
    and both against the spec's element-by-element reading: gaps, dilation, pads, big-endian
    data; where pads cut some kernel elements' blocks or blocks overlap, and for a
    non-C-ordered native input, the per-element loop (no permuted copy)."""
    batch, channels, size, kernel, strides, dilations, begin, end, whole = case
    lengths = [
        (size[d] + begin[d] + end[d] - dilations[d] * (kernel[d] - 1) - 1) // strides[d] + 1
        for d in range(2)
    ]
    shape = (batch, channels * kernel[0] * kernel[1], lengths[0] * lengths[1])
    data = np.random.default_rng(3).integers(1, 250, shape).astype(dtype)
    copies: list[int] = []
    counted = raw.copy_permuted

    def copy_permuted(*arguments: Any) -> None:
        copies.append(1)
        counted(*arguments)

    monkeypatch.setattr(col2im_module, "copy_permuted", copy_permuted)
    lists = (strides, dilations, begin, end)
    expected = col2im_reference(data, size, kernel, *lists)
    strided = np.repeat(data, 2, axis=2)[..., ::2]  # the same values, every other one
    # A big-endian input is first put in native order, C-ordered: then it is copied whole too.
    for blocks, permuted in ((data, whole), (strided, whole and dtype == ">f4")):
        copies.clear()
        compiled = col2im_module.col2im(blocks, np.array(size), np.array(kernel), *lists)
        assert len(copies) == permuted
        with loops.numpy_stand_ins():
            stood_in = col2im_module.col2im(blocks, np.array(size), np.array(kernel), *lists)
        assert_same_bits(stood_in, compiled)
        assert compiled.dtype == data.dtype
        assert np.array_equal(compiled.astype(np.float64), expected.astype(np.float64))


def test_while_compiling_a_cheap_call_stands_in_and_a_costly_one_waits(
    monkeypatch: pytest.MonkeyPatch, stand_in_calls: list[str]
) -> None:
    """The stand-ins hold temporaries beside the output: only calls of at most
    CHEAP_OUTPUT_BYTES of output take them while numba compiles; a larger one waits for the
    compiled loop."""
    module = loops.compiled_module()
    compiling = loops._Compiled()
    compiling.thread = threading.Thread()  # "started": no call starts another
    monkeypatch.setattr(loops, "_COMPILED", compiling)
    source = np.arange(256, dtype=np.uint8)
    indices = np.arange(-256, 256, dtype=np.int64)
    cheap = np.empty(numpy_loops.CHEAP_OUTPUT_BYTES // indices.size * indices.size, np.uint8)
    outer = cheap.size // indices.size
    loops.take(np.tile(source, outer), indices, cheap, 1, outer, 256, indices.size, 256, 0)
    assert stand_in_calls == ["take"]
    assert_same_bits(cheap, np.tile(np.concatenate([source, source]), outer))

    def ready() -> None:
        compiling.module = module
        compiling.done.set()

    costly = np.empty(cheap.size + indices.size, np.uint8)
    outer += 1
    timer = threading.Timer(0.2, ready)
    timer.start()
    loops.take(np.tile(source, outer), indices, costly, 1, outer, 256, indices.size, 256, 0)
    timer.join()
    assert stand_in_calls == ["take"]  # the compiled loop wrote it
    assert_same_bits(costly, np.tile(np.concatenate([source, source]), outer))


def test_a_roll_of_many_rolled_dimensions_waits_for_the_compiled_loop() -> None:
    # Two block copies per rolled dimension before the rows, combined: 2**6 at most.
    def table(rolled: int) -> npt.NDArray[np.int64]:
        dims = 8
        shifts = [1] * rolled + [0] * (dims - rolled)
        return np.array([2] * dims + shifts + [1] * dims, np.int64)

    assert numpy_loops.roll_is_cheap(table(numpy_loops.CHEAP_ROLLED_DIMENSIONS))
    assert not numpy_loops.roll_is_cheap(table(numpy_loops.CHEAP_ROLLED_DIMENSIONS + 1))


def test_a_walk_of_many_steps_waits_for_the_compiled_loop(
    monkeypatch: pytest.MonkeyPatch, stand_in_calls: list[str]
) -> None:
    """GatherTree's stand-in walks its steps in Python: a few bytes of ids over more than
    CHEAP_STEPS steps wait for the compiled walk; as many steps as that stand in."""
    module = loops.compiled_module()
    compiling = loops._Compiled()
    compiling.thread = threading.Thread()  # "started": no call starts another
    monkeypatch.setattr(loops, "_COMPILED", compiling)
    assert numpy_loops.gather_tree_is_cheap(np.empty(4, np.uint8), numpy_loops.CHEAP_STEPS)

    def walk(steps: int) -> npt.NDArray[np.uint8]:
        ids = np.arange(steps, dtype=np.uint8) % 5
        out = np.empty(steps, np.uint8)
        lengths = np.array([steps], np.int64)
        ends = np.array([9, 9], np.uint8)
        state = np.empty(32, np.uint32)
        loops.gather_tree(ids, np.zeros(steps, np.uint8), out, lengths, state, ends,
                          steps, 1, 1, 1, 0, 0, 0, 0, np.empty(0, np.uint8))  # fmt: skip
        return out

    few = numpy_loops.CHEAP_STEPS
    assert_same_bits(walk(few), np.arange(few, dtype=np.uint8) % 5)
    assert stand_in_calls == ["gather_tree"]

    def ready() -> None:
        compiling.module = module
        compiling.done.set()

    timer = threading.Timer(0.2, ready)
    timer.start()
    many = numpy_loops.CHEAP_STEPS + 1
    assert_same_bits(walk(many), np.arange(many, dtype=np.uint8) % 5)
    timer.join()
    assert stand_in_calls == ["gather_tree"]  # the compiled walk wrote the second


def test_a_large_col2im_kernel_waits_for_the_compiled_loops(
    monkeypatch: pytest.MonkeyPatch, stand_in_calls: list[str]
) -> None:
    """Col2Im's stand-ins go through the kernel's elements in Python, a few NumPy calls each (a
    512 x 512 kernel held a worker 8 s): while numba compiles, a kernel of CHEAP_KERNEL_ELEMENTS
    elements stands in, one more waits for the compiled loops (which write the answer)."""
    module = loops.compiled_module()
    compiling = loops._Compiled()
    compiling.thread = threading.Thread()  # "started": no call starts another
    monkeypatch.setattr(loops, "_COMPILED", compiling)
    side = numpy_loops.CHEAP_KERNEL_ELEMENTS // 2  # a kernel of 2 x side, two blocks overlapping
    axes = np.array([2, 1, 1, 0, 2, 3, side, 1, 1, 0, 1, side], np.int64)
    assert numpy_loops.col2im_is_cheap(axes)
    assert not numpy_loops.col2im_is_cheap(np.where(np.arange(12) == 6, side + 1, axes))
    assert numpy_loops.col2im_reach_is_cheap(numpy_loops.CHEAP_KERNEL_ELEMENTS)
    assert not numpy_loops.col2im_reach_is_cheap(numpy_loops.CHEAP_KERNEL_ELEMENTS + 1)

    def image(columns: int) -> npt.NDArray[np.int32]:
        data = np.arange(2 * 2 * columns, dtype=np.int32).reshape(1, 2 * columns, 2)
        got = col2im_module.col2im(data, np.array([3, columns]), np.array([2, columns]))
        expected = col2im_reference(data, (3, columns), (2, columns))
        assert_same_bits(got, expected)
        return got

    image(side)
    assert stand_in_calls == ["col2im_reach", "col2im_reach", "col2im"]

    def ready() -> None:
        compiling.module = module
        compiling.done.set()

    timer = threading.Timer(0.2, ready)
    timer.start()
    image(side + 1)
    timer.join()
    # Each axis's reach (2 and side + 1 elements) stood in; the sum (2 * (side + 1)) waited.
    assert stand_in_calls == ["col2im_reach", "col2im_reach", "col2im"] + ["col2im_reach"] * 2


#: ``take``'s ways, by (element type, batches, outer, length, count): one row a batch (vector
#: gathers), several rows of 2-byte elements (positions once for all rows), 8 rows of bytes and
#: more (their columns, where the CPU has VBMI; else positions).
_TAKE_WAYS = [(np.float32, 3, 1, 50, 70), (np.int16, 2, 5, 40, 33), (np.int8, 2, 9, 100, 128)]


@pytest.mark.parametrize(("dtype", "batches", "outer", "length", "count"), _TAKE_WAYS, ids=str)
@pytest.mark.parametrize("index_type", [np.int32, np.int64], ids=["int32", "int64"])
def test_take_says_where_a_position_was_outside_as_its_stand_in(
    dtype: Any, batches: int, outer: int, length: int, count: int, index_type: Any
) -> None:
    """``take`` answers 1 where an index's position (after the wrap) was outside
    ``[0, length)``, else 0, on each of its ways, as its stand-in does: what a kernel that
    leaves the bounds to it (GatherElements') refuses by."""
    rng = np.random.default_rng(count)
    width = f"u{np.dtype(dtype).itemsize}"  # the loops move bits: unsigned words
    source = rng.integers(-100, 100, batches * outer * length).astype(dtype).view(width)
    base = rng.integers(0, length, batches * count).astype(index_type)
    for wrap in (0, length):
        for at, value in ((None, 0), (0, -1), (base.size - 1, length), (count // 2, -length - 1)):
            indices = base.copy()
            if at is not None:
                indices[at] = value
            out = np.empty(batches * outer * count, width)
            got = loops.take(source, indices, out, batches, outer, length, count, wrap, 0)
            with loops.numpy_stand_ins():
                want_out = np.empty_like(out)
                want = loops.take(source, indices, want_out, batches, outer, length, count, wrap,
                                  0)  # fmt: skip
            assert_same_bits(out, want_out)
            outside = at is not None and not (wrap and value == -1)
            assert got == want == int(outside), (wrap, at, value)
