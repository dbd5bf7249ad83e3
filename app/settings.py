"""Every setting the service reads, from environment variables prefixed ``TENSOR_OPS_``."""

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

MiB = 1 << 20
GiB = 1 << 30


class Settings(BaseSettings):
    """The service's settings; ``TENSOR_OPS_MAX_BODY_BYTES=1000`` sets ``max_body_bytes``."""

    model_config = SettingsConfigDict(env_prefix="TENSOR_OPS_", extra="ignore")

    host: str = Field("127.0.0.1", description="address the server binds to")
    port: int = Field(8000, ge=0, le=65535, description="port the server listens on")
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
    memory_budget_bytes: int = Field(
        4 * GiB,
        ge=1,
        description="memory the requests of one worker may hold at once (bodies, outputs, copies)",
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
        30.0, gt=0, description="seconds in-flight requests get to finish after SIGTERM"
    )
    offload_bytes: int = Field(
        256 * 1024,
        ge=0,
        description="bodies and outputs above this size are processed off the event loop",
    )
