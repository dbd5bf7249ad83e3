"""The heads of ``ModelInfer`` messages kept after their checks passed (``app/grpc/heads.py``):
a message whose head is known answers as one checked in full, every op and example of the
registry; a head that differs in any byte it is checked by is checked afresh; a refusal is
never kept; the cache stays within its bounds."""

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from app.errors import Fault, ServiceError
from app.grpc.exchange import GrpcExchange
from app.grpc.heads import (
    LARGEST_HEAD,
    MOST_LAYOUTS,
    MOST_TENSORS,
    Head,
    HeadCache,
    HeadKey,
)
from app.pipeline.jobs import Limits
from app.registry import REGISTRY, every_version
from app.settings import Settings
from tensor_ops_client._grpc import infer_request
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tensor_ops_wire.grpc_v2.framing import RAW_INPUT_FIELD, RAW_OUTPUT_FIELD, join_raw, split_raw
from tests.transports.test_every_op import EXAMPLES, IDS, example_arrays

LIMITS = Limits.of(Settings())
Array = npt.NDArray[Any]
#: What a message came to: the answer's bytes, or the refusal's problems (kind, place, words).
Outcome = bytes | list[tuple[Fault, tuple[str | int, ...], str]]


def outcome(message: bytes, heads: HeadCache, limits: Limits = LIMITS) -> Outcome:
    """A message through the exchange as the pipeline drives it (no shared memory)."""
    exchange = GrpcExchange(heads=heads)
    exchange.prepare(message)
    try:
        job = exchange.decode(limits)
    except ServiceError as error:
        return [(item.kind, tuple(item.loc), item.msg) for item in error.problems]
    return bytes(exchange.encode(job).buffers[0])


class CountedHeads(HeadCache):
    """A cache that counts the heads it found."""

    def __init__(self) -> None:
        super().__init__()
        self.found = 0

    def get(self, key: HeadKey) -> Head | None:
        head = super().get(key)
        self.found += head is not None
        return head


def unkept() -> HeadCache:
    """A cache that keeps nothing: every message checked in full."""
    return HeadCache(most=0)


def message(
    arrays: Mapping[str, Any],
    datatypes: Mapping[str, str] | None = None,
    shapes: Mapping[str, list[int]] | None = None,
    model: str = "roll",
    **fields: Any,
) -> bytes:
    """A roll's ModelInferRequest with raw contents; ``datatypes`` and ``shapes`` override
    what the arrays say (the same bytes declared otherwise)."""
    request = pb.ModelInferRequest(model_name=model, **fields)
    for name, array in arrays.items():
        datatype = (datatypes or {}).get(name, "FP32" if array.dtype == np.float32 else "INT64")
        shape = (shapes or {}).get(name, list(array.shape))
        request.inputs.add(name=name, datatype=datatype, shape=shape)
    raw = [np.ascontiguousarray(array).view(np.uint8).reshape(-1) for array in arrays.values()]
    return join_raw(request.SerializeToString(), RAW_INPUT_FIELD, raw)


def output(answer: Outcome) -> Array:
    assert isinstance(answer, bytes), answer
    head, raw = split_raw(answer, RAW_OUTPUT_FIELD)
    tensor = pb.ModelInferResponse.FromString(head).outputs[0]
    dtype = {"FP32": np.float32, "INT32": np.int32, "INT64": np.int64}[tensor.datatype]
    return np.frombuffer(raw[0], dtype).reshape(tuple(tensor.shape))


DATA = np.arange(6, dtype=np.float32).reshape(2, 3)
ROLL = {"data": DATA, "shift": np.array([1]), "axes": np.array([1])}


def warm() -> CountedHeads:
    """A cache holding the head of ``ROLL``'s message."""
    heads = CountedHeads()
    first = outcome(message(ROLL), heads)
    np.testing.assert_array_equal(output(first), np.roll(DATA, 1, axis=1))
    assert len(heads.entries) == 1
    return heads


