"""Every setting the service reads, from environment variables prefixed ``TENSOR_OPS_``."""

import re
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

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

    # An empty variable is an unset one: templates (Compose's ${VAR:-}, Helm) write them.
    model_config = SettingsConfigDict(
        env_prefix="TENSOR_OPS_", extra="ignore", env_ignore_empty=True
    )

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

    api_keys_file: Path | None = Field(
        None,
        description="file of API keys, one '<sha256 hex of the key> [label]' a line ('#' starts "
        "a comment); set, op routes, /v2 and gRPC need 'Authorization: Bearer <key>'. Re-read "
        "on SIGHUP and when it changes",
    )
    auth_probes: bool = Field(
        False,
        description="with API keys on, health, readiness and metrics need a key too "
        "(Kubernetes probes then need the header)",
    )
    tls_cert_file: Path | None = Field(
        None, description="PEM certificate (chain): python -m app serves HTTPS and gRPC over TLS"
    )
    tls_key_file: Path | None = Field(None, description="PEM private key of the certificate")
    tls_client_ca_file: Path | None = Field(
        None,
        description="PEM CA bundle: clients must present a certificate it signed (mutual TLS)",
    )
    cors_origins: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="comma-separated origins browsers may call from "
        "(https://app.example.com,http://localhost:3000; '*' for any); empty, CORS is off",
    )

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip().rstrip("/") for part in value.split(",") if part.strip())
        return value

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for origin in value:
            if origin != "*" and not re.fullmatch(r"https?://[^/\s]+", origin):
                raise ValueError(
                    f"TENSOR_OPS_CORS_ORIGINS: {origin!r} is not an origin: write scheme, host "
                    "and port only (https://app.example.com, http://localhost:3000), or '*'"
                )
        return value

    @field_validator("api_keys_file", "tls_cert_file", "tls_key_file", "tls_client_ca_file")
    @classmethod
    def _readable(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if value is not None:
            name = f"TENSOR_OPS_{(info.field_name or '').upper()}"
            try:
                with value.open("rb"):
                    pass
            except OSError as error:
                reason = error.strerror
                raise ValueError(f"{name} = {str(value)!r} cannot be read: {reason}") from None
        return value

    @model_validator(mode="after")
    def _tls_pairs(self) -> Self:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError(
                "TENSOR_OPS_TLS_CERT_FILE and TENSOR_OPS_TLS_KEY_FILE go together: set both "
                "(TLS on) or neither (plain)"
            )
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError(
                "TENSOR_OPS_TLS_CLIENT_CA_FILE checks client certificates over TLS: set "
                "TENSOR_OPS_TLS_CERT_FILE and TENSOR_OPS_TLS_KEY_FILE too"
            )
        return self

    @property
    def tls(self) -> bool:
        """Whether HTTP and gRPC are served over TLS."""
        return self.tls_cert_file is not None

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
