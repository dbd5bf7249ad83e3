"""What the movement ops' tests share: every element type with its awkward values, raw views for
comparing bits, and OpenVINO's CPU plugin run on tensors of positions."""

import importlib
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import openvino as ov
import openvino.opset1 as ov_opset1

from tensor_ops_wire.dtypes import BFLOAT16, element_type_of

#: Every element type the ops take.
ELEMENT_TYPES: tuple[np.dtype[Any], ...] = (
    np.dtype(np.bool_),
    *(np.dtype(name) for name in ("int8", "int16", "int32", "int64")),
    *(np.dtype(name) for name in ("uint8", "uint16", "uint32", "uint64")),
    np.dtype(np.float16),
    BFLOAT16,
    np.dtype(np.float32),
    np.dtype(np.float64),
)
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def sample(dtype: np.dtype[Any], shape: Sequence[int], seed: int = 0) -> npt.NDArray[Any]:
    """A tensor of ``dtype`` whose bits are random: floats include NaNs of every payload (quiet
    and signalling, both signs), -0.0, infinities and subnormals."""
    rng = np.random.default_rng(seed)
    count = int(np.prod(shape, dtype=np.int64))
    if dtype.kind == "b":
        return rng.integers(0, 2, count).astype(np.bool_).reshape(shape)
    bits = rng.integers(0, 256, count * dtype.itemsize, dtype=np.uint8)
    array = bits.view(_UNSIGNED[dtype.itemsize]).view(dtype).reshape(shape)
    if dtype.kind == "f" or dtype == BFLOAT16:
        flat = array.reshape(-1)
        flat[: min(count, 1)] = -0.0
    return array