@pytest.mark.parametrize(("op_name", "version", "example_name"), EXAMPLES, ids=IDS)
def test_a_known_head_answers_as_a_message_checked_in_full(
    op_name: str, version: int, example_name: str
) -> None:
    op = next(item for item in every_version() if (item.name, item.version) == (op_name, version))
    arrays, attributes = example_arrays(op, op.examples[example_name]["value"])
    sent = infer_request(op_name, arrays, attributes, version=str(version))
    heads = CountedHeads()
    checked = outcome(sent, unkept())
    assert isinstance(checked, bytes), checked  # every example is answered
    assert outcome(sent, heads) == checked  # its head kept
    assert (len(heads.entries), heads.found) == (1, 0)
    assert outcome(sent, heads) == checked  # and found, its layout kept
    assert (len(heads.entries), heads.found, heads.layout_count) == (1, 1, 1)
    assert outcome(sent, heads) == checked  # found by its layout, unparsed
    assert (len(heads.entries), heads.found, heads.layout_count) == (1, 2, 1)


def test_every_op_is_covered_by_an_example() -> None:
    assert {name for name, _, _ in EXAMPLES} == set(REGISTRY)


def test_the_values_of_a_known_head_are_read_from_each_message() -> None:
    heads = warm()
    for shift, axes in ((2, 1), (-1, 0), (1, 0)):
        data = np.arange(6, 12, dtype=np.float32).reshape(2, 3) * shift
        arrays = {"data": data, "shift": np.array([shift]), "axes": np.array([axes])}
        answer = outcome(message(arrays), heads)
        np.testing.assert_array_equal(output(answer), np.roll(data, shift, axis=axes))
    assert (len(heads.entries), heads.found) == (1, 3)  # one head, found each time
    assert heads.layout_count == 1  # the last two by their layout


def test_a_layout_is_only_the_bytes_it_was_seen_with() -> None:
    heads = warm()
    outcome(message(ROLL), heads)  # found: its layout kept
    assert heads.layout_count == 1
    # Other bytes outside the raw contents: parsed, and answered as checked
    # in full (the key still finds the head; no second layout of that head and length).
    for variant in (
        message(ROLL, model="r0ll"),
        message(ROLL, id="a"),
        message(ROLL, shapes={"data": [3, 2]}),
        message({**ROLL, "axes": np.array([1], np.int32)}, datatypes={"axes": "INT64"}),
    ):
        assert outcome(variant, heads) == outcome(variant, unkept())
    assert heads.layout_count <= 3
    # Other limits, shared memory on or off: the layout is not used.
    tight = replace(LIMITS, max_dimension=2)
    assert outcome(message(ROLL), heads, tight) == outcome(message(ROLL), unkept(), tight)


def test_a_layout_whose_head_was_dropped_is_checked_in_full() -> None:
    heads = HeadCache(most=1)
    for _ in range(2):
        outcome(message(ROLL), heads)  # kept, then found: its layout kept
    assert heads.layout_count == 1
    outcome(tagged("other"), heads)  # ROLL's head dropped
    assert message(ROLL) not in (key[0] for key in heads.entries)
    answer = outcome(message(ROLL), heads)
    np.testing.assert_array_equal(output(answer), np.roll(DATA, 1, axis=1))
    assert answer == outcome(message(ROLL), unkept())


def test_layouts_are_bounded() -> None:
    heads = HeadCache()
    for number in range(2 * MOST_LAYOUTS):
        for _ in range(2):
            outcome(tagged(f"{number:04d}"), heads)
        assert heads.layout_count <= MOST_LAYOUTS
    heads.clear()
    assert (heads.layout_count, heads.layouts) == (0, {})


