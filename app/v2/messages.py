"""The KServe V2 / Open Inference Protocol's messages, as pydantic models."""

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from app.codecs.v2_tensors import V2_DTYPES

NonNegative = Annotated[int, Field(strict=True, ge=0)]
Datatype = Annotated[
    str,
    Field(
        strict=True,
        description="The element type: " + ", ".join(V2_DTYPES) + " (BYTES is not supported).",
        json_schema_extra={"enum": list(V2_DTYPES)},
    ),
]


class RequestInput(BaseModel):
    """One input tensor: JSON ``data``, or ``parameters.binary_data_size`` bytes of binary data."""

    name: str = Field(
        strict=True, description="`data`, `shift`, `axes` / `data`, `indices`, `axis`"
    )
    shape: Annotated[list[NonNegative], Field(fail_fast=True)]
    datatype: Datatype
    parameters: dict[str, Any] | None = None
    data: Any = Field(None, description="Flat or nested, in row-major order; absent when binary.")


class RequestOutput(BaseModel):
    """An output the client asks for, and whether it wants it as binary data."""

    name: str = Field(strict=True, description="The only output is named `output`.")
    parameters: dict[str, Any] | None = None


class InferenceRequest(BaseModel):
    """An inference request: ``parameters.batch_dims`` sets Gather's batch_dims."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "gather-example-2",
                    "parameters": {"batch_dims": 1},
                    "inputs": [
                        {"name": "data", "shape": [2, 5], "datatype": "INT64",
                         "data": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]},
                        {"name": "indices", "shape": [2, 3], "datatype": "INT64",
                         "data": [0, 0, 4, 4, 0, 0]},
                        {"name": "axis", "shape": [], "datatype": "INT64", "data": [1]},
                    ],
                }
            ]
        }
    )  # fmt: skip

    id: str | None = Field(None, strict=True)
    parameters: dict[str, Any] | None = None
    # Lists a client sizes stop at their first bad element: a million bad ones would otherwise
    # cost a million errors (hundreds of bytes each) and seconds.
    inputs: Annotated[list[RequestInput], Field(fail_fast=True)]
    outputs: Annotated[list[RequestOutput] | None, Field(fail_fast=True)] = None


class ResponseOutput(BaseModel):
    """The output tensor: JSON ``data``, or ``parameters.binary_data_size`` bytes after the JSON."""

    name: str
    shape: list[int]
    datatype: str
    parameters: dict[str, Any] | None = None
    data: list[Any] | None = None


class InferenceResponse(BaseModel):
    """An inference response."""

    model_name: str
    model_version: str | None = None
    id: str | None = None
    parameters: dict[str, Any] | None = None
    outputs: list[ResponseOutput]


class MetadataTensor(BaseModel):
    """An input or output of a model: -1 marks a dimension of any size."""

    name: str
    datatype: str
    shape: list[int]
    parameters: dict[str, Any] | None = None


class ModelMetadata(BaseModel):
    """A model's metadata."""

    name: str
    versions: list[str]
    platform: str
    inputs: list[MetadataTensor]
    outputs: list[MetadataTensor]
    parameters: dict[str, Any] | None = None


class ServerMetadata(BaseModel):
    """The server's metadata and the protocol extensions it supports."""

    name: str
    version: str
    extensions: list[str]


class V2Error(BaseModel):
    """Every error of the ``/v2`` routes."""

    error: str


class StatisticDuration(BaseModel):
    """How many requests went through a stage, and their nanoseconds in it, summed."""

    count: int
    ns: int


class InferStatistics(BaseModel):
    """Triton's inference statistics: the pipeline's stages (docs/triton.md says which)."""

    success: StatisticDuration
    fail: StatisticDuration
    queue: StatisticDuration
    compute_input: StatisticDuration
    compute_infer: StatisticDuration
    compute_output: StatisticDuration
    cache_hit: StatisticDuration
    cache_miss: StatisticDuration


class ModelStatistics(BaseModel):
    """One model's statistics, over every transport and every worker."""

    name: str
    version: str
    last_inference: int = Field(description="Milliseconds since the epoch; 0: none yet")
    inference_count: int
    execution_count: int
    inference_stats: InferStatistics
    response_stats: dict[str, Any] = Field(description="Per response of a decoupled model: empty")
    batch_stats: list[Any] = Field(description="Per batch size: empty (no batching)")
    memory_usage: list[Any] = Field(description="Memory the model holds: empty")


class ModelStatisticsResponse(BaseModel):
    """Triton's statistics extension: the statistics of the models asked for."""

    model_stats: list[ModelStatistics]


class ModelConfigTensor(BaseModel):
    """An input or output in a model configuration: ``dims`` ``[-1]`` is any shape."""

    name: str
    data_type: str
    dims: list[int]


class ModelConfig(BaseModel):
    """Triton's model configuration (the model_configuration extension), as far as it applies."""

    name: str
    platform: str
    backend: str
    #: Which versions are served: ``{"all": {}}``, every one (Triton's ModelVersionPolicy).
    version_policy: dict[str, dict[str, Any]]
    max_batch_size: int
    input: list[ModelConfigTensor]
    output: list[ModelConfigTensor]
    parameters: dict[str, dict[str, str]]


class RepositoryIndexRequest(BaseModel):
    """The model repository index's request: ``ready`` (every model is ready) may be given."""

    repository_name: str | None = None
    ready: bool | None = None


class RepositoryModel(BaseModel):
    """A model of the repository index."""

    name: str
    version: str
    state: str
    reason: str = Field(description="Why the model is in its state; empty when it is ready")
