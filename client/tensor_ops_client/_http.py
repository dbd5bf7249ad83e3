"""The HTTP transports' requests and answers, with no I/O: what the sync and async clients send
(``HttpRequest``) and how they read what comes back (``read_output``, ``failure``).

- ``"npz"``: an ``.npz`` body to ``POST /{op}`` (``/roll``, ``/gather``), the attributes in the
  query; the output back as raw ``.npy``.
- ``"json"``: the same routes, each tensor a base64 ``.npy`` string in a JSON body and each
  attribute a field of it; the output back as raw ``.npy`` (``Accept: application/x-npy``).
- ``"v2"``: KServe V2 ``POST /v2/models/{op}/infer`` with Triton's binary tensor extension:
  a JSON head (its length in ``Inference-Header-Content-Length``; the attributes are its
  ``parameters``) and each tensor's raw little-endian bytes after it; the output back the same
  way.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import numpy as np
import numpy.typing as npt

from tensor_ops_client._errors import TensorOpsError
from tensor_ops_client._raw import fits, raw_input, raw_output, seconds
from tensor_ops_wire.dtypes import BFLOAT16, dtype_from_name
from tensor_ops_wire.errors import FAULT_STATUS, TensorError
from tensor_ops_wire.npy import decode_npy, npy_base64_pieces
from tensor_ops_wire.npz import Pieces, decode_npz, npz_pieces
from tensor_ops_wire.ops import AttributeValue, parameter_value, query_text

HEADER_LENGTH = "inference-header-content-length"
FAULT_HEADER = "tensor-ops-fault"
FIELD_HEADER = "tensor-ops-field"
REQUEST_ID_HEADER = "x-request-id"
#: Statuses after which the same call may be made again: the service's memory is busy or it
#: is shutting down (503), or a proxy in front of it found no replica that answered (502, 504).
RETRYABLE_STATUSES = frozenset({502, 503, 504})
#: Where in the request a fault is, as the first element of an error's ``loc``: left out of
#: ``field`` (``["body", "axes"]`` is the field ``axes``).
_PLACES = frozenset({"body", "header", "query"})


@dataclass
class HttpRequest:
    """One HTTP call: what httpx's ``stream()`` takes, and the element type of ``data``."""

    method: str
    url: str
    #: The body: bytes, or pieces sent one after the other (an archive's arrays in place).
    body: bytes | Pieces | None = None
    headers: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    #: How the answer's body becomes the result: "npy", "v2" or "json".
    answer: str = "json"
    data_dtype: np.dtype[Any] | None = None

    @property
    def content(self) -> bytes | None:
        """The body in one piece."""
        return None if self.body is None else bytes(self.body)


def op_request(
    op: str,
    arrays: Mapping[str, npt.ArrayLike],
    attributes: Mapping[str, AttributeValue],
    transport: str,
    version: str | None = None,
) -> HttpRequest:
    """The request of one op call over ``transport`` (``"npz"``, ``"json"`` or ``"v2"``): each
    input a tensor of its name, each attribute an integer where the transport carries them (the
    query of ``npz``, the JSON body's fields, the V2 request's parameters), whatever the op.

    A ``data`` input of bfloat16 is said so (``dtype=bfloat16``), and the output read as
    bfloat16: the service's ops give the element type of ``data``.
    """
    tensors = {name: np.asarray(value) for name, value in arrays.items()}
    data_dtype = data_type(tensors)
    bfloat16 = data_dtype == BFLOAT16
    if transport == "v2":
        binary, head_length = _v2_body(op, tensors, attributes)
        return HttpRequest(
            "POST",
            infer_path(op, version),
            binary,
            {"content-type": "application/octet-stream", HEADER_LENGTH: str(head_length)},
            answer="v2",
            data_dtype=data_dtype,
        )
    content: bytes | Pieces
    if transport == "npz":
        params: dict[str, Any] = {name: query_text(value) for name, value in attributes.items()}
        if bfloat16:
            params["dtype"] = "bfloat16"
        headers = {"content-type": "application/x-npz", "accept": "application/x-npy"}
        content = npz_pieces(tensors)
    else:
        headers = {"content-type": "application/json", "accept": "application/x-npy"}
        content = _json_body(tensors, attributes, bfloat16)
        params = {}
    path = f"/{op}" if version is None else f"/{op}/v{version}"
    return HttpRequest("POST", path, content, headers, params, answer="npy", data_dtype=data_dtype)


