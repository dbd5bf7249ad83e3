"""A large roll with its input and output in system shared memory, against its floors.

    .venv/bin/python tests/benchmarks/bench_shared_memory.py            # 64 MiB float32, 15 rounds
    .venv/bin/python tests/benchmarks/bench_shared_memory.py --mib 16 --rounds 9

The service is ``python -m uvicorn app.main:app`` (one worker, ``launch_server`` of
``tests/support.py``). Four ways of one roll (``--mib`` of float32, shape (rows, 1024), shift 3
along axis 1), each timed whole, medians of rounds taken side by side (the order turned every
round; the binary calls in a run of their own after them):

- shm: ``tritonclient.http`` with the input and the output in registered regions
  (``InferInput.set_shared_memory``, ``InferRequestedOutput.set_shared_memory``): the request
  and the answer are a few hundred bytes of JSON; the service reads the input where it lies and
  its kernel writes the output into the region.
- kernel: ``app.ops.roll`` in this process on the same array into a preallocated output, the
  floor shared memory can reach. Target: shm <= 1.5x the kernel. NumPy's arrays of many MiB
  get transparent huge pages (``madvise``) and ``/dev/shm``'s pages are 4 KiB (unless
  ``shmem_enabled`` says otherwise): ``region`` is the same kernel in this process on the
  region's own pages, in and out, which is what the service's kernel runs on.
- binary: the same roll as ``/v2`` binary tensors over HTTP (``set_data_from_numpy`` with
  binary data in and out, ``as_numpy``). Target: shm <= 1/3 of it.

Beside them, where the shm calls' time went inside the service, from its own Triton statistics
(``/v2/models/roll/stats``, means over the shm rounds): decoding the request, its kernel (on the
region's pages), and the rest (the answer, the thread's hop back to the event loop); what shm
takes beyond them is HTTP, the client and the scheduler.

It prints the times and ratios and never asserts a time. Every server started and every shared
memory object made is removed on the way out.
"""

import argparse
import mmap
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.ops import roll  # noqa: E402
from tests.support import launch_server, stop_server  # noqa: E402

SHIFT = np.array([3], np.int64)
AXES = np.array([1], np.int64)


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def service_ns(client: Any) -> dict[str, tuple[int, int]]:
    """The service's statistics of roll: each stage's count and nanoseconds so far."""
    stats = client.get_inference_statistics("roll")["model_stats"][0]["inference_stats"]
    return {stage: (int(value["count"]), int(value["ns"])) for stage, value in stats.items()}


