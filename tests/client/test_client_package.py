"""The client's own distribution, ``tensor-ops-client``, as a user gets it.

Its wheel names no server dependency and holds only ``tensor_ops_client`` and
``tensor_ops_wire``; installed in a fresh virtual environment (httpx, NumPy, ml-dtypes, rich and shtab come
from the package index), it imports beside a project that has its own ``app`` package, works with no
server code, and its ``tensor-ops`` command runs. The install needs the index: when the index
cannot be reached the tests that need it are skipped, saying so.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from collections.abc import Iterator
from email.parser import HeaderParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "client"
VERSION = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]["version"]

#: What the client needs, and nothing else: httpx, NumPy, ml-dtypes; rich and shtab for the
#: command line's progress bars, tables and completion scripts (pure Python, no server's).
RUNTIME = {"httpx", "numpy", "ml-dtypes", "rich", "shtab"}
#: The server's distributions: none may come with the client.
SERVER = {
    "fastapi",
    "fastapi-offline",
    "uvicorn",
    "starlette",
    "pydantic",
    "pydantic-settings",
    "prometheus-client",
    "orjson",
    "tensor-ops",
}
INSTALL_TIMEOUT = 180  # seconds


def environment() -> dict[str, str]:
    """This process's environment (the pip configuration and index included), without anything
    that would put this checkout or another environment's packages on a child's path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def run(
    argv: list[str | Path], timeout: float, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(arg) for arg in argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=environment(),
        cwd=cwd,
    )


def distribution_name(requirement: str) -> str:
    """The normalised name a ``Requires-Dist`` value starts with."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
    assert name, requirement
    return re.sub(r"[-_.]+", "-", name.group(0)).lower()


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Skips the test unless pip can fetch a distribution from the configured index."""
    probe = tmp_path_factory.mktemp("probe")
    try:
        done = run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", probe, "httpx"], 60
        )
    except subprocess.TimeoutExpired:
        pytest.skip("the package index did not answer within 60 s")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        pytest.skip(f"the package index is unreachable: {last}")


