"""StridedSlice-1 (app/ops/strided_slice.py): the spec's text as the reference (its slicing steps
simulated one index at a time), its examples (four of which the text contradicts), every
element type to the bit, the masks, the refusals, and OpenVINO's CPU plugin where it follows the
text."""

from typing import Any

import numpy as np
import numpy.typing as npt
import openvino.opset1 as ov_opset1
import pytest

from app.ops import strided_slice as module
from app.ops.declaration import Plan
from app.ops.errors import SpecError
from app.ops.strided_slice import strided_slice, strided_slice_plan
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

INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)


def _ints(values: Any) -> Any:
    return values if isinstance(values, np.ndarray) else np.array(values, np.int64)


def run(data: Any, begin: Any, end: Any, stride: Any = None, **masks: list[int]) -> Any:
    arrays = {"data": np.asarray(data), "begin": _ints(begin), "end": _ints(end)}
    if stride is not None:
        arrays["stride"] = _ints(stride)
    attributes = {"new_axis_mask": [], "shrink_axis_mask": [], "ellipsis_mask": [], **masks}
    plan = module.plan(arrays, attributes)
    assert isinstance(plan, Plan)
    got = plan.run(None)
    assert got.shape == plan.output_shape
    return got


def shape_of(shape: tuple[int, ...], begin: list[int], end: list[int], stride: list[int],
             **masks: list[int]) -> tuple[int, ...]:  # fmt: skip
    """The output's shape the planner gives, without any data (large examples)."""
    return strided_slice_plan(shape, _ints(begin), _ints(end), _ints(stride), masks)[1]


def text_indices(begin: int, end: int, stride: int, size: int, masks: tuple[int, int]) -> list[int]:
    """The spec's text for one slicing step, simulated index by index: negative values
    adjusted, clamped (in reverse by the reverse rules), masks applied, begin's element added,
    then every stride while before end."""
    if stride > 0:
        first = 0 if masks[0] else min(max(begin + size if begin < 0 else begin, 0), size)
        last = size if masks[1] else min(max(end + size if end < 0 else end, 0), size)
    else:
        first = size - 1 if masks[0] else begin + size if begin < 0 else begin
        first = 0 if first < 0 else size - 1 if first >= size else first
        last = 0 if masks[1] else end + size if end < 0 else end
        last = -1 if last < 0 else size if last >= size else last
    taken = [first] if 0 <= first < size else []
    index = first + stride
    while taken and (index < last if stride > 0 else index > last):
        taken.append(index)
        index += stride
    return taken


def test_is_collected() -> None:
    from app.registry import REGISTRY  # noqa: PLC0415

    assert REGISTRY["strided_slice"] is module.OP
    assert [item.name for item in module.OP.inputs if item.optional] == ["stride"]
    kinds = {item.name: (item.kind, item.required) for item in module.OP.attributes}
    assert kinds == {
        "begin_mask": ("ints", True),
        "end_mask": ("ints", True),
        "new_axis_mask": ("ints", False),
        "shrink_axis_mask": ("ints", False),
        "ellipsis_mask": ("ints", False),
    }


def test_the_declared_examples_answer_as_they_say() -> None:
    for name, item in module.OP.examples.items():
        request = item["value"]
        arrays = {key: np.asarray(request[key]) for key in ("data", "begin", "end", "stride")
                  if key in request}  # fmt: skip
        attributes = {key: tuple(value) for key, value in request.items() if key.endswith("mask")}
        attributes = {**dict.fromkeys(module.MASKS[2:], ()), **attributes}
        plan = module.OP.plan(arrays, attributes)
        assert isinstance(plan, Plan)
        assert plan.run(None).tolist() == item["x-expected-output"], name


# --- the spec's eight examples ---------------------------------------------------------------


