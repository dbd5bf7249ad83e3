"""One ``/v2`` infer request through the request pipeline (``V2Exchange``): a JSON body, or a JSON
header then the binary tensors it sizes (Triton's binary data extension), its inputs decoded and
its answer written as JSON or binary, each step's memory counted."""

from collections.abc import Mapping
from typing import Any

import orjson
from fastapi import Request
from pydantic import ValidationError

from app.codecs.json_body import JsonBody, split_json_body
from app.codecs.json_tensors import (
    check_json_text_size,
    json_encoding_bytes,
    require_json_can_carry,
)
from app.codecs.v2_tensors import (
    decode_v2_binary,
    decode_v2_json,
    v2_datatype,
    v2_json_data,
    v2_output_buffer,
    wire_dtype,
)
from app.errors import Fault, ServiceError, from_validation, from_wire, quote
from app.http.op_routes import JSON_TYPE, media_type, single_header
from app.http.shared_memory import http_answer, request_owner
from app.pipeline.jobs import Job, Limits, make_job
from app.pipeline.run import Answer, Body
from app.registry import Op
from app.v2.messages import (
    InferenceRequest,
    RequestInput,
)
from app.v2.rules import (
    INPUT_EXTENSIONS,
    OUTPUT_EXTENSIONS,
    PARAMETER_FAULT,
    json_kind,
    model_version,
    op_attributes,
    read_inputs,
    refuse_extensions,
    requested_outputs,
    wants_binary,
)
from app.v2.shared_memory import (
    INPUT_EXTENSIONS_ON,
    OUTPUT_EXTENSIONS_ON,
    Regions,
    SharedTensors,
    decoded_checked,
    new_request,
)
from tensor_ops_wire.errors import TensorError

HEADER_LENGTH = "inference-header-content-length"
_LENGTH_DIGITS = 19
BINARY_TYPE = "application/octet-stream"
#: What the V2 routes read: JSON, or JSON then binary tensors (tritonclient sends no type).
_READABLE = (JSON_TYPE, BINARY_TYPE, "")


