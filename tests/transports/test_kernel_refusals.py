"""A refusal made while an op's kernel runs (a check its plan left to it, ``Plan.check``: a
large GatherTree's ids), for every op of the registry on every way in: the same 4xx, naming
the same input, as a refusal of its plan; the memory the request reserved given back, and
the next request answered to the bit.

Each op's first example is planned as usual, then its kernel (``run``, and ``into`` for an op
of several outputs) refuses with a ``SpecError`` naming the example's first input: what a
kernel that checks values as it reads them raises. Nothing here is written for one op: an op
added to the registry is covered by this file as it stands."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from app.main import create_app
from app.ops.declaration import Op, Plan, SplitPlan
from app.ops.errors import SpecError
from app.registry import REGISTRY
from app.settings import Settings
from tests.support import DTYPES, grpc_channel, grpc_serving, inference_stub, npy_b64
from tests.transports.test_edge_shapes import (
    WAYS,
    Outcome,
    _field,
    _grpc_message,
    anyio_backend,
    first_example,
    in_process,
    same_bits,
    send,
)

__all__ = ["anyio_backend"]  # the fixture, shared with test_edge_shapes

pytestmark = pytest.mark.anyio

#: What the kernel says when it refuses: a test's words, found in every way's answer.
WORDS = "refused by the kernel as it ran"


@pytest.fixture(scope="module")
async def served() -> AsyncIterator[tuple[Any, tuple[httpx.AsyncClient, Any]]]:
    """One app for the module, its HTTP client and gRPC stub (and the app: its budget)."""
    app = create_app(Settings())
    async with (
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client,
        grpc_serving(app) as address,
        grpc_channel(address) as channel,
    ):
        yield app, (client, inference_stub(channel))


@contextlib.contextmanager
def kernel_refusing(op: Op, field: str) -> Iterator[None]:
    """Within this block, ``op``'s plan is made as before, and its kernel refuses naming
    ``field`` (``Plan.check`` too: shared memory asks it first)."""
    planner = op.plan

    def refuse(*_: Any) -> Any:
        raise SpecError(field, f"{field} {WORDS}")

    def plan(arrays: Any, attributes: Any) -> Plan | SplitPlan:
        made = planner(arrays, attributes)
        if isinstance(made, SplitPlan):
            into = None if made.into is None else refuse
            return SplitPlan(made.output_shapes, refuse, made.bounded, into)
        return Plan(made.output_shape, refuse, check=refuse)

    object.__setattr__(op, "plan", plan)  # an Op is frozen: its planner swapped for the block
    try:
        yield
    finally:
        object.__setattr__(op, "plan", planner)


async def through_the_stream(stub: Any, op: Op, arrays: Any, attributes: Any) -> Outcome:
    """The request as one message of a gRPC stream: its answer, or its error message."""

    async def messages() -> Any:
        yield _grpc_message(op, arrays, attributes)

    async for answer in stub.ModelStreamInfer(messages()):
        if answer.error_message:
            message = answer.error_message
            return ("refused", 400, _field(message), message)
        got = [
            np.frombuffer(raw, np.dtype(tensor_dtype(tensor))).reshape(tuple(tensor.shape))
            for tensor, raw in zip(
                answer.infer_response.outputs,
                answer.infer_response.raw_output_contents,
                strict=True,
            )
        ]
        return ("ok", got)
    raise AssertionError("the stream gave no answer")


def tensor_dtype(tensor: Any) -> Any:
    return DTYPES[tensor.datatype].newbyteorder("<")


async def through_verify(
    client: httpx.AsyncClient, op: Op, arrays: Any, attributes: Any, outputs: Any
) -> Outcome:
    """The request with its right outputs as the candidate, ``POST /verify/{op}``: its verdict
    (("ok", [...]) when the candidate was judged equal), or its refusal."""
    names = op.output_names if len(outputs) == 1 else [f"output_{i}" for i in range(len(outputs))]
    body = {name: npy_b64(array) for name, array in arrays.items()}
    candidates = {
        name: npy_b64(np.ascontiguousarray(output))
        for name, output in zip(names, outputs, strict=True)
    }
    response = await client.post(
        f"/verify/{op.name}", json={**body, **attributes, "outputs": candidates}
    )
    if response.status_code != 200:
        [problem, *_] = response.json()["detail"]
        return ("refused", response.status_code, problem["loc"][-1], problem["msg"])
    verdict = response.json()
    return ("ok", [verdict])


async def every_way(
    ways: tuple[httpx.AsyncClient, Any], op: Op, arrays: Any, attributes: Any, outputs: Any
) -> dict[str, Outcome]:
    client, stub = ways
    got = {way: await send(way, ways, op, arrays, attributes) for way in WAYS}
    got["grpc-stream"] = await through_the_stream(stub, op, arrays, attributes)
    got["verify"] = await through_verify(client, op, arrays, attributes, outputs)
    return got


@pytest.mark.parametrize("op_name", sorted(REGISTRY))
async def test_a_refusal_from_the_kernel_is_the_plan_s_on_every_way_in(
    served: tuple[Any, tuple[httpx.AsyncClient, Any]], op_name: str
) -> None:
    app, ways = served
    op = REGISTRY[op_name]
    arrays, attributes = first_example(op)
    expected = in_process(op, arrays, attributes)
    assert expected[0] == "ok", expected
    field = next(iter(arrays))
    with kernel_refusing(op, field):
        assert in_process(op, arrays, attributes)[:3] == ("refused", 422, field)
        refused = await every_way(ways, op, arrays, attributes, expected[1])
    for way, outcome in refused.items():
        assert outcome[0] == "refused", (way, outcome)
        status, named, message = outcome[1:]
        assert status == (400 if way.startswith("grpc") else 422), (way, outcome)
        assert named == field and WORDS in message, (way, outcome)
    for _ in range(100):  # every reservation given back (a gRPC answer's once it is sent)
        if app.state.budget.in_use == 0:
            break
        await asyncio.sleep(0.01)
    assert app.state.budget.in_use == 0
    # The worker as it was: the same request answered, to the bit, on every way in.
    answered = await every_way(ways, op, arrays, attributes, expected[1])
    for way, outcome in answered.items():
        assert outcome[0] == "ok", (way, outcome)
        if way == "verify":
            assert outcome[1][0]["equal"] is True, outcome
        else:
            assert same_bits(outcome[1], expected[1]), (way, outcome[1], expected[1])
