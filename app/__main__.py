"""``python -m app``: serve tensor-ops with uvicorn as its settings say (address, workers, TLS)."""

import os
import sys
import time

#: glibc serves blocks from this size on by mmap, and so gives them back when they are freed.
#: Its default threshold grows to the largest block freed (up to 32 MiB): after a few large
#: requests an idle worker would keep hundreds of MiB of heap. The Docker image and the
#: deployment files set the same variable; it is read once, when the process starts.
MMAP_THRESHOLD = "MALLOC_MMAP_THRESHOLD_"


def _with_allocator_settings() -> None:
    """Start afresh with the allocator's setting when the environment does not give it."""
    if sys.platform == "linux" and MMAP_THRESHOLD not in os.environ:
        os.environ[MMAP_THRESHOLD] = str(1 << 20)
        # The same command again, interpreter options (-X, -W) included.
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def _metrics_dir_or_exit() -> None:
    """``PROMETHEUS_MULTIPROC_DIR``, when set, must be a directory the workers can write: the
    metrics library opens its files there as soon as a metric is made (at import), and would
    fail with a traceback."""
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if folder and not (os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK)):
        line = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
            "level": "error",
            "logger": "tensor_ops.service",
            "message": f"cannot start: PROMETHEUS_MULTIPROC_DIR = {folder!r} is not a "
            "directory this process can write; unset it (python -m app makes one for "
            "several workers) or create it",
        }
        import json  # noqa: PLC0415 - only on this path

        sys.stderr.write(json.dumps(line, separators=(",", ":")) + "\n")
        sys.exit(2)


if __name__ == "__main__":
    _with_allocator_settings()
    _metrics_dir_or_exit()

import logging  # noqa: E402
import shutil  # noqa: E402
import ssl  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, NoReturn  # noqa: E402

import uvicorn  # noqa: E402
from pydantic import ValidationError  # noqa: E402

from app import tracing  # noqa: E402
from app.grpc.ports import (  # noqa: E402
    GrpcPortError,
    held_message,
    port_is_free,
)
from app.keyfile import KeyFileError, read_keys  # noqa: E402
from app.observability import configure_logging, log_format  # noqa: E402
from app.settings import Settings, tracing_problems, workers_problem  # noqa: E402

LOG = logging.getLogger("tensor_ops.service")


