"""The command line's ops come from the service on its default address (no ``--url`` needed):
every op of the registry is a command, ``tensor-ops pad ...`` works, a missing service is said
in one line naming the address and how to give another; the help presents every op; and the
inputs of the data's type (``--pad-value``, ``--updates``, Concat's later tensors) take
``--dtype``, else the data's type."""

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.registry import REGISTRY
from tensor_ops_client import cli
from tests.support import free_port

pytestmark = pytest.mark.e2e


@pytest.fixture
def default_address(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No ``$TENSOR_OPS_URL``: the command line calls its default address."""
    monkeypatch.delenv(cli.URL_VARIABLE, raising=False)
    return monkeypatch


def served_at_default(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setattr(cli, "DEFAULT_URL", url)


def test_every_op_of_the_service_is_a_command_without_url(
    live_url: str, default_address: pytest.MonkeyPatch
) -> None:
    served_at_default(default_address, live_url)
    ops, unread, _ = cli._ops_for(["--help"])
    assert unread is None
    assert sorted(op.name for op in ops) == sorted(REGISTRY)
    help_text = cli.build_parser(ops, unread).format_help()
    for op in REGISTRY.values():
        assert op.spec in help_text, op.spec


def test_pad_on_the_default_address(
    live_url: str, default_address: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    served_at_default(default_address, live_url)
    out = tmp_path / "out.npy"
    status = cli.main(
        ["pad", "[[0, 1], [2, 3]]", "--dtype", "float32", "--pads-begin", "0", "1",
         "--pads-end", "1", "0", "--pad-value", "0.5", "--pad-mode", "constant", "-o", str(out)]
    )  # fmt: skip
    assert status == cli.OK
    output = np.load(out)
    expected = np.array([[0.5, 0, 1], [0.5, 2, 3], [0.5, 0.5, 0.5]], np.float32)
    assert output.dtype == np.float32
    assert output.tobytes() == expected.tobytes()


def test_no_service_on_the_default_address_is_said_in_one_line(
    default_address: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    address = f"http://127.0.0.1:{free_port()}"
    served_at_default(default_address, address)
    status = cli.main(["pad", "[1, 2]", "--pads-begin", "1", "--pads-end", "1"])
    assert status == cli.UNREACHABLE
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("tensor-ops: 'pad' is no op known without the service, and no service ")
    assert f"answers at {address}" in err
    assert "--url" in err and "$TENSOR_OPS_URL" in err
    assert "invalid choice" not in err


def test_the_help_without_the_service_presents_the_family(
    default_address: pytest.MonkeyPatch,
) -> None:
    address = f"http://127.0.0.1:{free_port()}"
    served_at_default(default_address, address)
    ops, unread, command = cli._ops_for(["--help"])
    assert command is None and unread is not None and address in unread
    text = cli.build_parser(ops, unread).format_help()
    assert "Run the OpenVINO operations a tensor-ops service serves" in text
    assert "Known without the service: Roll-7 and Gather-8" in text
    assert f"no service answers at {address}" in text
    assert "tensor-ops pad " in text and "tensor-ops concat " in text


def run_to_array(argv: list[str], out: Path) -> Any:
    assert cli.main([*argv, "-o", str(out)]) == cli.OK
    return np.load(out)


def test_dtype_and_the_data_type_reach_the_value_inputs(
    live_url: str, default_address: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    served_at_default(default_address, live_url)
    out = tmp_path / "out.npy"
    # --dtype types Concat's every tensor, not its first only.
    output = run_to_array(["concat", "[[1, 2]]", "[[2.5, 3]]", "--dtype", "float16",
                           "--axis", "0"], out)  # fmt: skip
    assert output.dtype == np.float16
    assert output.tolist() == [[1.0, 2.0], [2.5, 3.0]]
    # Without --dtype, numbers beside a float32 .npy take float32.
    first = tmp_path / "first.npy"
    np.save(first, np.array([[1, 2]], np.float32))
    output = run_to_array(["concat", str(first), "[[2.5, 3]]", "--axis", "0"], out)
    assert output.dtype == np.float32
    assert output.tolist() == [[1.0, 2.0], [2.5, 3.0]]
    # --updates as numbers beside float32 data.
    data = tmp_path / "data.npy"
    np.save(data, np.zeros((2, 3), np.float32))
    output = run_to_array(["scatter_update", str(data), "--indices", "1", "--updates", "0.25",
                           "0.5", "0.75", "--axis", "0"], out)  # fmt: skip
    assert output.dtype == np.float32
    assert output.tolist() == [[0, 0, 0], [0.25, 0.5, 0.75]]
