"""Every op of the registry judged on every way a verdict is asked for: case files written with
``write_case`` for each op's spec examples and generated cases (every element type its typed
input allows, rank 0 and empty dimensions where the op takes them), judged ``equal: true``
through ``POST /verify/{op}`` (JSON and ``.npz``), ``client.verify`` (sync and async, every
transport) and ``tensor-ops verify`` on a folder; the same with one bit flipped judged not
equal at that element. A new op is covered by its declaration alone.

The default tier runs a sample (every op, its examples and a generated case, in its example's
type and one other, on every way in); the system tier (tests/conftest.py) the whole matrix.
"""

import io
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest
from fastapi import FastAPI

from app.errors import ServiceError
from app.main import create_app
from app.ops.declaration import Op
from app.pipeline.jobs import Limits, make_job
from app.registry import REGISTRY
from app.settings import Settings
from tensor_ops_client import (
    TRANSPORTS,
    AsyncTensorOpsClient,
    TensorOpsClient,
    main,
    read_case,
    write_case,
)
from tensor_ops_client._verdict import verify_request
from tensor_ops_wire.dtypes import dtype_from_name
from tests.support import free_port, launch_server, stop_server
from tests.transports.test_every_op import example_arrays

pytestmark = pytest.mark.anyio


@dataclass
class Built:
    """One case: an op's inputs and attributes, and the reference's outputs (the right answer)."""

    name: str
    op: Op
    inputs: dict[str, npt.NDArray[Any]]
    attributes: dict[str, Any]
    outputs: dict[str, npt.NDArray[Any]]

    @property
    def dtype(self) -> str:
        return str(read_dtype(self.inputs[self.op.output_type_from].dtype))

    def flipped(self) -> tuple[dict[str, npt.NDArray[Any]], list[int]] | None:
        """The outputs with one bit of one element flipped, and that element's index (None when
        every output is empty)."""
        for name, array in self.outputs.items():
            if array.size:
                flat = (array.size * 2) // 3  # not always the first: `first` must say where
                wrong = array.copy()
                # Bit 0: a bool's truth, any other type's lowest bit.
                wrong.reshape(-1).view(np.uint8)[flat * array.dtype.itemsize] ^= 1
                index = [int(i) for i in np.unravel_index(flat, array.shape)]
                return {**self.outputs, name: wrong}, index
        return None


def read_dtype(dtype: np.dtype[Any]) -> str:
    from tensor_ops_wire.verdict import type_name  # noqa: PLC0415

    return type_name(dtype)


LIMITS = Limits.of(Settings())


#: (op, case) whose inputs the op admits but whose computation failed: a 500 on every way in.
CRASHED: list[tuple[str, str]] = []


def reference(
    op: Op, inputs: dict[str, Any], attributes: dict[str, Any], name: str
) -> dict[str, Any] | None:
    """The op's outputs by name, as the service computes them; None when the op refuses (or
    fails: ``CRASHED`` lists it, and a test below says so)."""
    try:
        job = make_job(op, inputs, {**op.attribute_defaults(), **attributes}, LIMITS)
    except ServiceError:
        return None
    try:
        outputs = job.outputs()
    except Exception:  # any failure of an admitted case is the finding
        CRASHED.append((op.name, name))
        return None
    return {name: np.array(array) for name, array in zip(job.output_names, outputs, strict=True)}


def typed_as(op: Op, arrays: dict[str, Any], dtype: np.dtype[Any], rng: Any) -> dict[str, Any]:
    """``arrays`` with the typed input and its like-data inputs (updates, pad_value) of
    ``dtype``; with ``rng``, their elements random bits (NaN payloads, -0.0, subnormals...)."""
    typed: dict[str, Any] = {}
    for name, given in arrays.items():
        item = op.input_for(name)
        assert item is not None
        array = np.asarray(given)
        if name == op.output_type_from or (item.like_data and not item.is_index):
            if rng is None:
                array = array.astype(np.float64).astype(dtype)
            elif dtype.kind == "b":
                array = rng.integers(0, 2, array.shape).astype(bool)
            else:
                raw = rng.integers(0, 256, array.size * dtype.itemsize, dtype=np.uint8)
                array = raw.view(dtype).reshape(array.shape)
        typed[name] = array
    return typed


