"""What the op routes' direct way saves a small request, in process: the same app with and
without ``DirectRoutes`` (``app.direct``), side by side.

    .venv/bin/python tests/benchmarks/small_direct.py
    .venv/bin/python tests/benchmarks/small_direct.py --rounds 20 --size 2000

Each request is driven through the ASGI app as the server drives it (``small_stages.asgi_call``:
the whole body at once, a send that keeps nothing), after the kernels are loaded; the echo
app's ``POST /roll`` (the bare route doing the same NumPy call) is timed beside them. Rounds of
``--size`` requests each, every case once a round in turn; it prints the fewest and the median
microseconds a request of each, never asserts a time. The server's own HTTP work (the same for
all) is not in it: ``bench.py``'s small-request section measures that too.
"""

import argparse
import asyncio
import logging
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("TENSOR_OPS_GRPC_PORT", "0")

from app.main import create_app
from app.ops import loops
from app.settings import Settings
from tests.benchmarks.bench import SMALL_CASES
from tests.benchmarks.echo_app import app as echo_app
from tests.benchmarks.small_stages import asgi_call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--size", type=int, default=1000)
    arguments = parser.parse_args()
    direct, framework = create_app(Settings()), create_app(Settings())
    framework.direct = None  # every request the framework's way
    for handler in logging.getLogger("tensor_ops").handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(open(os.devnull, "w"))  # noqa: SIM115  # for the whole run
    cases = {"echo app POST /roll (anchor)": asgi_call(echo_app, "/roll", SMALL_CASES["roll"][1])}
    for name in ("roll", "v2 infer"):
        path, body, _ = SMALL_CASES[name]
        cases[f"{path}, direct"] = asgi_call(direct, path, body)
        cases[f"{path}, framework's way"] = asgi_call(framework, path, body)

    async def run() -> dict[str, list[float]]:
        times: dict[str, list[float]] = {name: [] for name in cases}
        async with (
            direct.router.lifespan_context(direct),
            framework.router.lifespan_context(framework),
        ):
            loops.wait_compiled(180)
            for call in cases.values():
                for _ in range(200):
                    await call()
            for _ in range(arguments.rounds):
                for name, call in cases.items():
                    started = time.perf_counter()
                    for _ in range(arguments.size):
                        await call()
                    elapsed = time.perf_counter() - started
                    times[name].append(elapsed / arguments.size * 1e6)
        return times

    times = asyncio.run(run())
    print(f"{'request':40s} {'fewest us':>10s} {'median us':>10s}")
    for name, values in times.items():
        print(f"{name:40s} {min(values):10.1f} {statistics.median(values):10.1f}")


if __name__ == "__main__":
    main()
