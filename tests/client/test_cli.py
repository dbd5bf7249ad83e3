"""The ``tensor-ops`` command line against a real server: every input form (``.npy``, ``.npz``,
JSON, CSV, standard input, integers), every output form (file, table, JSON, ``.npy`` to a pipe),
every transport, the exit statuses scripts test (0, 2, 3, 4), ``health``, ``info``, progress
bars on a terminal and not in a pipe, ``--help`` and shell completion."""

import io
import json
import os
import pty
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt
import pytest

from app.ops import gather, roll
from app.registry import REGISTRY
from tensor_ops_client import TRANSPORTS, main
from tests.support import assert_same_bits, free_port, launch_server, stop_server

pytestmark = pytest.mark.e2e

Array = npt.NDArray[Any]
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
SCRIPT = Path(sys.executable).parent / "tensor-ops"


@pytest.fixture(scope="module")
def grpc_server() -> Iterator[tuple[str, str]]:
    """A server with gRPC on: its URL and its gRPC target."""
    port = free_port()
    url, process = launch_server(env={"TENSOR_OPS_GRPC_PORT": str(port)})
    yield url, f"127.0.0.1:{port}"
    stop_server(process)


def service(url_and_target: tuple[str, str], transport: str) -> list[str]:
    url, target = url_and_target
    options = ["--url", url, "--transport", transport]
    return [*options, "--grpc-target", target] if transport == "grpc" else options


def save(path: Path, array: Array) -> str:
    np.save(path, array)
    return str(path)


def load(path: Path | str) -> Array:
    array: Array = np.load(path, allow_pickle=False)
    return array


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """The console script, as a user's shell runs it (stdout and stderr are pipes)."""
    return subprocess.run(
        [str(SCRIPT), *argv],
        capture_output=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


# --- Values, on every transport ----------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_roll_and_gather_on_every_transport(
    grpc_server: tuple[str, str], tmp_path: Path, transport: str
) -> None:
    rng = np.random.default_rng(7)
    data = rng.standard_normal((3, 4)).astype(np.float32)
    source = save(tmp_path / "in.npy", data)
    out = tmp_path / "out.npy"
    common = service(grpc_server, transport)
    assert (
        main([*common, "roll", source, "--shift", "1", "-2", "--axes", "0", "1", "-o", str(out)])
        == 0
    )
    assert_same_bits(load(out), roll(data, [1, -2], [0, 1]))
    indices = np.array([[1, -1], [4, 0], [0, 3]], dtype=np.int8)
    index_file = save(tmp_path / "idx.npy", indices)
    argv = [*common, "gather", source, "--indices", index_file, "--axis", "1", "--batch-dims", "1"]
    assert main([*argv, "-o", str(out)]) == 0
    assert_same_bits(load(out), gather(data, indices, 1, 1))
    # The options may also come after the command's name.
    argv = ["gather", source, "--indices", "2", "0", "--axis", "0", *common, "-o", str(out)]
    assert main(argv) == 0
    assert_same_bits(load(out), data[[2, 0]])


@pytest.mark.parametrize("transport", ["npz", "v2"])
def test_bfloat16(live_url: str, tmp_path: Path, transport: str) -> None:
    data = np.random.default_rng(9).standard_normal((2, 5)).astype(BFLOAT16)
    source = save(tmp_path / "in.npy", data.view(np.uint16))
    out = tmp_path / "out.npy"
    argv = ["--url", live_url, "--transport", transport, "roll", source, "--shift", "3"]
    assert main([*argv, "--axes", "-1", "--dtype", "bfloat16", "-o", str(out)]) == 0
    # bfloat16 is written as 2-byte unsigned integers, to be viewed as bfloat16.
    output = load(out)
    assert output.dtype == np.uint16
    assert_same_bits(output.view(BFLOAT16), roll(data, 3, -1))


# --- Input forms -------------------------------------------------------------------------------


