"""The op routes (``POST /roll``, ``POST /gather``...): JSON bodies and raw ``.npz`` bodies.

Adapters only: where the inputs and attributes are, what decoding and encoding cost, how the
answer is written. The request's life is the pipeline's.

Long (some 520 lines) because both body forms' adapters share the Accept negotiation, the
query's attributes and the OpenAPI description they are declared with.
"""

import re
from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import ValidationError

from app.codecs.json_body import JsonBody, split_json_body
from app.codecs.json_tensors import (
    NPZ_ANSWER_FACTOR,
    Form,
    check_json_text_size,
    decode_data,
    decode_index,
    decode_inferred,
    decode_like,
    encode_output,
    encode_outputs,
    json_encoding_bytes,
    settle_npy_type,
)
from app.errors import (
    Fault,
    ServiceError,
    from_validation,
    from_wire,
    near_miss,
    quote,
    refuse_unknown_fields,
)
from app.http.errors import ErrorBody, render_detail
from app.http.json_hints import explain_refusal, variadic_refusal
from app.http.responses import serve_http
from app.http.routes import Endpoint, OpRoute
from app.http.schemas import OutputsResponse, TensorResponse, request_fields, request_model
from app.ops.declaration import BOOL, INTS, JSON_INFERRED, AttributeRefusedError
from app.pipeline.jobs import Job, Limits, make_job
from app.pipeline.run import Answer, Body, Exchange, Pipeline
from app.registry import REGISTRY, Attribute, Op, attribute_names, every_version
from tensor_ops_wire.dtypes import UnknownDTypeError, dtype_from_name
from tensor_ops_wire.errors import TensorError
from tensor_ops_wire.npy import npy_buffer
from tensor_ops_wire.npz import decode_npz, inflated_size

JSON_TYPE = "application/json"
NPY_TYPE = "application/x-npy"
NPZ_TYPE = "application/x-npz"


def single_header(request: Request, name: str) -> str | None:
    """The value of a header that frames the body (``name`` lower-case), None when absent;
    given twice, refused: which one counts is not guessed (as two Content-Length lines)."""
    values = request.headers.getlist(name)
    if len(values) > 1:
        raise ServiceError(
            Fault.BAD_HEADER,
            ("header", name),
            f"the header {name} is given {len(values)} times; give it once",
        )
    return values[0] if values else None


def media_type(request: Request) -> str:
    """The request's media type, lower-cased, without parameters ('' when absent)."""
    return (single_header(request, "content-type") or "").split(";", 1)[0].strip().lower()


_QVALUE = re.compile(r"(?:0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?)")


def _accept_ranges(header: str) -> list[tuple[str, str, float]]:
    """The media ranges of an Accept header (RFC 9110, 12.5.1) as (type, subtype, weight),
    lower-cased; a malformed range, or one with a malformed weight, is left out."""
    ranges = []
    for part in header.split(","):
        media, *parameters = part.split(";")
        media = media.strip().lower()
        if media == "*":
            media = "*/*"  # what some clients (Java's URLConnection) send for */*
        kind, slash, subtype = media.partition("/")
        if not (slash and kind and subtype) or "/" in subtype or (kind == "*" != subtype):
            continue
        weight = _weight(parameters)
        if weight is not None:
            ranges.append((kind, subtype, weight))
    return ranges


def _weight(parameters: list[str]) -> float | None:
    # The first q= is the weight (what follows it are accept extensions); None when malformed.
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "q":
            value = value.strip()
            return float(value) if _QVALUE.fullmatch(value) else None
    return 1.0


def _preference(ranges: list[tuple[str, str, float]], media: str) -> tuple[float, int]:
    """The weight the client gives ``media``, from its most specific matching range (0 when none
    matches: not acceptable), and how specific that range is (2 exact, 1 type/*, 0 */*)."""
    kind, _, subtype = media.partition("/")
    best: tuple[float, int] = (0.0, -1)
    for range_kind, range_subtype, weight in ranges:
        if range_kind == kind and range_subtype == subtype:
            specificity = 2
        elif range_kind == kind and range_subtype == "*":
            specificity = 1
        elif range_kind == "*":
            specificity = 0
        else:
            continue
        if specificity > best[1] or (specificity == best[1] and weight > best[0]):
            best = (weight, specificity)
    return best


