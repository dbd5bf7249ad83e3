"""``python -m app`` refuses settings it cannot take, before any worker starts, with one log line
naming the variable and exit status 2: time settings that are not finite or longer than a day,
more workers than the machine can run, key and TLS files that are not regular files (a FIFO
does not block the start, ``/dev/zero`` is not read), and, with tracing
on, OpenTelemetry variables its SDK would fail on with a traceback in every worker."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from app.settings import MiB, tracing_problems, workers_problem
from tests.support import launch_server, server_output, stop_server

ROOT = Path(__file__).resolve().parents[1]
KEY_LINE = hashlib.sha256(b"a key").hexdigest() + " someone\n"


def start_refused(env: dict[str, str]) -> str:
    """The one line ``python -m app`` logs as it refuses to start with ``env`` (status 2)."""
    result = subprocess.run(
        [sys.executable, "-m", "app"],
        cwd=ROOT,
        env={**os.environ, "TENSOR_OPS_PORT": "0", "TENSOR_OPS_GRPC_PORT": "0", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    output = (result.stdout + result.stderr).strip()
    assert "Traceback" not in output
    lines = output.splitlines()
    assert len(lines) == 1, output
    assert '"level":"error"' in lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("RATE_WINDOW", "inf", "Input should be a finite number"),
        ("RATE_WINDOW", "nan", "Input should be a finite number"),
        ("BODY_TIMEOUT", "Infinity", "Input should be a finite number"),
        ("ADMISSION_TIMEOUT", "-inf", "Input should be"),
        ("GRACEFUL_TIMEOUT", "1e300", "Input should be less than or equal to 86400"),
        ("BODY_TIMEOUT", "86401", "Input should be less than or equal to 86400"),
        ("WORKERS", "100000", "is more than 4 worker processes a CPU"),
        ("MIN_TRANSFER_RATE", "99999999999999999999", "less than or equal to 1073741824"),
    ],
)
def test_settings_out_of_bounds(name: str, value: str, words: str) -> None:
    line = start_refused({f"TENSOR_OPS_{name}": value})
    assert f"TENSOR_OPS_{name} = " in line
    assert words in line


def test_workers_are_bounded_by_cpus_and_memory() -> None:
    assert workers_problem(8, cpus=2, memory=(64 << 30, "the machine's memory")) is None
    cpus = workers_problem(9, cpus=2, memory=(64 << 30, "the machine's memory"))
    assert cpus is not None and "at most 8" in cpus
    # A 512 MiB container takes one worker (296 MiB and the supervisor's 64), not two.
    limit = (512 * MiB, "the container's memory limit")
    assert workers_problem(1, cpus=8, memory=limit) is None
    memory = workers_problem(2, cpus=8, memory=limit)
    assert memory is not None
    assert "TENSOR_OPS_WORKERS = 2 needs about 656 MiB" in memory
    assert "more than the 512 MiB of the container's memory limit: at most 1 fit" in memory


@pytest.mark.parametrize("variable", ["API_KEYS_FILE", "TLS_CERT_FILE"])
def test_files_that_are_not_regular_files_are_refused_unread(tmp_path: Path, variable: str) -> None:
    key = tmp_path / "key.pem"
    key.write_text("not used")
    pair = {"TENSOR_OPS_TLS_KEY_FILE": str(key)} if variable == "TLS_CERT_FILE" else {}
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: opening it to read would wait for one forever
    cases = [
        (str(fifo), "is a FIFO, not a regular file"),
        ("/dev/zero", "is a device, not a regular file"),
        (str(tmp_path), "is a directory, not a regular file"),
    ]
    for path, words in cases:
        line = start_refused({f"TENSOR_OPS_{variable}": path, **pair})
        assert f"TENSOR_OPS_{variable} = '{path}' {words}" in line


def test_a_key_file_over_16_mib_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text(KEY_LINE + "#" * (16 << 20))
    line = start_refused({"TENSOR_OPS_API_KEYS_FILE": str(path)})
    assert "TENSOR_OPS_API_KEYS_FILE = " in line
    assert "more than the 16777216 a file here may hold" in line


def test_a_key_file_of_no_key_starts_locked_with_a_warning(tmp_path: Path) -> None:
    """A placeholder key file (comments only, as the shipped Secret) starts the service: its
    probes answer, every op is 401, and the log says why."""
    empty = tmp_path / "empty"
    empty.write_text("# a placeholder: every line a comment\n")
    url, process = launch_server({"TENSOR_OPS_API_KEYS_FILE": str(empty)}, command=["-m", "app"])
    try:
        assert httpx.get(f"{url}/health").status_code == 200
        refused = httpx.post(f"{url}/roll", json={"data": [1], "shift": 0, "axes": 0})
        assert refused.status_code == 401
        output = server_output(process)
        assert "holds no key" in output and "every request that needs a key is refused" in output
    finally:
        stop_server(process)


def test_a_key_file_of_one_hash_under_two_labels_is_refused(tmp_path: Path) -> None:
    twice = tmp_path / "twice"
    digest = KEY_LINE.split()[0]
    twice.write_text(f"{digest} first\n# a comment\n{digest} second\n")
    line = start_refused({"TENSOR_OPS_API_KEYS_FILE": str(twice)})
    assert "line 3: the same key hash as line 1, under another label" in line


TRACING_ON = {"OTEL_TRACES_EXPORTER": "console"}
OTLP_ON = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:9/v1/traces"}


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"OTEL_PROPAGATORS": "tracecontext,zipkin"}, "OTEL_PROPAGATORS names 'zipkin'"),
        ({"OTEL_BSP_MAX_QUEUE_SIZE": "0"}, "OTEL_BSP_MAX_QUEUE_SIZE = '0' is not a positive"),
        ({"OTEL_BSP_SCHEDULE_DELAY": "-5"}, "OTEL_BSP_SCHEDULE_DELAY = '-5' is not a positive"),
        ({"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "x"}, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE = 'x' is not"),
        ({"OTEL_BSP_EXPORT_TIMEOUT": "1.5"}, "OTEL_BSP_EXPORT_TIMEOUT = '1.5' is not a positive"),
        (
            {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4096"},
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE = 4096 is more than OTEL_BSP_MAX_QUEUE_SIZE",
        ),
        (
            {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"},
            "OTEL_TRACES_SAMPLER_ARG = '2' is not a ratio from 0 to 1",
        ),
        (
            {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "half"},
            "OTEL_TRACES_SAMPLER_ARG = 'half' is not a ratio",
        ),
        (
            {**OTLP_ON, "OTEL_EXPORTER_OTLP_TIMEOUT": "soon"},
            "OTEL_EXPORTER_OTLP_TIMEOUT = 'soon' is not a number of seconds",
        ),
        (
            {**OTLP_ON, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "inf"},
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT = 'inf' is not a number of seconds",
        ),
    ],
)
def test_opentelemetry_variables_the_sdk_cannot_take(env: dict[str, str], words: str) -> None:
    on = {} if "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" in env else TRACING_ON
    line = start_refused({**on, **env})
    assert words in line


def test_opentelemetry_variables_are_read_only_with_tracing_on() -> None:
    bad = {"OTEL_PROPAGATORS": "zipkin", "OTEL_BSP_MAX_QUEUE_SIZE": "-1"}
    assert len(tracing_problems(bad, otlp=False)) == 2
    good = {
        "OTEL_PROPAGATORS": "tracecontext,baggage",
        "OTEL_BSP_MAX_QUEUE_SIZE": "4096",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "1024",
        "OTEL_BSP_SCHEDULE_DELAY": "600000",
        "OTEL_TRACES_SAMPLER": "traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.25",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "10",
    }
    assert tracing_problems(good, otlp=True) == []
    # Not the SDK's own sampler: its argument is the sampler's to read.
    remote = {"OTEL_TRACES_SAMPLER": "jaeger_remote", "OTEL_TRACES_SAMPLER_ARG": "endpoint=x"}
    assert tracing_problems(remote, otlp=False) == []
    # With tracing off the service reads none of them: they do not stop the start.
    result = subprocess.run(
        [sys.executable, "-c", "from app.__main__ import _settings_or_exit; _settings_or_exit()"],
        cwd=ROOT,
        env={**os.environ, **bad, "OTEL_SDK_DISABLED": "true"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_a_metrics_directory_that_cannot_be_written_is_refused(tmp_path: Path) -> None:
    """The metrics library writes to ``PROMETHEUS_MULTIPROC_DIR`` as soon as a metric is made:
    a missing directory was a traceback at import."""
    line = start_refused({"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "absent")})
    assert "PROMETHEUS_MULTIPROC_DIR" in line and "is not a directory" in line
