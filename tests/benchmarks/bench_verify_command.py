"""``tensor-ops verify`` over a folder of many small cases: cases per second, printed, never asserted.

    .venv/bin/python tests/benchmarks/bench_verify_command.py               # 10,000 cases
    .venv/bin/python tests/benchmarks/bench_verify_command.py --cases 2000 --jobs 4 8

Writes ``--cases`` small case files (Roll of a (4, 6) float32 tensor, every 10th one a bit
off), then times the command on the folder against a fresh single-worker server on 127.0.0.1
(``--jobs`` each) and in this process (``--local``), with the JUnit and Markdown reports.
"""

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "client"))

from tensor_ops_client import main, write_case
from tests.support import launch_server, stop_server


def write_cases(folder: Path, count: int) -> None:
    rng = np.random.default_rng(0)
    for number in range(count):
        data = rng.standard_normal((4, 6)).astype(np.float32)
        output = np.roll(data, 1, axis=1)
        if number % 10 == 0:
            output.view(np.uint32)[1, 2] ^= 1
        inputs: dict[str, Any] = {"data": data, "shift": 1, "axes": 1}
        write_case(
            folder / f"{number // 1000:02d}" / f"{number:05d}.npz",
            "roll",
            inputs,
            {"output": output},
        )


def timed(argv: list[str]) -> tuple[float, int]:
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        status = main(argv)
    return time.perf_counter() - started, status


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, nargs="+", default=[8])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as where:
        folder = Path(where) / "cases"
        started = time.perf_counter()
        write_cases(folder, args.cases)
        print(f"{args.cases} cases written in {time.perf_counter() - started:.1f} s")
        reports = ["--junit", f"{where}/r.xml", "--markdown", f"{where}/r.md"]
        url, process = launch_server()
        try:
            for jobs in args.jobs:
                argv = ["--url", url, "verify", str(folder), "--jobs", str(jobs), *reports]
                seconds, status = timed(argv)
                rate = args.cases / seconds
                print(
                    f"service, --jobs {jobs}: {seconds:.1f} s, {rate:.0f} cases/s (exit {status})"
                )
        finally:
            stop_server(process)
        for jobs in args.jobs:
            seconds, status = timed(
                ["verify", "--local", str(folder), "--jobs", str(jobs), *reports]
            )
            rate = args.cases / seconds
            print(f"--local, --jobs {jobs}: {seconds:.1f} s, {rate:.0f} cases/s (exit {status})")


if __name__ == "__main__":
    run()
