"""The project's promises about itself: README's commands are the ones CI and users run."""

import re
import tomllib
from pathlib import Path

from app.settings import Settings
from tensor_ops_wire.dtypes import ELEMENT_TYPES

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
CI = (ROOT / ".ci" / "run").read_text()


def shell_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", README, flags=re.S)


def test_ci_runs_the_readme_test_command() -> None:
    test_command = next(block.strip() for block in shell_blocks() if "pytest" in block)
    ci_lines = CI.splitlines()
    assert test_command in ci_lines


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


def test_ci_lints_and_type_checks_the_client() -> None:
    lines = CI.splitlines()
    assert any(line.startswith(".venv/bin/ruff check") and "client" in line for line in lines)
    assert any(
        line.startswith(".venv/bin/ruff format --check") and "client" in line for line in lines
    )
    assert ".venv/bin/mypy --strict client" in lines


def test_the_server_pins_the_client_version_it_is_released_with() -> None:
    server = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    client = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]
    assert f"tensor-ops-client=={client['version']}" in server["dependencies"]


def test_readme_lists_every_setting() -> None:
    for name in Settings.model_fields:
        assert f"TENSOR_OPS_{name.upper()}" in README


def test_readme_lists_every_dtype_name() -> None:
    for element in ELEMENT_TYPES:
        assert f"| {element.numpy} | {element.openvino} | {element.kserve} |" in README
