"""The Open Inference Protocol's rules, whatever carries it (``/v2`` over HTTP, or gRPC).

Models and their metadata, the request's parameters (``batch_dims``, the binary data
extension's booleans, the extensions not served here) and the naming of inputs and outputs: one
copy, read by both adapters, so that a request means the same and fails the same on either.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from app.errors import Fault, ServiceError, near_miss, quote
from app.ops.declaration import BOOL, INTS, Attribute, AttributeRefusedError, variadic_index
from app.pipeline.jobs import Job, Limits, check_shape
from app.registry import REGISTRY, Op, attribute_names, version_of, versions
from tensor_ops_wire.dtypes import ELEMENT_TYPES


class NamedInput(Protocol):
    """An input of a V2 request, as a transport holds it (a model of JSON, a protobuf message)."""

    @property
    def name(self) -> str: ...

    @property
    def shape(self) -> Sequence[int]: ...


Item = TypeVar("Item", bound=NamedInput)

SERVER_NAME = "tensor-ops"
#: The output of an op of one output; an op of several has ``output_0``, ``output_1``...
OUTPUT_NAME = "output"

#: The kind of a protocol parameter of a wrong type (400).
PARAMETER_FAULT = Fault.BAD_PARAMETER
_SHARED_MEMORY = "Triton's shared memory extension"
#: Parameters of extensions this service does not implement, to the extension they belong to.
#: Any other parameter is the client's own and is ignored, as the protocol allows.
INPUT_EXTENSIONS = {
    "shared_memory_region": _SHARED_MEMORY,
    "shared_memory_byte_size": _SHARED_MEMORY,
    "shared_memory_offset": _SHARED_MEMORY,
}
OUTPUT_EXTENSIONS = {**INPUT_EXTENSIONS, "classification": "Triton's classification extension"}

Parameters = Mapping[str, Any]


def model(name: str, version: str | None = None) -> Op:
    """The op served as model ``name`` at ``version`` (its opset version; the newest when none
    is asked for); else 404 naming the models, or the versions of this one, served."""
    if name not in REGISTRY:
        raise ServiceError(
            Fault.NOT_FOUND,
            ("model",),
            f"model {quote(name)} is not served here; models: {', '.join(REGISTRY)}",
        )
    op = version_of(name, version)
    if op is None:
        served = ", ".join(str(number) for number in versions(name))
        raise ServiceError(
            Fault.NOT_FOUND,
            ("model",),
            f"model {name!r} has no version {quote(str(version))}; versions: {served}",
        )
    return op


def statistics_models(name: str | None, version: str | None) -> list[tuple[str, str]]:
    """The models (name, version) whose statistics a request asks for: every version of every
    model (no name), every version of one (no version, as Triton answers), or one version (else
    404). A model's versions oldest first, as Triton lists them (its model states are kept in
    maps ordered by version) and as metadata and the repository index list them here."""
    if name is None:
        ops = [op for each in REGISTRY for op in versions(each).values()]
    elif version is None:
        model(name)  # 404 for a model not served
        ops = list(versions(name).values())
    else:
        ops = [model(name, version)]
    return [(op.name, model_version(op)) for op in ops]


def model_version(op: Op) -> str:
    """The V2 model version of ``op``: its opset version, as a string ("8" for Gather-8)."""
    return op.model_key[1]


def model_metadata(op: Op) -> dict[str, Any]:
    """Inputs and outputs of ``op``: -1 marks a dimension of any size; ``parameters`` lists every
    datatype a tensor may have, its ``datatype`` being the one JSON clients get by default. A
    variadic input is listed by its first two names (``data_0``, ``data_1``) and a pattern, the
    outputs of an op of several outputs likewise (``output_0``, ``output_1``)."""

    def tensor(name: str, types: tuple[str, ...], rank: str, **more: Any) -> dict[str, Any]:
        datatypes = [e.kserve for e in ELEMENT_TYPES if e.numpy in types]
        return {
            "name": name,
            "datatype": "FP32" if "float32" in types else "INT64",
            "shape": [-1],
            "parameters": {"datatypes": datatypes, "rank": rank, **more},
        }

    inputs = []
    for item in op.inputs:
        if item.variadic:
            more = {"variadic": f"{item.name}_0, {item.name}_1, ... (at least one)"}
            for name in (f"{item.name}_0", f"{item.name}_1"):
                inputs.append(tensor(name, item.element_types, item.rank, **more))
        elif item.optional:
            inputs.append(tensor(item.name, item.element_types, item.rank, optional=True))
        else:
            inputs.append(tensor(item.name, item.element_types, item.rank))
    source = op.input_for(op.output_type_from)
    types = source.element_types if source is not None else op.inputs[0].element_types
    outputs = [
        tensor(
            name,
            types,
            "any",
            **({"several": "output_0, output_1, ..."} if op.several_outputs else {}),
        )
        for name in op.output_names
    ]
    metadata: dict[str, Any] = {
        "name": op.name,
        "versions": [str(number) for number in versions(op.name)],
        "platform": "openvino_opset",
        "inputs": inputs,
        "outputs": outputs,
    }
    if op.attributes:
        metadata["parameters"] = {item.name: _parameter_words(item) for item in op.attributes}
    return metadata


def _parameter_words(item: Attribute) -> str:
    if item.is_string:
        kind = f"string request parameter, {item.kind_words}"
    elif item.kind == BOOL:
        kind = "bool request parameter"
    elif item.kind == INTS:
        kind = f"string request parameter, {item.parameter_words}"
    else:
        kind = "int64 request parameter"
    if item.default is None:
        return f"{kind}, required"
    return f"{kind}, default {item.shown(item.default)}"


#: Triton's protocol extensions served here beside the binary tensor data one: their names
#: as server metadata lists them (HTTP and gRPC alike); system shared memory is added when it
#: is on (``shared_memory.server_extensions``).
EXTENSIONS = [
    "binary_tensor_data",
    "model_configuration",
    "statistics",
    "model_repository",
]
#: The model configuration's backend (Triton's model_config.proto ``backend``).
BACKEND = "tensor-ops"


def model_config(op: Op) -> dict[str, Any]:
    """Triton's model configuration of ``op`` (the model_configuration extension), as Triton's
    HTTP API writes it. No batching (``max_batch_size`` 0): the dims are the whole shape, and
    ``[-1]`` stands for any shape (any rank, any size). Each tensor's ``data_type`` is the one
    model metadata gives (the default of JSON clients); ``parameters`` lists, per input, every
    datatype and rank it takes (``<input>.datatypes``, ``<input>.rank``), and the op's request
    parameters."""
    metadata = model_metadata(op)
    parameters: dict[str, str] = {}
    inputs = []
    for item in metadata["inputs"]:
        inputs.append({"name": item["name"], "data_type": f"TYPE_{item['datatype']}", "dims": [-1]})
        parameters[f"{item['name']}.datatypes"] = ",".join(item["parameters"]["datatypes"])
        parameters[f"{item['name']}.rank"] = item["parameters"]["rank"]
    parameters.update(metadata.get("parameters", {}))
    return {
        "name": op.name,
        "platform": metadata["platform"],
        "backend": BACKEND,
        # Every version is served at once, as Triton's "all" policy says (its default serves
        # the latest only; here an older version is a model's own, never a stale copy).
        "version_policy": {"all": {}},
        "max_batch_size": 0,
        "input": inputs,
        "output": [
            {"name": output["name"], "data_type": f"TYPE_{output['datatype']}", "dims": [-1]}
            for output in metadata["outputs"]
        ],
        "parameters": {name: {"string_value": value} for name, value in parameters.items()},
    }


def repository_index(ready_only: bool) -> list[dict[str, str]]:
    """The model repository's index: every op, always loaded (``ready_only`` changes nothing).
    Each entry has the four fields of Triton's index response, ``reason`` empty: a ready model
    has none to give."""
    return [
        {"name": name, "version": str(number), "state": "READY", "reason": ""}
        for name in REGISTRY
        for number in versions(name)
    ]


def refuse_model_control(name: str, action: str) -> ServiceError:
    """Loading or unloading a model: the ops are built into the service, always loaded. 404
    for a name that is not a model, else 400 (``not_offered``; gRPC UNIMPLEMENTED)."""
    op = model(name)
    return ServiceError(
        Fault.NOT_OFFERED,
        ("model",),
        f"model {op.name!r} cannot be {action}ed: the models of tensor-ops are its built-in ops, "
        f"always loaded (the model_repository extension serves the index only)",
    )


def json_kind(value: Any) -> str:
    """What a parameter's value is, in words (gRPC's values are named as their JSON kind)."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "null"