def test_example_1_basic_the_text_gives_3_where_the_example_says_4() -> None:
    """begin [0, 1, 0, 1, 3, 3], end [4, 4, 4, 4, 0, 0], stride [1, 1, 2, 2, -1, -2] on 4^6:
    in reverse from 3 "as long as slicing_index > end" (0) gives [3, 2, 1]; the example lists
    [3, 2, 1, 0] (4) beside its own equivalent array[..., 3:0:-1, ...], which is 3 long."""
    data = np.arange(4**6).reshape((4,) * 6)
    got = run(data, [0, 1, 0, 1, 3, 3], [4, 4, 4, 4, 0, 0], [1, 1, 2, 2, -1, -2],
              begin_mask=[], end_mask=[])  # fmt: skip
    assert got.shape == (4, 3, 2, 2, 3, 2)
    assert_same_bits(got, data[0:4, 1:4, 0:4:2, 1:4:2, 3:0:-1, 3:0:-2].copy())


def test_example_2_clamping_the_text_gives_0_by_1_where_the_example_says_1_by_1() -> None:
    """begin [1234, 2], end [1234, 4321], stride [1, -1] on 2x2: forward, begin clamps to
    size(dim) = 2, where no element is (the op's decision: none added); in reverse begin clamps
    to size - 1 = 1 and its element is added: [1]. The example says 1x1, "element ids: [2]"."""
    data = np.arange(4).reshape(2, 2)
    got = run(data, [1234, 2], [1234, 4321], [1, -1], begin_mask=[0, 0], end_mask=[0, 0])
    assert got.shape == (0, 1)
    assert text_indices(2, 4321, -1, 2, (0, 0)) == [1]


def test_example_3_negative_end() -> None:
    data = np.arange(24).reshape(2, 3, 4)
    got = run(data, [0, 0, 0], [2, 2, -1], [1, 1, 1], begin_mask=[0], end_mask=[0])
    assert_same_bits(got, data[0:2, 0:2, 0:-1].copy())


def test_example_4_masks_reverse_end_mask_stops_before_the_first_element() -> None:
    """begin_mask 0,1,1, end_mask 1,1,1, stride [1, 1, -1] on 2x3x4: the text's end_mask in
    reverse is 0, "which does not allow slicing inclusively with the first value": [3, 2, 1]
    (the example's dims agree: 1, 3, 3; its Python equivalent array[1:, :, ::-1] has 4)."""
    data = np.arange(24).reshape(2, 3, 4)
    got = run(data, [1, 1, 123], [0, 0, 2], [1, 1, -1], begin_mask=[0, 1, 1],
              end_mask=[1, 1, 1], new_axis_mask=[0] * 5, shrink_axis_mask=[0, 0],
              ellipsis_mask=[0])  # fmt: skip
    assert_same_bits(got, data[1:, :, 3:0:-1].copy())


def test_example_5_new_axis_mask() -> None:
    data = np.arange(8).reshape(2, 4)
    got = run(data, [1234, 0, -1, 0], [1234, 2, 9876, 4], [132, 1, 241, 1],
              begin_mask=[0] * 4, end_mask=[0] * 4, new_axis_mask=[1, 0, 1, 0],
              shrink_axis_mask=[0] * 4, ellipsis_mask=[0] * 4)  # fmt: skip
    assert_same_bits(got, data[np.newaxis, 0:2, np.newaxis, 0:4].copy())


def test_example_6_shrink_axis_mask() -> None:
    masks = {"begin_mask": [0] * 5, "end_mask": [0] * 5, "new_axis_mask": [0] * 5,
             "shrink_axis_mask": [0, 1, 0, 0, 0], "ellipsis_mask": [0] * 5}  # fmt: skip
    shape = shape_of((1, 2, 384, 640, 8), [0] * 5, [1, 0, 384, 640, 8], [1] * 5, **masks)
    assert shape == (1, 384, 640, 8)
    data = np.arange(2 * 3 * 4 * 2).reshape(1, 2, 3, 4, 2)
    got = run(data, [0] * 5, [1, 0, 3, 4, 2], [1] * 5, **masks)
    assert_same_bits(got, data[0:1, 0, 0:3, 0:4, 0:2].copy())