def main() -> None:
    """Run uvicorn from the ``TENSOR_OPS_*`` settings; several workers share one metrics dir."""
    settings = _settings_or_exit()
    configure_logging(settings.log_level, settings.log_format)
    if settings.grpc_port:
        # Each worker would refuse the port at its start-up too, but uvicorn's supervisor then
        # exits with status 0: a process manager would take that for a clean stop.
        try:
            if not port_is_free(settings.host, settings.grpc_port):
                raise GrpcPortError(held_message(settings.host, settings.grpc_port))
        except GrpcPortError as error:
            LOG.error("gRPC cannot start: %s", error)
            sys.exit(1)
    if settings.port:
        # uvicorn binds HTTP after the app has started (gRPC): its refusal would
        # come after all that, among the lines of the start and of the stop that follows.
        problem = _http_port_problem(settings.host, settings.port)
        if problem:
            LOG.error("HTTP cannot start: %s", problem)
            sys.exit(1)
    metrics_dir = None
    if settings.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Set before any worker imports prometheus_client: each writes its samples there.
        metrics_dir = tempfile.mkdtemp(prefix="tensor-ops-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    try:
        uvicorn.run(
            "app.main:app",
            host=settings.host,
            port=settings.port,
            workers=settings.workers,
            log_level=settings.log_level,
            access_log=False,  # the service logs each request itself, in its own format
            timeout_graceful_shutdown=int(settings.graceful_timeout),
            server_header=False,
            # Each answer's head and body in one write: a replica that dies between the two
            # would leave a load balancer an answer it can neither finish nor move on.
            http="app.http.protocol:ServiceHttpProtocol",
            # uvloop, with TLS handshakes inside the head's time limit.
            loop="app.http.loop:new_loop",
            log_config=_log_config(log_format(settings.log_format)),
            **_tls_arguments(settings),
        )
    finally:
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _settings_or_exit() -> Settings:
    """The settings, and the key file they name, checked before any worker starts: a refusal
    is one log line a problem and exit status 2, not a traceback from each worker. Beyond
    pydantic's checks: more workers than the machine's CPUs and memory take, and with tracing
    on, the OpenTelemetry variables its SDK would fail on. A key file of no key is not refused
    (a placeholder Secret must let the probes answer while every op is 401): each worker logs
    a warning that everyone is locked out."""
    try:
        settings = Settings()
        if settings.api_keys_file is not None:
            read_keys(settings.api_keys_file)
    except ValidationError as error:
        _refuse_start([_in_words(item) for item in error.errors(include_url=False)])
    except KeyFileError as error:
        _refuse_start([f"TENSOR_OPS_API_KEYS_FILE: {error}"])
    workers = workers_problem(settings.workers)
    if workers:
        _refuse_start([workers])
    if settings.tls_cert_file is not None and settings.tls_key_file is not None:
        problem = _tls_problem(
            settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file
        )
        if problem:
            _refuse_start([problem])
    try:
        traced = tracing.settings_from(os.environ)
    except tracing.TracingError as error:
        _refuse_start([str(error)])
    if traced is not None:
        missing = tracing.unavailable(traced, os.environ)
        if missing:
            _refuse_start([missing])
        # What the SDK and its exporters would otherwise fail on in each worker, with a trace.
        problems = tracing_problems(os.environ, "otlp" in traced.exporters)
        if problems:
            _refuse_start(problems)
    return settings


def _tls_arguments(settings: Settings) -> dict[str, Any]:
    """uvicorn's TLS arguments: HTTPS from the certificate and key, and with a client CA,
    a certificate from every client. The context is uvicorn's ``ssl.SSLContext`` of
    ``PROTOCOL_TLS_SERVER``: TLS 1.2 at least (Python's floor since 3.10), no ALPN, HTTP/1.1."""
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        return {}
    arguments: dict[str, Any] = {
        "ssl_certfile": str(settings.tls_cert_file),
        "ssl_keyfile": str(settings.tls_key_file),
    }
    if settings.tls_client_ca_file is not None:
        arguments["ssl_ca_certs"] = str(settings.tls_client_ca_file)
        arguments["ssl_cert_reqs"] = ssl.CERT_REQUIRED
    return arguments


class _EncryptedKeyError(Exception):
    """Raised instead of OpenSSL asking for a passphrase on the terminal."""


def _no_passphrase() -> str:
    raise _EncryptedKeyError


def _tls_problem(cert: Path, key: Path, client_ca: Path | None) -> str | None:
    """What is wrong with the TLS files, in words, before any worker loads them (uvicorn and
    gRPC would each fail with a traceback or a bare "cannot bind"); None when they load."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    for name, path in (("CERT_FILE", cert), ("CLIENT_CA_FILE", client_ca)):
        if path is None:
            continue
        try:
            context.load_verify_locations(cafile=path)
        except (ssl.SSLError, OSError, ValueError) as error:
            return f"TENSOR_OPS_TLS_{name} = {str(path)!r} holds no PEM certificate ({error})"
    try:
        context.load_cert_chain(cert, key, password=_no_passphrase)
    except _EncryptedKeyError:
        return (
            f"TENSOR_OPS_TLS_KEY_FILE = {str(key)!r} is encrypted: give the key unencrypted "
            "(kept readable by the service's user alone); there is no passphrase setting"
        )
    except ssl.SSLError as error:
        if error.reason == "KEY_VALUES_MISMATCH":
            return (
                f"TENSOR_OPS_TLS_KEY_FILE = {str(key)!r} is not the private key of the "
                f"certificate in TENSOR_OPS_TLS_CERT_FILE = {str(cert)!r}"
            )
        return f"TENSOR_OPS_TLS_KEY_FILE = {str(key)!r} holds no PEM private key ({error})"
    except OSError as error:
        return f"TENSOR_OPS_TLS_KEY_FILE = {str(key)!r} cannot be read: {error.strerror}"
    return None


def _in_words(item: Any) -> str:
    message = str(item["msg"]).removeprefix("Value error, ")
    if message.startswith("TENSOR_OPS_") or not item["loc"]:
        return message
    name = "TENSOR_OPS_" + "_".join(str(part) for part in item["loc"]).upper()
    return f"{name} = {str(item.get('input'))[:64]!r}: {message}"


def _http_port_problem(host: str, port: int) -> str | None:
    """Why HTTP cannot listen on ``host:port``, in words; None when it can."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        if port_is_free(host, port):
            return None
    except GrpcPortError:  # the address itself: uvicorn says why in one line of its own
        return None
    return (
        f"the HTTP port {where} is already in use by another process; stop it, or choose a "
        "free port with TENSOR_OPS_PORT (and, for a second instance, TENSOR_OPS_GRPC_PORT: "
        "gRPC listens beside HTTP, on 8001 unless set)"
    )


def _refuse_start(problems: list[str]) -> NoReturn:
    # The settings that would say how to log may be what is wrong: then as by default.
    form = os.environ.get("TENSOR_OPS_LOG_FORMAT", "").strip().lower()
    configure_logging("info", form if form in ("json", "text") else "auto")
    for problem in problems:
        logging.getLogger("tensor_ops.service").error("cannot start: %s", problem)
    sys.exit(2)


def _log_config(form: str) -> dict[str, Any]:
    """uvicorn's own messages in the service's log format."""
    formatter = {
        "()": "app.observability.JsonFormatter"
        if form == "json"
        else "app.observability.TextFormatter"
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"service": formatter},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "service",
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": "INFO"},
        },
    }


if __name__ == "__main__":
    main()
