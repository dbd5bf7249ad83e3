"""What /docs teaches: the ops under their own tag, the ways in, and examples that are answers.

Each spec example's 200 is what the route answers to it, and each refusal's example what the
route answers to a request of that fault: both are made by the JSON route's own exchange (the
pipeline's stages, run here without a socket) when the document is first built, so they cannot
drift from the service.
"""

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import orjson
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from app.access import AccessControl
from app.codecs.v2_tensors import v2_datatype
from app.errors import ServiceError
from app.http.body import too_large
from app.http.errors import render_detail
from app.http.op_routes import JSON_TYPE, JsonExchange, exchange_for_media, op_paths
from app.http.schemas import SHARED_SCHEMAS, link_shared_schemas, request_model
from app.http.v2 import INFER_PATH
from app.http.v2_exchange import V2Exchange
from app.pipeline.admission import busy_error
from app.pipeline.jobs import Limits
from app.registry import REGISTRY, Op, every_version
from app.settings import Settings
from app.v2.messages import InferenceRequest
from tensor_ops_wire.ops import parameter_value

#: The tag of the routes that run the ops, and the order of the tags in /docs.
OPS_TAG = "ops"
TAGS = [
    {
        "name": OPS_TAG,
        "description": "The movement family's ops, `POST /<op>` for the newest version and "
        "`POST /<op>/v<N>` for each, on JSON bodies (nested arrays or base64 `.npy` tensors) or "
        "on `.npz` archives. Each input and attribute is a field of its name; a variadic input "
        "is sent as `data_0`, `data_1`, ... (Concat); the inputs of the data's type "
        "(`pad_value`, `updates`, `data_1`...) take the data's element type in JSON form; an op "
        "of several outputs (Split, VariadicSplit, Unique) answers `outputs`. `GET /info` lists "
        "every op, its inputs, attributes (kinds, defaults, allowed values) and versions.",
    },
    {
        "name": "KServe V2",
        "description": "The Open Inference Protocol under `/v2`, with Triton's binary tensors: "
        "what `tritonclient.http` speaks. The same protocol is served over gRPC.",
    },
    {"name": "service", "description": "Probes, metrics and what the service offers."},
]


def description(settings: Settings) -> str:
    """The document's description: what the service does and every way in."""
    grpc = (
        f"on port **{settings.grpc_port}** (`inference.GRPCInferenceService`, the same protocol "
        "as `/v2`; `tritonclient.grpc` speaks it)"
        if settings.grpc_port
        else "(off on this server: `TENSOR_OPS_GRPC_PORT` is 0)"
    )
    specs = [f"**{op.spec}**" for op in REGISTRY.values()]
    listed = ", ".join(specs[:-1]) + f" and {specs[-1]}" if len(specs) > 1 else specs[0]
    routes = ", ".join(f"`POST /{name}`" for name in REGISTRY)
    return f"""
Executes OpenVINO's {listed} exactly as their specifications say, in every
element type (bool, int8-64, uint8-64, float16, bfloat16, float32, float64).

**Ways in**

- {routes} with a **JSON** body: tensors as nested arrays, or as base64
  `.npy` files (a JSON string is always read as base64 `.npy`).
- The same routes with an **`.npz`** body (`Content-Type: application/x-npz`): one `.npy`
  member per input, attributes in the query; the answer is the output's raw `.npy` (an
  `.npz` of `output_0`, `output_1`, ... for an op of several outputs).
- **KServe V2** under `/v2` (JSON or binary tensors), for `tritonclient.http`.
- **gRPC** {grpc}.
- The **Python client and command line**: `pip install ./client`, then
  `TensorOpsClient(url).call("pad", {...}, {...})` or `tensor-ops pad ...` (every op a
  command).

Pick one of the specs' examples in a route's request body, then *Try it out* and *Execute*: the
200 example of the same name is the answer to expect.
"""