def refuse_extensions(
    parameters: Parameters, extensions: Mapping[str, str], loc: tuple[str, ...], advice: str
) -> None:
    """Refuse a parameter of an extension not served here: ignoring it would answer something
    other than what the client asked for (the tensor from shared memory, say)."""
    if not parameters:
        return
    refused = sorted(extensions.keys() & parameters.keys())
    if refused:
        name = refused[0]
        raise ServiceError(
            Fault.NOT_OFFERED,
            (*loc, name),
            f"{name} is a parameter of {extensions[name]}, which is not supported here; {advice}",
        )


def boolean_parameter(parameters: Parameters, name: str, loc: tuple[str, ...]) -> bool | None:
    """The boolean parameter ``name`` (None when absent); any other value is refused (a string
    "false" is not false)."""
    if name not in parameters:
        return None
    value = parameters[name]
    if not isinstance(value, bool):
        raise ServiceError(
            PARAMETER_FAULT,
            (*loc, name),
            f"{name} must be a boolean (true or false), got {json_kind(value)}",
        )
    return value


def op_attributes(op: Op, parameters: Parameters) -> dict[str, Any]:
    """The op's attributes (``batch_dims``, ``mode``) from the request's parameters, defaults
    filled in; an attribute of another op is refused, as an unknown input is, and a required
    one that is missing as a missing input is."""
    attributes = op.attribute_defaults()
    if not parameters and not op.required_attributes:
        return attributes  # the commonest request: no parameters at all
    for name in attribute_names().intersection(parameters):
        value = parameters[name]
        declared = op.attribute(name)
        if declared is None:
            raise ServiceError(
                Fault.UNKNOWN_INPUT,
                ("body", name),
                f"model {op.name!r} takes no {name} parameter"
                + (f" at version {op.version} ({op.spec})" if _older(op) else ""),
            )
        try:
            attributes[name] = declared.from_parameter(value)
        except AttributeRefusedError as refusal:
            raise ServiceError(
                Fault.INVALID_FIELD, ("body", "parameters", name), f"{name} {refusal}"
            ) from None
    _refuse_slips(op, parameters)
    for item in op.required_attributes:
        if item.name not in parameters:
            raise ServiceError(
                Fault.MISSING_INPUT,
                ("body", "parameters", item.name),
                f"missing parameter {item.name!r}: {op.name} requires it ({item.kind_words})",
            )
    return attributes


