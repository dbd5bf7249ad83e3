"""The raw contents' splitter read against protobuf's own parser: on any bytes, both accept or
both refuse, and what the split leaves parses to what protobuf reads (fuzzed with Hypothesis
from valid requests, mutated)."""

from typing import Any

import hypothesis.strategies as st
import numpy as np
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings

from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tensor_ops_wire.grpc_v2.framing import (
    RAW_INPUT_FIELD,
    FramingError,
    join_raw,
    split_raw,
)


def valid_request(sizes: list[int], typed: bool, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    message = pb.ModelInferRequest(model_name="gather", id=f"id-{seed}")
    message.parameters["batch_dims"].int64_param = int(rng.integers(-3, 3))
    message.outputs.add(name="output").parameters["binary_data"].bool_param = True
    for index, size in enumerate(sizes):
        tensor = message.inputs.add(name=f"input{index}", datatype="FP32", shape=[size])
        values = rng.standard_normal(size).astype("<f4")
        if typed:
            tensor.contents.fp32_contents.extend(values.tolist())
        else:
            message.raw_input_contents.append(values.tobytes())
    return message.SerializeToString()


def protobuf_reads(data: bytes) -> Any:
    try:
        return pb.ModelInferRequest.FromString(data)
    except DecodeError:
        return None


def split_reads(data: bytes) -> Any:
    try:
        head, raw = split_raw(data, RAW_INPUT_FIELD)
    except FramingError:
        return None
    message = protobuf_reads(head)
    if message is not None:
        assert not message.raw_input_contents
        message.raw_input_contents.extend(bytes(piece) for piece in raw)
    return message


mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10_000), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.integers(0, 10_000), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 10_000), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(0, 10_000), st.just(0)),
)


def mutate(data: bytes, changes: list[tuple[str, int, int]]) -> bytes:
    out = bytearray(data)
    for kind, where, value in changes:
        at = where % (len(out) + 1)
        if kind == "flip" and at < len(out):
            out[at] ^= value
        elif kind == "cut":
            del out[at:]
        elif kind == "insert":
            out.insert(at, value)
        elif kind == "delete" and at < len(out):
            del out[at]
    return bytes(out)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(0, 40), min_size=0, max_size=4),
    typed=st.booleans(),
    seed=st.integers(0, 2**16),
    changes=st.lists(mutation, max_size=4),
)
def test_the_split_reads_what_protobuf_reads(
    sizes: list[int], typed: bool, seed: int, changes: list[tuple[str, int, int]]
) -> None:
    data = mutate(valid_request(sizes, typed, seed), changes)
    reference = protobuf_reads(data)
    ours = split_reads(data)
    assert (reference is None) == (ours is None), (data, reference, ours)
    if reference is not None:
        assert ours == reference


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=64))
def test_arbitrary_bytes(data: bytes) -> None:
    reference = protobuf_reads(data)
    ours = split_reads(data)
    assert (reference is None) == (ours is None), (data, reference, ours)
    if reference is not None:
        assert ours == reference


def test_join_writes_what_protobuf_writes() -> None:
    tensors = [np.arange(5, dtype="<f4").tobytes(), b"", bytes(300)]
    head = pb.ModelInferResponse(model_name="roll", id="x")
    reference = pb.ModelInferResponse(model_name="roll", id="x", raw_output_contents=tensors)
    assert join_raw(head.SerializeToString(), 6, tensors) == reference.SerializeToString()
