"""Verdicts as the client gives them (``Verdict``), and the verify request of each transport.

- ``"json"``: ``POST /verify/{op}`` with a JSON body: the op's own request (each input a base64
  ``.npy``, the attributes as fields), ``outputs`` (each candidate ``{"data": base64 .npy,
  "dtype": NAME}``) and ``tolerance``;
- every other transport (``"npz"``, ``"v2"``, ``"grpc"``, shared memory): ``POST /verify/{op}``
  with a case file as the body (``tensor_ops_wire.cases``: raw bytes, no base64), over the
  service's HTTP port. A verdict is no tensor: V2 and gRPC have no message for it (see
  docs/verify.md).
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy.typing as npt

from tensor_ops_client._errors import TensorOpsError
from tensor_ops_client._http import HttpRequest, data_type
from tensor_ops_wire.cases import case_pieces
from tensor_ops_wire.dtypes import BFLOAT16, UnknownDTypeError, element_type_of
from tensor_ops_wire.npy import npy_base64_pieces
from tensor_ops_wire.npz import Pieces

JSON_TYPE = "application/json"
NPZ_TYPE = "application/x-npz"


@dataclass(frozen=True)
class OutputVerdict:
    """The verdict on one output: ``equal``, shape and type agreement, elements compared,
    mismatches and the first few of them, and for floating types ``max_ulp``,
    ``nan_payload_only`` and ``signed_zero_only`` (None for other types)."""

    name: str
    equal: bool
    shape_equal: bool
    dtype_equal: bool
    expected_shape: tuple[int, ...] | None
    expected_dtype: str | None
    compared: int
    mismatches: int
    first: tuple[dict[str, Any], ...]
    max_ulp: int | None
    nan_payload_only: int | None
    signed_zero_only: int | None
    #: Why it is not equal, in words (None when it is).
    why: str | None
    raw: Mapping[str, Any]

    @classmethod
    def of(cls, item: Mapping[str, Any]) -> "OutputVerdict":
        shape = item.get("expected_shape")
        return cls(
            name=str(item["name"]),
            equal=bool(item["equal"]),
            shape_equal=bool(item["shape_equal"]),
            dtype_equal=bool(item["dtype_equal"]),
            expected_shape=None if shape is None else tuple(shape),
            expected_dtype=item.get("expected_dtype"),
            compared=int(item["compared"]),
            mismatches=int(item["mismatches"]),
            first=tuple(item.get("first", ())),
            max_ulp=item.get("max_ulp"),
            nan_payload_only=item.get("nan_payload_only"),
            signed_zero_only=item.get("signed_zero_only"),
            why=item.get("why"),
            raw=item,
        )


@dataclass(frozen=True)
class Verdict:
    """Whether a candidate's outputs are the op's: ``equal``, ``outputs`` (one
    ``OutputVerdict`` per output name), ``rule`` (the comparison applied) and ``as_dict()``
    (the JSON form the service sends)."""

    equal: bool
    rule: Mapping[str, Any]
    outputs: tuple[OutputVerdict, ...]
    raw: Mapping[str, Any]

    @classmethod
    def of(cls, verdict: Mapping[str, Any]) -> "Verdict":
        """A verdict from its JSON form (``compare()``'s result, or the service's answer)."""
        try:
            return cls(
                equal=bool(verdict["equal"]),
                rule=dict(verdict["rule"]),
                outputs=tuple(OutputVerdict.of(item) for item in verdict["outputs"]),
                raw=verdict,
            )
        except (KeyError, TypeError, ValueError) as error:
            raise TensorOpsError(0, f"the service's verdict cannot be read: {error!r}") from None

    def as_dict(self) -> dict[str, Any]:
        """The verdict's JSON form (docs/verify.md)."""
        return json.loads(json.dumps(self.raw))  # type: ignore[no-any-return]

    def __getitem__(self, name: str) -> OutputVerdict:
        """The verdict on the output called ``name``."""
        for output in self.outputs:
            if output.name == name:
                return output
        raise KeyError(name)


def read_verdict(body: bytes | bytearray) -> Verdict:
    """The verdict in a 200 answer's body."""
    try:
        payload = json.loads(bytes(body))
    except ValueError as error:
        raise TensorOpsError(0, f"the service's verdict is not JSON: {error}") from None
    if not isinstance(payload, dict):
        raise TensorOpsError(0, "the service's verdict is not a JSON object")
    return Verdict.of(payload)


def _type_name(array: npt.NDArray[Any]) -> str | None:
    try:
        return element_type_of(array.dtype).numpy
    except UnknownDTypeError:
        return None


def verify_request(
    op: str,
    inputs: Mapping[str, npt.NDArray[Any]],
    outputs: Mapping[str, npt.NDArray[Any]],
    attributes: Mapping[str, Any],
    tolerance: Mapping[str, Any] | None,
    transport: str,
    version: str | None = None,
) -> HttpRequest:
    """The ``POST /verify/{op}`` of one verify call over ``transport``."""
    if transport != "json":
        pieces = case_pieces(op, inputs, outputs, attributes, tolerance, version=version)
        headers = {"content-type": NPZ_TYPE, "accept": JSON_TYPE}
        return HttpRequest("POST", f"/verify/{op}", pieces, headers)
    # Base64 needs no escaping in a JSON string: the encoded files go in as they are, and the
    # body is sent as its parts (a join or a concatenation would be a copy of the whole).
    parts: list[bytes | memoryview] = [b"{"]
    for name, tensor in inputs.items():
        parts += [_key(name), b'"', *npy_base64_pieces(tensor), b'",']
    for name, value in attributes.items():
        parts += [_key(name), json.dumps(value).encode(), b","]
    # The type source may be named other than data (Transpose's arg, Concat's data_0): any
    # bfloat16 input says so, or its 2-byte .npy would be read as uint16.
    if data_type(inputs) == BFLOAT16:
        parts.append(b'"dtype":"bfloat16",')
    parts.append(b'"outputs":{')
    for number, (name, tensor) in enumerate(outputs.items()):
        dtype = _type_name(tensor)
        typed = b"" if dtype is None else b',"dtype":' + json.dumps(dtype).encode()
        comma = b"," if number else b""
        parts += [comma, _key(name), b'{"data":"', *npy_base64_pieces(tensor), b'"', typed, b"}"]
    parts.append(b"}")
    if tolerance is not None:
        parts.append(b',"tolerance":' + json.dumps(dict(tolerance)).encode())
    if version is not None:
        parts.append(b',"version":' + json.dumps(version).encode())
    parts.append(b"}")
    headers = {"content-type": JSON_TYPE, "accept": JSON_TYPE}
    return HttpRequest("POST", f"/verify/{op}", Pieces(parts), headers)


def _key(name: str) -> bytes:
    return json.dumps(name).encode() + b":"
