"""The JSON routes' request and response models, made from the registry with the specs' types."""

import functools
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, create_model

from app.ops.declaration import BOOL, INTS, MAX_LIST, MAX_VARIADIC
from app.registry import ALL_TYPES, DATA_CONSTRAINT, REGISTRY, Input, Op
from tensor_ops_wire.dtypes import DTYPE_NAMES

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

#: Marks a reference to one of SHARED_SCHEMAS; pydantic cannot resolve such references itself,
#: so `link_shared_schemas` turns each marker into a ``$ref`` once the document is built.
SCHEMA_REF = "x-shared-schema"

#: Schemas referenced by the tensor fields, added to the OpenAPI components.
SHARED_SCHEMAS: dict[str, dict[str, Any]] = {
    "JsonTensor": {
        "title": "JsonTensor",
        "description": "A number, a boolean, or a rectangular nested array of them.",
        "anyOf": [
            {"type": "number"},
            {"type": "boolean"},
            {"type": "array", "items": {"$ref": "#/components/schemas/JsonTensor"}},
        ],
    },
    "JsonIntTensor": {
        "title": "JsonIntTensor",
        "description": "An int64 integer, or a rectangular nested array of them.",
        "anyOf": [
            {"type": "integer", "format": "int64", "minimum": INT64_MIN, "maximum": INT64_MAX},
            {"type": "array", "items": {"$ref": "#/components/schemas/JsonIntTensor"}},
        ],
    },
    "NpyBase64": {
        "title": "NpyBase64",
        "description": "Standard base64 (RFC 4648, padded) of the bytes of a NumPy .npy file "
        "(which start with \\x93NUMPY, so their base64 with k05VTVBZ).",
        "type": "string",
        "pattern": "^k05VTVBZ[A-Za-z0-9+/]*={0,2}$",
        "contentEncoding": "base64",
        "contentMediaType": "application/x-npy",
    },
}


def _tensor_schema(description: str, element_types: list[str], integers_only: bool) -> Any:
    json_form = "JsonIntTensor" if integers_only else "JsonTensor"
    return WithJsonSchema(
        {
            "description": description,
            "x-element-types": element_types,
            "anyOf": [
                {SCHEMA_REF: json_form},
                {SCHEMA_REF: "NpyBase64"},
            ],
        }
    )


DTypeName = Annotated[
    str,
    # Checked by the decoder, as every transport's type names are: one fault kind for all.
    Field(strict=True),
    WithJsonSchema(
        {
            "type": "string",
            "enum": list(DTYPE_NAMES),
            "description": "The element type of `data`, by its NumPy, OpenVINO or KServe name.",
        }
    ),
]


def _tensor_field(item: Input, *default: None, description: str = "") -> Any:
    """A tensor field: required, or with ``default`` (None: an optional input left out)."""
    schema = _tensor_schema(item.constraint, list(item.element_types), integers_only=item.is_index)
    return (Annotated[Any, schema], Field(*default, description=description or item.description))


def numbers_below(limit: int) -> str:
    """A regular expression of the decimal numbers 0 to ``limit - 1``, without leading zeros
    (``variadic_index``'s spelling): ``0|[1-9][0-9]{0,2}|10[01][0-9]|102[0-3]`` for 1024."""
    top = str(limit - 1)
    parts = ["0"] if limit > 0 else []
    if len(top) > 1:
        shorter = "" if len(top) == 2 else f"{{0,{len(top) - 2}}}"
        parts.append(f"[1-9][0-9]{shorter}" if len(top) > 2 else "[1-9]")
    for position, digit in enumerate(top):
        low = 1 if position == 0 else 0
        if int(digit) > low:
            below = f"[{low}-{int(digit) - 1}]" if int(digit) - 1 > low else str(low)
            rest = len(top) - position - 1
            tail = f"[0-9]{{{rest}}}" if rest > 1 else "[0-9]" if rest else ""
            parts.append(top[:position] + below + tail)
    if len(top) > 1 or top != "0":
        parts.append(top)
    return "|".join(dict.fromkeys(parts))


def _variadic_schema(names: tuple[str, ...]) -> Callable[[dict[str, Any]], None]:
    """The model's schema with ``<name>_<n>`` for every n the route takes (below
    MAX_VARIADIC) as a pattern property typed as ``<name>_0``: a generated client (TypeScript,
    Go) may then send ``data_2`` and beyond, which the route joins."""

    def extend(schema: dict[str, Any]) -> None:
        patterns = schema.setdefault("patternProperties", {})
        for name in names:
            typed = {
                key: value
                for key, value in schema["properties"][f"{name}_0"].items()
                if key not in ("title", "default")
            }
            patterns[f"^{name}_({numbers_below(MAX_VARIADIC)})$"] = typed
        # The numbered inputs a request may hold, and the op's other fields.
        schema["maxProperties"] = MAX_VARIADIC * len(names) + len(schema["properties"])

    return extend


