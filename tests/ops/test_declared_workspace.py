"""Every op of the registry holds, while its kernel runs, no more than the workspace its
declaration gives (``Op.workspace``: what admission reserves beyond the inputs and outputs).

Each op's kernel benchmark cases (``benchmark_cases`` in its test file, float32 and int8, about
``CASE_BYTES`` of data; ``test_benchmark_cases.py`` requires them of every op) are planned as a
request is (``make_job``) and run as the pipeline runs them: into a ready output, or through
``Job.outputs`` for an op of several (whose outputs are then counted apart). What NumPy
allocates meanwhile is traced (``tracemalloc``); numba's own allocations inside a compiled loop
are not seen here, and the worker's whole growth is held to its reservation by
``tests/hostile/test_memory_ops.py``. A new op is covered without a line written for it."""

from typing import Any

import numpy as np
import pytest

from app.ops import loops
from app.pipeline.jobs import Limits, make_job
from app.registry import REGISTRY
from app.settings import Settings
from tests.ops.movement_support import BenchmarkCase, every_benchmark_case, least_traced_bytes

CASE_BYTES = 4 << 20
#: Python's own objects while a kernel runs (its plan's integers and tuples, a few small
#: tables): below what admission counts at all.
SLACK = 256 << 10

CASES = every_benchmark_case(CASE_BYTES)


@pytest.mark.parametrize("case", CASES, ids=[f"{case.op}-{case.label}" for case in CASES])
def test_the_kernel_holds_within_its_declared_workspace(case: BenchmarkCase) -> None:
    assert loops.wait_compiled()  # the compiled loops, as a worker runs them once loaded
    op = REGISTRY[case.op]
    attributes = {**op.attribute_defaults(), **case.attributes}
    job = make_job(op, case.arrays, attributes, Limits.of(Settings()))
    single = job.split is None
    out = np.empty(job.output_shape, job.output_dtype) if single else None
    reference = [np.array(part) for part in ([job.output(out)] if single else job.outputs())]

    def same_answer(made: list[Any]) -> None:
        # The same answer each run: what was traced is the kernel's work.
        assert all(
            np.array_equal(part, first, equal_nan=part.dtype.kind == "f")
            for part, first in zip(made, reference, strict=True)
        )

    held = least_traced_bytes(
        lambda: [job.output(out)] if single else job.outputs(), after=same_answer
    )
    # What the outputs of an op of several take, made by ``outputs``, counted apart.
    held -= 0 if single else job.output_bytes
    assert held <= job.workspace_bytes + SLACK, (
        f"{op.spec} ({case.label}) held {held} bytes beyond its "
        f"{'output' if single else 'outputs'}, declaring {job.workspace_bytes}"
    )