@pytest.fixture(scope="module")
def wheel(index: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The client's wheel, built as a user would (``pip wheel --no-deps ./client``).

    It is built from a copy of ``client/``: setuptools leaves ``build/`` and ``*.egg-info`` in the
    tree it builds, and files left there from an earlier build would end up in the next wheel.
    """
    source = tmp_path_factory.mktemp("source") / "client"
    shutil.copytree(
        CLIENT, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    )
    out = tmp_path_factory.mktemp("wheel")
    command: list[str | Path] = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        source,
        "-w",
        out,
    ]
    try:
        done = run(command, INSTALL_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.skip(f"building the wheel took over {INSTALL_TIMEOUT} s (fetching setuptools)")
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = out.glob("*.whl")
    assert built.name.startswith(f"tensor_ops_client-{VERSION}-py3-none-any")
    return built


@pytest.fixture(scope="module")
def fresh_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A new virtual environment with the wheel installed and nothing else asked for."""
    venv = tmp_path_factory.mktemp("venv")
    done = run([sys.executable, "-m", "venv", venv], 120)
    assert done.returncode == 0, done.stderr
    python = venv / "bin" / "python"
    try:
        done = run([python, "-m", "pip", "install", "--quiet", wheel], INSTALL_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.skip(f"installing the client's dependencies took over {INSTALL_TIMEOUT} s")
    assert done.returncode == 0, done.stdout + done.stderr
    yield venv
    shutil.rmtree(venv, ignore_errors=True)


def test_wheel_requires_only_the_client_dependencies(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        (metadata_path,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = HeaderParser().parsestr(archive.read(metadata_path).decode())
    requires = metadata.get_all("Requires-Dist") or []
    names = {distribution_name(r) for r in requires}
    assert not names & SERVER, requires
    assert not any(name.startswith(("fastapi", "uvicorn", "prometheus")) for name in names)
    runtime = {distribution_name(r) for r in requires if "extra ==" not in r}
    assert runtime == RUNTIME, requires
    fast = {distribution_name(r) for r in requires if re.search(r"extra == ['\"]fast['\"]", r)}
    assert fast == {"pybase64", "isal"}, requires
    assert metadata["Name"] == "tensor-ops-client"
    assert metadata["Version"] == VERSION


def test_wheel_holds_only_the_client_and_wire_packages(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top_level = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    assert top_level == {"tensor_ops_client", "tensor_ops_wire"}, sorted(names)
    assert "tensor_ops_client/py.typed" in names
    assert "tensor_ops_wire/py.typed" in names
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)
    with zipfile.ZipFile(wheel) as archive:
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = archive.read(entry_points).decode()
    assert "tensor-ops = tensor_ops_client:main" in scripts


#: Run by the fresh environment's Python in a project with its own ``app`` package: the client
#: works (a roll through httpx's mock transport, bfloat16 included) and no server code is there.
IN_A_PROJECT = textwrap.dedent(
    """
    import importlib.metadata, importlib.util, io, json, sys

    import app
    import httpx, ml_dtypes, numpy as np
    from tensor_ops_client import (
        AsyncTensorOpsClient, TensorOpsClient, TensorOpsError, Transport, __version__, main,
    )

    def answer(request):
        arrays = np.load(io.BytesIO(request.content))
        out = np.roll(arrays["data"], arrays["shift"].tolist(), arrays["axes"].tolist())
        buffer = io.BytesIO()
        np.save(buffer, out)
        return httpx.Response(200, content=buffer.getvalue())

    http = httpx.Client(transport=httpx.MockTransport(answer), base_url="http://tensor-ops")
    with TensorOpsClient(http=http) as client:
        rolled = client.roll(np.arange(5, dtype=ml_dtypes.bfloat16), 2, 0)
    print(json.dumps({
        "app": app.MINE,
        "client": sys.modules["tensor_ops_client"].__file__,
        "version": __version__,
        "rolled": [float(x) for x in rolled],
        "dtype": str(rolled.dtype),
        "missing": [m for m in ("fastapi", "uvicorn", "starlette", "pydantic", "prometheus_client",
                                "orjson") if importlib.util.find_spec(m) is None],
        "distributions": sorted(d.metadata["Name"].lower() for d in importlib.metadata.distributions()),
    }))
    """
)


def test_client_imports_beside_a_project_with_its_own_app(fresh_venv: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "app").mkdir(parents=True)
    (project / "app" / "__init__.py").write_text('MINE = "the project\'s own app"\n')
    python = fresh_venv / "bin" / "python"
    done = run([python, "-c", IN_A_PROJECT], 60, cwd=project)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["app"] == "the project's own app"
    assert Path(seen["client"]).is_relative_to(fresh_venv)
    assert seen["version"] == VERSION
    assert seen["rolled"] == [3.0, 4.0, 0.0, 1.0, 2.0]
    assert seen["dtype"] == "bfloat16"
    assert seen["missing"] == [
        "fastapi",
        "uvicorn",
        "starlette",
        "pydantic",
        "prometheus_client",
        "orjson",
    ]
    assert not set(seen["distributions"]) & SERVER, seen["distributions"]
    done = run([python, "-c", "import fastapi"], 60, cwd=project)
    assert done.returncode != 0
    assert "ModuleNotFoundError: No module named 'fastapi'" in done.stderr


def test_installed_command_line_runs(fresh_venv: Path, tmp_path: Path) -> None:
    script = fresh_venv / "bin" / "tensor-ops"
    done = run([script, "--help"], 60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: tensor-ops")
    assert all(f"    {command} " in done.stdout for command in ("roll", "gather", "health", "info"))
    done = run([script, "--version"], 60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"tensor-ops {VERSION}"
    done = run([fresh_venv / "bin" / "python", "-m", "tensor_ops_client", "roll", "--help"], 60)
    assert done.returncode == 0, done.stderr
    assert "--shift" in done.stdout