def teach(schema: dict[str, Any], settings: Settings, limits: Limits, budget: int) -> None:
    """Tag, describe and give examples to the OpenAPI document ``schema``, in place."""
    schema["tags"] = TAGS
    paths = schema.get("paths", {})
    for op, path in ((each, path) for each in every_version() for path in op_paths(each)):
        operation = paths.get(path, {}).get("post")
        if operation is None:
            continue
        operation["tags"] = [OPS_TAG]
        for parameter in operation.get("parameters", ()):
            if parameter.get("in") == "query":
                parameter["description"] = (
                    "**`.npz` bodies only** (in a JSON body it is a field). "
                    + parameter.get("description", "")
                )
        responses = operation.setdefault("responses", {})
        answers = {
            name: {"summary": example["summary"], "value": answer(op, example["value"], limits)}
            for name, example in op.examples.items()
        }
        _content(responses, "200")["examples"] = answers
        for status, (summary, body) in refusals(op, settings, limits, budget).items():
            examples = _content(responses, str(status)).setdefault("examples", {})
            examples[summary] = {"summary": summary, "value": body}


def answer(op: Op, value: Any, limits: Limits) -> Any:
    """The JSON route's answer to the JSON request ``value``."""
    exchange = JsonExchange(op, raw_npy=False)
    exchange.prepare(orjson.dumps(value))
    job = exchange.decode(limits)
    encoded = exchange.encode(job)
    return orjson.loads(b"".join(_pieces(encoded.buffers)))


def v2_example(op: Op, value: Any, limits: Limits) -> tuple[dict[str, Any], Any]:
    """The V2 infer request of the JSON route's request ``value`` (each input as that route
    decodes it, its attributes as parameters), and ``/v2``'s answer to it."""
    exchange = JsonExchange(op, raw_npy=False)
    exchange.prepare(orjson.dumps(value))
    job = exchange.decode(limits)
    inputs = []
    for name, array in job.arrays.items():
        flat = array.reshape(-1)
        data = flat.astype(np.float32) if v2_datatype(array.dtype) == "BF16" else flat
        inputs.append(
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": v2_datatype(array.dtype),
                "data": data.tolist(),
            }
        )
    request: dict[str, Any] = {"id": f"{op.name}-example", "inputs": inputs}
    if job.attributes:
        # A list travels as one string among the parameters ("1,0,1").
        request["parameters"] = {
            name: parameter_value(value) for name, value in job.attributes.items()
        }
    v2 = V2Exchange(op, None)
    v2.prepare(orjson.dumps(request))
    encoded = v2.encode(v2.decode(limits))
    return request, orjson.loads(b"".join(_pieces(encoded.buffers)))


def teach_v2_examples(schema: dict[str, Any], limits: Limits) -> None:
    """One named request example per model on the ``/v2`` infer route, each with its 200
    answer: the first example of each op's spec."""
    operation = schema.get("paths", {}).get(INFER_PATH, {}).get("post")
    if operation is None:
        return
    requests, answers = {}, {}
    for op in REGISTRY.values():
        example = next(iter(op.examples.values()))
        request, answer = v2_example(op, example["value"], limits)
        summary = f"{op.name}: {example['summary']} (POST /v2/models/{op.name}/infer)"
        requests[op.name] = {"summary": summary, "value": request}
        answers[op.name] = {"summary": summary, "value": answer}
    content = operation["requestBody"]["content"][JSON_TYPE]
    content["examples"] = requests
    _content(operation.setdefault("responses", {}), "200")["examples"] = answers


def refusals(op: Op, settings: Settings, limits: Limits, budget: int) -> dict[int, tuple[str, Any]]:
    """A request of each refusal the op's route documents, and the route's answer to it."""
    example = next(iter(op.examples.values()))["value"]
    cases: dict[int, tuple[str, Any]] = {
        400: ("body that is not JSON", _refused(op, JSON_TYPE, b'{"data": [1, 2', limits)),
        415: ("a text/plain body", _refused(op, "text/plain", b"data=1", limits)),
        422: _spec_refusal(op, example, limits),
        413: (
            "a body over the limit",
            _rendered(too_large(f"{settings.max_body_bytes + 1} bytes", settings.max_body_bytes)),
        ),
        503: (
            "the memory budget is full",
            _rendered(busy_error(budget, budget, 64 << 20, settings.admission_timeout)),
        ),
    }
    return cases