class V2Exchange:
    """One infer request: a JSON body, or a JSON header then the binary tensors it sizes."""

    def __init__(
        self, op: Op, header_length: str | None, shared: SharedTensors | None = None
    ) -> None:
        # A byte count in ASCII digits; past 19 of them it passes any body (and int() refuses
        # 4300 of them), so it is refused before int() sees it.
        if header_length is not None and not (
            header_length.isascii()
            and header_length.isdigit()
            and len(header_length.lstrip("0")) <= _LENGTH_DIGITS
        ):
            raise ServiceError(
                Fault.BAD_HEADER,
                ("header", HEADER_LENGTH),
                f"Inference-Header-Content-Length {quote(header_length)} does not fit the body: "
                "it is not a byte count of at most 19 digits",
            )
        self.op = op
        self.header_length = None if header_length is None else int(header_length)
        self.head: Body = b""
        self.binary = memoryview(b"")
        self.request: InferenceRequest | None = None
        self.binary_output = False
        self.text_bytes = 0
        self.json: JsonBody | None = None
        #: Tensors in shared memory (None: the extension is off).
        self.shared = shared
        self.shared_output = False
        #: The outputs the request names, of an op of several (None: all of them).
        self.requested: frozenset[str] | None = None

    def prepare(self, body: Body) -> int:
        if self.header_length is None:
            self.head = body
        else:
            if self.header_length > len(body):
                raise ServiceError(
                    Fault.BAD_HEADER,
                    ("header", HEADER_LENGTH),
                    f"Inference-Header-Content-Length {self.header_length} does not fit the body "
                    f"of {len(body)} bytes",
                )
            view = memoryview(body)
            self.head = view[: self.header_length].tobytes()
            self.binary = view[self.header_length :]
        # Long nested data arrays are read by NumPy; strings stay strings (names are checked
        # as text).
        self.json = split_json_body(self.head, long_strings=False)
        return self.json.parsing_bytes()

    def decode(self, limits: Limits) -> Job:
        return decoded_checked(self.shared, lambda: self._decode(limits))

    def _decode(self, limits: Limits) -> Job:
        assert self.json is not None
        try:
            payload = self.json.loads()
        except orjson.JSONDecodeError as error:
            raise ServiceError(
                Fault.JSON_INVALID, ("body",), f"request is not valid JSON: {error}"
            ) from None
        try:
            # The model's core validator, not model_validate (whose wrapper costs more).
            request = InferenceRequest.__pydantic_validator__.validate_python(payload)
        except ValidationError as error:
            raise from_validation(error) from None
        self.request = request
        arrays = self._inputs(request, limits)
        outputs = [(output.name, output.parameters or {}) for output in request.outputs or []]
        self.binary_output = wants_binary(
            request.parameters or {},
            outputs,
            default=False,
            extensions=OUTPUT_EXTENSIONS if self.shared is None else OUTPUT_EXTENSIONS_ON,
            op=self.op,
        )
        job = make_job(self.op, arrays, op_attributes(self.op, request.parameters or {}), limits)
        self.requested = requested_outputs(job, (name for name, _ in outputs))
        if self.shared is not None and self.shared.place_output(outputs, job):
            # Written into the client's region: nothing of it in the answer.
            self.shared_output = True
        elif not self.binary_output:
            # V2 JSON data is flat: the text of a 1-D array of the output's elements.
            self.text_bytes = check_json_text_size(
                (job.output_count,), job.sizing_dtype, limits.max_output_bytes
            )
        return job

    def _inputs(self, request: InferenceRequest, limits: Limits) -> dict[str, Any]:
        binary = self.binary
        offset = 0
        shared = self.shared
        extensions = INPUT_EXTENSIONS if shared is None else INPUT_EXTENSIONS_ON

        #: The size ``check`` found for the input ``decode`` reads next (read_inputs checks
        #: each input, then decodes it): its parameters checked once.
        checked: list[int | None] = [None]

        def check(item: RequestInput) -> int | None:
            checked[0] = size = _binary_data_size(item, extensions)
            return size

        def decode(index: int, item: RequestInput) -> Any:
            nonlocal offset
            size = checked[0]
            if shared is not None and item.parameters:  # a tensor in shared memory names it
                carried = "binary_data_size" if size is not None else None
                if item.data is not None:
                    carried = "data"
                array = shared.input(item.name, item.parameters, item.shape, item.datatype, carried)
                if array is not None:
                    return array
            chunk = None
            if size is not None:
                chunk = binary[offset : offset + size]
                if len(chunk) != size:
                    raise ServiceError(
                        Fault.TENSOR_DECODE,
                        ("body", item.name),
                        f"binary_data_size {size} passes the end of the body",
                    )
                offset += size
            return _decode_input(item, chunk)

        def unclaimed() -> None:
            if offset != len(binary):
                raise ServiceError(
                    Fault.TENSOR_DECODE,
                    ("body",),
                    f"the body has {len(binary) - offset} bytes of binary data no input claims",
                )

        return read_inputs(
            self.op,
            request.inputs,
            limits,
            check=check,
            decode=decode,
            finish=unclaimed,
        )

    def encoding_bytes(self, job: Job) -> int:
        # The inputs and output in shared memory are the client's: only copies count.
        copied = 0 if self.shared is None else self.shared.copied_bytes
        if self.shared_output:
            return copied
        if self.binary_output:
            return 2 * job.output_bytes + copied
        shape = (job.output_count,) if job.split is not None else job.output_shape
        return json_encoding_bytes(shape, job.sizing_dtype, self.text_bytes) + copied

    def encode(self, job: Job) -> Answer:
        # A refusal while it ran (a check the plan left to the kernel) gives way to the
        # region's own, as decoding's does; and no object of the request was cut short.
        answer = decoded_checked(self.shared, lambda: self._encode(job))
        if self.shared is not None:
            self.shared.verify()
        return answer

    def _encode(self, job: Job) -> Answer:
        assert self.request is not None
        if self.shared_output:
            assert self.shared is not None
            return http_answer(job, self.request.id, self.shared)
        buffers, headers = encode_infer(job, self.request, self.binary_output, self.requested)
        media = headers.pop("content-type")
        return Answer(buffers, media, headers)


def v2_exchange(op: Op, request: Request, regions: Regions) -> V2Exchange:
    """The adapter of one infer request, its tensors perhaps in ``regions``; 415 for a body V2
    cannot read as JSON or binary tensors."""
    kind = media_type(request)
    if kind not in _READABLE:
        raise ServiceError(
            Fault.UNSUPPORTED_MEDIA_TYPE,
            ("header", "content-type"),
            f"content type {quote(kind)} is not accepted here; send {JSON_TYPE}, or "
            f"{BINARY_TYPE} with an Inference-Header-Content-Length header",
        )
    return V2Exchange(
        op, single_header(request, HEADER_LENGTH), new_request(regions, request_owner(request))
    )


