"""GatherTree-1 (app/ops/gather_tree.py): the spec's pseudocode as the reference, every element
type to the bit (one type T for all four inputs, float included), the refusals, and OpenVINO's
CPU plugin on generated cases."""

import contextlib
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import openvino as ov
import openvino.opset1 as ov_opset1
import pytest

from app.ops import gather_tree as module
from app.ops import loops
from app.ops.declaration import Plan
from app.ops.errors import SpecError
from app.ops.gather_tree import gather_tree
from tests.ops.movement_support import ELEMENT_TYPES, BenchmarkCase, assert_same_bits, raw

NAMES = ("step_ids", "parent_ids", "max_seq_len", "end_token")


def run(step_ids: Any, parent_ids: Any, max_seq_len: Any, end_token: Any) -> Any:
    values = (step_ids, parent_ids, max_seq_len, end_token)
    arrays = {name: np.asarray(value) for name, value in zip(NAMES, values, strict=True)}
    plan = module.plan(arrays, {})
    assert isinstance(plan, Plan)
    return plan.run(None)


def pseudocode(
    step_ids: npt.NDArray[Any],
    parent_ids: npt.NDArray[Any],
    max_seq_len: npt.NDArray[Any],
    end_token: npt.NDArray[Any],
) -> npt.NDArray[Any]:
    """The spec's pseudocode, line by line, on the elements themselves (a length of 0 decodes
    nothing: the op's decision)."""
    max_time, batch_size, beam_width = step_ids.shape
    final_ids = np.empty_like(step_ids)
    final_ids[:, :, :] = end_token
    for batch in range(batch_size):
        for beam in range(beam_width):
            max_sequence_in_beam = min(max_time, int(max_seq_len[batch]))
            if max_sequence_in_beam == 0:
                continue
            parent = int(parent_ids[max_sequence_in_beam - 1, batch, beam])
            final_ids[max_sequence_in_beam - 1, batch, beam] = step_ids[
                max_sequence_in_beam - 1, batch, beam
            ]
            for level in reversed(range(max_sequence_in_beam - 1)):
                final_ids[level, batch, beam] = step_ids[level, batch, parent]
                parent = int(parent_ids[level, batch, parent])
            finished = False
            for time in range(max_sequence_in_beam):
                if finished:
                    final_ids[time, batch, beam] = end_token
                elif final_ids[time, batch, beam] == end_token:
                    finished = True
    return final_ids


def beams(
    dtype: Any, shape: tuple[int, int, int], seed: int, end: int = 3
) -> tuple[npt.NDArray[Any], ...]:
    """Random inputs of one type: ids in [0, 6) (some of them the end token), parent ids in
    range, lengths 0 to MAX_TIME + 1."""
    rng = np.random.default_rng(seed)
    max_time, batch_size, beam_width = shape
    step_ids = rng.integers(0, 6, shape).astype(dtype)
    parent_ids = rng.integers(0, max(beam_width, 1), shape).astype(dtype)
    max_seq_len = rng.integers(0, max_time + 2, batch_size).astype(dtype)
    return step_ids, parent_ids, max_seq_len, np.array(end, dtype)


def test_is_collected() -> None:
    from app.registry import REGISTRY  # noqa: PLC0415

    assert REGISTRY["gather_tree"] is module.OP
    assert module.OP.input_names == NAMES


def test_the_spec_example_shapes() -> None:
    """The spec's example: [100, 1, 10] ids and parents, one length, a scalar end token."""
    step_ids, parent_ids, _, end = beams(np.int32, (100, 1, 10), seed=1)
    plan = module.plan(
        {"step_ids": step_ids, "parent_ids": parent_ids, "max_seq_len": np.array([100], np.int32),
         "end_token": end}, {},
    )  # fmt: skip
    assert isinstance(plan, Plan)
    assert plan.output_shape == (100, 1, 10)
    assert_same_bits(plan.run(None), pseudocode(step_ids, parent_ids, np.array([100]), end))


def test_tensorflow_s_example() -> None:
    """The spec calls the op TensorFlow's gather_tree; its documented example answers so."""
    step_ids = [[[1, 2, 3]], [[4, 5, 6]], [[7, 8, 9]]]
    parent_ids = [[[0, 0, 0]], [[0, 1, 1]], [[2, 1, 2]]]
    got = run(step_ids, parent_ids, [3], np.int64(10))
    assert got.reshape(3, 3).tolist() == [[2, 2, 2], [6, 5, 6], [7, 8, 9]]


def test_the_declared_examples_answer_as_they_say() -> None:
    for name, item in module.OP.examples.items():
        request = item["value"]
        dtype = np.dtype(request.get("dtype", "int64"))
        arrays = {key: np.asarray(request[key], dtype) for key in NAMES}
        plan = module.OP.plan(arrays, {})
        assert isinstance(plan, Plan)
        assert plan.run(None).tolist() == item["x-expected-output"], name


