"""Every op's kernel on a large tensor against its byte floor and OpenVINO's CPU plugin.

    .venv/bin/python tests/benchmarks/bench_kernels.py            # 64 MiB of data an op
    .venv/bin/python tests/benchmarks/bench_kernels.py --smoke    # 1 MiB, for CI
    .venv/bin/python tests/benchmarks/bench_kernels.py --only pad,tile

Each op's cases come from its own test file: a module-level ``benchmark_cases(nbytes)`` in
``tests/ops/test_<op>.py`` giving ``BenchmarkCase`` values (the inputs and attributes of one
large request, the bytes the op must move, and how to build the same node for OpenVINO), in
float32 and int8 (``tests/ops/test_benchmark_cases.py`` checks both for every op). A new op's
test file adds its cases and this table has a row for each. Per case, interleaved, the median of
several rounds: the op's plan and kernel into a ready output (as a request runs them), the byte
floor (``np.copyto`` of the bytes it moves: read and written once), a plain copy of the output's
bytes (the physical limit: every output byte written once, from somewhere) and the CPU plugin's
inference into a ready output on the same data, on one thread as ours runs. It prints ratios and
asserts no time (the machine is shared and noisy).
"""

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "client")]

from app.ops.declaration import Plan, SplitPlan  # noqa: E402
from app.registry import REGISTRY  # noqa: E402
from tests.ops.movement_support import BenchmarkCase, every_benchmark_case  # noqa: E402


def cases(nbytes: int, only: set[str] | None) -> list[BenchmarkCase]:
    """Each op's cases (``every_benchmark_case``), those of ``only`` when it is given."""
    return [case for case in every_benchmark_case(nbytes) if only is None or case.op in only]


def output_bytes(case: BenchmarkCase) -> int:
    """The bytes of the op's output (all its outputs) on ``case``."""
    planned = REGISTRY[case.op].plan(case.arrays, case.attributes)
    if isinstance(planned, SplitPlan):
        shapes = list(planned.output_shapes)
    else:
        assert isinstance(planned, Plan)
        shapes = [planned.output_shape]
    return sum(int(np.prod(shape, dtype=np.int64)) for shape in shapes) * case.dtype.itemsize


def ours(case: BenchmarkCase) -> Callable[[], Any]:
    op = REGISTRY[case.op]
    planned = op.plan(case.arrays, case.attributes)
    if isinstance(planned, SplitPlan):
        types = op.output_types(case.arrays, {**op.attribute_defaults(), **case.attributes},
                                len(planned.output_shapes))  # fmt: skip
        outs = [np.empty(shape, dtype) for shape, dtype in zip(planned.output_shapes, types,
                                                               strict=True)]  # fmt: skip

        def split() -> Any:
            again = op.plan(case.arrays, case.attributes)
            assert isinstance(again, SplitPlan)
            parts = again.run() if again.into is None else again.into(outs)
            for out, part in zip(outs, parts, strict=True):
                if part is out:  # written in place (``SplitPlan.into``)
                    continue
                # A bounded plan's part fills only the front of its bound (Unique-10's).
                np.copyto(out[tuple(slice(0, length) for length in part.shape)], part)
            return outs

        return split
    assert isinstance(planned, Plan)
    out = np.empty(planned.output_shape, case.dtype)

    def run() -> Any:
        again = op.plan(case.arrays, case.attributes)
        assert isinstance(again, Plan)
        return again.run(out)

    return run


def copy_of(nbytes: int) -> Callable[[], Any]:
    """A plain copy of ``nbytes`` (read once, written once)."""
    source = np.ones(nbytes, np.uint8)
    target = np.empty_like(source)
    return lambda: np.copyto(target, source)


def openvino(case: BenchmarkCase) -> Callable[[], Any] | None:
    if case.openvino is None:
        return None
    import openvino as ov  # noqa: PLC0415

    model, feed = case.openvino()
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": 1})
    request = compiled.create_infer_request()
    for index, array in enumerate(feed):
        request.set_input_tensor(index, ov.Tensor(array, shared_memory=True))
    request.infer()  # outputs allocated once
    infer: Callable[[], Any] = request.infer
    return infer


def median_seconds(thunks: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Each thunk's median time, run interleaved (the order reversed every other round)."""
    times: dict[str, list[float]] = {name: [] for name in thunks}
    names = list(thunks)
    for turn in range(rounds):
        for name in names if turn % 2 == 0 else reversed(names):
            started = time.perf_counter()
            thunks[name]()
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="1 MiB cases, 3 rounds")
    parser.add_argument("--only", help="comma-separated op names")
    args = parser.parse_args()
    nbytes = (1 << 20) if args.smoke else (64 << 20)
    rounds = 3 if args.smoke else 9
    only = set(args.only.split(",")) if args.only else None
    print(
        f"{'op (case)':<44} {'ours':>9} {'floor':>9} {'memcpy':>9} {'ovino':>9} {'/floor':>7} "
        f"{'/memcpy':>7} {'/ovino':>7}"
    )
    for case in cases(nbytes, only):
        thunks = {
            "ours": ours(case),
            "floor": copy_of(case.moved_bytes // 2),
            "memcpy": copy_of(output_bytes(case)),
        }
        plugin = openvino(case)
        if plugin is not None:
            thunks["openvino"] = plugin
        seconds = median_seconds(thunks, rounds)
        theirs = seconds.get("openvino")
        mine, copy, limit = seconds["ours"], seconds["floor"], seconds["memcpy"]
        plugin_ms = "-" if theirs is None else f"{theirs * 1e3:.1f}m"
        versus = "-" if theirs is None else f"{mine / theirs:.2f}"
        label = f"{case.op} ({case.label})"
        print(
            f"{label:<44} {mine * 1e3:8.1f}m {copy * 1e3:8.1f}m {limit * 1e3:8.1f}m {plugin_ms:>9} "
            f"{mine / copy:7.2f} {mine / limit:7.2f} {versus:>7}",
            flush=True,
        )


if __name__ == "__main__":
    main()
