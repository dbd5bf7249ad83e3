"""Every setting the service reads, from environment variables prefixed ``TENSOR_OPS_``."""

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from tensor_ops_wire.npy import MAX_NBYTES

MiB = 1 << 20
GiB = 1 << 30
#: Settings that bound sizes in bytes or elements: none may pass what one NumPy array can span
#: (``MAX_NBYTES``, 2**63 - 1 on a 64-bit machine), or a request could get past the service's
#: checks and be refused by NumPy itself (a 500).
_NUMPY_BOUNDED = (
    "max_body_bytes",
    "max_output_bytes",
    "max_dimension",
    "memory_budget_bytes",
    "offload_bytes",
)


class Settings(BaseSettings):
    """The service's settings; ``TENSOR_OPS_MAX_BODY_BYTES=1000`` sets ``max_body_bytes``."""

    model_config = SettingsConfigDict(env_prefix="TENSOR_OPS_", extra="ignore")

    host: str = Field("127.0.0.1", description="address the server binds to")
    port: int = Field(8000, ge=0, le=65535, description="port the server listens on")
    grpc_port: int = Field(
        8001,
        ge=0,
        le=65535,
        description="port of the KServe V2 gRPC service, beside HTTP (0 turns it off)",
    )
    workers: int = Field(1, ge=1, description="number of worker processes")
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "info"
    log_format: Literal["json", "text"] = Field(
        "json", description="one JSON object a line, or text"
    )
    max_body_bytes: int = Field(256 * MiB, ge=1, description="largest request body accepted")
    max_output_bytes: int = Field(1 * GiB, ge=1, description="largest output tensor produced")
    max_rank: int = Field(32, ge=1, le=64, description="largest rank of any tensor accepted")
    max_dimension: int = Field(
        1 << 31, ge=1, description="longest dimension of any tensor accepted (empty ones too)"
    )
    memory_budget_bytes: int | None = Field(
        None,
        ge=1,
        description="memory the requests of one worker may hold at once (bodies, outputs, "
        "copies); unset, it is derived from the container's memory limit, else 4 GiB",
    )
    admission_timeout: float = Field(
        10.0, gt=0, description="seconds a request waits for memory before a 503"
    )
    body_timeout: float = Field(
        300.0, gt=0, description="seconds a request body may take in all before a 408"
    )
    min_transfer_rate: int = Field(
        16 * 1024,
        ge=0,
        description="bytes a second a client must send its body at, and read its answer at, "
        "over every rate window (408 for a body, cut off for an answer)",
    )
    rate_window: float = Field(
        10.0, gt=0, description="seconds over which the minimum transfer rate is measured"
    )
    graceful_timeout: float = Field(
        30.0,
        gt=0,
        allow_inf_nan=False,  # uvicorn takes it as an int: infinity would fail at start-up
        description="seconds in-flight requests get to finish after SIGTERM",
    )
    offload_bytes: int = Field(
        256 * 1024,
        ge=0,
        description="bodies and outputs above this size are processed off the event loop",
    )

    @field_validator(*_NUMPY_BOUNDED)
    @classmethod
    def _numpy_can_span(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and value > MAX_NBYTES:
            name = f"TENSOR_OPS_{(info.field_name or '').upper()}"
            raise ValueError(
                f"{name} = {value} is more than one NumPy array can span ({MAX_NBYTES}, "
                "2**63 - 1, bytes or elements); a request within it could pass the service's "
                f"checks and fail in NumPy. Set {name} to at most {MAX_NBYTES}"
            )
        return value
