"""SliceScatter-15 (app/ops/slice_scatter.py): the spec's examples and its NumPy snippet as the
reference on every integer, every element type to the bit, the refusals, and OpenVINO's CPU
plugin on generated cases."""

from typing import Any

import numpy as np
import numpy.typing as npt
import openvino as ov
import openvino.opset1 as ov_opset1
import openvino.opset15 as ov_opset15
import pytest

from app.ops import slice_scatter as module
from app.ops.declaration import Plan
from app.ops.errors import SpecError
from app.ops.slice_scatter import slice_scatter
from tests.ops.movement_support import (
    BENCHMARK_DTYPES,
    ELEMENT_TYPES,
    BenchmarkCase,
    assert_same_bits,
    constant,
    plugin_type,
    sample,
    short,
    square,
)

INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)


def _ints(values: Any) -> Any:
    return values if isinstance(values, np.ndarray) else np.array(values, np.int64)


def run(data: Any, updates: Any, start: Any, stop: Any, step: Any, axes: Any = None) -> Any:
    arrays = {"data": np.asarray(data), "updates": np.asarray(updates), "start": _ints(start),
              "stop": _ints(stop), "step": _ints(step)}  # fmt: skip
    if axes is not None:
        arrays["axes"] = _ints(axes)
    plan = module.plan(arrays, {})
    assert isinstance(plan, Plan)
    assert plan.output_shape == arrays["data"].shape
    return plan.run(None)


def snippet(
    data: npt.NDArray[Any],
    updates: npt.NDArray[Any],
    start: list[int],
    stop: list[int],
    step: list[int],
    axes: list[int] | None = None,
) -> npt.NDArray[Any]:
    """The spec's NumPy snippet, as it is written."""
    out = np.copy(data)
    if axes is None:
        axes = list(range(len(start)))
    slice_list = [slice(None)] * data.ndim
    for slice_start, slice_stop, slice_step, slice_axis in zip(start, stop, step, axes):  # noqa: B905
        slice_list[slice_axis] = slice(slice_start, slice_stop, slice_step)
    out[tuple(slice_list)] = updates
    return out


def test_is_collected() -> None:
    from app.registry import REGISTRY  # noqa: PLC0415

    assert REGISTRY["slice_scatter"] is module.OP
    assert [item.name for item in module.OP.inputs if item.optional] == ["axes"]


TEN = np.arange(10, dtype=np.float32).reshape(2, 5)


def test_the_spec_examples() -> None:
    one = run(TEN, np.array([[10, 20, 30, 40, 50]], np.float32), [0], [1], [1], [0])
    assert one.tolist() == [[10, 20, 30, 40, 50], [5, 6, 7, 8, 9]]
    two = run(TEN, np.array([[10, 20, 30], [40, 50, 60]], np.float32), [-25], [25], [2], [1])
    assert two.tolist() == [[10, 1, 20, 3, 30], [40, 6, 50, 8, 60]]
    data = np.arange(15, dtype=np.float32).reshape(3, 5)
    three = run(data, np.array([[50, 60], [70, 80]], np.float32), [0, 1], [3, 5], [2, 2])
    assert three.tolist() == [[0, 50, 2, 60, 4], [5, 6, 7, 8, 9], [10, 70, 12, 80, 14]]


def test_the_declared_examples_answer_as_they_say() -> None:
    for name, item in module.OP.examples.items():
        request = item["value"]
        dtype = np.dtype(request.get("dtype", "float64"))
        arrays = {key: np.asarray(value, dtype if key in ("data", "updates") else np.int64)
                  for key, value in request.items() if key != "dtype"}  # fmt: skip
        plan = module.OP.plan(arrays, {})
        assert isinstance(plan, Plan)
        assert plan.run(None).tolist() == item["x-expected-output"], name


