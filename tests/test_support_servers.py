"""The servers the tests start do not outlive the process that started them."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support import ROOT

pytestmark = pytest.mark.e2e

#: A test process that starts a server, says its URL and pid, and waits to be killed.
_STARTER = """
import sys, time
sys.path.insert(0, {root!r})
from tests.support import launch_server
url, process = launch_server()
print(url, process.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_server_ends_with_the_test_process_killed_outright() -> None:
    starter = subprocess.Popen(
        [sys.executable, "-c", _STARTER.format(root=str(ROOT))],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert starter.stdout is not None
        url, pid = starter.stdout.readline().split()
        server = int(pid)
        # The server answers, as the test process that started it does.
        answer = httpx.post(f"{url}/roll", json={"data": [1, 2, 3], "shift": 1, "axes": 0})
        assert answer.status_code == 200
        assert answer.json()["data"] == [3, 1, 2]
        assert _alive(server)
        # Killed as an xdist worker's end kills it: no atexit, no finally.
        starter.send_signal(signal.SIGKILL)
        starter.wait(10)
        deadline = time.monotonic() + 30
        while _alive(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(server), "the server outlived the test process that started it"
    finally:
        starter.kill()
        starter.wait(10)
        if "server" in locals() and _alive(server):
            os.killpg(server, signal.SIGKILL)