def _decode_input(item: RequestInput, chunk: memoryview | None) -> Any:
    try:
        if chunk is not None:
            if item.data is not None:
                # gRPC refuses contents beside a raw entry; which one counts is not guessed.
                raise TensorError(
                    "has both data and parameters.binary_data_size; give the tensor one way"
                )
            return decode_v2_binary(chunk, item.shape, item.datatype)
        if item.data is None:
            raise TensorError("has neither data nor parameters.binary_data_size")
        return decode_v2_json(item.data, item.shape, item.datatype)
    except TensorError as error:
        raise from_wire(error, item.name) from None


def _binary_data_size(
    item: RequestInput, extensions: Mapping[str, str] = INPUT_EXTENSIONS
) -> int | None:
    """The input's ``binary_data_size`` (None when its data is JSON), its parameters checked
    (those of ``extensions``, not served, refused)."""
    parameters = item.parameters or {}
    loc = ("body", item.name, "parameters")
    refuse_extensions(
        parameters,
        extensions,
        loc,
        "send the tensor in the request, as JSON data or as binary data (binary_data_size)",
    )
    if "binary_data_size" not in parameters:
        return None
    size = parameters["binary_data_size"]
    if isinstance(size, bool) or not isinstance(size, int):
        got = json_kind(size)
    elif size < 0:
        got = "a negative one"
    else:
        return size
    raise ServiceError(
        PARAMETER_FAULT,
        (*loc, "binary_data_size"),
        f"binary_data_size must be a non-negative integer, got {got}",
    )


def encode_infer(
    job: Job,
    request: InferenceRequest,
    binary: bool,
    requested: frozenset[str] | None = None,
) -> tuple[list[Any], dict[str, str]]:
    """The response body (buffers to send in turn) and its headers: of an op of several
    outputs, those ``requested`` (all when None)."""
    if job.split is not None:
        return _encode_several(job, request, binary, requested)
    output = job.output(v2_output_buffer(job.output_shape, job.output_dtype) if binary else None)
    tensor: dict[str, Any] = {
        "name": "output",
        "datatype": v2_datatype(output.dtype),
        "shape": list(output.shape),
    }
    response: dict[str, Any] = {"model_name": job.op.name, "model_version": model_version(job.op)}
    if request.id is not None:
        response["id"] = request.id
    response["outputs"] = [tensor]
    if not binary:
        require_json_can_carry(
            output,
            ("outputs", "output"),
            'ask for it as binary data ("outputs": [{"name": "output", "parameters": '
            '{"binary_data": true}}])',
        )
        tensor["data"] = v2_json_data(output)
        body = orjson.dumps(response, option=orjson.OPT_SERIALIZE_NUMPY)
        return [body], {"content-type": JSON_TYPE}
    tensor["parameters"] = {"binary_data_size": output.nbytes}
    head = orjson.dumps(response)
    headers = {"content-type": BINARY_TYPE, HEADER_LENGTH: str(len(head))}
    return [head, output], headers


def _encode_several(
    job: Job, request: InferenceRequest, binary: bool, requested: frozenset[str] | None
) -> tuple[list[Any], dict[str, str]]:
    """The answer of an op of several outputs (Split-1): every output in the outputs list, in
    order, as JSON data or binary data alike."""
    response: dict[str, Any] = {"model_name": job.op.name, "model_version": model_version(job.op)}
    if request.id is not None:
        response["id"] = request.id
    tensors: list[dict[str, Any]] = []
    pieces: list[Any] = []
    for name, output in zip(job.output_names, job.outputs(), strict=True):
        if requested is not None and name not in requested:
            continue
        tensor: dict[str, Any] = {
            "name": name,
            "datatype": v2_datatype(output.dtype),
            "shape": list(output.shape),
        }
        if binary:
            wire = output.astype(wire_dtype(output.dtype), copy=False)
            tensor["parameters"] = {"binary_data_size": wire.nbytes}
            pieces.append(wire)
        else:
            require_json_can_carry(
                output,
                ("outputs", name),
                'ask for the outputs as binary data ("parameters": {"binary_data_output": true})',
            )
            tensor["data"] = v2_json_data(output)
        tensors.append(tensor)
    response["outputs"] = tensors
    if not binary:
        body = orjson.dumps(response, option=orjson.OPT_SERIALIZE_NUMPY)
        return [body], {"content-type": JSON_TYPE}
    head = orjson.dumps(response)
    headers = {"content-type": BINARY_TYPE, HEADER_LENGTH: str(len(head))}
    return [head, *pieces], headers


#: The infer routes' templates: their labels in metrics and logs.
