"""Tracing is an extra (``pip install 'tensor-ops[tracing]'``): OpenTelemetry's SDK and
exporters are imported only with tracing on, and with tracing on but them missing, the service
refuses to start in one line (status 2), under ``python -m app`` and wherever the app is made.

Their absence is played by a ``sitecustomize`` that blocks them (``sys.modules[name] = None``):
any import of them then fails as if they were not installed. OpenTelemetry's API stays: FastAPI
itself requires and imports it."""

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from app import tracing

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = ("opentelemetry.sdk", "opentelemetry.exporter")
MISSING = (
    "cannot start: tracing is on ({}) but OpenTelemetry is not installed: "
    "pip install 'tensor-ops[tracing]'"
)


@pytest.fixture
def without_sdk(tmp_path: Path) -> dict[str, str]:
    """The environment of a process in which OpenTelemetry's SDK and exporters are missing."""
    (tmp_path / "sitecustomize.py").write_text(
        f"import sys\nfor name in {BLOCKED!r}:\n    sys.modules[name] = None\n"
    )
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    return {**env, "PYTHONPATH": path, "TENSOR_OPS_PORT": "0", "TENSOR_OPS_GRPC_PORT": "0"}


def refused(arguments: list[str], env: dict[str, str]) -> str:
    """The one line a process refusing to start writes (status 2)."""
    result = subprocess.run(
        [sys.executable, *arguments],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    output = (result.stdout + result.stderr).strip()
    assert "Traceback" not in output
    lines = output.splitlines()
    assert len(lines) == 1, output
    record = json.loads(lines[0])
    assert record["level"] == "error"
    message: str = record["message"]
    return message


@pytest.mark.parametrize(
    ("variables", "reason"),
    [
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
            "OTEL_EXPORTER_OTLP_ENDPOINT is set",
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            },
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set",
        ),
        ({"OTEL_TRACES_EXPORTER": "console"}, "OTEL_TRACES_EXPORTER=console"),
    ],
)
def test_python_m_app_refuses_tracing_without_opentelemetry(
    without_sdk: dict[str, str], variables: dict[str, str], reason: str
) -> None:
    message = refused(["-m", "app"], {**without_sdk, **variables})
    assert message == MISSING.format(reason)


def test_the_app_refuses_it_under_any_launcher(without_sdk: dict[str, str]) -> None:
    # As uvicorn or gunicorn would: the app made in the process, no python -m app before.
    env = {**without_sdk, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    message = refused(["-c", "from app.main import create_app; create_app()"], env)
    assert message == MISSING.format("OTEL_EXPORTER_OTLP_ENDPOINT is set")


def test_tracing_off_never_imports_the_sdk(without_sdk: dict[str, str]) -> None:
    # Blocked, an import would fail; and none is in sys.modules after the app is made.
    code = (
        "import sys\n"
        "from app.main import create_app\n"
        "create_app()\n"
        "loaded = [name for name in sys.modules if name.startswith(('opentelemetry.sdk', "
        "'opentelemetry.exporter')) and sys.modules[name] is not None]\n"
        "print('loaded:', loaded)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=without_sdk,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "loaded: []" in result.stdout


def test_tracing_off_with_the_sdk_installed_does_not_load_it() -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    code = (
        "import sys\n"
        "from app.main import create_app\n"
        "create_app()\n"
        "print(sorted(name for name in sys.modules if name.startswith(('opentelemetry.sdk', "
        "'opentelemetry.exporter'))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env, "TENSOR_OPS_GRPC_PORT": "0"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_with_the_sdk_installed_nothing_is_missing() -> None:
    for environ in (
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        },
        {"OTEL_TRACES_EXPORTER": "console"},
    ):
        settings = tracing.settings_from(environ)
        assert settings is not None
        assert tracing.unavailable(settings, environ) is None


def names(requirements: list[str]) -> set[str]:
    return {Requirement(text).name for text in requirements}


def test_opentelemetry_is_the_tracing_extra_which_the_tests_and_the_image_take() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    sdk = {
        "opentelemetry-api",
        "opentelemetry-sdk",
        "opentelemetry-exporter-otlp-proto-http",
        "opentelemetry-exporter-otlp-proto-grpc",
    }
    assert not sdk & names(project["dependencies"])
    assert names(project["optional-dependencies"]["tracing"]) == sdk
    test_extra = [Requirement(text) for text in project["optional-dependencies"]["test"]]
    assert any(item.name == "tensor-ops" and item.extras == {"tracing"} for item in test_extra)
    # The image installs requirements.lock, which scripts/lock makes with the extra.
    assert "'-e .[tracing]'" in (ROOT / "scripts" / "lock").read_text()
    for lock in ("requirements.lock", "requirements-test.lock"):
        text = (ROOT / lock).read_text()
        for name in sdk:
            assert f"\n{name}==" in text, (lock, name)