@functools.cache
def request_model(op: Op) -> type[BaseModel]:
    """The JSON request body of ``op`` (``RollRequest``...), made from its declaration. A
    variadic input shows as its first two fields (``data_0``, ``data_1``) and a pattern property
    for every ``data_<n>`` below MAX_VARIADIC; the route takes every ``data_<n>`` and checks
    them itself."""
    fields: dict[str, Any] = {}
    for item in op.inputs:
        if item.variadic:
            for index in (0, 1):
                fields[f"{item.name}_{index}"] = _tensor_field(
                    item,
                    None,
                    description=f"{item.description} One of {item.name}_0, {item.name}_1, ... "
                    "(at least one; as many as the op takes).",
                )
        elif item.optional:
            fields[item.name] = _tensor_field(item, None)
        else:
            fields[item.name] = _tensor_field(item)
    for attribute in op.attributes:
        default = ... if attribute.default is None else attribute.default
        if attribute.is_string:
            fields[attribute.name] = (
                Literal[attribute.choices],
                Field(default, description=attribute.description),
            )
            continue
        if attribute.kind == BOOL:
            fields[attribute.name] = (
                bool,
                Field(default, strict=True, description=attribute.description),
            )
            continue
        if attribute.kind == INTS:
            fields[attribute.name] = (
                list[Annotated[int, Field(strict=True, ge=INT64_MIN, le=INT64_MAX)]],
                Field(
                    list(default) if isinstance(default, tuple) else default,
                    max_length=MAX_LIST,
                    description=attribute.description,
                ),
            )
            continue
        fields[attribute.name] = (
            int,
            Field(
                default,
                strict=True,
                ge=INT64_MIN,
                le=INT64_MAX,
                description=attribute.description,
            ),
        )
    fields["dtype"] = (DTypeName | None, Field(None, description="The element type of `data`."))
    variadic = tuple(item.name for item in op.inputs if item.variadic)
    config = (
        ConfigDict(extra="forbid", json_schema_extra=_variadic_schema(variadic))
        if variadic
        else ConfigDict(extra="forbid")
    )
    model: type[BaseModel] = create_model(
        f"{''.join(part.capitalize() for part in op.name.split('_'))}{_older_mark(op)}Request",
        __config__=config,
        __doc__=op.request_doc,
        **fields,
    )
    return model


def _older_mark(op: Op) -> str:
    """ "7" in Gather7Request: an older version's model is named apart from the newest's."""
    newest = REGISTRY.get(op.name)
    return "" if newest is None or newest is op else str(op.version)


@functools.cache
def request_fields(op: Op) -> frozenset[str]:
    """The field names of ``request_model(op)``, known once (pydantic's ``model_fields`` on the
    class is a property that costs each request half a microsecond)."""
    return frozenset(request_model(op).model_fields)


class TensorResponse(BaseModel):
    """The output tensor, in the form the request's `data` used."""

    data: Annotated[Any, _tensor_schema(DATA_CONSTRAINT, list(ALL_TYPES), integers_only=False)] = (
        Field(description="The output: JSON form or base64 .npy, as `data` came.")
    )
    dtype: str = Field(description="NumPy name of the output's element type", examples=["int64"])
    shape: list[int] = Field(description="The output's shape", examples=[[4, 3]])


class NamedTensor(TensorResponse):
    """One of several outputs, with its name."""

    name: str = Field(description="The output's name", examples=["output_0"])


class OutputsResponse(BaseModel):
    """The outputs of an op of several (Split-1, VariadicSplit-1), in order, each in the form
    the request's `data` used."""

    outputs: list[NamedTensor] = Field(description="`output_0`, `output_1`, ...")


def link_shared_schemas(node: Any) -> Any:
    """Replace every ``{SCHEMA_REF: name}`` marker in an OpenAPI document by its ``$ref``."""
    if isinstance(node, dict):
        if SCHEMA_REF in node:
            return {"$ref": f"#/components/schemas/{node[SCHEMA_REF]}"}
        return {key: link_shared_schemas(value) for key, value in node.items()}
    if isinstance(node, list):
        return [link_shared_schemas(item) for item in node]
    return node
