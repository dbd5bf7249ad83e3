"""The project's promises about itself: README's commands are the ones CI and users run."""

import os
import re
import tomllib
from pathlib import Path

from app.settings import Settings
from tensor_ops_wire.dtypes import ELEMENT_TYPES
from tests.conftest import SYSTEM_TIER, SYSTEM_TOGETHER

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
#: The pages README links to; what moved out of README is checked where it now is.
SETTINGS_PAGE = (ROOT / "docs" / "settings.md").read_text()
CONTRACT_PAGE = (ROOT / "docs" / "contract.md").read_text()
CI = (ROOT / ".ci" / "run").read_text()
CHECK = (ROOT / "scripts" / "check").read_text()
TEST = (ROOT / "scripts" / "test").read_text()


def shell_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", README, flags=re.S)


def readme_test_command() -> str:
    return next(block.strip() for block in shell_blocks() if "pytest" in block)


def test_ci_runs_the_readme_test_command() -> None:
    assert readme_test_command() in CI.splitlines()


def readme_run_commands() -> list[str]:
    """README's commands that install and start the service, or start it again."""
    return [
        block.strip()
        for block in shell_blocks()
        if block.strip().endswith(".venv/bin/python -m app") and "pytest" not in block
    ]


def test_readme_run_command_serves_the_app_on_localhost_8000() -> None:
    # The production entry point, from the checkout's .venv: python -m app serves HTTP on
    # 127.0.0.1:8000 (and gRPC on 8001) by default, so the command names no address.
    commands = readme_run_commands()
    assert commands, "README gives no command that starts the service with python -m app"
    assert commands[0] == (
        "python3 -m venv .venv && .venv/bin/pip install -e ./client -e . && .venv/bin/python -m app"
    )
    assert ".venv/bin/python -m app" in commands[1:], "README says how to start it again"
    assert not any("uvicorn" in command for command in commands)
    defaults = Settings.model_fields
    assert (defaults["host"].default, defaults["port"].default) == ("127.0.0.1", 8000)
    assert defaults["grpc_port"].default == 8001


def test_every_install_puts_the_client_distribution_beside_the_server() -> None:
    # The server depends on tensor-ops-client, which is not on an index: an install of "." alone
    # would fail to resolve it, so each command that installs the server installs ./client too.
    commands = [
        block.strip()
        for block in shell_blocks()
        if "pip install" in block and (block.strip().endswith("-m app") or "pytest" in block)
    ]
    assert len(commands) == 2, commands
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


def test_the_settings_page_lists_every_setting() -> None:
    for name in Settings.model_fields:
        assert f"TENSOR_OPS_{name.upper()}" in SETTINGS_PAGE


def test_the_contract_page_lists_every_dtype_name() -> None:
    for element in ELEMENT_TYPES:
        assert f"| {element.numpy} | {element.openvino} | {element.kserve} |" in CONTRACT_PAGE


def test_every_system_tier_entry_names_a_module_or_a_test_of_it() -> None:
    """An entry that names nothing (a module or test renamed) would leave its tests in the
    default tier without a word."""
    tests = Path(__file__).resolve().parent
    missing = []
    for entry in (*SYSTEM_TIER, *SYSTEM_TOGETHER):
        module, _, name = entry.partition("::")
        path = tests / module
        defined = rf"^(async )?def {re.escape(name)}\("
        if not path.is_file() or (name and not re.search(defined, path.read_text(), re.M)):
            missing.append(entry)
    assert not missing, missing