def test_npz_archives_hold_the_inputs(live_url: str, tmp_path: Path) -> None:
    data = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    archive = tmp_path / "inputs.npz"
    np.savez(archive, data=data, indices=np.array([2, -1]), axis=np.array(2))
    out = tmp_path / "out.npy"
    # Every input from the archive.
    assert main(["--url", live_url, "gather", str(archive), "-o", str(out)]) == 0
    assert_same_bits(load(out), gather(data, [2, -1], 2))
    # An option overrides the archive's member; file.npz:member names one.
    argv = ["--url", live_url, "gather", f"{archive}:data", "--indices", "0", "--axis"]
    assert main([*argv, f"{archive}:axis", "-o", str(out)]) == 0
    assert_same_bits(load(out), data[:, :, 0])


def test_json_and_csv_inputs(live_url: str, tmp_path: Path) -> None:
    out = tmp_path / "out.npy"
    literal = "[[1, 2, 3], [4, 5, 6]]"
    argv = ["--url", live_url, "roll", literal, "--shift", "1", "--axes", "1", "-o", str(out)]
    assert main(argv) == 0
    result = load(out)
    assert result.dtype == np.int64
    assert result.tolist() == [[3, 1, 2], [6, 4, 5]]
    (tmp_path / "data.json").write_text("[[0.5, 1.5], [2.5, 3.5]]")
    argv = ["--url", live_url, "gather", str(tmp_path / "data.json"), "--indices", "[1, 0, 5]"]
    assert main([*argv, "--axis", "0", "--dtype", "float32", "-o", str(out)]) == 0
    result = load(out)
    assert result.dtype == np.float32
    assert result.tolist() == [[2.5, 3.5], [0.5, 1.5], [0.0, 0.0]]
    (tmp_path / "data.csv").write_text("1,2,3\n4,5,6\n")
    argv = ["--url", live_url, "roll", str(tmp_path / "data.csv"), "--shift", "1", "--axes", "0"]
    assert main([*argv, "--dtype", "int16", "-o", str(out)]) == 0
    result = load(out)
    assert result.dtype == np.int16
    assert result.tolist() == [[4, 5, 6], [1, 2, 3]]