@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_every_type_to_the_bit(dtype: np.dtype[Any]) -> None:
    if dtype.kind == "b":
        inputs = beams(np.int8, (5, 3, 2), seed=4, end=1)
        inputs = tuple(np.asarray(item % 2, np.bool_) for item in inputs)
    else:
        inputs = beams(dtype, (5, 3, 4), seed=4)
    step_ids = inputs[0]
    if dtype.kind == "f" or dtype.name == "bfloat16":
        # -0.0 beside 0: equal to an end token 0 by value, and its own bits kept.
        step_ids = step_ids.copy()
        step_ids.reshape(-1)[::3] = -0.0
        inputs = (step_ids, *inputs[1:3], np.array(0, dtype))
    got = run(*inputs)
    assert_same_bits(got, pseudocode(*inputs))


def test_integers_of_every_width_keep_their_bits() -> None:
    """Ids are moved, not converted: the extremes of each integer type come back whole."""
    for dtype in (np.int64, np.uint64, np.int32, np.uint8):
        info = np.iinfo(dtype)
        step_ids = np.array([[[info.max, info.min]], [[info.min + 1, info.max - 1]]], dtype)
        parent_ids = np.array([[[1, 0]], [[1, 1]]], dtype)
        got = run(step_ids, parent_ids, np.array([2], dtype), np.array(7, dtype))
        assert_same_bits(got, pseudocode(step_ids, parent_ids, np.array([2]), np.array(7)))


def test_properties_against_the_pseudocode() -> None:
    for seed in range(60):
        rng = np.random.default_rng(seed)
        shape = (int(rng.integers(1, 6)), int(rng.integers(1, 4)), int(rng.integers(1, 5)))
        dtype = (np.int32, np.int64, np.float32, np.float64, np.uint16)[seed % 5]
        inputs = beams(dtype, shape, seed)
        assert_same_bits(run(*inputs), pseudocode(*inputs))


_FLOAT_TYPES = [dtype for dtype in ELEMENT_TYPES if dtype.kind == "f" or dtype.name == "bfloat16"]