@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_every_type_to_the_bit(dtype: np.dtype[Any]) -> None:
    data = sample(dtype, (4, 5, 6), seed=2)
    updates = sample(dtype, (4, 5, 2), seed=3)
    start, stop, step = np.array([3, 1], np.int32), np.array([-5, 5], np.int8), [-2, 3]
    got = run(data, updates[:2], start, stop, step, np.array([0, -1], np.int8))
    expected = data.copy()
    np.copyto(expected[3:-5:-2, :, 1:5:3], updates[:2])
    assert_same_bits(got, expected)


@pytest.mark.parametrize("start", [INT64_MIN, -11, -3, 0, 4, 10, INT64_MAX])
@pytest.mark.parametrize("stop", [INT64_MIN, -11, -3, 0, 4, 10, INT64_MAX])
@pytest.mark.parametrize("step", [INT64_MIN, -3, -1, 1, 2, INT64_MAX])
def test_the_spec_snippet_on_every_integer(start: int, stop: int, step: int) -> None:
    data = np.arange(10)
    updates = -1 - np.arange(len(data[start:stop:step]))
    expected = snippet(data, updates, [start], [stop], [step])
    assert run(data, updates, [start], [stop], [step]).tolist() == expected.tolist()


def test_properties_against_the_snippet() -> None:
    rng = np.random.default_rng(8)
    for _ in range(200):
        rank = int(rng.integers(1, 4))
        shape = tuple(int(v) for v in rng.integers(0, 5, rank))
        count = int(rng.integers(1, rank + 1))
        axes = [int(v) for v in rng.choice(rank, count, replace=False)]
        start = [int(v) for v in rng.integers(-7, 7, count)]
        stop = [int(v) for v in rng.integers(-7, 7, count)]
        step = [int(v) or 1 for v in rng.integers(-3, 4, count)]
        data = rng.integers(0, 100, shape).astype(np.int16)
        index = [slice(None)] * rank
        for axis, first, last, pace in zip(axes, start, stop, step, strict=True):
            index[axis] = slice(first, last, pace)
        updates = -1 - rng.integers(0, 100, data[tuple(index)].shape).astype(np.int16)
        got = run(data, updates, start, stop, step, axes)
        assert_same_bits(got, snippet(data, updates, start, stop, step, axes))


