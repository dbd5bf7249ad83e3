"""Every plan counts before it builds (issue 42, points 1 and 2), registry-wide and in-process:
each index-like input at 4,000,000 elements is refused before its op's plan runs when the op
declares its limit (``Input.limit``), and otherwise costs its planning and its kernel no more
than the workspace the op declares (NumPy's and Python's allocations traced); each integer
attribute at +-2**31 is refused naming it, a count attribute (``Attribute.limit``) before the
plan. A new op is held to it by its declaration alone. The worker's RSS against the reservation
is measured by ``tests/hostile/test_declared_limits_memory.py`` (system tier)."""

import dataclasses
import io
import tracemalloc
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest

from app.errors import Fault, ServiceError
from app.main import create_app
from app.ops.declaration import (
    LIMIT_OUTPUTS,
    LIMIT_RANK,
    LIMIT_SCALAR,
    MAX_OUTPUTS,
    Attributes,
    Op,
)
from app.pipeline import run, threads
from app.pipeline.jobs import Limits, make_job
from app.registry import REGISTRY, Arrays, every_version
from app.settings import Settings
from tests.support import npz_bytes
from tests.transports.test_every_op import example_arrays

Array = npt.NDArray[Any]
MiB = 1 << 20
#: The length every index-like input is sent at (the issue's figure).
LONG = 4_000_000
#: What a plan and a kernel may hold beyond the op's declared workspace and the output: the
#: memory model's slack (docs/limits.md: growth within 1.25 x the reservation + 16 MiB).
SLACK = 16 * MiB
LIMITS = Limits.of(Settings())


def first_example(op: Op) -> tuple[dict[str, Array], dict[str, Any]]:
    """The arrays and attributes of the op's first example: a request that plans."""
    value = next(iter(op.examples.values()))["value"]
    arrays, attributes = example_arrays(op, dict(value))
    return arrays, {**op.attribute_defaults(), **attributes}


def index_like(op: Op) -> Iterator[str]:
    """The op's inputs that are read as indices, lengths or counts (not variadic)."""
    for item in op.inputs:
        if not item.variadic and (item.is_index or item.limit):
            yield item.name


#: Every version of every op, by its spec's name (Pad-12, Pad-1...): each declares its own.
OPS = {op.spec: op for op in every_version()}
LONG_INPUTS = [(spec, name) for spec, op in OPS.items() for name in index_like(op)]
INTEGER_ATTRIBUTES = [
    (spec, item.name) for spec, op in OPS.items() for item in op.attributes if item.kind == "int"
]


def long_input(op: Op, name: str, given: Array | None) -> Array:
    """``name`` at LONG elements: zeros of its example's type (int64 when the example leaves
    it out), 1-D."""
    dtype = np.dtype(np.int64) if given is None else given.dtype
    if dtype.kind == "b":
        return np.zeros(LONG, dtype)
    return np.zeros(LONG, dtype)


class Spied:
    """An op's planner, counted."""

    def __init__(self, op: Op) -> None:
        self.op = op
        self.calls = 0

    def __call__(self, arrays: Arrays, attributes: Attributes) -> Any:
        self.calls += 1
        return self.op.plan(arrays, attributes)