@pytest.mark.parametrize("dtype", _FLOAT_TYPES, ids=str)
@pytest.mark.parametrize("block_bytes", [1, 2 << 20])
def test_float_parent_ids_of_every_exponent_compiled_and_not(
    dtype: np.dtype[Any], block_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Float parent ids 0 to 199 (every exponent from a zero's to 2**7, -0.0 among them) name
    the beams they are, compiled (one batch a block, or all of them) and by the stand-ins."""
    monkeypatch.setattr(module, "_BLOCK_BYTES", block_bytes)
    step_ids, parent_ids, max_seq_len, end = beams(dtype, (7, 3, 200), seed=11)
    parent_ids = parent_ids.copy()
    parent_ids[parent_ids == 0] = -0.0
    assert int(np.signbit(parent_ids).sum()) > 0
    want = pseudocode(step_ids, parent_ids, max_seq_len, end)
    assert loops.wait_compiled(120)
    assert_same_bits(run(step_ids, parent_ids, max_seq_len, end), want)
    with loops.numpy_stand_ins():
        assert_same_bits(run(step_ids, parent_ids, max_seq_len, end), want)


#: Shapes for each of the compiled walk's ways: a batch's piece of a step in one line or two
#: (permutes), wider (vector gathers, with beams past the last whole vector), more steps than the
#: state holds (one pass a beam at a time), an output large enough to be streamed.
_WALK_SHAPES = [(5, 3, 7), (6, 4, 40), (4, 3, 100), (3, 2, 33), (7, 3, 130), (2100, 1, 5),
                (300, 1, 300), (64, 2048, 64), (64, 512, 64)]  # fmt: skip


@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
@pytest.mark.parametrize("shape", _WALK_SHAPES, ids=str)
def test_every_walk_answers_as_the_stand_in(
    dtype: np.dtype[Any], shape: tuple[int, int, int]
) -> None:
    """Every way the compiled walk goes, for every type, to the bit: the same beams as the
    NumPy stand-in walks (itself held to the pseudocode above), -0.0 among float ids (equal to
    an end token of 0)."""
    beam_width = shape[2]
    if dtype.kind == "b" or (dtype.kind in "iu" and beam_width > np.iinfo(dtype).max):
        pytest.skip("no beam of this width is a value of the type")
    if dtype.name == "bfloat16" and beam_width > 256:
        pytest.skip("bfloat16 holds the integers up to 256 only")
    if np.prod(shape) * dtype.itemsize > 8 << 20 and dtype.itemsize not in (1, 4):
        pytest.skip("the streamed output: one type of 1 byte and one of 4 are enough")
    inputs = beams(dtype, shape, seed=shape[2])
    if dtype.kind in "iu":  # lengths the type holds (some past MAX_TIME where it can)
        lengths = np.random.default_rng(1).integers(0, shape[0] + 2, shape[1])
        most = min(int(np.iinfo(dtype).max), 1 << 62)
        inputs = (*inputs[:2], np.minimum(lengths, most).astype(dtype), inputs[3])
    if dtype.kind == "f" or dtype.name == "bfloat16":
        step_ids = inputs[0].copy()
        step_ids.reshape(-1)[::5] = -0.0
        inputs = (step_ids, *inputs[1:3], np.array(0, dtype))
    assert loops.wait_compiled(120)
    got = run(*inputs)
    with loops.numpy_stand_ins():
        want = run(*inputs)
    assert_same_bits(got, want)
    assert int(np.count_nonzero(got != inputs[3])) > 0  # not all end tokens: ids were walked


@pytest.mark.parametrize(("dtype", "beam_width"), [("bfloat16", 300), ("float16", 2100)])
def test_half_float_parent_ids_past_their_mantissa_name_their_beams(
    dtype: str, beam_width: int
) -> None:
    """16-bit float parent ids above 2**(mantissa + 1) (bfloat16's 258, float16's 2050) are
    beams too, where the type holds them: the compiled walk (its vectors, and the beams past the
    last whole vector one at a time) and the stand-in name the beam the pseudocode does."""
    kind = next(item for item in ELEMENT_TYPES if np.dtype(item).name == dtype)
    held = np.arange(beam_width).astype(kind)
    beams_held = np.unique(held[held.astype(np.float64) == np.arange(beam_width)].astype(np.int64))
    assert beams_held.max() > (256 if dtype == "bfloat16" else 2048)
    rng = np.random.default_rng(7)
    shape = (4, 2, beam_width)
    step_ids = rng.integers(0, 6, shape).astype(kind)
    parent_ids = rng.choice(beams_held[beams_held >= beam_width // 2], shape).astype(kind)
    inputs = (step_ids, parent_ids, np.array([4, 3], kind), np.array(3, kind))
    want = pseudocode(*inputs)
    assert loops.wait_compiled(120)
    assert_same_bits(run(*inputs), want)
    with loops.numpy_stand_ins():
        assert_same_bits(run(*inputs), want)


_WALK_PEAK = """
import numpy as np
from app.ops import gather_tree as module, loops
assert loops.wait_compiled(300)
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) * 1024
width = 4 << 20
step_ids, parent_ids = np.ones((1, 1, width), np.int64), np.zeros((1, 1, width), np.int64)
lengths, end = np.array([1], np.int64), np.array(3, np.int64)
arrays = {"step_ids": step_ids, "parent_ids": parent_ids, "max_seq_len": lengths,
          "end_token": end}
out = np.zeros_like(step_ids)
before = peak()
module.plan(arrays, {}).run(out)
print(peak() - before, module.workspace_bytes(arrays, {}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="no /proc")
def test_the_walk_of_one_wide_batch_stays_within_its_workspace() -> None:
    """One batch of 4 Mi int64 beams: the walk's state, flags and row (the whole batch's row,
    32 MiB) together stay within what the workspace declares, measured as the process's peak
    resident memory."""
    done = subprocess.run([sys.executable, "-c", _WALK_PEAK], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    grown, declared = (int(item) for item in done.stdout.split())
    assert 32 << 20 <= grown <= declared, (grown, declared)


def test_lengths_zero_and_past_max_time() -> None:
    step_ids, parent_ids, _, end = beams(np.int32, (4, 3, 2), seed=9)
    got = run(step_ids, parent_ids, np.array([0, 4, 1000], np.int32), end)
    assert (got[:, 0] == 3).all()  # nothing decoded: all end_token
    assert_same_bits(got, pseudocode(step_ids, parent_ids, np.array([0, 4, 1000]), end))


def test_empty_dimensions() -> None:
    for shape in ((0, 2, 3), (3, 0, 2), (3, 2, 0)):
        step_ids, parent_ids, lengths, end = beams(np.float32, shape, seed=2)
        assert run(step_ids, parent_ids, lengths, end).shape == shape


def test_into_a_given_output() -> None:
    out = np.empty((1, 1, 2), np.int16)
    got = gather_tree(np.array([[[5, 6]]], np.int16), np.zeros((1, 1, 2), np.int16),
                      np.array([1], np.int16), np.int16(6), out)  # fmt: skip
    assert got is out
    assert out.tolist() == [[[5, 6]]]


def test_parent_ids_no_beam_follows_are_not_checked() -> None:
    """Only the parents a beam follows name a beam: those of the first step and of the steps
    past a batch's length are never read."""
    step_ids = np.arange(12, dtype=np.int32).reshape(3, 2, 2)
    parent_ids = np.full((3, 2, 2), -7, np.int32)
    parent_ids[1:2, 0] = [1, 0]
    got = run(step_ids, parent_ids, np.array([2, 1], np.int32), np.int32(-1))
    assert_same_bits(
        got, pseudocode(step_ids, parent_ids, np.array([2, 1]), np.array(-1, np.int32))
    )


def _good() -> dict[str, npt.NDArray[Any]]:
    return dict(zip(NAMES, beams(np.float32, (3, 2, 2), seed=5), strict=True))


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"step_ids": np.zeros((3, 2), np.float32)}, "step_ids", "rank 3"),
        ({"parent_ids": np.zeros((3, 2, 3), np.float32)}, "parent_ids", "shape of step_ids"),
        ({"parent_ids": np.zeros((3, 2, 2), np.int32)}, "parent_ids", "type of step_ids"),
        ({"max_seq_len": np.zeros(2, np.float64)}, "max_seq_len", "type of step_ids"),
        ({"max_seq_len": np.zeros(3, np.float32)}, "max_seq_len", "BATCH_SIZE (2)"),
        ({"end_token": np.zeros(1, np.float32)}, "end_token", "scalar"),
        ({"end_token": np.array(np.nan, np.float32)}, "end_token", "integer values only"),
        ({"max_seq_len": np.array([1.5, 2], np.float32)}, "max_seq_len", "integer values"),
        ({"max_seq_len": np.array([-1, 2], np.float32)}, "max_seq_len", "cannot be negative"),
        ({"step_ids": np.full((3, 2, 2), np.inf, np.float32)}, "step_ids", "integer values"),
        ({"parent_ids": np.full((3, 2, 2), 2, np.float32)}, "parent_ids", "in [0, 1]"),
        ({"parent_ids": np.full((3, 2, 2), -1, np.float32)}, "parent_ids", "is no beam"),
    ],
)
def test_refusals_name_the_field(change: dict[str, Any], field: str, words: str) -> None:
    arrays = {**_good(), "max_seq_len": np.array([3, 3], np.float32), **change}
    with pytest.raises(SpecError) as refused:
        module.plan(arrays, {})
    assert refused.value.field == field
    assert words in refused.value.message