def shapes_of_edge(op: Op, arrays: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Edge forms of an example's inputs: the typed input at rank 0 (its index inputs as given
    or empty), and with each dimension made 0 in turn. The ones the op takes are kept."""
    source = op.output_type_from
    data = np.asarray(arrays[source])
    scalar = data.reshape(-1)[:1].reshape(()) if data.size else np.zeros((), data.dtype)
    emptied = {
        name: (np.zeros(0, np.asarray(a).dtype) if name != source else scalar)
        for name, a in arrays.items()
        if (item := op.input_for(name)) is not None and (item.is_index or name == source)
    }
    yield "rank0", {**arrays, source: scalar}
    yield "rank0-empty-indices", {**arrays, **emptied}
    for axis in range(data.ndim):
        shape = list(data.shape)
        shape[axis] = 0
        empty = {
            name: np.zeros(shape, np.asarray(a).dtype)
            for name, a in arrays.items()
            if name == source or (op.variadic is not None and op.input_for(name) is op.variadic)
        }
        yield f"empty-axis{axis}", {**arrays, **empty}


def build_cases(op: Op, full: bool) -> list[Built]:
    """The cases of ``op``: its examples and a generated case of each, in every type its typed
    input allows (``full``) or in the example's type and one other; and its edge forms."""
    typed_input = op.input_for(op.output_type_from)
    assert typed_input is not None
    allowed = [dtype_from_name(name) for name in typed_input.element_types]
    rng = np.random.default_rng(len(op.name))
    cases: list[Built] = []
    examples = list(op.examples.items())
    # The default tier's sample: the first example (its generated case, its edges) only.
    for number, (example_name, example) in enumerate(examples if full else examples[:1]):
        arrays, attributes = example_arrays(op, dict(example["value"]))
        own = np.asarray(arrays[op.output_type_from]).dtype
        other = allowed[(number + len(op.name)) % len(allowed)]
        for dtype in allowed if full else list(dict.fromkeys([own, other])):
            for kind, random in (("example", None), ("random", rng)):
                inputs = typed_as(op, arrays, dtype, random)
                name = f"{op.name}/{example_name}-{kind}-{read_dtype(dtype)}"
                outputs = reference(op, inputs, attributes, name)
                if outputs is not None:
                    cases.append(Built(name, op, inputs, attributes, outputs))
        for edge, inputs in shapes_of_edge(op, arrays):
            name = f"{op.name}/{example_name}-{edge}"
            outputs = reference(op, inputs, attributes, name)
            if outputs is not None:
                cases.append(Built(name, op, inputs, attributes, outputs))
    return cases


SAMPLE = {op.name: build_cases(op, full=False) for op in REGISTRY.values()}


def test_every_op_has_cases_and_its_edges_where_it_takes_them() -> None:
    for name, cases in SAMPLE.items():
        kinds = {case.name.rpartition("-")[0].rpartition("/")[2] for case in cases}
        assert any("example" in kind for kind in kinds), name
        assert any(case.op.name == name for case in cases)
    # Ops that take a scalar and an empty tensor show it here (Tile, Transpose, Reverse do).
    edges = {case.name.split("/")[0] for cases in SAMPLE.values() for case in cases}
    rank0 = {case.op.name for cases in SAMPLE.values() for case in cases if "rank0" in case.name}
    empty = {case.op.name for cases in SAMPLE.values() for case in cases if "empty" in case.name}
    assert edges == set(REGISTRY)
    assert {"tile", "transpose"} <= rank0
    assert {"roll", "concat", "tile", "transpose", "reverse"} <= empty


@pytest.mark.parametrize("op_name", list(REGISTRY))
def test_no_case_the_op_admits_fails_in_its_computation(op_name: str) -> None:
    assert [case for op, case in CRASHED if op == op_name] == []


@pytest.fixture(scope="module")
def app() -> FastAPI:
    """One app for the module (making one takes about a second; the cases change nothing)."""
    return create_app(Settings())


