"""The project's promises about itself: README's commands are the ones CI and users run."""

import re
from pathlib import Path

from app.settings import Settings
from tensor_ops_wire.dtypes import ELEMENT_TYPES

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def shell_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", README, flags=re.S)


def test_ci_runs_the_readme_test_command() -> None:
    test_command = next(block.strip() for block in shell_blocks() if "pytest" in block)
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in ci_lines


def test_readme_run_command_serves_the_app_on_localhost_8000() -> None:
    run_command = next(block.strip() for block in shell_blocks() if "uvicorn" in block)
    assert "app.main:app" in run_command
    assert "--host 127.0.0.1 --port 8000" in run_command


def test_readme_lists_every_setting() -> None:
    for name in Settings.model_fields:
        assert f"TENSOR_OPS_{name.upper()}" in README


def test_readme_lists_every_dtype_name() -> None:
    for element in ELEMENT_TYPES:
        assert f"| {element.numpy} | {element.openvino} | {element.kserve} |" in README