def infer_path(op: str, version: str | None) -> str:
    """The V2 infer route of ``op``, at ``version`` when one is given (else the newest)."""
    model = quote(op, safe="")
    if version is None:
        return f"/v2/models/{model}/infer"
    return f"/v2/models/{model}/versions/{quote(version, safe='')}/infer"


def data_type(tensors: Mapping[str, npt.NDArray[Any]]) -> np.dtype[Any] | None:
    """The element type the outputs of a call will have: bfloat16 when an input is (the ops
    give the type of their value inputs), else that of ``data`` (None when there is none)."""
    for tensor in tensors.values():
        if tensor.dtype == BFLOAT16:
            return tensor.dtype
    data = tensors.get("data")
    return None if data is None else data.dtype


def _json_body(
    tensors: Mapping[str, npt.NDArray[Any]],
    attributes: Mapping[str, AttributeValue],
    bfloat16: bool,
) -> Pieces:
    """The JSON request with every tensor as a base64 ``.npy`` string, then the attributes.

    The base64 alphabet (A-Z a-z 0-9 + / =) needs no escaping in a JSON string, so the encoded
    files go in as they are, with no JSON encoder passing over them (the standard library's
    takes half a second on a 64 MiB tensor), and the body is sent as its parts, not joined.
    """
    parts: list[bytes | memoryview] = []
    for name, tensor in tensors.items():
        parts += [b",", json.dumps(name).encode(), b':"', *npy_base64_pieces(tensor), b'"']
    for name, value in attributes.items():
        parts += [b",", json.dumps(name).encode(), b":", json.dumps(value).encode()]
    if bfloat16:
        parts.append(b',"dtype":"bfloat16"')
    if not parts:
        return Pieces([b"{}"])
    parts[0] = b"{"  # the first member's comma
    parts.append(b"}")
    return Pieces(parts)


def _v2_body(
    op: str, tensors: Mapping[str, npt.NDArray[Any]], attributes: Mapping[str, AttributeValue]
) -> tuple[Pieces, int]:
    """A V2 binary request: the JSON head, then each tensor's little-endian C-order bytes (the
    tensor's own memory where it is laid out so)."""
    inputs = []
    raw: list[npt.NDArray[Any]] = []
    for name, tensor in tensors.items():
        element, contents = raw_input(name, tensor)
        raw.append(contents)
        inputs.append(
            {
                "name": name,
                "shape": list(tensor.shape),
                "datatype": element.kserve,
                "parameters": {"binary_data_size": contents.nbytes},
            }
        )
    head: dict[str, Any] = {
        "inputs": inputs,
        "parameters": {"binary_data_output": True},
    }
    head["parameters"].update((name, parameter_value(value)) for name, value in attributes.items())
    head_bytes = json.dumps(head, separators=(",", ":")).encode()
    return Pieces([head_bytes, *(part.data for part in raw)]), len(head_bytes)


def read_output(request: HttpRequest, body: bytearray, headers: Mapping[str, str]) -> Any:
    """The output of a 200 answer (the list of them, in order, for an op of several outputs);
    an answer that cannot be read is ``TensorOpsError`` 0."""
    several = True
    try:
        if request.answer == "v2":
            outputs, several = _v2_outputs(body, headers)
        elif headers.get("content-type", "").startswith("application/x-npz"):
            outputs = list(decode_npz_outputs(body).values())
        else:
            outputs, several = [decode_npy(body)], False
    except (TensorError, ValueError) as error:
        raise TensorOpsError(0, f"the service's answer cannot be read: {error}") from None
    # The ops keep the element type of data; bfloat16 comes back as 2-byte elements (.npy).
    if request.data_dtype == BFLOAT16:
        outputs = [item if item.dtype == BFLOAT16 else item.view(BFLOAT16) for item in outputs]
    return outputs if several else outputs[0]