@pytest.fixture
async def http(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        yield c


async def judge_on_routes(http: httpx.AsyncClient, case: Built) -> None:
    """The case equal through POST /verify/{op} with a JSON body and with its case file; one
    bit flipped not equal there, at that element."""
    flipped = case.flipped()
    for transport in ("json", "npz"):
        request = verify_request(
            case.op.name, case.inputs, case.outputs, case.attributes, None, transport
        )
        answer = await http.post(request.url, content=request.content, headers=request.headers)
        assert answer.status_code == 200, (case.name, transport, answer.text)
        verdict = answer.json()
        assert verdict["equal"] is True, (case.name, transport, verdict)
        assert [o["name"] for o in verdict["outputs"]] == list(case.outputs)
        if flipped is None:
            continue
        wrong, index = flipped
        request = verify_request(case.op.name, case.inputs, wrong, case.attributes, None, transport)
        answer = await http.post(request.url, content=request.content, headers=request.headers)
        verdict = answer.json()
        assert verdict["equal"] is False, (case.name, transport)
        judged = [o for o in verdict["outputs"] if not o["equal"]]
        assert len(judged) == 1 and judged[0]["mismatches"] == 1, (case.name, verdict)
        assert judged[0]["first"][0]["index"] == index, (case.name, transport)
        assert sum(judged[0]["causes"].values()) == 1


@pytest.mark.parametrize("op_name", list(REGISTRY))
async def test_every_case_is_equal_on_the_routes_and_a_flipped_bit_is_found(
    http: httpx.AsyncClient, op_name: str
) -> None:
    for case in SAMPLE[op_name]:
        await judge_on_routes(http, case)


@pytest.mark.parametrize("op_name", list(REGISTRY))
async def test_the_whole_matrix_on_the_routes(http: httpx.AsyncClient, op_name: str) -> None:
    for case in build_cases(REGISTRY[op_name], full=True):
        await judge_on_routes(http, case)


def test_case_files_keep_every_case(tmp_path: Path) -> None:
    for cases in SAMPLE.values():
        for case in cases[::3]:
            path = write_case(
                tmp_path / f"{case.name}.npz",
                case.op.name,
                case.inputs,
                case.outputs,
                case.attributes,
            )
            back = read_case(path)
            assert back.op == case.op.name and back.attributes == case.attributes
            for name, array in case.inputs.items():
                assert back.inputs[name].dtype == array.dtype
                assert back.inputs[name].tobytes() == array.tobytes()
            for name, array in case.outputs.items():
                assert back.outputs[name].shape == array.shape
                assert back.outputs[name].tobytes() == array.tobytes()


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, str]]:
    port = free_port()
    url, process = launch_server(env={"TENSOR_OPS_GRPC_PORT": str(port)})
    yield url, f"127.0.0.1:{port}"
    stop_server(process)


#: Every way the client sends a verify: each transport, and shared memory on the V2 ones.
CLIENT_WAYS = [(transport, False) for transport in TRANSPORTS] + [("v2", True), ("grpc", True)]


def _client_cases(full: bool) -> list[Built]:
    if full:
        return [case for op in REGISTRY.values() for case in build_cases(op, full=True)]
    # One case of each op (its first example), and the generated cases of every other op.
    picked = []
    for number, cases in enumerate(SAMPLE.values()):
        picked.append(cases[0])
        picked += [case for case in cases if "random" in case.name][-1:] if number % 2 else []
    return picked


def _judge_with(client: Any, case: Built) -> None:
    verdict = client.verify(case.op.name, case.inputs, case.outputs, case.attributes)
    assert verdict.equal, (case.name, verdict.as_dict())
    flipped = case.flipped()
    if flipped is not None:
        wrong, index = flipped
        verdict = client.verify(case.op.name, case.inputs, wrong, case.attributes)
        assert not verdict.equal
        (judged,) = [output for output in verdict.outputs if not output.equal]
        assert judged.first[0]["index"] == index, case.name


@pytest.mark.e2e
@pytest.mark.parametrize(("transport", "shared_memory"), CLIENT_WAYS)
def test_the_sync_client_on_every_way(
    server: tuple[str, str], transport: Any, shared_memory: bool
) -> None:
    url, target = server
    with TensorOpsClient(
        url, transport=transport, grpc_target=target, shared_memory=shared_memory, retry=False
    ) as client:
        for case in _client_cases(full=False):
            _judge_with(client, case)


@pytest.mark.e2e
@pytest.mark.parametrize(("transport", "shared_memory"), CLIENT_WAYS)
async def test_the_async_client_on_every_way(
    server: tuple[str, str], transport: Any, shared_memory: bool
) -> None:
    url, target = server
    async with AsyncTensorOpsClient(
        url, transport=transport, grpc_target=target, shared_memory=shared_memory, retry=False
    ) as client:
        for case in _client_cases(full=False):
            verdict = await client.verify(case.op.name, case.inputs, case.outputs, case.attributes)
            assert verdict.equal, (case.name, verdict.as_dict())
            flipped = case.flipped()
            if flipped is not None:
                wrong, index = flipped
                verdict = await client.verify(case.op.name, case.inputs, wrong, case.attributes)
                (judged,) = [output for output in verdict.outputs if not output.equal]
                assert judged.first[0]["index"] == index, case.name