def wants_npy(request: Request) -> bool:
    """True when the Accept header prefers the raw ``.npy`` of the output to JSON.

    The header is negotiated as RFC 9110 says: media ranges with ``q`` weights, ``*/*`` and
    ``type/*``, case-insensitive, the most specific range deciding each type's weight, ``q=0``
    meaning not acceptable; malformed ranges are ignored. ``.npy`` is answered when its weight
    is above JSON's, or equal to it from a more specific range (``application/x-npy, */*``);
    otherwise, on a true tie, with no Accept header or with ``*/*``, JSON, the request's own form.
    A client that accepts neither (``Accept: text/html``) still gets JSON rather than a 406: the
    answer's form is the request's, and a 406 would only hide the result or the error it needs.
    """
    # Several Accept lines are one list, as if joined by commas (RFC 9110, 5.3).
    accepts = request.headers.getlist("accept")
    if not accepts:
        return False
    header = ", ".join(accepts)
    if not header:
        return False
    ranges = _accept_ranges(header)
    npy_weight, npy_specificity = _preference(ranges, NPY_TYPE)
    json_weight, json_specificity = _preference(ranges, JSON_TYPE)
    if npy_weight != json_weight:
        return npy_weight > json_weight
    return npy_weight > 0 and npy_specificity > json_specificity


class JsonExchange:
    """A JSON body: tensors as nested arrays or base64 ``.npy``, attributes as fields."""

    def __init__(self, op: Op, raw_npy: bool) -> None:
        self.op = op
        self.raw_npy = raw_npy
        self.form = Form.JSON
        self.json: JsonBody | None = None
        self.text_bytes = 0

    def prepare(self, body: Body) -> int:
        self.json = split_json_body(body)
        return self.json.parsing_bytes()

    def decode(self, limits: Limits) -> Job:
        assert self.json is not None
        payload = self.json.parse()
        op = self.op
        variadic = op.variadic
        numbered: dict[str, Any] = {}
        if variadic is not None and isinstance(payload, dict):
            # data_0, data_1, ...: as many as sent, checked here rather than by the model.
            numbered = {key: payload[key] for key in payload if op.input_for(key) is variadic}
            payload = {key: value for key, value in payload.items() if key not in numbered}
        try:
            # The model's core validator, not model_validate (whose wrapper costs 5 us more).
            model_type = request_model(op)
            refuse_unknown_fields(payload, request_fields(op))
            model = model_type.__pydantic_validator__.validate_python(payload)
            fields = dict(model.__dict__)
        except ValidationError as error:
            raise explain_refusal(from_validation(error), op, payload) from None
        except ServiceError as error:
            raise explain_refusal(error, op, payload) from None
        if op.data_then_indices:
            # Roll, Gather: data, then index inputs (the short way of every small request).
            data, self.form = decode_data(fields["data"], fields["dtype"])
            arrays = {"data": data}
            for item in op.inputs[1:]:
                arrays[item.name] = decode_index(fields[item.name], item.name)
        else:
            arrays = self._decode_inputs(fields, numbered)
        attributes = {
            item.name: tuple(fields[item.name]) if item.kind == INTS else fields[item.name]
            for item in op.attributes
        }
        job = make_job(op, arrays, attributes, limits)
        if self.form is Form.JSON and not self.raw_npy:
            self.text_bytes = check_json_text_size(
                _answer_shape(job), job.sizing_dtype, limits.max_output_bytes
            )
        return job

    def _decode_inputs(self, fields: dict[str, Any], numbered: dict[str, Any]) -> dict[str, Any]:
        """Every input sent, decoded as its declaration says: the output's type source first
        (its form is the answer's), typed by ``dtype``; the other value inputs in JSON form
        typed as it is (Pad's ``pad_value`` 0 is data's zero), index inputs as int64."""
        op = self.op
        sent = {name: value for name, value in fields.items() if value is not None}
        sent.update(numbered)
        missing = op.missing_input(sent)
        if missing is not None:
            raise ServiceError(
                Fault.MISSING_INPUT,
                ("body", missing),
                f"missing input {missing!r}; {op.name} takes {op.input_words}",
            )
        source = op.output_type_from
        try:
            primary, self.form = decode_data(sent[source], fields["dtype"])
        except ServiceError as error:
            raise _variadic_named(error, op, source) from None
        arrays: dict[str, Any] = {}
        for name, value in _ordered(op, sent):
            item = op.input_for(name)
            if item is None or name in ("dtype",) or op.attribute(name) is not None:
                continue
            if name == source:
                arrays[name] = primary
            elif item.like_data:
                try:
                    arrays[name] = decode_like(value, name, primary.dtype, fields["dtype"])
                except ServiceError as error:
                    raise _variadic_named(error, op, name) from None
            elif item.json_typing == JSON_INFERRED:
                arrays[name] = decode_inferred(value, name)
            else:
                arrays[name] = decode_index(value, name)
        return arrays

    def encoding_bytes(self, job: Job) -> int:
        if self.raw_npy and job.split is not None:
            return NPZ_ANSWER_FACTOR * job.output_bytes
        if self.raw_npy:
            return 2 * job.output_bytes
        if self.form is Form.NPY:
            return 4 * job.output_bytes  # the output, its .npy, the base64, the JSON text
        return json_encoding_bytes(_answer_shape(job), job.sizing_dtype, self.text_bytes)

    def encode(self, job: Job) -> Answer:
        if job.split is not None:
            buffers, media = encode_outputs(job.output_names, job.outputs, self.form, self.raw_npy)
        else:
            buffers, media = encode_output(
                job.output_shape, job.output_dtype, job.output, self.form, self.raw_npy
            )
        return Answer(buffers, media)