def test_example_7_ellipsis_over_the_twelve_dimensions_its_input_has() -> None:
    """The input port lists 12 dimensions of 10 (its caption says 10D): the ellipsis skips
    12 - (3 - 0 - 1) = 10 of them, and the output port's 12 dimensions agree."""
    masks = {"begin_mask": [0] * 3, "end_mask": [0] * 3, "new_axis_mask": [0] * 3,
             "shrink_axis_mask": [0] * 3, "ellipsis_mask": [0, 1, 0]}  # fmt: skip
    assert shape_of((10,) * 12, [0, 0, 0], [4, 0, 5], [1, -1, 1], **masks) == (4, *[10] * 10, 5)
    data = np.arange(3**5).reshape((3,) * 5)
    got = run(data, [0, 0, 0], [2, 0, 1], [1, -1, 1], **masks)
    assert_same_bits(got, data[0:2, ..., 0:1].copy())


def test_example_8_the_text_gives_13_dimensions_where_the_example_says_11() -> None:
    """Its input port lists 12 dimensions; the ellipsis skips 12 - (4 - 1 - 1) = 10, so the
    output has 8, ten 10s, 1 and 5. The example's 11 dimensions are those of a 10D input (its
    caption)."""
    masks = {"begin_mask": [0, 0, 1, 1], "end_mask": [1, 1, 0, 0], "new_axis_mask": [0, 0, 1],
             "shrink_axis_mask": [0], "ellipsis_mask": [0, 1]}  # fmt: skip
    begin, end, stride = [2, 1, 10, 10], [123, 1, 10, 5], [1, -1, 1, 1]
    assert shape_of((10,) * 12, begin, end, stride, **masks) == (8, *[10] * 10, 1, 5)
    assert shape_of((10,) * 10, begin, end, stride, **masks) == (8, *[10] * 8, 1, 5)
    data = np.arange(4 * 2 * 2 * 6).reshape(4, 2, 2, 6)
    got = run(data, begin, end, stride, **masks)
    assert_same_bits(got, data[2:, ..., np.newaxis, :5].copy())


# --- the text's rules, each against the simulation -------------------------------------------


