"""``POST /verify/{op}``: a candidate's outputs judged against the op's own, on the op's pipeline.

The request is the op's request plus the candidate: a JSON body (the op's fields, ``outputs``
and ``tolerance``) or a case file as an ``.npz`` body (``tensor_ops_wire.cases``). The op's
part is decoded and checked by the op's own exchange, so a request the op refuses gets the op's
own 4xx, unchanged; the candidate is decoded beside it (its bytes are in the body, so admission
counts them as it counts the inputs'); the answer is the verdict of
``tensor_ops_wire.verdict.compare`` as JSON, computed where the op's output would be encoded.
Shape, type and element mismatches are verdicts, never errors. Everything this route needs
beyond the op routes is here: one line in app/main.py registers it.
"""

from typing import Any

import numpy.typing as npt
import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.codecs.json_body import JsonBody
from app.codecs.json_tensors import decode_data
from app.errors import ClientKey, Fault, ServiceError, from_wire, quote
from app.http.errors import ErrorBody, render_detail
from app.http.op_routes import JSON_TYPE, NPZ_TYPE, JsonExchange, media_type
from app.http.responses import serve_http
from app.ops.declaration import AttributeRefusedError
from app.pipeline.jobs import Job, Limits, make_job
from app.pipeline.run import Answer, Body, Exchange, Pipeline
from app.registry import REGISTRY, Op, version_of, versions
from tensor_ops_wire.cases import decode_case
from tensor_ops_wire.errors import TensorError
from tensor_ops_wire.npz import inflated_size
from tensor_ops_wire.verdict import (
    CHUNK_ELEMENTS,
    TOLERANCE_KEYS,
    Tolerance,
    ToleranceError,
    compare,
    parse_tolerance,
)

#: The fields a verify request's JSON body has beside the op's own.
VERIFY_FIELDS = ("outputs", "tolerance", "version")
#: A candidate output given as an object: its tensor and, optionally, its element type.
_CANDIDATE_KEYS = frozenset({"data", "dtype"})
#: Bytes a comparison holds per element of its largest chunk (the mask, the mismatches' indices
#: and their widened copies); see ``tensor_ops_wire.verdict``.
_COMPARE_BYTES_PER_ELEMENT = 64


def output_names(op: Op) -> tuple[str, ...]:
    """The names of ``op``'s outputs as its metadata lists them: ``output``, or for an op of
    several (their number set by the request) ``output_0``, ``output_1``."""
    return op.output_names


def reference_outputs(job: Job) -> dict[str, npt.NDArray[Any]]:
    """The op's outputs by name, computed: what the candidate is judged against."""
    return dict(zip(job.output_names, job.outputs(), strict=True))


def _verdict_answer(
    job: Job, candidates: dict[str, npt.NDArray[Any]], tolerance: Tolerance
) -> Answer:
    verdict = compare(reference_outputs(job), candidates, tolerance)
    return Answer([orjson.dumps(verdict)], JSON_TYPE)


def _compare_bytes(job: Job, candidates: dict[str, npt.NDArray[Any]]) -> int:
    """The reference outputs, the comparison's chunk, and any candidate that must be copied to
    be compared (not in native byte order, or not contiguous)."""
    copies = sum(
        array.nbytes
        for array in candidates.values()
        if not (array.dtype.isnative and array.flags.c_contiguous)
    )
    chunk = min(job.output_count, CHUNK_ELEMENTS) * _COMPARE_BYTES_PER_ELEMENT
    return job.output_bytes + chunk + copies


def versioned(op: Op, version: object, where: tuple[str, ...]) -> Op:
    """``op`` at ``version`` (its opset version as a string, "7"; None: the newest); a version
    the service does not serve is refused 404, naming those it does, as an unknown model
    version is."""
    if version is None:
        return op
    found = version_of(op.name, version) if isinstance(version, str) and version else None
    if found is None:
        served = ", ".join(str(number) for number in versions(op.name))
        raise ServiceError(
            Fault.NOT_FOUND,
            where,
            f"{op.name} has no version {quote(str(version))}; versions served: {served}",
        )
    return found


