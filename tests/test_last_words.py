"""A worker's last words reach the log, against a real ``python -m app`` (TLS on, so that a
stranger's failed handshakes make gRPC's core write a line each): a flood of failed handshakes
spends gRPC core's own quota, whose "left out" count is written as lines are left out; then the
worker is killed (SIGSEGV, caught by faulthandler; an abort) and its fatal-error report is in the
log whole, one JSON line for each line it wrote."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import trustme

from tests.support import free_port

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent


def launch(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path, int]:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    server.cert_chain_pems[0].write_to_path(str(cert))
    server.private_key_pem.write_to_path(str(key))
    grpc_port = free_port()
    log = tmp_path / "server.log"
    env = {
        **os.environ,
        "TENSOR_OPS_HOST": "127.0.0.1",
        "TENSOR_OPS_PORT": str(free_port()),
        "TENSOR_OPS_GRPC_PORT": str(grpc_port),
        "TENSOR_OPS_TLS_CERT_FILE": str(cert),
        "TENSOR_OPS_TLS_KEY_FILE": str(key),
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "app"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 30
    while "Application startup complete" not in log.read_text(errors="replace"):
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    return process, log, grpc_port


def lines(log: Path) -> list[dict[str, Any]]:
    text = log.read_text(errors="replace")
    found = []
    for line in text.splitlines():
        assert line.startswith("{"), line  # every line one JSON object
        found.append(orjson.loads(line))
    return found


def failed_handshakes(port: int, count: int) -> None:
    for _ in range(count):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.settimeout(2)
            try:
                while sock.recv(4096):
                    pass
            except OSError:
                pass


def died_with(process: subprocess.Popen[bytes], log: Path, number: signal.Signals) -> str:
    os.kill(process.pid, number)
    assert process.wait(10) != 0
    deadline = time.monotonic() + 5
    while True:  # the relay writes what was left in the pipe, then ends
        report = "\n".join(line["message"] for line in lines(log) if line["logger"] == "stderr")
        if "most recent call first" in report or time.monotonic() > deadline:
            return report
        time.sleep(0.1)


@pytest.mark.parametrize(
    ("number", "words"),
    [(signal.SIGSEGV, "Segmentation fault"), (signal.SIGABRT, "Aborted")],
    ids=["sigsegv", "abort"],
)
def test_a_worker_s_last_words_reach_the_log_after_a_flood(
    tmp_path: Path, number: signal.Signals, words: str
) -> None:
    process, log, grpc_port = launch(tmp_path)
    try:
        failed_handshakes(grpc_port, 40)
        deadline = time.monotonic() + 5
        while True:
            found = lines(log)
            core = [line for line in found if line["logger"] == "grpc.core"]
            told = [line for line in core if "left_out" in line]
            if told or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert len([line for line in core if "left_out" not in line]) <= 20, core
        assert told, "the count of lines left out is written as they are left out"
        report = died_with(process, log, number)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert f"Fatal Python error: {words}" in report, report
    assert "most recent call first" in report, report
    assert 'File "' in report, report  # the stack, line by line