def raw(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``array``'s bits, as unsigned integers of its width (bool as uint8)."""
    array = np.ascontiguousarray(array)
    return array.view(_UNSIGNED[array.dtype.itemsize])


def assert_same_bits(actual: npt.NDArray[Any], expected: npt.NDArray[Any]) -> None:
    """Same shape, same type, same bits."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert np.array_equal(raw(actual), raw(expected))


def positions(shape: Sequence[int]) -> npt.NDArray[np.int32]:
    """int32 ``1 .. n`` in ``shape``: what OpenVINO is given instead of the data."""
    count = int(np.prod(shape, dtype=np.int64))
    return np.arange(1, count + 1, dtype=np.int32).reshape(shape)


def from_positions(data: npt.NDArray[Any], moved: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """The output OpenVINO's answer on positions means for ``data``: each position's element
    (0 marks an element no input gave: zero bits)."""
    flat = np.ascontiguousarray(data).reshape(-1)
    taken = np.where(moved > 0, moved - 1, 0).astype(np.int64)
    out = flat[taken] if flat.size else np.zeros(moved.shape, data.dtype)
    out = np.array(out, dtype=data.dtype).reshape(moved.shape)
    zero = np.zeros((), data.dtype)
    np.copyto(out, zero, where=moved == 0)
    return out


def cpu_plugin(
    build: Callable[[Any], Any], data_shape: Sequence[int]
) -> Callable[[], npt.NDArray[Any]]:
    """OpenVINO's CPU plugin running ``build(parameter)`` on int32 positions of ``data_shape``."""
    parameter = ov_opset1.parameter(list(data_shape), ov.Type.i32)
    node = build(parameter)
    compiled = ov.Core().compile_model(ov.Model([node], [parameter]), "CPU")

    def run() -> npt.NDArray[Any]:
        return np.asarray(compiled(positions(data_shape))[0])

    return run


def constant(values: npt.NDArray[Any]) -> Any:
    """An OpenVINO constant of ``values`` (an empty one too, which opset1.constant refuses)."""
    types = {"int64": ov.Type.i64, "int32": ov.Type.i32, "bool": ov.Type.boolean}
    shape = ov.Shape(list(values.shape))
    return ov.op.Constant(types[values.dtype.name], shape, values.reshape(-1).tolist())


@dataclass(frozen=True)
class BenchmarkCase:
    """One large request of an op for tests/benchmarks/bench_kernels.py: its inputs and
    attributes, the output's element type, the bytes it must move (read and written), and how
    to build the same node for OpenVINO's CPU plugin (a model and the arrays it is fed)."""

    op: str
    label: str
    arrays: dict[str, npt.NDArray[Any]]
    attributes: dict[str, Any]
    dtype: np.dtype[Any]
    moved_bytes: int
    openvino: Callable[[], tuple[Any, list[npt.NDArray[Any]]]] | None = None


#: The element types every op's benchmark cases come in (tests/benchmarks/bench_kernels.py).
BENCHMARK_DTYPES: tuple[np.dtype[Any], ...] = (np.dtype(np.float32), np.dtype(np.int8))


def _benchmark_makers() -> list[Callable[[int], list[BenchmarkCase]]]:
    """Each ``tests/ops/test_<op>.py``'s module-level ``benchmark_cases``, in the files' order."""
    makers = []
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        made = getattr(importlib.import_module(f"tests.ops.{path.stem}"), "benchmark_cases", None)
        if made is not None:
            makers.append(made)
    return makers


def every_benchmark_case(nbytes: int) -> list[BenchmarkCase]:
    """Every op's benchmark cases of about ``nbytes``, in the files' order."""
    return [case for made in _benchmark_makers() for case in made(nbytes)]


def benchmark_cases_of(op: str, nbytes: int) -> list[BenchmarkCase]:
    """``op``'s benchmark cases of about ``nbytes``, made for that op alone (each file is asked
    first, at a few bytes, which op its cases are of)."""
    return [
        case
        for made in _benchmark_makers()
        if any(case.op == op for case in made(1 << 12))
        for case in made(nbytes)
        if case.op == op
    ]


def least_traced_bytes(
    run: Callable[[], object], runs: int = 3, after: Callable[[Any], None] | None = None
) -> int:
    """The fewest bytes NumPy and Python allocated at once beyond what was held before, over
    ``runs`` calls of ``run`` (traced): tracemalloc counts every thread of the process, and
    another test's thread in the same worker may allocate during one call, where what ``run``
    itself holds is there in every call. ``after`` is given each call's result once its peak
    has been read (a check of the answer, whose temporaries are not the run's)."""
    held = []
    tracemalloc.start()
    try:
        for _ in range(runs):
            tracemalloc.reset_peak()
            before, _ = tracemalloc.get_traced_memory()
            result = run()
            _, peak = tracemalloc.get_traced_memory()
            held.append(peak - before)
            if after is not None:
                after(result)
            del result
    finally:
        tracemalloc.stop()
    return min(held)


def short(dtype: Any) -> str:
    """``dtype``'s OpenVINO name (``f32``, ``i8``), for a benchmark case's label."""
    return element_type_of(np.dtype(dtype)).openvino


def plugin_type(dtype: Any) -> Any:
    """OpenVINO's element type for ``dtype`` (a benchmark model's parameter)."""
    return getattr(ov.Type, short(dtype))


def plugin_model(
    build: Callable[[Any], Any], data: npt.NDArray[Any]
) -> tuple[Any, list[npt.NDArray[Any]]]:
    """A model of ``build(parameter)`` over ``data`` (float32 or int8), and its feed."""
    parameter = ov_opset1.parameter(list(data.shape), plugin_type(data.dtype))
    node = build(parameter)
    outputs = node.outputs() if len(node.outputs()) > 1 else [node]
    return ov.Model(outputs, [parameter]), [data]


def square(nbytes: int, dtype: Any = np.float32) -> npt.NDArray[Any]:
    """About ``nbytes`` of ``dtype`` as a square matrix of ones and zeros."""
    side = int((nbytes // np.dtype(dtype).itemsize) ** 0.5)
    return (np.arange(side * side) % 3).astype(dtype).reshape(side, side)


def watch_stream_flags(monkeypatch: Any, module: Any, name: str) -> list[int]:
    """The last argument (whether it streams) of each call of the compiled loop ``name`` of
    ``module`` while the test runs; the loop still runs."""
    calls: list[int] = []
    original = getattr(module, name)

    def watched(*arguments: Any) -> None:
        calls.append(int(arguments[-1]))
        original(*arguments)

    monkeypatch.setattr(module, name, watched)
    return calls