@pytest.mark.e2e
@pytest.mark.parametrize(("transport", "shared_memory"), CLIENT_WAYS)
def test_the_whole_matrix_through_the_client(
    server: tuple[str, str], transport: Any, shared_memory: bool
) -> None:
    url, target = server
    # The whole matrix on the client's first way, the default tier's sample on the others: the
    # matrix is the op's and the transports' codecs are proven on every case by the routes' own
    # whole matrix; six times it would take the system tier past its time.
    full = (transport, shared_memory) == CLIENT_WAYS[0]
    with TensorOpsClient(
        url, transport=transport, grpc_target=target, shared_memory=shared_memory, retry=False
    ) as client:
        for case in _client_cases(full=full):
            _judge_with(client, case)


def write_folder(folder: Path, cases: list[Built]) -> dict[str, tuple[str, list[int] | None]]:
    """Each case as a right case file and, where it has elements, a flipped one: their names
    (relative to ``folder``) to the outcome due and the flipped element's index."""
    due: dict[str, tuple[str, list[int] | None]] = {}
    for case in cases:
        right = f"{case.name}.npz"
        write_case(folder / right, case.op.name, case.inputs, case.outputs, case.attributes)
        due[right] = ("equal", None)
        flipped = case.flipped()
        if flipped is not None:
            wrong, index = flipped
            name = f"{case.name}-flipped.npz"
            write_case(folder / name, case.op.name, case.inputs, wrong, case.attributes)
            due[name] = ("not_equal", index)
    return due


def check_folder_run(
    status: int, report: bytes, due: dict[str, tuple[str, list[int] | None]]
) -> None:
    assert status == 1  # the flipped cases
    root = ET.fromstring(report)
    suites = {suite.get("name"): suite for suite in root.findall("testsuite")}
    assert set(suites) == {name.split("/")[0] for name in due}
    seen = {}
    for suite in suites.values():
        for testcase in suite.findall("testcase"):
            seen[testcase.get("name")] = testcase
    assert set(seen) == set(due)
    for name, (outcome, index) in due.items():
        testcase = seen[name]
        failure, error = testcase.find("failure"), testcase.find("error")
        assert error is None, (name, error.get("message") if error is not None else "")
        if outcome == "equal":
            assert failure is None, (name, failure.get("message") if failure is not None else "")
        else:
            assert failure is not None and f"first at {index}" in failure.get("message", ""), name


@pytest.mark.e2e
def test_the_command_on_a_folder(server: tuple[str, str], tmp_path: Path) -> None:
    cases = [case for cases in SAMPLE.values() for case in cases[:2]]
    due = write_folder(tmp_path / "cases", cases)
    report = tmp_path / "report.xml"
    status = main(["--url", server[0], "verify", str(tmp_path / "cases"), "--junit", str(report)])
    check_folder_run(status, report.read_bytes(), due)


def test_the_command_in_process_on_a_folder(tmp_path: Path) -> None:
    cases = [case for cases in SAMPLE.values() for case in cases[::2]]
    due = write_folder(tmp_path / "cases", cases)
    report = tmp_path / "report.xml"
    status = main(["verify", "--local", str(tmp_path / "cases"), "--junit", str(report)])
    check_folder_run(status, report.read_bytes(), due)


def test_the_whole_matrix_through_the_command(tmp_path: Path) -> None:
    cases = [case for op in REGISTRY.values() for case in build_cases(op, full=True)]
    due = write_folder(tmp_path / "cases", cases)
    report = tmp_path / "report.xml"
    status = main(["verify", "--local", str(tmp_path / "cases"), "--junit", str(report)])
    check_folder_run(status, report.read_bytes(), due)


def test_an_npz_body_is_a_case_file(tmp_path: Path) -> None:
    """The route's .npz body and write_case's file are the same bytes (one format)."""
    case = SAMPLE["concat"][0]
    path = write_case(tmp_path / "c.npz", "concat", case.inputs, case.outputs, case.attributes)
    request = verify_request("concat", case.inputs, case.outputs, case.attributes, None, "npz")
    assert request.content == path.read_bytes()
    assert np.load(io.BytesIO(path.read_bytes()), allow_pickle=False).files