def test_stdin_in_and_npy_out_to_a_pipe(live_url: str, tmp_path: Path) -> None:
    data = np.arange(8, dtype=np.uint32)
    buffer = io.BytesIO()
    np.save(buffer, data)
    done = subprocess.run(
        [str(SCRIPT), "--url", live_url, "roll", "-", "--shift", "1", "--axes", "0"],
        input=buffer.getvalue(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == b""  # no progress bars, no table: stdout is a pipe
    assert_same_bits(np.load(io.BytesIO(done.stdout), allow_pickle=False), np.roll(data, 1))


def test_output_forms(live_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--url", live_url, "roll", "[[1, 2, 3], [4, 5, 6]]", "--shift", "1", "--axes", "1"]
    assert main([*argv, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "data": [[3, 1, 2], [6, 4, 5]], "dtype": "int64", "shape": [2, 3],
    }  # fmt: skip
    assert main([*argv, "--format", "table"]) == 0
    table = capsys.readouterr().out
    assert "int64 [2, 3]" in table
    rows = [line for line in table.splitlines() if line.startswith("│")]
    assert [row.split("│")[1:-1] for row in rows] == [
        [" 0 ", " 3 ", " 1 ", " 2 "],
        [" 1 ", " 6 ", " 4 ", " 5 "],
    ]
    # A large result is summarised, and the user told how to keep all of it.
    big = ["--url", live_url, "roll", "[" + ",".join(["1"] * 1000) + "]", "--shift", "0"]
    assert main([*big, "--axes", "0", "--format", "table"]) == 0
    summary = capsys.readouterr().out
    assert "int64 [1000]" in summary and "..." in summary and "-o out.npy" in summary
    expected = [[3, 1, 2], [6, 4, 5]]
    assert main([*argv, "-o", str(tmp_path / "out.json")]) == 0
    assert json.loads((tmp_path / "out.json").read_text())["data"] == expected
    assert main([*argv, "-o", str(tmp_path / "out.csv")]) == 0
    assert (tmp_path / "out.csv").read_text() == "3,1,2\n6,4,5\n"
    assert main([*argv, "-o", str(tmp_path / "out.npy")]) == 0
    assert load(tmp_path / "out.npy").tolist() == expected


# --- Exit statuses ------------------------------------------------------------------------------


def test_refused_exits_3_with_status_kind_and_message(live_url: str, tmp_path: Path) -> None:
    source = save(tmp_path / "in.npy", np.zeros((2, 3), np.float32))
    out = tmp_path / "out.npy"
    done = run("--url", live_url, "roll", source, "--shift", "1", "--axes", "2", "-o", str(out))
    assert done.returncode == 3
    assert done.stdout == b""
    lines = done.stderr.decode().splitlines()
    assert lines[0] == (
        "tensor-ops: [422 spec_violation] axes: axes = 2 is out of range for data of rank 2 "
        "(allowed values: [-2, 1])"
    )
    assert lines[1].startswith("tensor-ops: request id ") and len(lines[1].split()[-1]) == 32
    assert not out.exists()


def test_unreachable_exits_4(tmp_path: Path) -> None:
    source = save(tmp_path / "in.npy", np.zeros(3, np.float32))
    done = run("--url", closed_port_url(), "--retries", "1", "gather", source, "--indices", "0",
               "--axis", "0")  # fmt: skip
    assert done.returncode == 4
    err = done.stderr.decode()
    assert err.startswith("tensor-ops: cannot reach the service at http://127.0.0.1:")
    assert "gave up after 2 attempts" in err
    done = run("--url", closed_port_url(), "--no-retry", "health")
    assert done.returncode == 4


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["roll", "{source}", "--shift", "one", "--axes", "0"], "shift: 'one' is neither a file"),
        (["roll", "{source}", "--shift", "1", "--axes", "0", "--dtype", "bfloat16"],
         "--dtype bfloat16 needs 2-byte elements"),
        (["roll", "{source}", "--shift", "1"], "--axes is required"),
        (["roll", "missing.npy", "--shift", "1", "--axes", "0"], "No such file or directory"),
        (["roll", "{bad}", "--shift", "1", "--axes", "0"], "not an .npy"),
        (["roll", "[1, [2]]", "--shift", "1", "--axes", "0"], "not a tensor of numbers"),
        (["roll", "{source}", "--shift", "1", "--axes", "0", "--dtype", "complex"],
         "unknown element type"),
        (["--timeout", "0", "health"], "must be positive"),
        (["--transport", "carrier-pigeon", "health"], "invalid choice"),
        (["roll", "{source}", "--shift", "1", "--axes", "0", "--grpc-target", "h:1"],
         "--grpc-target is for --transport grpc"),
        (["--client-cert", "c.pem", "health"], "--client-cert and --client-key go together"),
        ([], "the following arguments are required: COMMAND"),
    ],
)  # fmt: skip
def test_usage_errors_exit_2_before_any_request(
    tmp_path: Path, argv: list[str], message: str
) -> None:
    source = save(tmp_path / "in.npy", np.zeros(3, np.float32))
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"not numpy at all")
    argv = [part.format(source=source, bad=bad) for part in argv]
    done = run("--url", closed_port_url(), *argv)  # never reached
    assert done.returncode == 2, done.stderr
    assert message in done.stderr.decode()
    assert b"Traceback" not in done.stderr


# --- health and info ----------------------------------------------------------------------------


def test_health_and_info(grpc_server: tuple[str, str]) -> None:
    url, target = grpc_server
    done = run("health", env={"TENSOR_OPS_URL": url})
    assert (done.returncode, done.stdout) == (0, b"live: yes\nready: yes\n")
    done = run("--url", url, "info", "--json")
    assert done.returncode == 0
    info = json.loads(done.stdout)
    assert [op["spec"] for op in info["ops"]][:2] == ["Roll-7", "Gather-8"]
    assert [op["name"] for op in info["ops"]] == list(REGISTRY)
    assert info["transports"]["grpc_port"] == int(target.rsplit(":", 1)[1])
    done = run("--url", url, "info")
    text = done.stdout.decode()
    assert text.startswith(f"tensor-ops {info['version']}\n")
    assert "  gather: Gather-8 (inputs data, indices, axis; attributes batch_dims=0)" in text
    assert "  max_body_bytes: 268435456 (256 MiB)" in text
    assert f"gRPC on port {info['transports']['grpc_port']}" in text


# --- Progress, help, completion -----------------------------------------------------------------