def _tolerance(value: object, where: tuple[str, ...]) -> Tolerance:
    try:
        return parse_tolerance(value)
    except ToleranceError as error:
        # A key of the service's stays a name; the client's own is one element however it is
        # spelled (dots and all), and never logged.
        loc = (
            *where,
            *(
                part if part == "tolerance" or part in TOLERANCE_KEYS else ClientKey(part)
                for part in error.loc
            ),
        )
        raise ServiceError(Fault.INVALID_FIELD, loc, error.message) from None


class _Envelope(JsonBody):
    """The body's JSON object without the verify fields, as the op's exchange parses it."""

    def __init__(self, payload: dict[str, Any]) -> None:
        super().__init__(b"", b"", [])
        self.payload = payload

    def parse(self) -> dict[str, Any]:
        return self.payload


class JsonVerifyExchange:
    """A JSON body: the op's request, ``outputs`` ({name: TENSOR or {"data": TENSOR, "dtype":
    NAME}}) and ``tolerance``."""

    def __init__(self, op: Op) -> None:
        self.op = op
        # Its answer is never encoded (raw_npy spares the JSON text's size check).
        self.request = JsonExchange(op, raw_npy=True)
        self.candidates: dict[str, npt.NDArray[Any]] = {}
        self.tolerance = Tolerance()

    def prepare(self, body: Body) -> int:
        # The candidate's strings are in the body: their decoding is counted with the inputs'.
        return self.request.prepare(body)

    def decode(self, limits: Limits) -> Job:
        assert self.request.json is not None
        payload = self.request.json.parse()
        present = {name: payload.pop(name) for name in VERIFY_FIELDS if name in payload}
        op = versioned(self.op, present.get("version"), ("body", "version"))
        if op is not self.op:  # another version's request: its own inputs and attributes
            self.op = op
            self.request = JsonExchange(op, raw_npy=True)
        self.request.json = _Envelope(payload)
        job = self.request.decode(limits)  # the op's own refusals, as its route gives them
        if "outputs" not in present:
            shape = ", ".join(f'"{name}": TENSOR' for name in output_names(self.op))
            raise ServiceError(
                Fault.MISSING_INPUT,
                ("body", "outputs"),
                f'the candidate\'s outputs are missing: send "outputs": {{{shape}}}',
            )
        self.candidates = _json_candidates(present["outputs"])
        self.tolerance = _tolerance(present.get("tolerance"), ("body",))
        return job

    def encoding_bytes(self, job: Job) -> int:
        return _compare_bytes(job, self.candidates)

    def encode(self, job: Job) -> Answer:
        return _verdict_answer(job, self.candidates, self.tolerance)


def _json_candidates(value: object) -> dict[str, npt.NDArray[Any]]:
    if not isinstance(value, dict):
        raise ServiceError(
            Fault.INVALID_FIELD,
            ("body", "outputs"),
            "outputs must be an object: each output's name to its TENSOR",
        )
    candidates = {}
    for name, given in value.items():
        tensor, dtype = given, None
        if isinstance(given, dict):
            unknown = sorted(set(given) - _CANDIDATE_KEYS)
            if unknown or "data" not in given:
                raise ServiceError(
                    Fault.INVALID_FIELD,
                    ("body", "outputs", ClientKey(name)),
                    'an output given as an object is {"data": TENSOR, "dtype": NAME}',
                )
            tensor, dtype = given["data"], given.get("dtype")
            if dtype is not None and not isinstance(dtype, str):
                raise ServiceError(
                    Fault.INVALID_FIELD,
                    ("body", "outputs", ClientKey(name), "dtype"),
                    "dtype is a name",
                )
        try:
            candidates[name], _ = decode_data(tensor, dtype)
        except ServiceError as error:
            for problem in error.problems:  # the candidate's place, not data's
                rest = problem.loc[1:]
                rest = rest[1:] if rest[:1] == ("data",) else rest
                problem.loc = ("body", "outputs", ClientKey(name), *rest)
            raise
    return candidates