@pytest.mark.parametrize("begin", [INT64_MIN, -11, -5, -3, 0, 2, 4, 5, 10, INT64_MAX])
@pytest.mark.parametrize("end", [INT64_MIN, -11, -3, 0, 2, 4, 5, 10, INT64_MAX])
@pytest.mark.parametrize("stride", [INT64_MIN, -3, -1, 1, 2, INT64_MAX])
@pytest.mark.parametrize("masks", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_one_step_as_the_text_says(
    begin: int, end: int, stride: int, masks: tuple[int, int]
) -> None:
    data = np.arange(5)
    got = run(data, [begin], [end], [stride], begin_mask=[masks[0]], end_mask=[masks[1]])
    assert got.tolist() == text_indices(begin, end, stride, 5, masks)


def test_where_the_text_and_python_agree() -> None:
    """Forward with begin before end, in reverse with begin after end and no end_mask: the
    text's slices are Python's."""
    for begin in range(-7, 8):
        for end in range(-7, 8):
            for stride in (-3, -1, 1, 2):
                expected = list(range(5))[begin:end:stride]
                if expected:
                    got = run(np.arange(5), [begin], [end], [stride], begin_mask=[0], end_mask=[])
                    assert got.tolist() == expected


def test_begin_equal_to_end_keeps_one_element() -> None:
    data = np.arange(12).reshape(3, 4)
    assert run(data, [1, 2], [1, 2], [1, 1], begin_mask=[], end_mask=[]).tolist() == [[6]]
    assert run(data, [-2, 0], [1, 4], None, begin_mask=[], end_mask=[]).tolist() == [
        data[1].tolist()
    ]
    assert run(data, [3, 0], [3, 4], [1, 1], begin_mask=[], end_mask=[]).shape == (0, 4)


def test_masks_shorter_or_longer_than_begin() -> None:
    data = np.arange(12).reshape(3, 4)
    got = run(data, [1, 1], [2, 3], None, begin_mask=[1], end_mask=[0, 1, 1, 1, 0, 0])
    assert_same_bits(got, data[0:2, 1:4].copy())
    # Bits past the slicing steps are ignored, a second ellipsis among them too.
    got = run(data, [1, 1], [2, 3], None, begin_mask=[], end_mask=[], ellipsis_mask=[0, 0, 1, 1])
    assert_same_bits(got, data[1:2, 1:3].copy())


def test_new_axes_shrinks_and_an_ellipsis_together() -> None:
    data = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    got = run(data, [1, 0, 0, -1], [1, 0, 0, -1], [1, 1, 1, 1], begin_mask=[], end_mask=[],
              shrink_axis_mask=[1, 0, 0, 1], new_axis_mask=[0, 1], ellipsis_mask=[0, 0, 1])  # fmt: skip
    assert_same_bits(got, data[1, np.newaxis, ..., -1].copy())
    # An ellipsis that skips nothing, and a scalar given new axes.
    assert run(data, [0, 0, 0, 0, 0], [1, 1, 1, 1, 1], None, begin_mask=[], end_mask=[],
               ellipsis_mask=[0, 0, 1]).shape == (1, 1, 1, 1)  # fmt: skip
    assert run(np.float32(3), [0, 0], [0, 0], None, begin_mask=[], end_mask=[],
               new_axis_mask=[1, 1]).tolist() == [[3.0]]  # fmt: skip
    assert run(np.float32(3), [0], [0], None, begin_mask=[], end_mask=[],
               ellipsis_mask=[1]).tolist() == 3.0  # fmt: skip


def test_shrinking_takes_begin_after_masks_and_adjusting() -> None:
    data = np.arange(12).reshape(3, 4)
    got = run(data, [-1, 0], [2, 4], None, begin_mask=[], end_mask=[], shrink_axis_mask=[1])
    assert_same_bits(got, data[2].copy())
    got = run(data, [5, 0], [0, 4], None, begin_mask=[1], end_mask=[], shrink_axis_mask=[1])
    assert_same_bits(got, data[0].copy())
    got = run(data, [-9, 0], [-9, 4], None, begin_mask=[], end_mask=[], shrink_axis_mask=[1])
    assert_same_bits(got, data[0].copy())  # -9 + 3 = -6: clamped to 0


def test_empty_dimensions() -> None:
    data = np.zeros((0, 3), np.int8)
    assert run(data, [0, 0], [5, 3], [1, 1], begin_mask=[], end_mask=[]).shape == (0, 3)
    assert run(data, [0, 0], [5, 3], [-1, 1], begin_mask=[], end_mask=[]).shape == (0, 3)
    assert run(data, [0, 0], [0, 0], None, begin_mask=[1, 1], end_mask=[1, 1]).shape == (0, 3)


@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_every_type_to_the_bit(dtype: np.dtype[Any]) -> None:
    data = sample(dtype, (4, 5, 6), seed=2)
    got = run(data, np.array([3, 1, 0], np.int32), np.array([-5, 5, 0], np.int8),
              np.array([-2, 3, 1], np.int16), begin_mask=[0, 0, 0], end_mask=[0, 0, 0],
              shrink_axis_mask=[0, 0, 1])  # fmt: skip
    assert_same_bits(got, data[3:-5:-2, 1:5:3, 0].copy())
    unsigned = run(data, np.array([2**64 - 1, 0, 0], np.uint64), np.array([0, 9, 9], np.uint64),
                   [-1, 1, 1], begin_mask=[], end_mask=[])  # fmt: skip
    assert_same_bits(unsigned, data[3:0:-1].copy())


def test_into_a_given_output() -> None:
    out = np.empty(2, np.int8)
    assert strided_slice(np.arange(4, dtype=np.int8), [0], [4], [2], out) is out
    assert out.tolist() == [0, 2]


def test_the_shape_is_known_without_data() -> None:
    shape = strided_slice_plan((2**40, 3), _ints([1, 0, 0]), _ints([0, 0, 3]), None,
                               {"begin_mask": [], "end_mask": [1], "new_axis_mask": [0, 1]})  # fmt: skip
    assert shape[1] == (2**40 - 1, 1, 3)


@pytest.mark.parametrize(
    ("begin", "end", "stride", "masks", "field", "words"),
    [
        ([0, 0], [1, 1], [1, 0], {}, "stride", "cannot contain zeros"),
        ([0, 0], [1, 1], [0, 1], {"new_axis_mask": [1]}, "stride", "cannot contain zeros"),
        ([0, 0], [1], None, {}, "end", "same length"),
        ([0, 0], [1, 1], [1], {}, "stride", "same length"),
        ([0, 0], [1, 1], None, {"begin_mask": [0, 2]}, "begin_mask", "0s and 1s"),
        ([0, 0], [1, 1], None, {"end_mask": [-1]}, "end_mask", "0s and 1s"),
        ([0, 0, 0], [1, 1, 1], None, {"ellipsis_mask": [1, 0, 1]}, "ellipsis_mask", "up to one"),
        (
            [0, 0, 0],
            [1, 1, 1],
            None,
            {"ellipsis_mask": [1], "new_axis_mask": [1]},
            "ellipsis_mask",
            "not several",
        ),
        (
            [0, 0],
            [1, 1],
            None,
            {"shrink_axis_mask": [1], "new_axis_mask": [1]},
            "shrink_axis_mask",
            "not several",
        ),
        ([0, 0], [1, 1], None, {"shrink_axis_mask": [1]}, "end", "must equal end[0]"),
        ([3, 0], [3, 1], None, {"shrink_axis_mask": [1]}, "begin", "names no element"),
        ([0, 0], [0, 1], None, {"shrink_axis_mask": [1], "end_mask": [1]}, "end", "must equal"),
        ([0], [1], None, {}, "begin", "as many as data's dimensions"),
        ([0, 0, 0], [1, 1, 1], None, {}, "begin", "as many as data's dimensions"),
        ([0, 0, 0, 0], [1, 1, 1, 1], None, {"ellipsis_mask": [1]}, "begin", "slice 3"),
        ([[0, 0]], [1, 1], None, {}, "begin", "1D tensor"),
        (np.array([0.0, 0.0]), [1, 1], None, {}, "begin", "integer type"),
    ],
)
def test_refusals_name_the_field(
    begin: Any, end: Any, stride: Any, masks: dict[str, list[int]], field: str, words: str
) -> None:
    with pytest.raises(SpecError) as refused:
        run(np.zeros((3, 3)), begin, end, stride, **{"begin_mask": [], "end_mask": [], **masks})
    assert refused.value.field == field
    assert words in refused.value.message


# --- OpenVINO's CPU plugin, where it follows the text ----------------------------------------


def plugin(shape: tuple[int, ...], begin: list[int], end: list[int], stride: list[int],
           masks: dict[str, list[int]]) -> npt.NDArray[Any]:  # fmt: skip
    values = [constant(np.array(item, np.int64)) for item in (begin, end, stride)]
    order = [list(masks.get(name, [])) for name in module.MASKS]
    return cpu_plugin(lambda p: ov_opset1.strided_slice(p, *values, *order), shape)()


def _cases() -> list[tuple[tuple[int, ...], list[int], list[int], list[int], dict[str, list[int]]]]:
    """Cases where the text and Python's slicing agree: each sliced step non-empty with begin
    before end in its direction, no end_mask in reverse; new axes, shrinks and an ellipsis."""
    rng = np.random.default_rng(17)
    cases: list[tuple[tuple[int, ...], list[int], list[int], list[int], dict[str, list[int]]]] = []
    while len(cases) < 80:
        rank = int(rng.integers(1, 5))
        shape = tuple(int(v) for v in rng.integers(1, 6, rank))
        begin: list[int] = []
        end: list[int] = []
        stride: list[int] = []
        masks: dict[str, list[int]] = {name: [] for name in module.MASKS}
        axis = 0
        ellipsis = bool(rng.integers(0, 3) == 0)
        while axis < rank:
            if rng.integers(0, 5) == 0:  # a new axis
                begin, end, stride = [*begin, 0], [*end, 0], [*stride, 1]
                for name in module.MASKS:
                    masks[name].append(int(name == "new_axis_mask"))
                continue
            if ellipsis:
                skipped = int(rng.integers(0, rank - axis + 1))
                begin, end, stride = [*begin, 0], [*end, 0], [*stride, 1]
                for name in module.MASKS:
                    masks[name].append(int(name == "ellipsis_mask"))
                axis += skipped
                ellipsis = False
                continue
            size = shape[axis]
            shrink = int(rng.integers(0, 5) == 0)
            pace, bits = 1, (0, 0)
            first = last = int(rng.integers(-size, size))
            while not shrink:
                pace = int(rng.choice([-3, -2, -1, 1, 2, 3]))
                first, last = (int(v) for v in rng.integers(-size - 1, size + 2, 2))
                bits = (int(rng.integers(0, 4) == 0), int(pace > 0 and rng.integers(0, 4) == 0))
                python = slice(None if bits[0] else first, None if bits[1] else last, pace)
                taken = list(range(size))[python]
                if taken and taken == text_indices(first, last, pace, size, bits):
                    break
            begin, end, stride = [*begin, first], [*end, last], [*stride, pace]
            masks["begin_mask"].append(bits[0])
            masks["end_mask"].append(bits[1])
            masks["new_axis_mask"].append(0)
            masks["shrink_axis_mask"].append(shrink)
            masks["ellipsis_mask"].append(0)
            axis += 1
        if axis != rank:
            continue
        cases.append((shape, begin, end, stride, masks))
    return cases


@pytest.mark.parametrize(("shape", "begin", "end", "stride", "masks"), _cases())
def test_openvino_cpu_plugin_agrees(
    shape: tuple[int, ...], begin: list[int], end: list[int], stride: list[int],
    masks: dict[str, list[int]],
) -> None:  # fmt: skip
    dtype = ELEMENT_TYPES[(sum(shape) + len(begin)) % len(ELEMENT_TYPES)]
    data = sample(dtype, shape, seed=len(begin))
    ours = run(data, begin, end, stride, **masks)
    assert_same_bits(ours, from_positions(data, plugin(shape, begin, end, stride, masks)))


@pytest.mark.parametrize(
    ("begin", "end", "stride", "masks", "text", "cpu"),
    [
        ([2], [2], [1], {}, [2], []),  # begin equal to end
        ([3], [1], [1], {}, [3], []),  # begin past end, forward
        ([3], [0], [-1], {"end_mask": [1]}, [3, 2, 1], [3, 2, 1, 0]),  # end_mask in reverse
    ],
)
def test_the_cpu_plugin_disagreements_are_as_listed(
    begin: list[int], end: list[int], stride: list[int], masks: dict[str, list[int]],
    text: list[int], cpu: list[int],
) -> None:  # fmt: skip
    """Where the text says otherwise than Python's slicing, the CPU plugin says Python's (the
    op's disagreements list each; this fails when the plugin changes)."""
    data = np.arange(5)
    assert (
        run(data, begin, end, stride, **{"begin_mask": [], "end_mask": [], **masks}).tolist()
        == text
    )
    moved = plugin((5,), begin, end, stride, {"begin_mask": [0], "end_mask": [0], **masks})
    assert (moved - 1).tolist() == cpu
    assert sum(f"{begin}" in line and f"{cpu}" in line for line in module.OP.disagreements) == 1


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """Every other column of a matrix of ``nbytes``, float32 and int8."""
    return [_benchmark_case(nbytes, dtype) for dtype in BENCHMARK_DTYPES]


def _benchmark_case(nbytes: int, dtype: Any) -> BenchmarkCase:
    """Every other column of a matrix of ``nbytes``."""
    data = square(nbytes, dtype)
    begin, end, stride = np.array([0, 0]), np.array(data.shape), np.array([1, 2])
    masks = {"begin_mask": (0, 0), "end_mask": (0, 0), "new_axis_mask": (),
             "shrink_axis_mask": (), "ellipsis_mask": ()}  # fmt: skip

    def model() -> Any:
        values = [constant(v) for v in (begin, end, stride)]
        return plugin_model(lambda p: ov_opset1.strided_slice(p, *values, [0, 0], [0, 0]), data)

    arrays = {"data": data, "begin": begin, "end": end, "stride": stride}
    return BenchmarkCase("strided_slice", f"step 2 inner, {short(dtype)}", arrays, masks, data.dtype,
                         data.nbytes, model)  # fmt: skip
