"""Every op of the registry has kernel benchmark rows in float32 and int8, and each row computes
what OpenVINO's CPU plugin computes on the same node (so the table times the op it names).

The rows are each op's ``benchmark_cases(nbytes)`` in its test file, read by
tests/benchmarks/bench_kernels.py; a new op without them fails here, not in a table nobody reads.
"""

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from app.ops.declaration import Plan, SplitPlan
from app.registry import REGISTRY
from tests.ops.movement_support import (
    BENCHMARK_DTYPES,
    BenchmarkCase,
    assert_same_bits,
    every_benchmark_case,
)

SMALL = 1 << 16


CASES = every_benchmark_case(SMALL)


def test_every_op_has_rows_in_float32_and_int8() -> None:
    have: dict[str, set[str]] = {}
    for case in CASES:
        have.setdefault(case.op, set()).add(case.dtype.name)
    wanted = {dtype.name for dtype in BENCHMARK_DTYPES}
    missing = {name: sorted(wanted - have.get(name, set())) for name in REGISTRY}
    assert {name: kinds for name, kinds in missing.items() if kinds} == {}
    assert set(have) <= set(REGISTRY)


def _ours(case: BenchmarkCase) -> list[npt.NDArray[Any]]:
    planned = REGISTRY[case.op].plan(case.arrays, case.attributes)
    if isinstance(planned, SplitPlan):
        return [np.array(part) for part in planned.run()]
    assert isinstance(planned, Plan)
    return [planned.run(np.empty(planned.output_shape, case.dtype))]


@pytest.mark.parametrize("case", CASES, ids=[f"{case.op}-{case.label}" for case in CASES])
def test_a_row_computes_what_the_plugin_computes(case: BenchmarkCase) -> None:
    """The row's inputs through our plan and kernel, and through the plugin's node, bit for bit
    (a row the plugin refuses, int8 GatherTree, is compared with nothing)."""
    ours = _ours(case)
    assert case.moved_bytes >= sum(out.nbytes for out in ours[:1])
    if case.openvino is None:
        return
    import openvino as ov  # noqa: PLC0415

    model, feed = case.openvino()
    try:
        compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": 1})
    except RuntimeError:
        pytest.skip("the CPU plugin does not compile this row")
    request = compiled.create_infer_request()
    request.infer([ov.Tensor(array) for array in feed])
    theirs = [np.array(request.get_output_tensor(i).data) for i in range(len(ours))]
    for mine, expected in zip(ours, theirs, strict=True):
        assert_same_bits(mine, expected.astype(mine.dtype, copy=False))
