"""The memory matrix's cells for the movement family: per op, the largest output a request of its
kind makes (Tile and Pad: 64 MiB out of 1 MiB in), sent as an ``.npz`` body and as V2 binary
tensors to one real worker, its RSS growth held to the matrix's bound (growth <= 1.25 x
reserved + 16 MiB, ``test_memory_matrix.py``) and its answer checked against a NumPy reference.
Cells of ops the registry does not hold are not made.

Every other op of the registry has cells too, made from its float32 kernel benchmark case
(``benchmark_cases`` in its test file, about ``CASE_BYTES`` of data; ``test_benchmark_cases.py``
holds each to OpenVINO's CPU plugin): its answer is checked against the op's own plan and kernel
run in this process. A new op is covered here without a line written for it."""

import io
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from app.pipeline.jobs import Limits, make_job
from app.registry import REGISTRY
from app.settings import Settings
from tensor_ops_wire.ops import parameter_value, query_text
from tests.hostile.test_memory_matrix import (
    MiB,
    Request,
    Row,
    Worker,
    access_line,
    watched,
    worker,
)
from tests.ops.movement_support import benchmark_cases_of
from tests.support import DTYPES, npz_bytes

pytestmark = pytest.mark.e2e
__all__ = ["worker"]  # the matrix's fixture, used here too

Array = npt.NDArray[Any]
FLOATS = np.arange(16 * MiB, dtype=np.float32).reshape(4096, 4096)  # 64 MiB


@dataclass(frozen=True)
class OpCell:
    name: str
    op: str
    build: Callable[[], tuple[dict[str, Array], dict[str, Any], list[Array]]]


def _reverse() -> tuple[dict[str, Array], dict[str, Any], list[Array]]:
    return ({"data": FLOATS, "axis": np.array([0, 1])}, {"mode": "index"},
            [FLOATS[::-1, ::-1]])  # fmt: skip


def _transpose() -> tuple[dict[str, Array], dict[str, Any], list[Array]]:
    return {"arg": FLOATS, "input_order": np.array([1, 0])}, {}, [FLOATS.T]


def _tile() -> tuple[dict[str, Array], dict[str, Any], list[Array]]:
    data = FLOATS[:64]  # 1 MiB in, 64 MiB out
    return {"data": data, "repeats": np.array([64, 1])}, {}, [np.tile(data, (64, 1))]


def _concat() -> tuple[dict[str, Array], dict[str, Any], list[Array]]:
    parts = np.split(FLOATS, 4)
    inputs = {f"data_{index}": part for index, part in enumerate(parts)}
    return inputs, {"axis": 0}, [FLOATS]


def _split() -> tuple[dict[str, Array], dict[str, Any], list[Array]]:
    return {"data": FLOATS, "axis": np.array(1)}, {"num_splits": 4}, np.split(FLOATS, 4, 1)


def _variadic_split() -> tuple[dict[str, Array], dict[str, Any], list[Array]]:
    inputs = {"data": FLOATS, "axis": np.array(0), "split_lengths": np.array([16, -1])}
    return inputs, {}, [FLOATS[:16], FLOATS[16:]]


def _slice() -> tuple[dict[str, Array], dict[str, Any], list[Array]]:
    inputs = {
        "data": FLOATS,
        "start": np.array([-1]),
        "stop": np.array([-(2**63)]),
        "step": np.array([-1]),
    }
    return inputs, {}, [FLOATS[::-1]]


def _pad() -> tuple[dict[str, Array], dict[str, Any], list[Array]]:
    data = FLOATS[:64]  # 1 MiB in, 64 MiB out
    inputs = {"data": data, "pads_begin": np.array([2016, 0]), "pads_end": np.array([2016, 0])}
    return inputs, {"pad_mode": "edge"}, [np.pad(data, ((2016, 2016), (0, 0)), mode="edge")]


def _gather_nd() -> tuple[dict[str, Array], dict[str, Any], list[Array]]:
    rows = np.arange(4095, -1, -1).reshape(4096, 1)
    return {"data": FLOATS, "indices": rows}, {}, [FLOATS[::-1]]


def _gather_elements() -> tuple[dict[str, Array], dict[str, Any], list[Array]]:
    data = FLOATS[:1024]  # 16 MiB, and int32 indices as large
    indices = np.broadcast_to(np.arange(4095, -1, -1, dtype=np.int32), data.shape).copy()
    return {"data": data, "indices": indices}, {"axis": 1}, [data[:, ::-1]]


def _scatter_update() -> tuple[dict[str, Array], dict[str, Any], list[Array]]:
    updates = np.zeros((2, 4096), np.float32)
    expected = FLOATS.copy()
    expected[[5, 7]] = 0
    inputs = {"data": FLOATS, "indices": np.array([5, 7]), "updates": updates,
              "axis": np.array(0)}  # fmt: skip
    return inputs, {}, [expected]


def _scatter_nd_update() -> tuple[dict[str, Array], dict[str, Any], list[Array]]:
    expected = FLOATS.copy()
    expected[3] = 1
    inputs = {"data": FLOATS, "indices": np.array([[3]]), "updates": np.ones((1, 4096), np.float32)}
    return inputs, {}, [expected]


