"""The request and response models of the JSON routes, with the specs' type constraints."""

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema

from tensor_ops_wire.dtypes import BY_NAME, DTYPE_NAMES, ELEMENT_TYPES

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
_INTEGER_TYPES = [e.numpy for e in ELEMENT_TYPES if e.dtype.kind in "iu"]
_ALL_TYPES = [e.numpy for e in ELEMENT_TYPES]

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


DataTensor = Annotated[
    Any,
    _tensor_schema(
        "T: any supported type (bool, int8-64, uint8-64, float16, bfloat16, float32, float64). "
        "JSON form takes its type from `dtype`, or as NumPy infers it; npy form from its header.",
        _ALL_TYPES,
        integers_only=False,
    ),
]
RollIndexTensor = Annotated[
    Any,
    _tensor_schema(
        "T_IND: int32 or int64, a scalar or a 1D tensor. JSON form is int64; npy form must be "
        "int32 or int64.",
        ["int32", "int64"],
        integers_only=True,
    ),
]
GatherIndices = Annotated[
    Any,
    _tensor_schema(
        "T_IND: any integer type, any shape (a scalar too). Values outside "
        "[-data.shape[axis], data.shape[axis] - 1] give zeros. JSON form is int64.",
        _INTEGER_TYPES,
        integers_only=True,
    ),
]
GatherAxis = Annotated[
    Any,
    _tensor_schema(
        "T_AXIS: any integer type, a scalar or a 1D tensor of one element, in "
        "[-data.rank, data.rank - 1]. JSON form is int64.",
        _INTEGER_TYPES,
        integers_only=True,
    ),
]


def _known_dtype(name: str) -> str:
    if name not in BY_NAME:
        shown = name if len(name) <= 32 else name[:32] + "..."
        raise ValueError(
            f"unknown element type {shown!r}; use a NumPy, OpenVINO or KServe name: "
            + ", ".join(DTYPE_NAMES)
        )
    return name


DTypeName = Annotated[
    str,
    Field(strict=True),
    AfterValidator(_known_dtype),
    WithJsonSchema(
        {
            "type": "string",
            "enum": list(DTYPE_NAMES),
            "description": "The element type of `data`, by its NumPy, OpenVINO or KServe name.",
        }
    ),
]


class RollRequest(BaseModel):
    """Roll-7: shift the elements of `data` by `shift` along `axes`."""

    model_config = ConfigDict(extra="forbid")

    data: DataTensor = Field(description="The tensor to roll (input 1, type T).")
    shift: RollIndexTensor = Field(description="Places to shift by (input 2, type T_IND_1).")
    axes: RollIndexTensor = Field(description="Axes to shift along (input 3, type T_IND_2).")
    dtype: DTypeName | None = Field(None, description="The element type of `data`.")


class GatherRequest(BaseModel):
    """Gather-8: the slices of `data` along `axis` at `indices`, batch by batch."""

    model_config = ConfigDict(extra="forbid")

    data: DataTensor = Field(description="The tensor to gather from (input 1, type T).")
    indices: GatherIndices = Field(description="Indices to gather (input 2, type T_IND).")
    axis: GatherAxis = Field(description="The axis to gather along (input 3, type T_AXIS).")
    batch_dims: int = Field(
        0,
        strict=True,
        ge=INT64_MIN,
        le=INT64_MAX,
        description="Leading dimensions of data and indices that are batches; "
        "in [-min(data.rank, indices.rank), min(data.rank, indices.rank)] and <= axis.",
    )
    dtype: DTypeName | None = Field(None, description="The element type of `data`.")


class TensorResponse(BaseModel):
    """The output tensor, in the form the request's `data` used."""

    data: DataTensor = Field(description="The output: JSON form or base64 .npy, as `data` came.")
    dtype: str = Field(description="NumPy name of the output's element type", examples=["int64"])
    shape: list[int] = Field(description="The output's shape", examples=[[4, 3]])


def link_shared_schemas(node: Any) -> Any:
    """Replace every ``{SCHEMA_REF: name}`` marker in an OpenAPI document by its ``$ref``."""
    if isinstance(node, dict):
        if SCHEMA_REF in node:
            return {"$ref": f"#/components/schemas/{node[SCHEMA_REF]}"}
        return {key: link_shared_schemas(value) for key, value in node.items()}
    if isinstance(node, list):
        return [link_shared_schemas(item) for item in node]
    return node