def _variadic_named(error: ServiceError, op: Op, name: str) -> ServiceError:
    """A variadic input's refusal at its own field, with how the op's inputs are sent."""
    item = op.input_for(name)
    return variadic_refusal(error, op, name) if item is not None and item.variadic else error


def _answer_shape(job: Job) -> tuple[int, ...]:
    """The shape a JSON answer's text is sized by: the output's, or every output's elements in
    a row for an op of several."""
    return (job.output_count,) if job.split is not None else job.output_shape


def _ordered(op: Op, sent: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The inputs sent, in the op's order (a variadic input's by their number)."""

    def key(name: str) -> tuple[int, int]:
        item = op.input_for(name)
        position = op.inputs.index(item) if item is not None else len(op.inputs)
        number = name.rpartition("_")[2] if item is not None and item.variadic else "0"
        return position, int(number)

    return sorted(sent.items(), key=lambda pair: key(pair[0]))


class NpzExchange:
    """An ``.npz`` archive of the inputs; attributes and ``dtype`` in the query."""

    def __init__(self, op: Op, query: Mapping[str, str], max_body_bytes: int) -> None:
        self.op = op
        self.max_bytes = max_body_bytes
        self.attributes = {
            item.name: _query_attribute(query, item.name, op) for item in op.attributes
        }
        for name in attribute_names().difference(self.attributes).intersection(query):
            raise ServiceError(Fault.UNKNOWN_INPUT, ("query", name), f"{op.name} has no {name}")
        taken = ("dtype", *self.attributes)
        for name in query:
            if name not in taken:
                # Refused as the JSON body's unknown field is: a misspelt attribute ignored
                # would run the op with its default (?batchdims=1 as batch_dims 0).
                raise ServiceError(Fault.UNKNOWN_INPUT, ("query", name), _unknown_query(op, name))
        self.dtype = None
        if "dtype" in query:
            try:
                self.dtype = dtype_from_name(query["dtype"])
            except UnknownDTypeError as error:
                raise ServiceError(Fault.TENSOR_TYPE, ("query", "dtype"), str(error)) from None
        self.body: Body = b""

    def prepare(self, body: Body) -> int:
        self.body = body
        # Stored members are read in place; compressed ones cost what they inflate to.
        try:
            return inflated_size(body, self.op.input_names)
        except TensorError as error:
            raise from_wire(error, None) from None

    def decode(self, limits: Limits) -> Job:
        op = self.op
        try:
            arrays = decode_npz(
                self.body,
                _required_names(op),
                max_bytes=self.max_bytes,
                optional=tuple(item.name for item in op.inputs if item.optional),
                variadic=None if op.variadic is None else op.variadic.name,
            )
        except TensorError as error:
            raise from_wire(error, None) from None
        for name in arrays:
            if op.input_for(name) is None:  # data_01, data_5000: numbered, but no input's name
                raise ServiceError(
                    Fault.UNKNOWN_INPUT,
                    ("body", name),
                    f".npz member {quote(name)} is not an input; {op.name} takes {op.input_words}",
                )
        missing = op.missing_input(arrays)
        if missing is not None:
            raise ServiceError(
                Fault.MISSING_INPUT, ("body", missing), f".npz archive has no member {missing!r}"
            )
        source = op.output_type_from
        for name in arrays:
            item = op.input_for(name)
            if name == source or (item is not None and item.like_data and self.dtype is not None):
                try:
                    arrays[name] = settle_npy_type(arrays[name], self.dtype)
                except TensorError as error:
                    raise from_wire(error, name) from None
        return make_job(op, arrays, self.attributes, limits)

    def encoding_bytes(self, job: Job) -> int:
        return (NPZ_ANSWER_FACTOR if job.split is not None else 2) * job.output_bytes

    def encode(self, job: Job) -> Answer:
        if job.split is not None:
            buffers, media = encode_outputs(job.output_names, job.outputs, Form.JSON, raw_npy=True)
            return Answer(buffers, media)
        buffer, target = npy_buffer(job.output_shape, job.output_dtype)
        job.output(target)
        return Answer([buffer], NPY_TYPE)


def _required_names(op: Op) -> tuple[str, ...]:
    """The members every ``.npz`` of ``op`` holds (a variadic input's are counted apart)."""
    return tuple(item.name for item in op.inputs if not item.optional and not item.variadic)


def _query_attribute(query: Mapping[str, str], name: str, op: Op) -> Any:
    """An attribute from the query: an integer, or one of an enumeration's strings; its
    default when absent; a required one missing refused."""
    item = op.attribute(name)
    assert item is not None
    text = query.get(name)
    if text is None:
        if item.default is None:
            raise ServiceError(
                Fault.MISSING_INPUT,
                ("query", name),
                f"missing query parameter {name}: {op.name} requires it ({item.kind_words})",
            )
        return item.default
    try:
        return item.from_text(text)
    except AttributeRefusedError as refusal:
        raise ServiceError(Fault.INVALID_FIELD, ("query", name), f"{name} {refusal}") from None


def _unknown_query(op: Op, name: str) -> str:
    """Why query parameter ``name`` is refused on ``op``'s route: what the query takes, and the
    nearest of it."""
    taken = ", ".join(("dtype", *(item.name for item in op.attributes)))
    said = f"{op.name} takes no query parameter {quote(name)}; its query takes {taken}"
    near = near_miss(name, ("dtype", *(item.name for item in op.attributes)))
    return f'{said}; did you mean "{near}"?' if near else said


def exchange_for_media(op: Op, kind: str) -> Exchange:
    """The adapter of a JSON body with no query, or the 415 of a type the routes do not take
    (what /docs shows)."""
    if kind in (JSON_TYPE, ""):
        return JsonExchange(op, raw_npy=False)
    raise _unsupported(kind)


def _unsupported(kind: str) -> ServiceError:
    return ServiceError(
        Fault.UNSUPPORTED_MEDIA_TYPE,
        ("header", "content-type"),
        f"content type {quote(kind)} is not accepted here; send {JSON_TYPE} or {NPZ_TYPE}",
    )


def exchange_for(op: Op, request: Request, max_body_bytes: int) -> Exchange:
    """The adapter for the request's content type; 415 for a type the op routes do not take."""
    kind = media_type(request)
    # The query parameters an op route reads (.npz bodies): only looked for in a query.
    names = ("dtype", *sorted(attribute_names())) if request.scope["query_string"] else ()
    if kind == NPZ_TYPE:
        query = request.query_params
        for name in names:
            if len(query.getlist(name)) > 1:
                # Which value counts is not guessed, as an input given twice is refused.
                raise ServiceError(
                    Fault.INVALID_FIELD,
                    ("query", name),
                    f"{name} is given more than once in the query; give it once",
                )
        return NpzExchange(op, query, max_body_bytes)
    if kind in (JSON_TYPE, ""):
        for name in names:
            if name in request.query_params:
                raise ServiceError(
                    Fault.UNKNOWN_INPUT,
                    ("query", name),
                    f"the query parameter {name} is for .npz bodies; in a JSON body it is a field",
                )
        return JsonExchange(op, wants_npy(request))
    raise _unsupported(kind)


def _responses(op: Op) -> dict[int | str, dict[str, Any]]:
    binary = {"schema": {"type": "string", "format": "binary"}}
    answer: dict[str, Any] = (
        {
            "model": OutputsResponse,
            "description": "The outputs: JSON for a JSON request, an .npz archive of "
            "output_0.npy, output_1.npy, ... for an .npz request (or `Accept: "
            "application/x-npy`)",
            "content": {NPZ_TYPE: binary},
        }
        if op.several_outputs
        else {
            "model": TensorResponse,
            "description": "The output tensor: JSON for a JSON request (or its raw .npy with "
            "`Accept: application/x-npy`), raw .npy for an .npz request",
            "content": {NPY_TYPE: binary},
        }
    )
    return {
        200: answer,
        400: {"model": ErrorBody, "description": "The body cannot be decoded"},
        413: {"model": ErrorBody, "description": "The body or the output is over a size limit"},
        415: {"model": ErrorBody, "description": "A content type the route does not take"},
        422: {"model": ErrorBody, "description": "The request breaks the spec or the types"},
        503: {"model": ErrorBody, "description": "The memory budget is busy; retry later"},
    }


def _query_parameter(op: Op, item: Attribute) -> dict[str, Any]:
    """The OpenAPI description of an attribute as an ``.npz`` body's query parameter."""
    schema: dict[str, Any]
    if item.is_string:
        schema = {"type": "string", "enum": list(item.choices)}
    elif item.kind == BOOL:
        schema = {"type": "boolean"}
    elif item.kind == INTS:
        schema = {"type": "string", "pattern": "^(-?[0-9]{1,19}(,-?[0-9]{1,19})*)?$"}
    else:
        schema = {"type": "integer", "format": "int64"}
    if item.default is None:
        said = "required"
    else:
        said = f"default {item.shown(item.default)}"
        schema["default"] = item.shown(item.default) if item.kind == INTS else item.default
    return {
        "name": item.name,
        "in": "query",
        "required": False,
        "description": f"With an .npz body: {op.spec}'s {item.name} ({said}).",
        "schema": schema,
    }


def _openapi_extra(op: Op) -> dict[str, Any]:
    members = ", ".join(
        f"`{item.name}_0.npy`, `{item.name}_1.npy`, ..."
        if item.variadic
        else f"`{item.name}.npy`" + (" (optional)" if item.optional else "")
        for item in op.inputs
    )
    parameters: list[dict[str, Any]] = [_query_parameter(op, item) for item in op.attributes]
    parameters.append(
        {
            "name": "dtype",
            "in": "query",
            "required": False,
            "description": "With an .npz body: `bfloat16` to read 2-byte `data` as bfloat16.",
            "schema": {"type": "string", "enum": ["bfloat16", "bf16", "BF16"]},
        }
    )
    examples = {
        name: {"summary": example["summary"], "value": example["value"]}
        for name, example in op.examples.items()
    }
    return {
        "parameters": parameters,
        "requestBody": {
            "required": True,
            "content": {
                JSON_TYPE: {
                    "schema": {"$ref": f"#/components/schemas/{request_model(op).__name__}"},
                    "examples": examples,
                },
                NPZ_TYPE: {
                    "schema": {
                        "type": "string",
                        "format": "binary",
                        "description": f"An .npz archive (np.savez) with members {members}.",
                    }
                },
            },
        },
    }


def op_endpoints(pipeline: Pipeline) -> dict[str, Endpoint]:
    """The endpoint of each op's ``POST /<op>`` route, by path."""
    max_body_bytes = pipeline.settings.max_body_bytes

    def endpoint(op: Op) -> Endpoint:
        async def route(request: Request) -> Response:
            return await serve_http(
                pipeline, request, lambda: exchange_for(op, request, max_body_bytes), render_detail
            )

        route.__doc__ = op.description
        return route

    return {path: endpoint(op) for op in every_version() for path in op_paths(op)}


def op_paths(op: Op) -> tuple[str, ...]:
    """The routes of one version of an op: ``/<op>/v<N>``, and ``/<op>`` for the newest."""
    versioned = f"/{op.name}/v{op.version}"
    newest = REGISTRY.get(op.name)
    return (f"/{op.name}", versioned) if newest is op else (versioned,)


def add_op_routes(router: APIRouter, endpoints: Mapping[str, Endpoint]) -> None:
    """A ``POST /<op>`` route for every op of the registry, and ``POST /<op>/v<N>`` for each of
    its versions, on the app's own router (an included router's routes are matched twice)."""
    for op in every_version():
        for path in op_paths(op):
            _add_op_route(router, op, path, endpoints[path])


def _add_op_route(router: APIRouter, op: Op, path: str, endpoint: Endpoint) -> None:
    versioned = path != f"/{op.name}"
    router.add_api_route(
        path,
        endpoint,
        methods=["POST"],
        name=f"{op.name}_v{op.version}" if versioned else op.name,
        summary=op.summary,
        description=op.description,
        responses=_responses(op),
        openapi_extra=_openapi_extra(op),
        route_class_override=OpRoute,
        tags=["ops"],
    )