BUILDERS = {
    "reverse": _reverse,
    "transpose": _transpose,
    "tile": _tile,
    "concat": _concat,
    "split": _split,
    "variadic_split": _variadic_split,
    "slice": _slice,
    "pad": _pad,
    "gather_nd": _gather_nd,
    "gather_elements": _gather_elements,
    "scatter_update": _scatter_update,
    "scatter_nd_update": _scatter_nd_update,
}
#: The data of an op's cell made from its benchmark case.
CASE_BYTES = 32 * MiB


def _from_benchmark_case(
    op: str,
) -> Callable[[], tuple[dict[str, Array], dict[str, Any], list[Array]]]:
    """The cell of ``op``'s float32 benchmark case: its inputs and attributes, and the answer of
    the op's own plan and kernel in this process."""

    def build() -> tuple[dict[str, Array], dict[str, Any], list[Array]]:
        cases = benchmark_cases_of(op, CASE_BYTES)
        case = next(case for case in cases if case.dtype == np.float32)
        declared = REGISTRY[op]
        attributes = {**declared.attribute_defaults(), **case.attributes}
        job = make_job(declared, case.arrays, attributes, Limits.of(Settings()))
        return dict(case.arrays), dict(case.attributes), [np.array(out) for out in job.outputs()]

    return build


#: The memory matrix's own ops, in every form there (``test_memory_matrix.py``).
MATRIX_OPS = ("roll", "gather")
CELL_BUILDERS = {
    op: BUILDERS.get(op) or _from_benchmark_case(op) for op in REGISTRY if op not in MATRIX_OPS
}
CELLS = [
    OpCell(f"{op}-{transport}", op, build)
    for op, build in CELL_BUILDERS.items()
    for transport in ("npz", "v2-binary")
]


def request_for(cell: OpCell, inputs: dict[str, Array], attributes: dict[str, Any]) -> Request:
    if cell.name.endswith("npz"):
        query = "&".join(f"{key}={query_text(value)}" for key, value in attributes.items())
        path = f"/{cell.op}" + (f"?{query}" if query else "")
        return Request(path, npz_bytes(False, **inputs), {"content-type": "application/x-npz"})
    kinds = {dtype: name for name, dtype in DTYPES.items()}
    parameters = {name: parameter_value(value) for name, value in attributes.items()}
    head: dict[str, Any] = {"inputs": [], "parameters": {**parameters, "binary_data_output": True}}
    raw = []
    for name, array in inputs.items():
        contiguous = np.ascontiguousarray(array)
        head["inputs"].append({"name": name, "shape": list(array.shape),
                               "datatype": kinds[array.dtype],
                               "parameters": {"binary_data_size": contiguous.nbytes}})  # fmt: skip
        raw.append(contiguous.tobytes())
    import orjson  # noqa: PLC0415

    text = orjson.dumps(head)
    headers = {"content-type": "application/octet-stream",
               "inference-header-content-length": str(len(text))}  # fmt: skip
    return Request(f"/v2/models/{cell.op}/infer", b"".join([text, *raw]), headers)


def outputs_of(cell: OpCell, body: bytes, headers: Any) -> list[Array]:
    if cell.name.endswith("npz"):
        if headers.get("content-type", "").startswith("application/x-npz"):
            archive = np.load(io.BytesIO(body))
            return [archive[name] for name in archive.files]
        return [np.load(io.BytesIO(body))]
    import orjson  # noqa: PLC0415

    length = int(headers["inference-header-content-length"])
    head = orjson.loads(body[:length])
    offset, outputs = length, []
    for output in head["outputs"]:
        size = output["parameters"]["binary_data_size"]
        dtype = DTYPES[output["datatype"]]
        outputs.append(np.frombuffer(body[offset : offset + size], dtype).reshape(output["shape"]))
        offset += size
    return outputs


@pytest.mark.parametrize("cell", [pytest.param(cell, id=cell.name) for cell in CELLS])
def test_each_op_stays_within_its_reservation(worker: Worker, cell: OpCell) -> None:
    inputs, attributes, expected = cell.build()
    request_id = f"memory-{cell.name}-{time.monotonic_ns()}"
    request = request_for(cell, inputs, attributes)
    request.headers["x-request-id"] = request_id  # how the access line is found
    del inputs
    sent = watched(worker, "npz" if cell.name.endswith("npz") else "v2-binary", request, request_id)
    reply = sent.reply
    assert reply.status_code == 200, getattr(reply, "text", reply)
    got = outputs_of(cell, reply.content, reply.headers)  # type: ignore[union-attr]
    assert len(got) == len(expected)
    for actual, wanted in zip(got, expected, strict=True):
        assert actual.shape == wanted.shape and np.array_equal(actual, wanted)
    line = access_line(worker.process, request_id)
    row = Row(
        cell=cell.name, reserved=int(line["reserved_bytes"]), growth=sent.growth,
        sampled=sent.sampled - sent.baseline,
        hwm=None if sent.hwm is None else sent.hwm - sent.baseline, seconds=sent.seconds,
        body=len(request.content), status=reply.status_code, problem=None,
    )  # fmt: skip
    print(f"\n{row.line()}", end="")
    assert row.growth <= row.bound, (
        f"{cell.name}: RSS grew {row.growth / MiB:.2f} MiB against {row.reserved / MiB:.2f} MiB "
        f"reserved, past 1.25 x reserved + 16 MiB\n{row.line()}"
    )