def _refuse_slips(op: Op, parameters: Parameters) -> None:
    """Refuse a parameter that is a slip of one of the op's attributes (``batchdims``,
    ``Batch_Dims``): ignored, it would run the op with the attribute's default. Other unknown
    parameters pass, as the protocol lets clients send their own (``priority``, ``timeout``,
    ``sequence_id``)."""
    names = [item.name for item in op.attributes]
    if not names:
        return
    for name in parameters:
        if name in names or name in attribute_names():
            continue
        near = near_miss(name, names)
        if near is not None:
            raise ServiceError(
                Fault.UNKNOWN_INPUT,
                ("body", "parameters", name),
                f"model {op.name!r} takes no {quote(name)} parameter; did you mean {near!r}?",
            )


def _older(op: Op) -> bool:
    """Whether ``op`` is an older version than the newest its model serves."""
    newest = REGISTRY.get(op.name)
    return newest is not None and newest.version != op.version


def wants_binary(
    parameters: Parameters,
    outputs: Iterable[tuple[str, Parameters]],
    default: bool,
    extensions: Mapping[str, str] = OUTPUT_EXTENSIONS,
    op: Op | None = None,
) -> bool:
    """Whether the outputs go as binary (raw) data: the first requested output's own
    ``binary_data`` parameter, else the request's ``binary_data_output``, else ``default``.
    An output ``op`` does not have is refused, and so are the output's parameters of
    ``extensions`` (not served)."""
    wanted = boolean_parameter(parameters, "binary_data_output", ("body", "parameters"))
    own: bool | None = None
    for name, output_parameters in outputs:
        if not is_output_name(op, name):
            raise ServiceError(
                Fault.UNKNOWN_INPUT,
                ("body",),
                f"unknown output {quote(name)}; {output_words(op)}",
            )
        loc = ("body", name, "parameters")
        refuse_extensions(
            output_parameters,
            extensions,
            loc,
            "the output comes in the response, as JSON data or as binary data (binary_data)",
        )
        given = boolean_parameter(output_parameters, "binary_data", loc)
        if own is None:
            own = given
    if own is not None:
        return own
    return default if wanted is None else wanted