def _on_a_terminal(argv: list[str], timeout: float = 60) -> tuple[int, str]:
    """The console script with stderr on a pseudo-terminal (stdout a pipe): its exit status
    and what the terminal showed."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [str(SCRIPT), *argv],
        stdout=subprocess.DEVNULL,
        stderr=follower,
        env={**os.environ, "COLUMNS": "100"},
    )
    os.close(follower)
    shown = b""
    while True:
        ready, _, _ = select.select([leader], [], [], timeout)
        if not ready:
            process.kill()
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal's other end closed: the process is done
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    return process.wait(timeout), shown.decode("utf-8", "replace")


def test_progress_bars_on_a_terminal_only(live_url: str, tmp_path: Path) -> None:
    data = np.zeros((2048, 1024), dtype=np.float32)  # 8 MiB each way
    source = save(tmp_path / "big.npy", data)
    out = tmp_path / "out.npy"
    argv = ["--url", live_url, "roll", source, "--shift", "1", "--axes", "0", "-o", str(out)]
    status, shown = _on_a_terminal(argv)
    assert status == 0
    assert "upload" in shown and "download" in shown
    assert "8.0/8.0 MiB" in shown  # both bars end full
    assert_same_bits(load(out), data)
    # A small transfer draws nothing; a pipe gets nothing; --no-progress turns them off.
    small = save(tmp_path / "small.npy", np.zeros(16, np.float32))
    status, shown = _on_a_terminal(["--url", live_url, "roll", small, "--shift", "1", "--axes",
                                    "0", "-o", str(out)])  # fmt: skip
    assert (status, shown) == (0, "")
    status, shown = _on_a_terminal([*argv, "--no-progress"])
    assert (status, shown) == (0, "")
    done = run(*argv)
    assert (done.returncode, done.stderr) == (0, b"")
    # --progress draws them into a pipe too.
    done = run(*argv, "--progress")
    assert done.returncode == 0 and b"upload" in done.stderr


def test_help_shows_examples_and_exit_statuses() -> None:
    for argv in ([], ["roll"], ["gather"]):
        done = run(*argv, "--help")
        assert done.returncode == 0
        text = done.stdout.decode()
        assert "examples:" in text
        assert "3  refused by the service" in text or argv == []
    assert "tensor-ops roll data.npy --shift 1 --axes 0 -o out.npy" in run("--help").stdout.decode()


@pytest.mark.parametrize("shell", ["bash", "zsh", "tcsh"])
def test_completion_scripts(shell: str) -> None:
    done = run("completion", shell)
    assert done.returncode == 0
    script = done.stdout.decode()
    for word in ("roll", "gather", "health", "info", "completion"):
        assert word in script, (shell, word)
    if shell != "tcsh":  # shtab's tcsh scripts complete the commands only
        for option in ("--transport", "--batch-dims", "--url"):
            assert option in script, (shell, option)
    if shell == "bash":
        checked = subprocess.run(
            ["bash", "-n"], input=done.stdout, capture_output=True, check=False
        )
        assert checked.returncode == 0, checked.stderr
        # Sourced, it completes the commands.
        probe = (
            script
            + '\nCOMP_WORDS=(tensor-ops ro); COMP_CWORD=1; COMP_LINE="tensor-ops ro"; '
            + 'COMP_POINT=${#COMP_LINE}; _shtab_tensor_ops "tensor-ops" "ro" "tensor-ops"; '
            + 'echo "${COMPREPLY[@]}"'
        )
        completed = subprocess.run(["bash", "-c", probe], capture_output=True, check=False)
        assert completed.stdout.decode().split() == ["roll"], completed.stderr


def test_a_reader_that_stops_early_is_no_failure(live_url: str) -> None:
    """``| head``, or a reader gone before the first byte (``| true``: it exits long before the
    command has started): the output is cut short, the command exits 0, with no traceback."""
    for command in ("completion bash", f"--url {live_url} info --json"):
        for reader, length in (("head -c 10", 10), ("true", 0)):
            done = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", f"{SCRIPT} {command} | {reader}"],
                capture_output=True,
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, (command, reader, done.stderr)
            assert len(done.stdout) == length
            assert b"Traceback" not in done.stderr