class NpzVerifyExchange:
    """A case file as the body: ``input.<name>``, ``output.<name>`` and a ``meta`` member whose
    ``attributes``, ``tolerance`` and ``dtypes`` the request takes (its ``op``, when given,
    must be the route's)."""

    def __init__(self, op: Op, max_body_bytes: int) -> None:
        self.op = op
        self.max_bytes = max_body_bytes
        self.body: Body = b""
        self.candidates: dict[str, npt.NDArray[Any]] = {}
        self.tolerance = Tolerance()

    def prepare(self, body: Body) -> int:
        self.body = body
        # Stored members are read in place; compressed ones cost what they inflate to.
        try:
            return inflated_size(body, ())
        except TensorError as error:
            raise from_wire(error, None) from None

    def decode(self, limits: Limits) -> Job:
        try:
            case = decode_case(self.body, max_bytes=self.max_bytes)
        except TensorError as error:
            raise from_wire(error, None) from None
        op = self.op
        if case.op is not None and case.op != op.name:
            raise ServiceError(
                Fault.INVALID_FIELD,
                ("body", "meta", "op"),
                f"the case is of op {quote(case.op)}, sent to /verify/{op.name}",
            )
        op = self.op = versioned(op, case.version, ("body", "meta", "version"))
        for name in case.inputs:
            if op.input_for(name) is None:  # Concat's data_0, data_1... are its input data
                raise ServiceError(
                    Fault.UNKNOWN_INPUT,
                    ("body", f"input.{name}"),
                    f"{op.name} has no input {quote(name)}; inputs: {op.input_words}",
                )
        missing = op.missing_input(case.inputs)  # an optional input left out takes its default
        if missing is not None:
            raise ServiceError(
                Fault.MISSING_INPUT,
                ("body", f"input.{missing}"),
                f".npz archive has no member 'input.{missing}'; {op.name} takes {op.input_words}",
            )
        job = make_job(op, case.inputs, self._attributes(case.attributes), limits)
        self.candidates = case.outputs
        self.tolerance = _tolerance(case.tolerance, ("body", "meta"))
        return job

    def _attributes(self, given: dict[str, Any]) -> dict[str, Any]:
        declared = {item.name: item for item in self.op.attributes}
        for name in given:
            if name not in declared:
                raise ServiceError(
                    Fault.UNKNOWN_INPUT,
                    ("body", "meta", "attributes", name),
                    f"{self.op.name} has no attribute {quote(name)}",
                )
        attributes = {}
        for name, item in declared.items():
            where = ("body", "meta", "attributes", name)
            if name not in given:
                if item.required:
                    raise ServiceError(
                        Fault.MISSING_INPUT,
                        where,
                        f"missing attribute {name}: {self.op.name} requires it ({item.kind_words})",
                    )
                attributes[name] = item.default
                continue
            # The attribute's own rule (an int64, one of an enumeration's strings), as the op
            # routes apply it.
            try:
                attributes[name] = item.accept(given[name])
            except AttributeRefusedError as refusal:
                raise ServiceError(Fault.INVALID_FIELD, where, f"{name} {refusal}") from None
        return attributes

    def encoding_bytes(self, job: Job) -> int:
        return _compare_bytes(job, self.candidates)

    def encode(self, job: Job) -> Answer:
        return _verdict_answer(job, self.candidates, self.tolerance)