_PLUGIN_TYPES = {"int32": ov.Type.i32, "float32": ov.Type.f32, "float16": ov.Type.f16,
                 "int64": ov.Type.i64}  # fmt: skip


def plugin(inputs: tuple[npt.NDArray[Any], ...]) -> npt.NDArray[Any]:
    """OpenVINO's CPU plugin's GatherTree-1 on ``inputs`` (all of one type)."""
    kind = {**_PLUGIN_TYPES, "uint64": ov.Type.u64}[inputs[0].dtype.name]
    parameters = [ov_opset1.parameter(list(item.shape), kind) for item in inputs]
    compiled = ov.Core().compile_model(
        ov.Model([ov_opset1.gather_tree(*parameters)], parameters), "CPU"
    )
    return np.asarray(compiled(list(inputs))[0])


def _cases() -> list[tuple[str, tuple[int, int, int], int]]:
    rng = np.random.default_rng(23)
    cases = []
    for number in range(60):
        shape = (int(rng.integers(1, 7)), int(rng.integers(1, 4)), int(rng.integers(1, 5)))
        cases.append((list(_PLUGIN_TYPES)[number % 4], shape, number))
    return cases


@pytest.mark.parametrize(("dtype", "shape", "seed"), _cases())
def test_openvino_cpu_plugin_agrees(dtype: str, shape: tuple[int, int, int], seed: int) -> None:
    inputs = list(beams(np.dtype(dtype), shape, seed))
    inputs[2] = np.maximum(inputs[2], 1)  # a length of 0: see the op's decisions
    ours = run(*inputs)
    assert np.array_equal(raw(ours), raw(plugin(tuple(inputs))))


def test_the_cpu_plugin_disagreement_is_as_listed() -> None:
    """uint64 ids past 32 bits: the CPU plugin narrows them (listed in the op's
    disagreements; this fails when the plugin changes)."""
    step_ids = np.array([[[1, 2, 3]], [[4, 5, 6]], [[2**60 + 7, 8, 9]]], np.uint64)
    parent_ids = np.array([[[0, 0, 0]], [[0, 1, 1]], [[2, 1, 2]]], np.uint64)
    inputs = (step_ids, parent_ids, np.array([3], np.uint64), np.array(10, np.uint64))
    narrowed = plugin(inputs)
    assert narrowed[2, 0].tolist() == [7, 8, 9]
    assert run(*inputs)[2, 0].tolist() == [2**60 + 7, 8, 9]
    assert any("2**60 + 7" in line for line in module.OP.disagreements)


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """float32 and int8 beams of ``nbytes``: 64 steps, 256 beams (64 in int8: parent ids up to
    127), as many batches as fit (the CPU plugin refuses int8 GatherTree: that row has no
    OpenVINO figure)."""
    return [
        _benchmark_case(nbytes, np.dtype(np.float32)),
        _benchmark_case(nbytes, np.dtype(np.int8)),
    ]