def requested_outputs(job: Job, names: Iterable[str]) -> frozenset[str] | None:
    """The outputs of an op of several outputs that the request names (None: it names none, and
    gets them all, as the protocol says); a name past the outputs the request makes (``output_5``
    of a split in three) is refused."""
    if job.split is None:
        return None
    asked = frozenset(names)
    if not asked:
        return None
    made = job.output_names
    unknown = sorted(asked.difference(made))
    if unknown:
        raise ServiceError(
            Fault.UNKNOWN_INPUT,
            ("body",),
            f"unknown output {quote(unknown[0])}; this request makes {', '.join(made)}",
        )
    return asked


def is_output_name(op: Op | None, name: str) -> bool:
    """Whether ``name`` can be an output of ``op`` (``output``; ``output_<n>`` for an op of
    several outputs, whose number the request decides)."""
    if op is None or not op.several_outputs:
        return name == OUTPUT_NAME
    stem, _, number = name.rpartition("_")
    return stem == OUTPUT_NAME and variadic_index(number) is not None


def output_words(op: Op | None) -> str:
    """The outputs of ``op``, in words."""
    if op is not None and op.several_outputs:
        return "the outputs are 'output_0', 'output_1', ..."
    return f"the output is {OUTPUT_NAME!r}"


def admit_input(op: Op, name: str, seen: Mapping[str, Any]) -> None:
    """Refuse an input ``op`` does not take, or one given twice."""
    if op.input_for(name) is None:
        raise ServiceError(
            Fault.UNKNOWN_INPUT,
            ("body", name),
            f"unknown input {quote(name)}; {op.name} takes {op.input_words}",
        )
    if name in seen:
        raise ServiceError(Fault.TENSOR_DECODE, ("body", name), f"input {name!r} is given twice")


def require_inputs(op: Op, arrays: Mapping[str, Any]) -> None:
    """Refuse a request that lacks one of the op's inputs (optional ones may be left out)."""
    missing = op.missing_input(arrays)
    if missing is not None:
        raise ServiceError(
            Fault.MISSING_INPUT,
            ("body", missing),
            f"missing input {missing!r}; {op.name} takes {op.input_words}",
        )


def read_inputs(
    op: Op,
    items: Sequence[Item],
    limits: Limits,
    check: Callable[[Item], object],
    decode: Callable[[int, Item], Any],
    finish: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """The V2 input loop, one for ``/v2`` and gRPC: each input admitted by name (one of the op's,
    not twice), checked by the transport (``check``: its parameters, its shape's signs), its
    shape against the limits, then decoded; ``finish`` when all are read (what no input
    claimed), then every input the op requires present."""
    arrays: dict[str, Any] = {}
    for index, item in enumerate(items):
        key = item.name
        admit_input(op, key, arrays)
        check(item)
        check_shape(list(item.shape), key, limits)
        arrays[key] = decode(index, item)
    finish()
    require_inputs(op, arrays)
    return arrays