def traced(action: Any) -> tuple[Any, int]:
    """``action()``'s result (or the ServiceError it raised) and the most bytes it held at
    once beyond what was held before (NumPy's buffers and Python's objects alike)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        try:
            result = action()
        except ServiceError as error:
            result = error
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    return result, peak


@pytest.mark.parametrize(("op_name", "name"), LONG_INPUTS)
def test_an_index_like_input_of_4_million_elements_costs_no_more_than_its_reservation(
    op_name: str, name: str
) -> None:
    op = OPS[op_name]
    arrays, attributes = first_example(op)
    arrays[name] = long_input(op, name, arrays.get(name))
    item = op.input_for(name)
    assert item is not None
    spied = Spied(op)
    job_op = dataclasses.replace(op, plan=spied)
    outcome, peak = traced(lambda: make_job(job_op, arrays, attributes, LIMITS))
    if item.limit:
        # Refused on its shape, before the plan, naming the input and the limit.
        assert isinstance(outcome, ServiceError), f"{op_name}.{name} at {LONG} was planned"
        [problem] = outcome.problems
        assert problem.loc == ("body", name)
        expected = Fault.SPEC_VIOLATION if item.limit == LIMIT_SCALAR else Fault.TOO_LARGE
        assert problem.kind is expected
        if item.limit == LIMIT_SCALAR:
            assert problem.msg.startswith(f"{name} must be a scalar"), problem.msg
            assert problem.msg.endswith(f", got {LONG} elements (shape ({LONG},))"), problem.msg
        else:
            most = {LIMIT_RANK: LIMITS.max_rank, LIMIT_OUTPUTS: MAX_OUTPUTS}[item.limit]
            assert problem.msg.startswith(
                f"{name} has {LONG} elements (shape ({LONG},)); it holds at most {most}: "
            ), problem.msg
        assert spied.calls == 0
        assert peak < MiB, f"{peak / MiB:.1f} MiB held refusing {op_name}.{name}"
        return
    # A tensor counted as a tensor: its plan may read every element, within the workspace the
    # op declares (reserved with the output), and so may its kernel.
    if isinstance(outcome, ServiceError):
        assert peak <= SLACK, f"{op_name}.{name}: {peak / MiB:.1f} MiB held before refusing"
        return
    assert peak <= outcome.workspace_bytes + SLACK, (
        f"{op_name}.{name}: the plan held {peak / MiB:.1f} MiB, "
        f"{outcome.workspace_bytes / MiB:.1f} MiB declared"
    )
    job = outcome
    outputs, peak = traced(job.outputs)
    assert not isinstance(outputs, ServiceError)
    assert peak <= job.output_bytes + job.workspace_bytes + SLACK, (
        f"{op_name}.{name}: the kernel held {peak / MiB:.1f} MiB, "
        f"{(job.output_bytes + job.workspace_bytes) / MiB:.1f} MiB output and workspace"
    )
    assert [output.shape for output in outputs] == list(job.output_shapes)


@pytest.mark.parametrize("value", [2**31, -(2**31)])
@pytest.mark.parametrize(("op_name", "name"), INTEGER_ATTRIBUTES)
def test_an_integer_attribute_at_2_to_31_is_refused_naming_it(
    op_name: str, name: str, value: int
) -> None:
    op = OPS[op_name]
    declared = op.attribute(name)
    assert declared is not None
    arrays, attributes = first_example(op)
    spied = Spied(op)
    job_op = dataclasses.replace(op, plan=spied)
    outcome, peak = traced(lambda: make_job(job_op, arrays, {**attributes, name: value}, LIMITS))
    assert isinstance(outcome, ServiceError), f"{op_name} planned {name} = {value}"
    [problem] = outcome.problems
    assert problem.loc == ("body", name)
    assert name in problem.msg and str(value) in problem.msg, problem.msg
    assert peak < MiB
    if declared.limit and value > 0:
        # A count above its limit: refused before the plan, 413.
        assert problem.kind is Fault.TOO_LARGE
        assert spied.calls == 0
        assert problem.msg == (
            f"{name} = {value} is above the limit of {MAX_OUTPUTS}: one an output, and a "
            f"request makes at most {MAX_OUTPUTS} outputs"
        )


def test_every_count_attribute_and_length_input_declares_its_limit() -> None:
    """The ops whose plans make a list or a shape per element or count declare it: an input
    whose declared rank is 1 and whose elements are one a dimension, an output or a value."""
    declared: dict[tuple[str, str], str] = {}
    for op in REGISTRY.values():
        for item in op.inputs:
            declared[op.name, item.name] = item.limit
        for attribute in op.attributes:
            declared[op.name, attribute.name] = attribute.limit
    # The ops this issue found building first (each a figure of issue 42) declare theirs.
    assert declared[("split", "num_splits")] == LIMIT_OUTPUTS
    assert declared[("variadic_split", "split_lengths")] == LIMIT_OUTPUTS
    assert declared[("tile", "repeats")] == LIMIT_RANK
    for name in ("start", "stop", "step", "axes"):
        assert declared[("slice", name)] == LIMIT_RANK
    # Every input of rank "0" is a single value, and declared so.
    for op in OPS.values():
        for item in op.inputs:
            if item.rank == "0":
                assert item.limit == LIMIT_SCALAR, (op.name, item.name)


def test_split_of_an_empty_tensor_into_2_to_23_pieces_is_refused_before_any_piece() -> None:
    """Issue 42, 1: data of shape [0, 2**23], num_splits 2**23 grew the worker 650 MiB before
    the 1,024-output limit refused it; it is now refused on the attribute, nothing made."""
    op = REGISTRY["split"]
    data = np.zeros((0, 2**23), np.float32)
    for count in (2**23, 2**27):
        outcome, peak = traced(
            lambda count=count: make_job(
                op, {"data": data, "axis": np.array(1)}, {"num_splits": count}, LIMITS
            )
        )
        assert isinstance(outcome, ServiceError)
        [problem] = outcome.problems
        assert (problem.kind, problem.loc) == (Fault.TOO_LARGE, ("body", "num_splits"))
        assert problem.msg.startswith(f"num_splits = {count} is above the limit of 1024")
        assert peak < MiB


@pytest.mark.anyio
@pytest.mark.parametrize("compressed", [True, False])
async def test_a_small_body_that_decodes_large_is_decoded_and_planned_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch, compressed: bool
) -> None:
    """Issue 42, 2: a plan runs where its request is decoded, and a small body was decoded on
    the event loop whatever it inflated to: an 8 MiB tensor deflated to a few KiB is now
    decoded (and planned) in a thread; a small body that decodes small stays inline."""
    offloaded: list[str] = []
    original = threads.run_sized

    async def spied(offload: bool, function: Any, *args: Any) -> Any:
        if offload:
            offloaded.append(getattr(function, "__name__", ""))
        return await original(offload, function, *args)

    monkeypatch.setattr(run, "run_sized", spied)
    size = 8 * MiB if compressed else 1024
    data = np.zeros(size, np.uint8)
    body = npz_bytes(compressed, data=data, shift=np.array([1]), axes=np.array([0]))
    settings = Settings()
    assert len(body) < settings.offload_bytes  # a small body either way
    app = create_app(settings)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t"
    ) as client:
        response = await client.post(
            "/roll", content=body, headers={"content-type": "application/x-npz"}
        )
    assert response.status_code == 200, response.text
    assert np.load(io.BytesIO(response.content)).shape == (size,)
    assert ("decode" in offloaded) is compressed, offloaded


# ------------------------------------------------------------------------------------------------
# Red team of the limits themselves: their edges, odd shapes, and what a refusal quotes

LIMITED_INPUTS = [(spec, item.name) for spec, op in OPS.items() for item in op.inputs if item.limit]


@pytest.mark.parametrize(("op_name", "name"), LIMITED_INPUTS)
@pytest.mark.parametrize(
    "shape",
    [(0, 2**20), (1,) * 32, (2**20, 0), (LIMITS.max_rank + 1,)],
    ids=["empty-wide", "rank-32-of-one", "empty-tall", "one-past-the-rank-limit"],
)
def test_a_limited_input_of_an_odd_shape_is_refused_naming_it_or_planned_cheaply(
    op_name: str, name: str, shape: tuple[int, ...]
) -> None:
    """An empty tensor of long sides has no elements to pass a limit, and a tensor of 32 sides
    of one has a single one: the plan then reads the shape, and must refuse it (a 4xx naming
    the input) within a MiB; one element past the rank limit is refused before the plan."""
    op = OPS[op_name]
    arrays, attributes = first_example(op)
    given = arrays.get(name)
    arrays[name] = np.zeros(shape, np.int64 if given is None else given.dtype)
    outcome, peak = traced(lambda: make_job(op, arrays, attributes, LIMITS))
    assert peak < MiB, f"{peak / MiB:.1f} MiB"
    if isinstance(outcome, ServiceError):
        [problem] = outcome.problems
        assert 400 <= problem.kind.status < 500
        assert problem.loc[-1] in {item.name for item in op.inputs}, problem.loc
        if shape != (1,) * 32:
            assert problem.loc == ("body", name), (problem.loc, problem.msg)
    else:
        # Only a single value of a scalar input, or an empty pad of rank-0 data, plans.
        assert arrays[name].size <= 1


@pytest.mark.parametrize("count", [MAX_OUTPUTS, MAX_OUTPUTS + 1])
def test_the_output_limit_s_edge_for_split_and_variadic_split(count: int) -> None:
    """1,024 outputs are made; 1,025 are refused before the plan, by the attribute or the
    lengths' count, as the same 413."""
    data = np.arange(count * 2, dtype=np.int16)
    split = REGISTRY["split"]
    variadic = REGISTRY["variadic_split"]
    attempts = [
        (split, {"data": data, "axis": np.array(0)}, {"num_splits": count}, "num_splits"),
        (
            variadic,
            {"data": data, "axis": np.array(0), "split_lengths": np.full(count, 2)},
            {},
            "split_lengths",
        ),
    ]
    for op, arrays, attributes, field in attempts:
        spied = Spied(op)
        outcome, _ = traced(
            lambda op=op, arrays=arrays, attributes=attributes, spied=spied: make_job(
                dataclasses.replace(op, plan=spied), arrays, attributes, LIMITS
            )
        )
        if count <= MAX_OUTPUTS:
            assert not isinstance(outcome, ServiceError), outcome
            assert len(outcome.outputs()) == count
            assert [part.tolist() for part in outcome.outputs()[:2]] == [[0, 1], [2, 3]]
        else:
            assert isinstance(outcome, ServiceError)
            [problem] = outcome.problems
            assert (problem.kind, problem.loc) == (Fault.TOO_LARGE, ("body", field))
            assert spied.calls == 0