def _benchmark_case(nbytes: int, dtype: np.dtype[Any]) -> BenchmarkCase:
    max_time, beam_width = 64, 256 if dtype == np.float32 else 64
    batch_size = max(1, nbytes // dtype.itemsize // (max_time * beam_width))
    inputs = beams(dtype, (max_time, batch_size, beam_width), seed=0)
    inputs = (*inputs[:2], np.full(batch_size, max_time, dtype), inputs[3])

    def model() -> Any:
        parameters = [ov_opset1.parameter(list(item.shape), ov.Type.f32) for item in inputs]
        node = ov_opset1.gather_tree(*parameters)
        return ov.Model([node], parameters), list(inputs)

    arrays = dict(zip(NAMES, inputs, strict=True))
    moved = 3 * inputs[0].nbytes  # step_ids and parent_ids read, the output written
    label = f"64 steps, {beam_width} beams, {'f32' if dtype == np.float32 else 'i8'}"
    return BenchmarkCase("gather_tree", label, arrays, {}, inputs[0].dtype, moved,
                         model if dtype == np.float32 else None)  # fmt: skip


# --- the checks' quick passes ------------------------------------------------------------------


def _names_a_beam_by_value(parent_ids: npt.NDArray[Any], beam_width: int) -> bool:
    """Whether every parent id past the first step is in [0, BEAM_WIDTH), value by value."""
    return all(0 <= float(value) < beam_width for value in parent_ids[1:].reshape(-1).tolist())


@pytest.mark.parametrize("dtype", ELEMENT_TYPES)
def test_the_one_pass_parent_check_answers_as_the_values_do(dtype: np.dtype[Any]) -> None:
    """The one pass over the parent ids' bits says yes exactly when every id past the first step
    names a beam, for every type and around both ends of [0, BEAM_WIDTH): 0, BEAM_WIDTH - 1 and
    BEAM_WIDTH, -1, the type's extremes, a beam wider than the type holds; the first step's
    ids are never read. When it says no, the step-by-step check decides (it refuses only a
    followed id)."""
    kind = np.dtype(dtype)
    widest = 1 if kind == np.bool_ else 127
    for beam_width in sorted({1, 2, 3, widest, widest + 1, 300}):
        candidates: list[float] = [0, 1, beam_width - 1, beam_width, beam_width + 1, -1, widest]
        if kind.kind in "iu":
            candidates += [int(np.iinfo(kind).max), int(np.iinfo(kind).min)]
        for value in candidates:
            held = np.asarray(value).astype(kind)
            if float(held) != value:
                continue  # not a value of the type
            parent_ids = np.zeros((4, 3, 5), kind)
            parent_ids[0, 2, 4] = np.asarray(-1 if kind.kind != "u" else 255).astype(kind)
            parent_ids[2, 1, 3] = held
            answer = module._every_parent_names_a_beam(parent_ids, beam_width)
            assert answer == _names_a_beam_by_value(parent_ids, beam_width), (beam_width, value)


def test_the_one_pass_parent_check_leaves_what_it_cannot_tell_to_the_values() -> None:
    """-0.0 (bits above every beam), a BEAM_WIDTH no float16 holds, a big-endian or strided
    input: the one pass says no, and the step-by-step check takes them as before; one step
    has no parent the walk reads."""
    zero = np.zeros((3, 1, 4), np.float32)
    zero[1, 0, 2] = -0.0
    assert not module._every_parent_names_a_beam(zero, 4)
    assert run(np.ones((3, 1, 4), np.float32), zero, np.array([3], np.float32),
               np.array(9, np.float32)).tolist() == np.ones((3, 1, 4)).tolist()  # fmt: skip
    wide = np.full((2, 1, 2049), 2048, np.float16)
    assert not module._every_parent_names_a_beam(wide, 2049)  # 2049 is no float16
    ids = np.ones((2, 1, 2049), np.float16)
    assert run(ids, wide, np.array([2], np.float16), np.array(9, np.float16)).shape == ids.shape
    swapped = np.zeros((3, 2, 4), ">i4")
    assert not module._every_parent_names_a_beam(swapped, 4)
    swapped[1, 1, 1] = 4
    with pytest.raises(SpecError, match=r"parent_ids\[1, 1, 1\] = 4"):
        run(np.zeros((3, 2, 4), ">i4"), swapped, np.array([3, 3], ">i4"), np.array(9, ">i4"))
    strided = np.zeros((3, 2, 8), np.int32)[:, :, ::2]
    assert not module._every_parent_names_a_beam(strided, 4)
    assert module._every_parent_names_a_beam(np.full((1, 2, 3), -5, np.int8), 3)


@pytest.mark.parametrize(
    ("dtype", "beam_width", "value", "refused"),
    [
        ("int8", 300, 127, False),
        ("int8", 300, -1, True),
        ("int8", 128, -128, True),
        ("uint8", 255, 254, False),
        ("uint8", 255, 255, True),
        ("int64", 3, -(2**63), True),
        ("uint64", 3, 2**64 - 1, True),
        ("float32", 3, 2.0, False),
        ("float32", 3, 3.0, True),
        ("float64", 3, -1.0, True),
        ("bfloat16", 3, 256.0, True),
    ],
)
def test_a_followed_parent_past_the_beams_is_refused_the_same(
    dtype: str, beam_width: int, value: float, refused: bool
) -> None:
    """At the edges of what the one pass tells apart, a followed parent id past the beams is
    refused naming it, and one within them is walked as the pseudocode walks it."""
    kind = next(item for item in ELEMENT_TYPES if np.dtype(item).name == dtype)
    step_ids = (np.arange(3 * 2 * beam_width) % 5).astype(kind).reshape(3, 2, beam_width)
    parent_ids = np.zeros((3, 2, beam_width), kind)
    parent_ids[2, 1, beam_width - 1] = np.asarray(value).astype(kind)
    inputs = (step_ids, parent_ids, np.array([3, 3], kind), np.array(9, kind))
    if refused:
        with pytest.raises(SpecError, match=rf"parent_ids\[2, 1, {beam_width - 1}\] = "):
            run(*inputs)
        return
    assert_same_bits(run(*inputs), pseudocode(*inputs))


def _not_an_integer(values: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """x - trunc(x) is not 0: a fraction, NaN or an infinity (in float32 or float64: exact)."""
    wide = values.astype(np.float64 if values.dtype.itemsize == 8 else np.float32)
    with np.errstate(invalid="ignore"):
        return np.asarray(wide - np.trunc(wide) != 0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_every_half_float_is_told_integer_or_not(dtype: str) -> None:
    """Every one of the 65,536 bit patterns of a 16-bit float, alone: the compiled scan finds
    it exactly when it is not an integer."""
    kind = next(item for item in ELEMENT_TYPES if np.dtype(item).name == dtype)
    every = np.arange(1 << 16, dtype=np.uint16)
    expected = _not_an_integer(every.view(kind))
    reading = module._FLOAT_BITS[dtype]
    found = [loops.first_fraction(every[i : i + 1], *reading) == 0 for i in range(every.size)]
    assert found == expected.tolist()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_wide_floats_are_told_integer_or_not(dtype: Any) -> None:
    """Random bit patterns, and the values at every exponent's edge (2**k, its neighbours,
    the largest exact integers, subnormals, NaN, infinities, both zeros), alone and at every
    place of a chunk's edge in a long run of integers."""
    kind = np.dtype(dtype)
    unsigned = np.dtype(f"u{kind.itemsize}")
    rng = np.random.default_rng(5)
    info = np.finfo(kind)
    powers = np.array([2.0**k for k in range(-3, info.nmant + 3)], kind)
    near = np.concatenate([powers, np.nextafter(powers, np.inf), np.nextafter(powers, 0)])
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, info.smallest_subnormal,
                        info.max, 0.5, 1.5], kind)  # fmt: skip
    bits = np.concatenate([
        rng.integers(0, np.iinfo(unsigned).max, 20000, dtype=unsigned, endpoint=True),
        np.concatenate([near, -near, special]).view(unsigned),
    ])  # fmt: skip
    expected = _not_an_integer(bits.view(kind))
    reading = module._FLOAT_BITS[kind.name]
    found = [loops.first_fraction(bits[i : i + 1], *reading) == 0 for i in range(bits.size)]
    assert found == expected.tolist()
    for place in (0, 4095, 4096, 4097, 8191, 10_000 - 1):
        values = np.full(10_000, 7, kind)
        values[place] = 0.5
        values[-1 if place != 10_000 - 1 else 0] = np.nan if place != 10_000 - 1 else 1.0
        assert loops.first_fraction(values.view(unsigned), *reading) == place


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("shape", [(3, 2, 5), (3, 4, 9), (2, 1, 40), (3, 8, 8), (4, 5, 13)])
@pytest.mark.parametrize("stand_in", [False, True])
def test_float_parents_scanned_once_answer_as_the_two_passes(
    dtype: str, shape: tuple[int, int, int], stand_in: bool
) -> None:
    """Float parent ids checked integers and their largest bits found past the first step's
    row in one scan (a line of 64 bytes at a time, the rest one at a time): rows shorter than,
    across and a whole number of lines, an id past the beams (or -0.0, or -1) at the first step,
    its last id, the first followed id, a line's edge, the last: the same answer as the two
    passes, compiled and stood in; and a fraction refused at its place, before any range."""
    kind = next(item for item in ELEMENT_TYPES if np.dtype(item).name == dtype)
    beam_width = shape[2]
    row = shape[1] * shape[2]
    lanes = 64 // np.dtype(kind).itemsize
    flat_places = {
        0,
        row - 1,
        row,
        lanes - 1,
        lanes,
        2 * lanes - 1,
        2 * row - 1,
        math.prod(shape) - 1,
    }
    places = [
        np.unravel_index(place, shape) for place in sorted(flat_places) if place < math.prod(shape)
    ]
    context = loops.numpy_stand_ins() if stand_in else contextlib.nullcontext()
    with context:
        for place in places:
            for value in (beam_width - 1.0, beam_width, beam_width + 1.0, -0.0, -1.0):
                parent_ids = np.ones(shape, kind)
                parent_ids[place] = value
                assert module._scanned_with_largest(parent_ids)
                fits = module._integral_parents(parent_ids, beam_width)
                assert fits == module._every_parent_names_a_beam(parent_ids, beam_width)
                assert fits == _names_a_beam_by_value(parent_ids, beam_width) or value == -0.0
                parent_ids[-1, -1, -1] = 0.5
                parent_ids[1, 0, 0] = beam_width + 3.0  # past the beams, before the fraction
                with pytest.raises(SpecError, match=r"parent_ids must have integer values only, "
                                   r"got 0\.5 at \[" + ", ".join(str(n - 1) for n in shape)):  # fmt: skip
                    module._integral_parents(parent_ids, beam_width)


def test_float_parents_scanned_once_refuse_as_before() -> None:
    """Through the plan: a followed id past the beams refused at its place, one at the first
    step or past a batch's length walked over, a fraction anywhere named first; the beams as
    the pseudocode walks them."""
    step_ids, parent_ids, max_seq_len, end_token = beams(np.float32, (6, 3, 4), seed=3)
    max_seq_len[:] = [6, 2, 0]
    parent_ids[0, 0, 0] = 7.0  # the first step: never read
    parent_ids[4, 1, 2] = -1.0  # past batch 1's length: never read
    inputs = (step_ids, parent_ids, max_seq_len, end_token)
    assert_same_bits(run(*inputs), pseudocode(*inputs))
    parent_ids[3, 0, 1] = 4.0
    with pytest.raises(SpecError, match=r"parent_ids\[3, 0, 1\] = 4\.0 is no beam"):
        run(*inputs)
    parent_ids[5, 2, 3] = 1.5
    with pytest.raises(SpecError, match=r"got 1\.5 at \[5, 2, 3\]"):
        run(*inputs)


# --- the ids' values checked by the walk (large requests) ----------------------------------------


def _outcome(inputs: tuple[npt.NDArray[Any], ...], walk_checks: int, monkeypatch: Any) -> Any:
    """What the op makes of ``inputs`` with ids of ``walk_checks`` bytes or more checked by the
    walk: ("refused", field, message), or ("ok", the output's bits); and, when the walk checks
    them, what ``Plan.check`` says apart (the same refusal, or None)."""
    monkeypatch.setattr(module, "_WALK_CHECKS_BYTES", walk_checks)
    arrays = {name: np.asarray(value) for name, value in zip(NAMES, inputs, strict=True)}
    try:
        plan = module.plan(arrays, {})
    except SpecError as error:
        return ("refused", error.field, str(error)), None
    assert isinstance(plan, Plan)
    assert (plan.check is not None) == (inputs[0].nbytes >= walk_checks)
    apart = None
    if plan.check is not None:
        try:
            plan.check()
        except SpecError as error:
            apart = ("refused", error.field, str(error))
    try:
        return ("ok", raw(plan.run(None))), apart
    except SpecError as error:
        return ("refused", error.field, str(error)), apart


def _defects(dtype: np.dtype[Any], shape: tuple[int, int, int]) -> dict[str, Any]:
    """Ways to break GatherTree's rules on the ids (and on the other inputs beside them), each a
    change of ``beams``' inputs: a fraction, NaN or infinity among the step ids or parent ids
    (first, last or in the middle), a followed parent past the beams or below 0, one no beam
    follows, and the same with a refusal of max_seq_len or end_token too (refused in the
    plan's order)."""
    max_time, batch_size, beam_width = shape
    decoded = _decoded(dtype, max_time)
    last = (decoded - 1, min(1, batch_size - 1), beam_width - 1)  # a batch of every step
    middle = (decoded // 2, batch_size // 2, beam_width // 2)
    floats = dtype.kind == "f" or dtype.name == "bfloat16"
    signed = floats or dtype.kind == "i"
    defects: dict[str, Any] = {"none": {}}
    if floats:
        for where, at in (("first", (0, 0, 0)), ("last", last), ("middle", middle)):
            defects[f"step_ids half at {where}"] = {"step_ids": (at, 0.5)}
            defects[f"parent_ids half at {where}"] = {"parent_ids": (at, 1.5)}
        defects["step_ids nan"] = {"step_ids": (middle, np.nan)}
        defects["parent_ids inf"] = {"parent_ids": (last, np.inf)}
        defects["parent_ids -inf"] = {"parent_ids": ((0, 0, 0), -np.inf)}
        defects["parent_ids -0"] = {"parent_ids": (last, -0.0)}
        defects["both halves"] = {"step_ids": (last, 2.5), "parent_ids": ((0, 0, 0), 0.25)}
        defects["half and max_seq_len negative"] = {"step_ids": (last, 0.5), "max_seq_len": -1}
        defects["half and end_token a fraction"] = {"parent_ids": (last, 0.5), "end_token": 0.5}
    if max_time > 1:
        if beam_width < 100 or dtype.itemsize > 1:
            defects["followed parent past the beams"] = {"parent_ids": (last, beam_width)}
        if signed:
            defects["followed parent below 0"] = {"parent_ids": (middle, -1)}
            defects["below 0 and max_seq_len negative"] = {
                "parent_ids": (middle, -1),
                "max_seq_len": -2,
            }
        # Past every batch's length: no beam follows it.
        defects["unfollowed parent past the beams"] = {
            "parent_ids": (last, min(beam_width + 1, 100)),
            "max_seq_len": decoded - 1,
        }
    return defects


def _decoded(dtype: np.dtype[Any], max_time: int) -> int:
    """The most steps a batch decodes with a length of ``dtype``."""
    return min(max_time, int(np.iinfo(dtype).max)) if dtype.kind in "iu" else max_time


def _broken(
    dtype: np.dtype[Any], shape: tuple[int, int, int], change: dict[str, Any]
) -> tuple[npt.NDArray[Any], ...]:
    step_ids, parent_ids, _, end = beams(dtype, shape, seed=7)
    inputs = {"step_ids": step_ids.copy(), "parent_ids": parent_ids.copy()}
    decoded = _decoded(dtype, shape[0])
    lengths = np.full(shape[1], decoded, np.int64)
    lengths[2::3] = max(decoded - 2, 0)  # the first two batches decode all they can
    extra = {"max_seq_len": lengths.astype(dtype), "end_token": end}
    for name, given in change.items():
        if name in inputs:
            at, value = given
            inputs[name][at] = np.asarray(value).astype(dtype)
        elif name == "max_seq_len":
            extra[name] = np.full(shape[1], given).astype(dtype)
        else:
            extra[name] = np.asarray(given).astype(dtype)
    return inputs["step_ids"], inputs["parent_ids"], extra["max_seq_len"], extra["end_token"]


#: A batch's piece in one line and in two (permutes), wider (gathers), and more steps than the
#: state holds (the one-pass walk, which checks nothing: the plan's checks then run after it).
_CHECKED_SHAPES = [(5, 3, 7), (4, 3, 30), (6, 4, 40), (2100, 1, 33)]


@pytest.mark.parametrize("stand_in", [False, True], ids=["compiled", "stand-in"])
@pytest.mark.parametrize("shape", _CHECKED_SHAPES, ids=str)
@pytest.mark.parametrize(
    "dtype",
    [dtype for dtype in ELEMENT_TYPES if dtype.name in
     ("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int32", "int64")],
    ids=str,
)  # fmt: skip
def test_the_walk_refuses_what_the_plan_refuses(
    dtype: np.dtype[Any], shape: tuple[int, int, int], stand_in: bool, monkeypatch: Any
) -> None:
    """Ids whose values the walk checks (a large request's) give what the plan's own checks
    give, for every defect: the same refusal naming the same input and id, or the same output
    to the bit; and ``Plan.check``, apart, the same refusal before anything is written."""
    assert loops.wait_compiled(120)
    compared = 0
    for name, change in _defects(dtype, shape).items():
        inputs = _broken(dtype, shape, change)
        with loops.numpy_stand_ins() if stand_in else contextlib.nullcontext():
            want, _ = _outcome(inputs, 1 << 62, monkeypatch)
            got, apart = _outcome(inputs, 0, monkeypatch)
        assert got[0] == want[0], name
        if want[0] == "ok":
            assert_same_bits(got[1], want[1])
            assert apart is None, name
        else:
            assert got == want, name
            # Refused by the plan (another input) or by the walk, which Plan.check agrees with.
            assert apart in (None, want), name
            compared += 1
    floats = dtype.kind == "f" or dtype.name == "bfloat16"
    assert compared >= (12 if floats else 1)  # the refusals were compared, not only outputs


@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_a_large_request_s_ids_are_checked_by_the_walk(dtype: Any) -> None:
    """At the size the walk checks the ids itself (no threshold moved): the plan leaves them to
    it, and a fraction in the last step id, or a followed parent past the beams in the last
    step, is refused naming it, as the plan refused it."""
    shape = (64, 256 // np.dtype(dtype).itemsize, 64)
    step_ids, parent_ids, max_seq_len, end = beams(dtype, shape, seed=3)
    assert step_ids.nbytes >= module._WALK_CHECKS_BYTES
    max_seq_len = np.full(shape[1], shape[0], dtype)
    arrays = dict(zip(NAMES, (step_ids, parent_ids, max_seq_len, end), strict=True))
    plan = module.plan(arrays, {})
    assert isinstance(plan, Plan) and plan.check is not None
    assert_same_bits(plan.run(None), pseudocode(step_ids, parent_ids, max_seq_len, end))
    broken = parent_ids.copy()
    broken[-1, -1, -1] = shape[2]
    last = f"{shape[0] - 1}, {shape[1] - 1}, {shape[2] - 1}"
    words = rf"parent_ids\[{last}\] = {shape[2]}(\.0)? is no beam"
    with pytest.raises(SpecError, match=words):
        module.plan({**arrays, "parent_ids": broken}, {}).run(None)
    with pytest.raises(SpecError, match=words):
        module.gather_tree_plan(step_ids, broken, max_seq_len, end)
    if dtype == np.float32:
        fraction = step_ids.copy()
        fraction[-1, -1, -1] = 2.5
        words = rf"step_ids must have integer values only, got 2.5 at \[{last}\]"
        with pytest.raises(SpecError, match=words):
            module.plan({**arrays, "step_ids": fraction}, {}).run(None)