def decode_npz_outputs(body: bytearray | bytes) -> dict[str, npt.NDArray[Any]]:
    """The outputs of an ``.npz`` answer (``output_0.npy``, ``output_1.npy``...), in order."""
    members = decode_npz(body, (), max_bytes=len(body) * 2 + (1 << 20), variadic="output")
    return dict(sorted(members.items(), key=lambda item: int(item[0].rpartition("_")[2])))


def _v2_outputs(body: bytearray, headers: Mapping[str, str]) -> tuple[list[npt.NDArray[Any]], bool]:
    """The outputs of a V2 binary answer, and whether the op has several (``output_0``...)."""
    length_text = headers.get(HEADER_LENGTH)
    if length_text is None or not length_text.isascii() or not length_text.isdigit():
        raise ValueError(f"no valid {HEADER_LENGTH} header ({length_text!r:.40})")
    length = int(length_text)
    if length > len(body):
        raise ValueError(f"a head of {length} bytes in a body of {len(body)}")
    head = json.loads(bytes(body[:length]))
    outputs = head.get("outputs") if isinstance(head, dict) else None
    if not isinstance(outputs, list) or not outputs:
        raise ValueError("no outputs")
    arrays = []
    offset = length
    for output in outputs:
        if not isinstance(output, dict):
            raise ValueError("an output that is not an object")
        dtype = dtype_from_name(str(output.get("datatype")))
        shape = tuple(int(size) for size in output.get("shape", ()))
        parameters = output.get("parameters") or {}
        size = parameters.get("binary_data_size", len(body) - offset)
        if not isinstance(size, int) or not fits(size, dtype, shape) or offset + size > len(body):
            raise ValueError(f"{size} bytes for shape {list(shape)[:64]} of {dtype}")
        arrays.append(raw_output(memoryview(body)[offset : offset + size], dtype, shape))
        offset += size
    if offset != len(body):
        raise ValueError(f"{len(body) - offset} bytes after the outputs")
    return arrays, not (len(outputs) == 1 and outputs[0].get("name") == "output")


def failure(status: int, body: bytes, headers: Mapping[str, str]) -> TensorOpsError:
    """A refusal as ``TensorOpsError``, from any of the service's error shapes (or a proxy's)."""
    retry_after = seconds(headers.get("retry-after"))
    request_id = headers.get(REQUEST_ID_HEADER)
    kind = headers.get(FAULT_HEADER)
    field_name = headers.get(FIELD_HEADER) or None
    detail: Any = None
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested beyond reason
        message = body[:500].decode("utf-8", "replace") or "no message"
    else:
        detail = payload
        items = payload.get("detail") if isinstance(payload, dict) else None
        if isinstance(items, list) and items and isinstance(items[0], dict):
            messages = []
            for item in items:
                where = ".".join(str(part) for part in item.get("loc", []) if part not in _PLACES)
                messages.append(f"{where}: {item.get('msg')}" if where else str(item.get("msg")))
            message = "; ".join(messages)
            detail = items
            first = items[0]
            kind = kind or (str(first["type"]) if "type" in first else None)
            loc = [str(part) for part in first.get("loc", []) if part not in _PLACES]
            field_name = ".".join(loc) or None
        elif isinstance(payload, dict) and "error" in payload:
            message = str(payload["error"])
        else:
            message = str(items if items is not None else payload)
    if kind is not None and kind not in FAULT_STATUS:
        kind = None  # not one of the service's kinds (a framework's or a proxy's type)
    return TensorOpsError(
        status,
        message,
        detail,
        kind=kind,
        field=field_name,
        request_id=request_id,
        retry_after=retry_after,
        retryable=status in RETRYABLE_STATUSES,
    )
