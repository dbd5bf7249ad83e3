"""The project's promises about itself: README's commands are the ones CI and users run."""

import os
import re
import tomllib
from pathlib import Path

from app.settings import Settings
from tensor_ops_wire.dtypes import ELEMENT_TYPES

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
CI = (ROOT / ".ci" / "run").read_text()
CHECK = (ROOT / "scripts" / "check").read_text()
TEST = (ROOT / "scripts" / "test").read_text()


def shell_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", README, flags=re.S)


def readme_test_command() -> str:
    return next(block.strip() for block in shell_blocks() if "pytest" in block)


def test_ci_runs_the_readme_test_command() -> None:
    assert readme_test_command() in CI.splitlines()


def test_readme_run_command_serves_the_app_on_localhost_8000() -> None:
    run_command = next(block.strip() for block in shell_blocks() if "uvicorn" in block)
    assert "app.main:app" in run_command
    assert "--host 127.0.0.1 --port 8000" in run_command


def test_every_install_puts_the_client_distribution_beside_the_server() -> None:
    # The server depends on tensor-ops-client, which is not on an index: an install of "." alone
    # would fail to resolve it, so each command that installs the server installs ./client too.
    commands = [
        block.strip() for block in shell_blocks() if "uvicorn" in block or "pytest" in block
    ]
    commands += [line for line in CI.splitlines() if "pip install" in line]
    for command in commands:
        installs = re.findall(r"pip install ([^&]*)", command)
        assert installs, command
        for install in installs:
            if re.search(r"(^|\s)(-e\s+)?['\"]?\.(\[\w+\])?['\"]?(\s|$)", install):
                assert "./client" in install, command


def test_readme_shows_the_client_alone_and_imports_it_by_its_own_name() -> None:
    assert re.search(r"pip install (\S+ )*'?\./client(\[fast\])?'?(\s|$)", README)
    assert "from tensor_ops_client import" in README
    assert "from app.client import" not in README
    assert "app/client.py" not in README


def test_ci_runs_scripts_check_before_the_tests() -> None:
    lines = CI.splitlines()
    assert "scripts/check" in lines
    assert lines.index("scripts/check") < lines.index(readme_test_command())


def test_scripts_check_lints_and_type_checks_the_server_tests_and_client() -> None:
    lines = CHECK.splitlines()
    assert ".venv/bin/ruff check app tests client" in lines
    assert ".venv/bin/ruff format --check app tests client" in lines
    assert ".venv/bin/mypy --strict app tests" in lines
    assert ".venv/bin/mypy --strict client" in lines
    assert ".venv/bin/hadolint Dockerfile" in lines


def test_scripts_test_runs_the_readme_pytest_command_with_extra_arguments() -> None:
    pytest_part = readme_test_command().split("&&")[-1].strip()
    assert pytest_part.startswith(".venv/bin/python -m pytest")
    assert f'exec {pytest_part} "$@"' in TEST.splitlines()


def test_scripts_are_strict_bash_and_runnable_from_anywhere() -> None:
    for name in ("check", "test"):
        path = ROOT / "scripts" / name
        lines = path.read_text().splitlines()
        assert lines[0] == "#!/usr/bin/env bash", name
        assert "set -euo pipefail" in lines, name
        assert 'cd "$(dirname "${BASH_SOURCE[0]}")/.."' in lines, name
        assert os.access(path, os.X_OK), f"scripts/{name} is not executable"


def test_the_server_pins_the_client_version_it_is_released_with() -> None:
    server = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    client = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]
    pins = [
        dependency
        for dependency in server["dependencies"]
        if re.match(r"tensor-ops-client(\[[a-z,]+\])?==", dependency)
    ]
    assert [pin.split("==")[1] for pin in pins] == [client["version"]], pins


def test_readme_lists_every_setting() -> None:
    for name in Settings.model_fields:
        assert f"TENSOR_OPS_{name.upper()}" in README


def test_readme_lists_every_dtype_name() -> None:
    for element in ELEMENT_TYPES:
        assert f"| {element.numpy} | {element.openvino} | {element.kserve} |" in README