@pytest.mark.parametrize(
    ("variant", "different"),
    [
        # The same bytes declared as another shape or type: another answer, not the kept one.
        (message(ROLL, shapes={"data": [3, 2]}), "the data's shape"),
        (message(ROLL, datatypes={"data": "INT32"}), "the data's type"),
        # What the checks refuse, after the head of ROLL was kept.
        (message({**ROLL, "axis": ROLL["axes"]}), "an input the op does not take"),
        (message({"data": DATA, "shift": ROLL["shift"]}), "an input missing"),
        (message(ROLL, shapes={"data": [2, -3]}), "a negative dimension"),
        (message(ROLL, datatypes={"shift": "FP32"}), "a shift of floats"),
        (message(ROLL, model="gather"), "another model"),
        (message(ROLL, model_version="1"), "a version not served"),
        (message(ROLL, parameters={"tag": pb.InferParameter(string_param="a")}), "a parameter"),
        (
            message(ROLL, outputs=[pb.ModelInferRequest.InferRequestedOutputTensor(name="out")]),
            "an output",
        ),
        (
            message(ROLL, shapes={"data": [2, 3, *[1] * 70]}),
            "a rank past the limit",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_a_head_that_differs_is_checked_afresh(variant: bytes, different: str) -> None:
    assert variant != message(ROLL), different
    heads = warm()
    assert outcome(variant, heads) == outcome(variant, unkept())
    assert heads.found == 0


def test_parameters_are_part_of_the_head() -> None:
    request = pb.ModelInferRequest()
    request.ParseFromString(split_raw(message(ROLL), RAW_INPUT_FIELD)[0])
    raws = split_raw(message(ROLL), RAW_INPUT_FIELD)[1]
    for name, value in (("binary_data_output", False), ("binary_data_output", 1), ("mode", 2)):
        variant = pb.ModelInferRequest()
        variant.CopyFrom(request)
        if isinstance(value, bool):
            variant.parameters[name].bool_param = value
        else:
            variant.parameters[name].int64_param = value
        sent = join_raw(variant.SerializeToString(), RAW_INPUT_FIELD, raws)
        assert outcome(sent, warm()) == outcome(sent, unkept())
    typed = outcome(
        join_raw(
            _with_bool(request, "binary_data_output", False).SerializeToString(),
            RAW_INPUT_FIELD,
            raws,
        ),
        warm(),
    )
    # Asked for typed contents: the answer carries them, not raw contents.
    assert isinstance(typed, bytes)
    assert not pb.ModelInferResponse.FromString(typed).raw_output_contents
    assert list(pb.ModelInferResponse.FromString(typed).outputs[0].contents.fp32_contents) == [
        2.0, 0.0, 1.0, 5.0, 3.0, 4.0,
    ]  # fmt: skip


def _with_bool(request: Any, name: str, value: bool) -> Any:
    variant = pb.ModelInferRequest()
    variant.CopyFrom(request)
    variant.parameters[name].bool_param = value
    return variant


def test_the_limits_are_part_of_the_key() -> None:
    heads = warm()
    tight = replace(LIMITS, max_dimension=2)
    refused = outcome(message(ROLL), heads, tight)
    assert refused == [
        (
            Fault.TOO_LARGE,
            ("body", "data"),
            "data has a dimension of 3, above the limit of 2 (raise it with "
            "TENSOR_OPS_MAX_DIMENSION)",
        )
    ]
    assert outcome(message(ROLL), unkept(), tight) == refused


def test_a_count_of_raw_entries_that_differs_is_refused_as_before() -> None:
    head, raws = split_raw(message(ROLL), RAW_INPUT_FIELD)
    extra = join_raw(head, RAW_INPUT_FIELD, [*raws, raws[0]])
    refused = outcome(extra, warm())
    assert refused == outcome(extra, unkept())
    assert isinstance(refused, list)
    ((kind, loc, words),) = refused
    assert (kind, loc) == (Fault.TENSOR_DECODE, ("body", "raw_input_contents"))
    assert words.startswith("raw_input_contents has 4 entries for 3 inputs")


@pytest.mark.parametrize(
    "refused",
    [
        # The values: a raw entry of the wrong length, an axis out of range (make_job's).
        message({**ROLL, "data": DATA[:, :2]}, shapes={"data": [2, 3]}),
        message({**ROLL, "axes": np.array([5])}),
        # The head: an unknown output, axes of rank 3 (the spec takes a scalar or 1D).
        message(ROLL, outputs=[pb.ModelInferRequest.InferRequestedOutputTensor(name="nope")]),
        message({**ROLL, "axes": np.array([1])}, shapes={"axes": [1, 1, 1]}),
    ],
)
def test_a_refusal_is_never_kept(refused: bytes) -> None:
    heads = HeadCache()
    first = outcome(refused, heads)
    assert not isinstance(first, bytes), first
    assert not heads.entries
    assert outcome(refused, heads) == first  # refused again, checked again
    assert not heads.entries


def test_typed_contents_are_values_and_are_not_kept() -> None:
    request = pb.ModelInferRequest(model_name="roll")
    for name, values in (("data", [1.5, 2.5, 3.5]), ("shift", [1]), ("axes", [0])):
        tensor = request.inputs.add(
            name=name, datatype="FP32" if name == "data" else "INT64", shape=[len(values)]
        )
        if name == "data":
            tensor.contents.fp32_contents.extend(values)
        else:
            tensor.contents.int64_contents.extend(values)  # type: ignore[arg-type]
    heads = HeadCache()
    answer = outcome(request.SerializeToString(), heads)
    np.testing.assert_array_equal(output(answer), np.array([3.5, 1.5, 2.5], np.float32))
    assert not heads.entries


def tagged(tag: str, **fields: Any) -> bytes:
    """ROLL's message with a parameter of the client's own (ignored by the service): a head of
    its own."""
    return message(ROLL, parameters={"tag": pb.InferParameter(string_param=tag)}, **fields)


def test_the_id_is_not_part_of_the_head() -> None:
    heads = warm()
    for number in range(3):
        answer = outcome(message(ROLL, id=f"call-{number}"), heads)
        assert answer == outcome(message(ROLL, id=f"call-{number}"), unkept())
        answered = pb.ModelInferResponse.FromString(split_raw(answer, RAW_OUTPUT_FIELD)[0])
        assert answered.id == f"call-{number}"  # its own id, sent back
    assert (len(heads.entries), heads.found) == (1, 3)


def test_the_cache_keeps_the_most_recent_heads_within_its_count() -> None:
    heads = HeadCache(most=3)
    for number in range(10):
        answer = outcome(tagged(f"call-{number}"), heads)
        np.testing.assert_array_equal(output(answer), np.roll(DATA, 1, axis=1))
    assert len(heads.entries) == 3
    kept = [
        pb.ModelInferRequest.FromString(key[0]).parameters["tag"].string_param
        for key in heads.entries
    ]
    assert kept == ["call-7", "call-8", "call-9"]
    assert heads.held_bytes == sum(HeadCache.cost(key) for key in heads.entries)


def test_the_cache_keeps_within_its_bytes() -> None:
    one = HeadCache()
    outcome(tagged("0"), one)  # as long as each below
    (key,) = one.entries
    heads = HeadCache(most_bytes=2 * HeadCache.cost(key) + 10)
    for number in range(6):
        outcome(tagged(f"{number}"), heads)
        assert heads.held_bytes <= heads.most_bytes
    assert len(heads.entries) == 2


def test_a_large_head_or_one_of_many_outputs_is_not_kept() -> None:
    heads = HeadCache()
    answer = outcome(tagged("x" * (LARGEST_HEAD + 1)), heads)
    np.testing.assert_array_equal(output(answer), np.roll(DATA, 1, axis=1))
    many = [pb.ModelInferRequest.InferRequestedOutputTensor(name="output")] * (MOST_TENSORS + 1)
    answer = outcome(message(ROLL, outputs=many), heads)
    np.testing.assert_array_equal(output(answer), np.roll(DATA, 1, axis=1))
    assert not heads.entries


@pytest.mark.parametrize(
    "sent",
    [
        message({**ROLL, "data": DATA[:, :2]}, shapes={"data": [2, 3]}),  # 16 bytes for 24
        message({**ROLL, "axes": np.array([5])}),  # out of data's rank: make_job's
        message({**ROLL, "shift": np.array([2**40])}),  # answered: the net shift is 1
    ],
    ids=["raw-length", "axes-out-of-range", "large-shift"],
)
def test_the_values_of_a_known_head_are_checked_each_call(sent: bytes) -> None:
    heads = warm()
    assert outcome(sent, heads) == outcome(sent, unkept())
    assert heads.found == 1  # its head was found: the values' checks ran on it