@pytest.mark.parametrize("piece_bytes", [1, 7, 64])
def test_an_output_made_in_pieces_along_its_first_axis(
    piece_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past _PIECES_FROM bytes (here every output), an output whose first axis is not sliced is
    made piece by piece along it (pieces of one row, of a few and of rows not dividing the
    axis), the same bits as the spec's snippet; a sliced first axis, a first axis of one and
    rank 1 are made whole."""
    monkeypatch.setattr(module, "_PIECES_FROM", 0)
    monkeypatch.setattr(module, "_PIECE_BYTES", piece_bytes)
    rng = np.random.default_rng(21)
    for _ in range(150):
        rank = int(rng.integers(1, 5))
        shape = tuple(int(v) for v in rng.integers(0, 6, rank))
        count = int(rng.integers(1, rank + 1))
        axes = [int(v) for v in rng.choice(rank, count, replace=False)]
        start = [int(v) for v in rng.integers(-7, 7, count)]
        stop = [int(v) for v in rng.integers(-7, 7, count)]
        step = [int(v) or 1 for v in rng.integers(-3, 4, count)]
        if rng.integers(0, 3) == 0 and 0 in axes:  # the first axis "sliced" whole, step 1
            where = axes.index(0)
            start[where], stop[where], step[where] = 0, shape[0], 1
        dtype = (np.int8, np.float32, np.float64)[int(rng.integers(0, 3))]
        data = rng.integers(0, 100, shape).astype(dtype)
        index = [slice(None)] * rank
        for axis, first, last, pace in zip(axes, start, stop, step, strict=True):
            index[axis] = slice(first, last, pace)
        updates = -1 - rng.integers(0, 100, data[tuple(index)].shape).astype(dtype)
        got = run(data, updates, start, stop, step, axes)
        assert_same_bits(got, snippet(data, updates, start, stop, step, axes))


def _loop_reference(
    data: npt.NDArray[Any],
    updates: npt.NDArray[Any],
    shape: tuple[int, int, int, int, int, int],
) -> npt.NDArray[Any]:
    """``compiled.slice_scatter``'s result by NumPy: each row of data, its slots replaced."""
    rows, length, first, step, count, backward = shape
    out = data.reshape(rows, length).copy()
    taken = updates.reshape(rows, count)
    out[:, first : first + step * count : step] = taken[:, ::-1] if backward else taken
    return out.reshape(-1)


@pytest.mark.parametrize("width", [np.uint8, np.uint16, np.uint32, np.uint64], ids=str)
def test_the_compiled_loop_directly(width: Any) -> None:
    """``compiled.slice_scatter`` against NumPy, both ways of writing (regular stores, and a
    buffer written by non-temporal stores): rows of odd lengths, one and many, short and
    longer than the buffer (``SCATTER_CHUNK_BYTES``, so rows straddle its pieces), steps 1 to
    7 (2 most often, its own loop), forward and backward, no slot to every slot, slots at the
    start, the end and neither; arrays at odd offsets; nothing outside ``out`` written."""
    from app.ops import compiled, loops  # noqa: PLC0415

    assert loops.ready_module() is compiled
    rng = np.random.default_rng(int(np.dtype(width).itemsize))
    chunk = compiled.SCATTER_CHUNK_BYTES // np.dtype(width).itemsize
    info = np.iinfo(width)
    for trial in range(400):
        rows = int(rng.integers(1, 6))
        length = int(rng.integers(1, 80) if trial % 4 else rng.integers(chunk - 3, 2 * chunk + 9))
        if trial % 10 == 0:
            rows, length = 1, int(rng.integers(1, 3 * chunk))
        step = 2 if trial % 3 == 0 else int(rng.integers(1, 8))
        first = int(rng.integers(0, min(length, 2 * step + 1)))
        if trial % 7 == 0:
            first = length - 1 - int(rng.integers(0, min(length, step)))
        most = (length - 1 - first) // step + 1
        count = int(rng.choice([0, most, int(rng.integers(0, most + 1))]))
        backward, stream = int(rng.integers(0, 2)), int(trial % 2)
        offset = int(rng.integers(0, 3))
        data = rng.integers(0, info.max, rows * length + offset, dtype=width)[offset:]
        updates = rng.integers(0, info.max, rows * count + offset + 1, dtype=width)[offset + 1 :]
        guarded = np.full(rows * length + 2 * offset + 4, 0xA5, width)
        out = guarded[offset + 1 : offset + 1 + rows * length]
        shape = (rows, length, first, step, count, backward)
        compiled.slice_scatter(data, updates, out, *shape, stream)
        assert np.array_equal(out, _loop_reference(data, updates, shape)), (trial, shape, stream)
        assert (guarded[: offset + 1] == 0xA5).all()
        assert (guarded[offset + 1 + rows * length :] == 0xA5).all()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_slices_along_one_axis_by_the_compiled_loop(
    dtype: np.dtype[Any], stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slice along one axis, every other axis whole, is the compiled loop's when the elements
    after the axis are 1, 2, 4 or 8 bytes (every element type, every axis that gives such
    runs; small outputs and short rows too, ``_LOOP_FROM`` and ``_LOOP_ROW_BYTES`` lowered to 0
    here, and by non-temporal stores with ``STREAM_BYTES`` lowered to 0): the same bits as the
    spec's snippet, NaN payloads and -0.0 kept; any other slice is NumPy's."""
    from app.ops import compiled  # noqa: PLC0415

    monkeypatch.setattr(module, "_LOOP_ROW_BYTES", 0)
    monkeypatch.setattr(module, "_LOOP_FROM", 0)
    if stream:
        monkeypatch.setattr(module, "STREAM_BYTES", 0)
    calls: list[tuple[Any, ...]] = []
    original = compiled.slice_scatter

    def watched(*arguments: Any) -> None:
        calls.append(arguments[3:])
        original(*arguments)

    monkeypatch.setattr(compiled, "slice_scatter", watched)
    rng = np.random.default_rng(dtype.itemsize + 3)
    for shape in [(3, 17, 1), (5, 2, 33), (7, 16), (2, 3, 4, 2), (9,), (6, 301)]:
        data = sample(dtype, shape, seed=len(calls))
        for axis in range(len(shape)):
            size = shape[axis]
            for step in (2, -2, 1, -1, 3, -4):
                first = int(rng.integers(-size, size))
                index = [slice(None)] * len(shape)
                index[axis] = slice(first, None, step)
                updates = sample(dtype, data[tuple(index)].shape, seed=step + 9)
                inner = int(np.prod(shape[axis + 1 :])) * dtype.itemsize
                before = len(calls)
                start, stop, pace = [first], [INT64_MAX if step > 0 else INT64_MIN], [step]
                got = run(data, updates, start, stop, pace, [axis])
                assert_same_bits(got, snippet(data, updates, start, stop, pace, [axis]))
                whole = range(*index[axis].indices(size)) == range(size)
                assert (len(calls) > before) == (inner in (1, 2, 4, 8) and not whole)
    assert calls


def test_a_small_output_is_numpy_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below ``_LOOP_FROM`` bytes the compiled loop is not called (its call costs more there);
    at it, it is."""
    from app.ops import compiled  # noqa: PLC0415

    calls: list[int] = []
    original = compiled.slice_scatter

    def watched(*arguments: Any) -> None:
        calls.append(1)
        original(*arguments)

    monkeypatch.setattr(compiled, "slice_scatter", watched)
    side = int(module._LOOP_FROM**0.5)
    for width in (side - 2, side):
        data = sample(np.dtype(np.int8), (side, width), seed=width)
        updates = sample(np.dtype(np.int8), (side, width // 2), seed=1)
        got = run(data, updates, [0], [width], [2], [1])
        assert_same_bits(got, snippet(data, updates, [0], [width], [2], [1]))
    assert calls == [1]


def test_the_slots_of_every_row_as_one_row() -> None:
    """Slots at a fixed step through each whole row (every other column of an even width, any
    step dividing the width, starting before the first step) are one row of the compiled loop,
    however short the rows; other short rows are NumPy's."""
    assert module._one_axis((8192, 8192), 1, (slice(None), slice(0, 8192, 2))) == (
        1, 1, 8192 * 8192, 0, 2, 8192 * 4096, 0,
    )  # fmt: skip
    assert module._one_axis((10, 6, 2), 4, (slice(None), slice(2, 6, 3), slice(None))) == (
        8, 1, 60, 2, 3, 20, 0,
    )  # fmt: skip
    assert module._one_axis((10, 7), 1, (slice(None), slice(1, 7, 2))) is None
    assert module._one_axis((10, 6), 1, (slice(None), slice(5, None, -2))) is None
    assert module._one_axis((10, 600), 1, (slice(None), slice(5, None, -2))) == (
        1, 10, 600, 1, 2, 3, 1,
    )  # fmt: skip
    assert module._one_axis((10, 300), 1, (slice(None), slice(5, None, -2))) is None
    assert module._one_axis((10, 6, 3), 1, (slice(None), slice(0, 6, 2), slice(None))) is None
    assert module._one_axis((10, 6), 1, (slice(0, 10, 2), slice(0, 6, 2))) is None
    data = sample(np.dtype(np.float32), (33, 6), seed=4)
    updates = sample(np.dtype(np.float32), (33, 2), seed=5)
    got = run(data, updates, [1], [6], [3], [1])
    assert_same_bits(got, snippet(data, updates, [1], [6], [3], [1]))


def test_a_backward_start_below_minus_d_is_an_empty_slice() -> None:
    """Length 7, start -9, stop -10, step -2: Python's rule (the spec's snippet) clamps start to
    "before the first element": the slice is empty, so updates has length 0."""
    data = np.arange(7, dtype=np.int32)
    got = run(data, np.zeros(0, np.int32), [-9], [-10], [-2], [0])
    assert_same_bits(got, data)
    with pytest.raises(SpecError) as refused:
        run(data, np.zeros(1, np.int32), [-9], [-10], [-2], [0])
    assert refused.value.field == "updates"


def test_into_a_given_output() -> None:
    out = np.empty(4, np.int8)
    got = slice_scatter(np.zeros(4, np.int8), np.array([7, 7], np.int8), [1], [3], [1], None, out)
    assert got is out
    assert out.tolist() == [0, 7, 7, 0]


@pytest.mark.parametrize(
    ("updates", "start", "stop", "step", "axes", "field", "words"),
    [
        (np.zeros((3, 3)), [0], [1], [0], [0], "step", "cannot be 0"),
        (np.zeros((3, 3)), [0, 0], [1], [1, 1], None, "stop", "same number of elements"),
        (np.zeros((3, 3)), [0], [1], [1], [0, 1], "axes", "as many elements"),
        (np.zeros((3, 3)), [0, 0], [3, 3], [1, 1], [0, -2], "axes", "unique"),
        (np.zeros((3, 3)), [0], [1], [1], [2], "axes", "out of range"),
        (np.zeros((3, 3)), [0, 0, 0], [1, 1, 1], [1, 1, 1], None, "start", "more than data"),
        (np.zeros((3, 3)), 0, [1], [1], None, "start", "1D tensor"),
        (np.zeros((3, 3)), np.array([0.5]), [1], [1], None, "start", "integer type"),
        (np.zeros((1, 3)), [0], [2], [1], None, "updates", "shape of the slice"),
        (np.zeros((2,)), [0], [2], [1], None, "updates", "shape of the slice"),
        (np.zeros((2, 3), np.float32), [0], [2], [1], None, "updates", "type of data"),
    ],
)
def test_refusals_name_the_field(
    updates: Any, start: Any, stop: Any, step: Any, axes: Any, field: str, words: str
) -> None:
    with pytest.raises(SpecError) as refused:
        run(np.zeros((3, 3)), updates, start, stop, step, axes)
    assert refused.value.field == field
    assert words in refused.value.message


def test_a_scalar_is_refused() -> None:
    with pytest.raises(SpecError) as refused:
        run(np.float32(1), np.float32(2), [0], [1], [1])
    assert refused.value.field == "data"


def plugin(
    shape: tuple[int, ...], updates_shape: tuple[int, ...], values: list[npt.NDArray[Any]]
) -> npt.NDArray[Any]:
    """The CPU plugin's SliceScatter-15 on int32 positions: data 1..n, updates n+1..n+u."""
    data = ov_opset1.parameter(list(shape), ov.Type.i32)
    updates = ov_opset1.parameter(list(updates_shape), ov.Type.i32)
    node = ov_opset15.slice_scatter(data, updates, *(constant(v) for v in values))
    compiled = ov.Core().compile_model(ov.Model([node], [data, updates]), "CPU")
    count, more = int(np.prod(shape)), int(np.prod(updates_shape))
    first = np.arange(1, count + 1, dtype=np.int32).reshape(shape)
    second = np.arange(count + 1, count + more + 1, dtype=np.int32).reshape(updates_shape)
    return np.asarray(compiled([first, second])[0])


def _cases() -> list[tuple[tuple[int, ...], list[int], list[int], list[int], list[int]]]:
    rng = np.random.default_rng(41)
    cases: list[tuple[tuple[int, ...], list[int], list[int], list[int], list[int]]] = []
    while len(cases) < 60:
        rank = int(rng.integers(1, 5))
        shape = tuple(int(v) for v in rng.integers(2, 6, rank))
        count = int(rng.integers(1, rank + 1))
        axes = [int(v) for v in rng.choice(rank, count, replace=False)]
        step = [int(v) or 1 for v in rng.integers(-3, 4, count)]
        start, stop = [], []
        for axis, pace in zip(axes, step, strict=True):
            size = shape[axis]
            low, high = sorted(int(v) for v in rng.integers(-size, size + 2, 2))
            start.append(low if pace > 0 else high)
            stop.append(high if pace > 0 else low)
        index = [slice(None)] * rank
        for axis, first, last, pace in zip(axes, start, stop, step, strict=True):
            index[axis] = slice(first, last, pace)
        if np.zeros(shape)[tuple(index)].size:  # an empty slice is not asked of the plugin
            cases.append((shape, start, stop, step, axes))
    return cases


@pytest.mark.parametrize(("shape", "start", "stop", "step", "axes"), _cases())
def test_openvino_cpu_plugin_agrees(
    shape: tuple[int, ...], start: list[int], stop: list[int], step: list[int], axes: list[int]
) -> None:
    dtype = ELEMENT_TYPES[(sum(shape) + len(axes)) % len(ELEMENT_TYPES)]
    data = sample(dtype, shape, seed=sum(stop) % 89)
    index = [slice(None)] * len(shape)
    for axis, first, last, pace in zip(axes, start, stop, step, strict=True):
        index[axis] = slice(first, last, pace)
    updates = sample(dtype, data[tuple(index)].shape, seed=7)
    ours = run(data, updates, start, stop, step, axes)
    values = [np.array(item, np.int64) for item in (start, stop, step, axes)]
    moved = plugin(shape, updates.shape, values)
    both = np.concatenate([data.reshape(-1), updates.reshape(-1)])
    assert_same_bits(ours, both[moved.reshape(-1) - 1].reshape(shape))


def test_the_cpu_plugin_disagreement_is_as_listed() -> None:
    """Length 7, start -9, stop -10, step -2: empty by the spec's snippet; the CPU plugin wants
    one update and writes it at data[0] (listed in the op's disagreements)."""
    values = [np.array([v], np.int64) for v in (-9, -10, -2, 0)]
    moved = plugin((7,), (1,), values)
    assert moved.tolist() == [8, 2, 3, 4, 5, 6, 7]
    assert any("-9" in line and "data[0]" in line for line in module.OP.disagreements)


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """Every other column of a matrix of ``nbytes`` replaced, float32 and int8."""
    return [_benchmark_case(nbytes, dtype) for dtype in BENCHMARK_DTYPES]


def _benchmark_case(nbytes: int, dtype: Any) -> BenchmarkCase:
    """Every other column of a matrix of ``nbytes`` replaced."""
    data = square(nbytes, dtype)
    updates = np.ascontiguousarray(data[:, ::2]) + 1
    start, stop, step, axes = (np.array([v]) for v in (0, data.shape[1], 2, 1))

    def model() -> Any:
        first = ov_opset1.parameter(list(data.shape), plugin_type(dtype))
        second = ov_opset1.parameter(list(updates.shape), plugin_type(dtype))
        values = (constant(v) for v in (start, stop, step, axes))
        node = ov_opset15.slice_scatter(first, second, *values)
        return ov.Model([node], [first, second]), [data, updates]

    arrays = {"data": data, "updates": updates, "start": start, "stop": stop, "step": step,
              "axes": axes}  # fmt: skip
    moved = 2 * data.nbytes + updates.nbytes
    label = f"every other column, {short(dtype)}"
    return BenchmarkCase("slice_scatter", label, arrays, {}, data.dtype, moved, model)
