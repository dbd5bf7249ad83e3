"""Every setting the service reads, from environment variables prefixed ``TENSOR_OPS_``."""

import math
import os
import re
from collections.abc import Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.keyfile import regular_file_problem
from tensor_ops_wire.npy import MAX_NBYTES

MiB = 1 << 20
GiB = 1 << 30
#: The longest any time setting may be: a day. Longer is a mistake (a unit taken for another),
#: and infinity or NaN would reach asyncio and uvicorn as timeouts they cannot take.
MAX_SECONDS = 86400.0
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

    #: The variables of other tools the service follows, as the environment had them when the
    #: settings were read: OpenTelemetry's standard ``OTEL_*`` (tracing) and prometheus_client's
    #: ``PROMETHEUS_MULTIPROC_DIR`` (one set of metrics for several workers; ``python -m app``
    #: sets it). Read here, with the rest, so that what ``create_app(settings)`` is given is
    #: what every part of the service follows.
    _foreign: dict[str, str] = PrivateAttr(default_factory=lambda: _foreign_variables(os.environ))

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
    log_format: Literal["auto", "json", "text"] = Field(
        "auto",
        description="one JSON object a line, or one line of text an event; auto: JSON unless "
        "standard error is a terminal (containers, files and pipes get JSON)",
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
        10.0,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="seconds a request waits for memory before a 503",
    )
    body_timeout: float = Field(
        300.0,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="seconds a request body may take in all before a 408",
    )
    min_transfer_rate: int = Field(
        16 * 1024,
        ge=0,
        le=1 << 30,  # past a GiB a second, every body and answer would be cut off
        description="bytes a second a client must send its body at, and read its answer at, "
        "over every rate window (408 for a body, cut off for an answer)",
    )
    rate_window: float = Field(
        10.0,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="seconds over which the minimum transfer rate is measured",
    )
    graceful_timeout: float = Field(
        30.0,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,  # uvicorn takes it as an int: infinity would fail at start-up
        description="seconds in-flight requests get to finish after SIGTERM",
    )
    offload_bytes: int = Field(
        256 * 1024,
        ge=0,
        description="bodies and outputs above this size are processed off the event loop",
    )

    shared_memory: Literal["on", "off"] = Field(
        "on",
        description="Triton's system shared memory extension under /v2 and gRPC: clients on "
        "the same host (sharing /dev/shm) register POSIX shared memory regions and pass "
        "tensors through them; off, its routes and parameters are refused. Needs "
        "TENSOR_OPS_WORKERS=1 (a region is registered with one worker process)",
    )

    shared_memory_prefix: str = Field(
        "",
        max_length=255,
        description="the shared memory objects a region may map: only those whose name (as "
        "shm_open takes it, without the leading '/') starts with this; empty, any object the "
        "service's user can open (tritonclient's examples use names such as '/input_data', "
        "the project's client 'psm_...': set 'psm_' to allow only the latter)",
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

    @property
    def otel_environment(self) -> dict[str, str]:
        """OpenTelemetry's ``OTEL_*`` variables, for the tracing they ask for."""
        return {key: value for key, value in self._foreign.items() if key.startswith("OTEL_")}

    @property
    def metrics_dir(self) -> str | None:
        """prometheus_client's multiprocess directory (several workers' metrics summed), if any."""
        return self._foreign.get("PROMETHEUS_MULTIPROC_DIR") or None

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
        # A regular file of at most 16 MiB, looked at without reading it: a FIFO would block
        # the start, a device (/dev/zero) would be read without end.
        if value is not None:
            name = f"TENSOR_OPS_{(info.field_name or '').upper()}"
            problem = regular_file_problem(value)
            if problem:
                raise ValueError(f"{name} = {str(value)!r} {problem}")
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


# ------------------------------------------------------------------------------------------------
# What the machine can take, and OpenTelemetry's variables: checked by ``python -m app`` before
# any worker starts (each refused with one line and exit status 2).

#: Workers beyond this many a CPU only share the same cores, each with its own memory.
WORKERS_PER_CPU = 4
#: What a worker takes before any request (README's scaling table: 228 MiB resident at idle,
#: Python, NumPy, numba and LLVM) and the smallest budget a worker is given for its requests.
WORKER_BYTES = 232 * MiB
WORKER_REQUEST_BYTES = 64 * MiB
#: ``python -m app``'s supervisor.
SUPERVISOR_BYTES = 64 * MiB
_CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def available_memory() -> tuple[int, str] | None:
    """The memory the service's processes may take together, and what sets it: the container's
    limit (cgroup v2, then v1), else the machine's physical memory; None when neither is known."""
    for path in _CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isascii() and text.isdigit() and int(text) < (1 << 62):
            return int(text), "the container's memory limit"
        break
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None
    return (total, "the machine's memory") if total > 0 else None


def workers_problem(
    workers: int, cpus: int | None = None, memory: tuple[int, str] | None = None
) -> str | None:
    """Why ``workers`` processes cannot run here, in words; None when they can. At most
    ``WORKERS_PER_CPU`` a CPU; and all of them, each with its own baseline and smallest request
    budget, beside the supervisor, within the memory there is."""
    cpus = available_cpus() if cpus is None else cpus
    most = WORKERS_PER_CPU * cpus
    if workers > most:
        return (
            f"TENSOR_OPS_WORKERS = {workers} is more than {WORKERS_PER_CPU} worker processes a "
            f"CPU ({cpus} CPU(s) here): at most {most}; more only share the same cores, each "
            "with its own memory"
        )
    memory = available_memory() if memory is None else memory
    if memory is not None:
        total, source = memory
        each = WORKER_BYTES + WORKER_REQUEST_BYTES
        needed = SUPERVISOR_BYTES + workers * each
        if needed > total:
            fit = max(0, (total - SUPERVISOR_BYTES) // each)
            return (
                f"TENSOR_OPS_WORKERS = {workers} needs about {needed // MiB} MiB (each worker "
                f"{WORKER_BYTES // MiB} MiB at idle and at least {WORKER_REQUEST_BYTES // MiB} "
                f"MiB for its requests, the supervisor {SUPERVISOR_BYTES // MiB} MiB), more "
                f"than the {total // MiB} MiB of {source}: at most {fit} fit"
            )
    return None


#: OpenTelemetry's batch span processor settings: positive integers (milliseconds, or counts).
_BSP_INTEGERS = (
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_BSP_EXPORT_TIMEOUT",
)
#: The largest a batch setting may be (a thread's wait takes no longer timeout; 24 days).
_BSP_MOST = (1 << 31) - 1
_SDK_SAMPLERS = (
    "always_on",
    "always_off",
    "parentbased_always_on",
    "parentbased_always_off",
    "traceidratio",
    "parentbased_traceidratio",
)
_OTLP_TIMEOUTS = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")


def known_propagators() -> frozenset[str]:
    """The propagators ``OTEL_PROPAGATORS`` may name: those installed (entry points of
    ``opentelemetry_propagator``, as the API loads them), and ``none``."""
    return frozenset(
        {"none", *(point.name for point in entry_points(group="opentelemetry_propagator"))}
    )


def tracing_problems(environ: Mapping[str, str], otlp: bool) -> list[str]:
    """What OpenTelemetry's SDK and exporters would fail on, or quietly replace by a default,
    in the variables they read, in words (checked with tracing on; ``otlp``: an OTLP exporter
    is among the exporters)."""
    problems = []
    names = environ.get("OTEL_PROPAGATORS", "").strip()
    if names:
        known = known_propagators()
        for name in (part.strip() for part in names.split(",")):
            if name and name not in known:
                problems.append(
                    f"OTEL_PROPAGATORS names {name[:64]!r}, which is not installed; known: "
                    f"{', '.join(sorted(known))}"
                )
                break
    values: dict[str, int] = {}
    for variable in _BSP_INTEGERS:
        raw = environ.get(variable, "").strip()
        if not raw:
            continue
        if not (raw.isascii() and raw.isdigit()) or not 0 < int(raw) <= _BSP_MOST:
            problems.append(
                f"{variable} = {raw[:64]!r} is not a positive integer (1 to {_BSP_MOST})"
            )
            continue
        values[variable] = int(raw)
    queue = values.get("OTEL_BSP_MAX_QUEUE_SIZE", 2048)
    batch = values.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)
    if batch > queue:
        problems.append(
            f"OTEL_BSP_MAX_EXPORT_BATCH_SIZE = {batch} is more than OTEL_BSP_MAX_QUEUE_SIZE = "
            f"{queue} (2048 unless set): a batch is taken from the queue"
        )
    sampler = environ.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    argument = environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    # The SDK's own samplers: the ratio ones read the argument (and fail on one above 1), the
    # others ignore it; an argument given to them is still meant as a ratio. Samplers of other
    # packages (jaeger_remote...) read it as they will.
    if argument and (sampler in _SDK_SAMPLERS or not sampler):
        try:
            ratio = float(argument)
        except ValueError:
            ratio = math.nan
        if not 0.0 <= ratio <= 1.0:
            problems.append(
                f"OTEL_TRACES_SAMPLER_ARG = {argument[:64]!r} is not a ratio from 0 to 1 (the "
                "share of traces sampled by traceidratio and parentbased_traceidratio)"
            )
    for variable in _OTLP_TIMEOUTS if otlp else ():
        raw = environ.get(variable, "").strip()
        if not raw:
            continue
        try:
            seconds = float(raw)
        except ValueError:
            seconds = math.nan
        if not 0.0 < seconds <= MAX_SECONDS:
            problems.append(
                f"{variable} = {raw[:64]!r} is not a number of seconds from above 0 to "
                f"{MAX_SECONDS:g}"
            )
    return problems


def _foreign_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of other tools the service follows (see ``Settings._foreign``)."""
    return {
        key: value
        for key, value in environ.items()
        if key.startswith("OTEL_") or key == "PROMETHEUS_MULTIPROC_DIR"
    }