def judge_case(op_name: str, case_body: bytes, settings: Any) -> dict[str, Any]:
    """The verdict on a case file's bytes, in this process, as ``POST /verify/{op}`` gives it
        (``tensor-ops verify --local``): the same decoding, checks and comparison, without the
        service's admission (the caller holds the case already). ``op_name`` is the route's op; the
    op's refusal is raised as the
        route's ``ServiceError``; ``settings`` gives the limits."""
    op = REGISTRY.get(op_name)
    if op is None:
        raise ServiceError(
            Fault.NOT_FOUND,
            ("path", "op"),
            f"op {quote(op_name)} is not served here; ops: {', '.join(REGISTRY)}",
        )
    exchange = NpzVerifyExchange(op, settings.max_body_bytes)
    exchange.prepare(case_body)
    job = exchange.decode(Limits.of(settings))
    verdict: dict[str, Any] = compare(
        reference_outputs(job), exchange.candidates, exchange.tolerance
    )
    return verdict


def verify_exchange(op: Op, request: Request, max_body_bytes: int) -> Exchange:
    """The adapter for the request's content type; 415 for a type the route does not take."""
    kind = media_type(request)
    if kind == NPZ_TYPE:
        return NpzVerifyExchange(op, max_body_bytes)
    if kind in (JSON_TYPE, ""):
        return JsonVerifyExchange(op)
    raise ServiceError(
        Fault.UNSUPPORTED_MEDIA_TYPE,
        ("header", "content-type"),
        f"content type {quote(kind)} is not accepted here; send {JSON_TYPE} or {NPZ_TYPE}",
    )


_DESCRIPTION = (
    "Verify a candidate (what a device computed) against the op's own output. The body is "
    "the op's request plus the candidate: JSON (the op's fields, `outputs`: {name: TENSOR or "
    '{"data": TENSOR, "dtype": NAME}}, optional `tolerance`: {"ulp": N}, {"atol": x, "rtol": '
    'y}, {"nan_payload": "ignore"}, {"signed_zero": "ignore"}) or a case file as an `.npz` '
    "(members `input.<name>`, `output.<name>`, a JSON `meta`). The answer is a verdict: "
    "`equal` (bit for bit unless a tolerance is given), and per output the shape and type "
    "agreement, mismatches, the first few of them, the largest distance in ULPs. A request "
    "the op refuses is the op's own 4xx. See docs/verify.md."
)


def add_verify_routes(router: APIRouter, pipeline: Pipeline) -> None:
    """``POST /verify/{op}`` for every op of the registry."""
    max_body_bytes = pipeline.settings.max_body_bytes

    async def verify(request: Request, op: str) -> Response:
        declared = REGISTRY.get(op)
        if declared is None:
            return render_detail(
                ServiceError(
                    Fault.NOT_FOUND,
                    ("path", "op"),
                    f"op {quote(op)} is not served here; ops: {', '.join(REGISTRY)}",
                )
            )
        return await serve_http(
            pipeline,
            request,
            lambda: verify_exchange(declared, request, max_body_bytes),
            render_detail,
        )

    router.add_api_route(
        "/verify/{op}",
        verify,
        methods=["POST"],
        name="verify",
        summary="Verify a candidate's outputs against the op's",
        description=_DESCRIPTION,
        responses={
            200: {"description": "The verdict (docs/verify.md)"},
            400: {"model": ErrorBody, "description": "The body cannot be decoded"},
            404: {"model": ErrorBody, "description": "No such op"},
            413: {"model": ErrorBody, "description": "The body or the output is over a limit"},
            415: {"model": ErrorBody, "description": "A content type the route does not take"},
            422: {"model": ErrorBody, "description": "The op refuses the request"},
            503: {"model": ErrorBody, "description": "The memory budget is busy; retry later"},
        },
        openapi_extra={
            "parameters": [
                {
                    "name": "op",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "enum": list(REGISTRY)},
                }
            ],
            "requestBody": {
                "required": True,
                "content": {
                    JSON_TYPE: {"schema": {"type": "object"}},
                    NPZ_TYPE: {"schema": {"type": "string", "format": "binary"}},
                },
            },
        },
        tags=["ops"],
    )