def _spec_refusal(op: Op, example: Mapping[str, Any], limits: Limits) -> tuple[str, Any]:
    """The 422 the docs show: the first example with its last input 5 (out of range for Roll's
    axes, Gather's axis), or when the op takes that, a field the op does not have."""
    last = op.inputs[-1].name
    broken = {**example, last: 5}
    try:
        return f"{last} out of range", _refused(op, JSON_TYPE, orjson.dumps(broken), limits)
    except AssertionError:
        unknown = {**example, "axes_": 0}
        return "a field the op does not take", _refused(
            op, JSON_TYPE, orjson.dumps(unknown), limits
        )


def _refused(op: Op, media: str, body: bytes, limits: Limits) -> Any:
    try:
        exchange = exchange_for_media(op, media)
        exchange.prepare(body)
        exchange.decode(limits)
    except ServiceError as error:
        return _rendered(error)
    raise AssertionError(f"{op.name}: a documented refusal was accepted: {body!r}")


def _rendered(error: ServiceError) -> Any:
    return orjson.loads(bytes(render_detail(error).body))


def _content(responses: dict[str, Any], status: str) -> dict[str, Any]:
    response = responses.setdefault(status, {"description": ""})
    content: dict[str, Any] = response.setdefault("content", {}).setdefault(JSON_TYPE, {})
    return content


def _pieces(buffers: Iterable[Any]) -> Iterable[bytes]:
    for buffer in buffers:
        if isinstance(buffer, np.ndarray):
            yield np.ascontiguousarray(buffer).tobytes()
        elif isinstance(buffer, bytes | bytearray | memoryview):
            yield bytes(buffer)
        else:  # a stream of pieces made as they are sent
            yield from buffer


def build_openapi(
    app: FastAPI, settings: Settings, limits: Limits, budget: int, access: AccessControl | None
) -> dict[str, Any]:
    """The OpenAPI document of ``app``: its routes, the request models made from the registry,
    what /docs teaches (``teach``), and with keys on, which operations need one."""
    schema = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.update(SHARED_SCHEMAS)
    models: list[type[BaseModel]] = [request_model(op) for op in every_version()]
    models.append(InferenceRequest)
    for model in models:
        model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(model_schema.pop("$defs", {}))
        components[model.__name__] = model_schema
    teach(schema, settings, limits, budget)
    teach_v2_examples(schema, limits)
    if access is not None:
        require_keys(schema, access)
    linked: dict[str, Any] = link_shared_schemas(schema)
    return linked


#: The OpenAPI security scheme of API keys: /docs shows an Authorize button for it.
BEARER_SCHEME = {
    "type": "http",
    "scheme": "bearer",
    "description": "An API key from the service's key file (TENSOR_OPS_API_KEYS_FILE), sent as "
    "'Authorization: Bearer <key>'.",
}


def require_keys(schema: dict[str, Any], access: AccessControl) -> None:
    """Declare the bearer scheme, and on each operation that needs a key, that it does, and
    its 401."""
    schema.setdefault("components", {})["securitySchemes"] = {"apiKey": BEARER_SCHEME}
    for path, operations in schema.get("paths", {}).items():
        probe_path = path.replace("{name}", "roll").replace("{version}", "1")
        if not access.needs_key(probe_path):
            continue
        for operation in operations.values():
            operation["security"] = [{"apiKey": []}]
            operation.setdefault("responses", {})["401"] = {
                "description": "No key, or one that is not valid (with WWW-Authenticate: Bearer)"
            }