def stage_means_ms(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> dict[str, float]:
    """Each stage's mean over the calls between ``before`` and ``after``, in ms."""
    means = {}
    for stage, (count, ns) in after.items():
        calls = count - before[stage][0]
        if calls:
            means[stage] = (ns - before[stage][1]) / calls / 1e6
    return means


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=64, help="size of the float32 tensor")
    parser.add_argument("--rounds", type=int, default=15)
    options = parser.parse_args()
    data = np.random.default_rng(0).standard_normal((options.mib << 18) // 1024 * 1024)
    data = data.astype(np.float32).reshape(-1, 1024)
    size = data.nbytes
    expected = roll(data, SHIFT, AXES)
    url, process = launch_server(
        {"TENSOR_OPS_MAX_BODY_BYTES": str(4 * size), "TENSOR_OPS_LOG_LEVEL": "warning"}
    )
    client = httpclient.InferenceServerClient(url.removeprefix("http://"), network_timeout=300)
    key = f"/tensor-ops-bench-{uuid.uuid4().hex[:8]}"
    handle = shm.create_shared_memory_region("bench", key, 2 * size)
    try:
        shm.set_shared_memory_region(handle, [data])
        client.register_system_shared_memory("bench", key, 2 * size)

        def small(name: str, array: Any) -> Any:
            tensor = httpclient.InferInput(name, list(array.shape), "INT64")
            tensor.set_data_from_numpy(array)
            return tensor

        shared_input = httpclient.InferInput("data", list(data.shape), "FP32")
        shared_input.set_shared_memory("bench", size)
        shared_output = httpclient.InferRequestedOutput("output")
        shared_output.set_shared_memory("bench", size, offset=size)
        shared_inputs = [shared_input, small("shift", SHIFT), small("axes", AXES)]

        def through_shared_memory() -> None:
            client.infer("roll", shared_inputs, outputs=[shared_output])

        ready = np.empty_like(data)

        def kernel() -> None:
            roll(data, SHIFT, AXES, out=ready)

        # The same region mapped here: the kernel on the very pages the service reads and
        # writes (tmpfs pages of 4 KiB, where NumPy's own arrays get transparent huge pages).
        with open(f"/dev/shm/{key[1:]}", "r+b") as file:
            mapping = mmap.mmap(file.fileno(), 2 * size)
        region = np.frombuffer(mapping, np.float32)
        region_in = region[: data.size].reshape(data.shape)
        region_out = region[data.size :].reshape(data.shape)

        def kernel_in_region() -> None:
            roll(region_in, SHIFT, AXES, out=region_out)

        def binary() -> None:
            tensor = httpclient.InferInput("data", list(data.shape), "FP32")
            tensor.set_data_from_numpy(data, binary_data=True)
            output = httpclient.InferRequestedOutput("output", binary_data=True)
            result = client.infer(
                "roll", [tensor, small("shift", SHIFT), small("axes", AXES)], outputs=[output]
            )
            result.as_numpy("output")

        # Warm up, and check every way answers the same bits.
        through_shared_memory()
        got = shm.get_contents_as_numpy(handle, np.float32, list(data.shape), offset=size)
        assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))
        del got
        kernel()
        assert np.array_equal(ready.view(np.uint32), expected.view(np.uint32))
        binary()
        ways = {"shm": through_shared_memory, "kernel": kernel, "region": kernel_in_region}
        samples: dict[str, list[float]] = {name: [] for name in [*ways, "binary"]}
        # Only the shm calls reach the service between these two reads.
        before = service_ns(client)
        for number in range(options.rounds):
            order = list(ways) if number % 2 == 0 else list(reversed(ways))
            for name in order:
                samples[name].append(timed(ways[name]))
        inside = stage_means_ms(before, service_ns(client))
        # Apart: the service is still giving back the memory of a binary call (hundreds of
        # MiB) when its answer has arrived, which would slow whatever is timed next.
        for _ in range(options.rounds):
            samples["binary"].append(timed(binary))
        times = {name: median_ms(values) for name, values in samples.items()}
        print(
            f"roll of {size >> 20} MiB float32 {list(data.shape)}, {options.rounds} rounds, medians"
        )
        for name, words in (
            ("shm", "/v2 over HTTP, input and output in shared memory"),
            ("kernel", "the kernel in process, into a ready output (NumPy's memory)"),
            ("region", "the kernel in process, in and out of the same region's pages"),
            ("binary", "/v2 over HTTP, binary tensors in and out"),
        ):
            print(f"  {name:7} {times[name]:9.2f} ms  {words}")
        # Means, not medians (the statistics keep sums): set beside shm's own mean.
        print(
            f"  service  {inside['compute_input']:.2f} ms decoding + {inside['compute_infer']:.2f} "
            f"ms kernel + {inside['compute_output']:.2f} ms answering, of shm's mean "
            f"{statistics.mean(samples['shm']) * 1000:.2f} ms (means over its calls)"
        )
        to_kernel = times["shm"] / times["kernel"]
        to_binary = times["shm"] / times["binary"]
        print(f"  shm / kernel = {to_kernel:.2f}x (target <= 1.5x)")
        print(f"  shm / kernel on the region's pages = {times['shm'] / times['region']:.2f}x")
        print(f"  shm / binary = {to_binary:.3f} (target <= 0.333)")
    finally:
        try:
            client.unregister_system_shared_memory()
        finally:
            shm.destroy_shared_memory_region(handle)
            client.close()
            stop_server(process)


if __name__ == "__main__":
    main()
