"""From ``python -m app`` to its first answer, on a cold kernel cache and a warm one.

    .venv/bin/python tests/benchmarks/first_answer.py             # 3 rounds, cold then warm
    .venv/bin/python tests/benchmarks/first_answer.py --rounds 5

Each round starts the service with ``NUMBA_CACHE_DIR`` on a new empty folder (cold: the numba
kernels have never been compiled) and then again on that folder (warm: the first start wrote
them there), and sends ``POST /roll`` with a small JSON body (and then ``POST /gather``) every
20 ms from the moment the process is started until one is answered 200; it prints the seconds
to the first answer, and the seconds until the compiled kernels serve (the service's
"kernels ready" log line), each as the median of the rounds and their spread. It never asserts
a time.
"""

import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
ROLL = {"data": [[1, 2, 3], [4, 5, 6]], "shift": 1, "axes": 0}
GATHER = {"data": [1, 2, 3, 4], "indices": [3, 0], "axis": 0}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start_to_answer(cache: Path, log: Path, seconds: float = 120) -> tuple[float, float | None]:
    """Seconds from the process's start to the first 200 of ``POST /roll``, and to its
    "kernels ready" line (None if it came after the answer and before the stop)."""
    port = _free_port()
    env = {
        **os.environ,
        "NUMBA_CACHE_DIR": str(cache),
        "TENSOR_OPS_HOST": "127.0.0.1",
        "TENSOR_OPS_PORT": str(port),
        "TENSOR_OPS_GRPC_PORT": "0",
        "TENSOR_OPS_LOG_FORMAT": "json",
    }
    url = f"http://127.0.0.1:{port}"
    with log.open("w") as sink:
        started = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-m", "app"],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    answered = None
    try:
        with httpx.Client(timeout=5) as client:
            while time.perf_counter() - started < seconds and process.poll() is None:
                with contextlib.suppress(httpx.TransportError):
                    roll = client.post(f"{url}/roll", json=ROLL)
                    if roll.status_code == 200:
                        answered = time.perf_counter() - started
                        assert roll.json()["data"] == [[4, 5, 6], [1, 2, 3]], roll.text
                        gather = client.post(f"{url}/gather", json=GATHER)
                        assert gather.json()["data"] == [4, 1], gather.text
                        break
                time.sleep(0.02)
            # Until the kernels are ready (or 150 s), for the log line's time (and a whole cache
            # for the warm start that follows).
            until = time.perf_counter() + 150
            while time.perf_counter() < until and "kernels ready" not in log.read_text():
                time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(20)
    if answered is None:
        raise SystemExit(f"no answer in {seconds} s:\n{log.read_text()}")
    ready = None
    for line in log.read_text().splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            message = str(record.get("message", ""))
            if message.startswith("kernels ready in"):
                ready = float(message.split()[3])
    return answered, ready


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    figures: dict[str, list[float]] = {"cold": [], "warm": [], "cold ready": [], "warm ready": []}
    with tempfile.TemporaryDirectory() as folder:
        for number in range(arguments.rounds):
            cache = Path(folder) / f"cache-{number}"
            for kind in ("cold", "warm"):
                answered, ready = start_to_answer(cache, Path(folder) / f"{kind}-{number}.log")
                figures[kind].append(answered)
                if ready is not None:
                    figures[f"{kind} ready"].append(ready)
    print(f"{'start to':<28}{'median s':>10}{'min s':>8}{'max s':>8}  rounds")
    for name, values in figures.items():
        if values:
            what = (
                f"first answer, {name} cache"
                if "ready" not in name
                else f"kernels ready, {name.split()[0]}"
            )
            print(
                f"{what:<28}{statistics.median(values):>10.2f}{min(values):>8.2f}"
                f"{max(values):>8.2f}  {len(values)}"
            )


if __name__ == "__main__":
    main()