@pytest.mark.parametrize(
    ("value", "told"),
    [
        ("re\u2028flect", '"re\\u2028flect"'),
        ("\x85\x9b\x1b[2J", '"\\u0085\\u009b\\u001b[2J"'),
        ("x" * 100, "another string"),
        (10**400, "an integer"),
        (True, "a boolean"),
        (None, "null"),
        ([1], "a list"),
    ],
    ids=["line-separator", "c1-controls", "long", "huge-integer", "boolean", "null", "list"],
)
def test_an_enumerated_attribute_s_refusal_quotes_what_was_given_safely(
    value: Any, told: str
) -> None:
    """What a refusal quotes of a client's value is short and escaped: no control, no line
    separator (U+2028 and C1 controls had reached the answer and the log raw), no 400-digit
    integer (Python refuses to print one of more than 4,300 digits)."""
    declared = REGISTRY["pad"].attribute("pad_mode")
    assert declared is not None
    message = declared.refusal(value)
    assert message == f'must be one of "constant", "edge", "reflect", "symmetric"; got {told}'
    assert all(char.isprintable() for char in message)


async def _json_refusal(body: dict[str, Any], route: str) -> tuple[int, dict[str, Any]]:
    app = create_app(Settings())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t"
    ) as client:
        response = await client.post(route, json=body)
    [problem] = response.json()["detail"]
    return response.status_code, problem


@pytest.mark.anyio
async def test_a_string_for_an_integer_attribute_still_says_to_send_the_number() -> None:
    """The advice the JSON route gives an integer attribute sent as a string stays; only the
    enumerated attributes lost it."""
    status, problem = await _json_refusal({"data": [1, 2], "axis": 0, "num_splits": "2"}, "/split")
    assert status == 422
    assert problem["loc"] == ["body", "num_splits"]
    assert problem["msg"] == '"2" is a string; num_splits is an integer: send the number 2'
