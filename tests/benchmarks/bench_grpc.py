"""KServe V2 over gRPC against a bare ``grpc.aio`` echo of the same tensor, side by side.

    .venv/bin/python tests/benchmarks/bench_grpc.py              # full run, about 75 s
    .venv/bin/python tests/benchmarks/bench_grpc.py --quick      # fewer rounds, shorter loads
    .venv/bin/python tests/benchmarks/bench_grpc.py --only large,small  # some sections only
    .venv/bin/python tests/benchmarks/bench_grpc.py --only stream  # one stream against unary
    .venv/bin/python tests/benchmarks/bench_grpc.py --env GLIBC_TUNABLES=glibc.malloc.hugetlb=1
                       # and a second service and echo started with that environment, compared
    .venv/bin/python tests/benchmarks/bench_grpc.py --only small --pair ECHO_INFER_AS_STREAM=1 \
        --pair ECHO_INFER_AS_STREAM=read   # the echo served three ways, side by side

The service is ``python -m uvicorn app.main:app`` (one worker, ``launch_server`` of
``tests/support.py``) with gRPC on a free port of 127.0.0.1; its anchor is
``tests/benchmarks/grpc_echo.py``, a bare ``grpc.aio`` server started the same way that answers
the request's first tensor (the transport's floor: receive the message, send the same tensor
back, one copy to join it to the answer's head, as the service makes too).

1. One large roll (``--mib``, 64 MiB float32 by default) through ``tritonclient.grpc`` as a user
   makes it: ``InferInput.set_data_from_numpy``, ``infer``, ``as_numpy``, timed whole (the
   client's defaults already allow messages of 2 GiB - 1). And the same call from a raw-bytes
   client (the request serialised once beforehand, the answer's tensor a view of the received
   bytes), which leaves the servers' share of the time. Target: service <= 1.3x the echo.
2. Small rolls (3 float32 elements) with 32 calls in flight on one ``grpc.aio`` channel, for a
   fixed time: calls/s, p50 and p99, and the CPU the client and each server took. The client
   sends the request's bytes, made once by the generated message classes, and takes the
   answer's bytes (no (de)serialiser: Python clients cost CPU that a 2-core machine takes from
   the server). Target: service >= 0.8x the echo's calls/s. Beside them, the echo started with
   ``ECHO_ROLL=1`` ("roll echo"): a bare servicer that does the same NumPy call (``np.roll``)
   and nothing else, as ``POST /roll`` of ``echo_app.py`` is the anchor of HTTP's small
   requests; the service's ratio to it is printed too.
4. ``--only stream``: the same small rolls over one ``ModelStreamInfer`` stream (Triton's
   streaming; up to 32 requests written ahead of their answers) against unary calls with 32 in
   flight, on one channel each, of the same service: calls/s and the ratio. Target: the stream
   >= 1.5x unary. The echo's own ratio beside it (its stream answers each message as it comes,
   reading the next while it writes): what ``grpc.aio`` itself makes of a stream against unary
   calls, the ceiling the service's ratio is read against.
3. Stages: where a large call copies its tensor, timed in this process: tritonclient's steps,
   gRPC's own copies (``grpc._cython`` 1.85 makes a ``bytes`` of each 64 KiB slice it received
   and joins them; it copies a message it sends with ``grpc_slice_from_copied_buffer``: modelled
   here in Python), the service's steps (``GrpcExchange``) and the echo's.

Each figure is a median of measurements taken side by side with its anchor, interleaved (the
order reversed every other round). It prints tables and ratios and never asserts a time; every
loop is bounded in count and time. Every server started is stopped on the way out.
"""

import argparse
import asyncio
import contextlib
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import numpy as np
import numpy.typing as npt
import tritonclient.grpc as grpcclient
from google.protobuf import __version__ as protobuf_version
from tritonclient.grpc import service_pb2

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.grpc.exchange import GrpcExchange  # noqa: E402
from app.pipeline.jobs import Limits  # noqa: E402
from app.settings import Settings  # noqa: E402
from tensor_ops_client import TensorOpsClient  # noqa: E402
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb  # noqa: E402
from tensor_ops_wire.grpc_v2.framing import (  # noqa: E402
    RAW_INPUT_FIELD,
    RAW_OUTPUT_FIELD,
    join_raw,
    split_raw,
)
from tests.benchmarks.bench import (  # noqa: E402
    ROLL_AXES,
    ROLL_SHIFT,
    SERVICE_ENV,
    MiB,
    interleaved,
    server,
    table,
    time_label,
    verdict,
)
from tests.benchmarks.grpc_echo import echo_answer  # noqa: E402
from tests.support import assert_same_bits, free_port  # noqa: E402

Array = npt.NDArray[Any]

#: Targets, printed beside the figures (never asserted).
LARGE_TARGET = 1.3  # a large roll's time, service / echo: at most
SMALL_TARGET = 0.8  # small calls per second, service / echo: at least
STREAM_TARGET = 1.5  # small rolls per second, one stream / unary calls: at least
METHOD = "/inference.GRPCInferenceService/ModelInfer"
STREAM_METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"
LARGEST_MESSAGE = 2**31 - 1
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", LARGEST_MESSAGE),
    ("grpc.max_receive_message_length", LARGEST_MESSAGE),
]
ECHO_COMMAND = ["-m", "tests.benchmarks.grpc_echo"]
#: The echo that does the roll's NumPy call (``ECHO_ROLL=1``): section 2's second anchor.
ROLL_ECHO = "roll echo"
SMALL_SERVERS = ("service", "echo", ROLL_ECHO)
DTYPES: dict[str, np.dtype[Any]] = {"FP32": np.dtype("<f4"), "INT64": np.dtype("<i8")}
#: What gRPC core hands the Python layer of a large message: slices of 64 KiB (counted with a
#: uprobe on PyBytes_FromStringAndSize in the echo server: 1024 of them per 64 MiB).
GRPC_SLICE = 64 * 1024
TRITON, OURS, RAW = "tritonclient.grpc", "tensor_ops_client", "raw bytes"
CLIENTS = (TRITON, OURS, RAW)


@dataclass
class Config:
    quick: bool
    mib: int
    repeat: int  # timed rounds of the large calls (one untimed round first)
    seconds: float  # each small-call load
    rounds: int  # loads of each server
    in_flight: int
    max_calls: int  # a bound on the calls of one load
    stage_rounds: int
    sections: set[str]
    envs: list[dict[str, str]]  # one pair of servers for each: the default, then --env

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Config":
        extra = dict(item.split("=", 1) for item in args.env)
        return cls(
            quick=args.quick,
            mib=args.mib,
            repeat=args.repeat or (3 if args.quick else 7),
            seconds=args.seconds or (2.0 if args.quick else 5.0),
            rounds=args.rounds or (1 if args.quick else 3),
            in_flight=args.in_flight,
            max_calls=200_000,
            stage_rounds=3 if args.quick else 7,
            sections=set(args.only.split(",")),
            envs=[
                {},
                *([extra] if extra else []),
                *(dict(item.split("=", 1) for item in pair.split(",")) for pair in args.pair),
            ],
        )


def env_label(env: dict[str, str]) -> str:
    return " ".join(f"{key}={value}" for key, value in env.items()) or "default"


@dataclass
class Pair:
    """A service and its echo, started with the same extra environment."""

    label: str
    targets: dict[str, str]  # "service" / "echo" / "roll echo" -> host:port of gRPC
    urls: dict[str, str]  # their HTTP URL (the echo's answers GET /health only)
    pids: dict[str, int]


@contextlib.contextmanager
def servers(env: dict[str, str]) -> Iterator[Pair]:
    ports: list[int] = []
    while len(ports) < 3:
        if (port := free_port()) not in ports:
            ports.append(port)
    settings = {**SERVICE_ENV, **env}
    with (
        server({**settings, "TENSOR_OPS_GRPC_PORT": str(ports[0])}) as service,
        server({**settings, "TENSOR_OPS_GRPC_PORT": str(ports[1])}, ECHO_COMMAND) as echo,
        server(
            {**settings, "TENSOR_OPS_GRPC_PORT": str(ports[2]), "ECHO_ROLL": "1"}, ECHO_COMMAND
        ) as roll,
    ):
        launched = {"service": service, "echo": echo, ROLL_ECHO: roll}
        yield Pair(
            env_label(env),
            {name: f"127.0.0.1:{port}" for name, port in zip(launched, ports, strict=True)},
            {name: started[0] for name, started in launched.items()},
            {name: started[1] for name, started in launched.items()},
        )


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------------------------------------
# Requests and answers


def roll_request(data: Array, shift: Array, axes: Array) -> bytes:
    """A ModelInferRequest of the roll, its tensors as raw contents (what tritonclient sends)."""
    request = pb.ModelInferRequest(model_name="roll")
    arrays = {"data": data, "shift": shift, "axes": axes}
    for name, array in arrays.items():
        datatype = "FP32" if array.dtype == np.float32 else "INT64"
        request.inputs.add(name=name, datatype=datatype, shape=list(array.shape))
    return join_raw(request.SerializeToString(), RAW_INPUT_FIELD, list(arrays.values()))


def raw_answer(message: bytes) -> Array:
    """The answer's first output, a view of the received bytes."""
    head, raw = split_raw(message, RAW_OUTPUT_FIELD)
    output = pb.ModelInferResponse.FromString(head).outputs[0]
    array: Array = np.frombuffer(raw[0], dtype=DTYPES[output.datatype])
    return array.reshape(tuple(output.shape))


def triton_roll(client: Any, data: Array, shift: Array, axes: Array) -> Array:
    """The roll through tritonclient.grpc, as a user writes it; the answer's first output."""
    inputs = [
        grpcclient.InferInput("data", list(data.shape), "FP32"),
        grpcclient.InferInput("shift", list(shift.shape), "INT64"),
        grpcclient.InferInput("axes", list(axes.shape), "INT64"),
    ]
    for item, tensor in zip(inputs, (data, shift, axes), strict=True):
        item.set_data_from_numpy(tensor)
    result = client.infer("roll", inputs)
    # "output" from the service; the echo names its output after the input it sends back.
    array: Array = result.as_numpy(result.get_response().outputs[0].name)
    return array


def roll_arrays(nbytes: int) -> tuple[Array, Array, Array]:
    side = int((nbytes // 4) ** 0.5)
    data = np.random.default_rng(0).standard_normal((side, nbytes // 4 // side))
    return data.astype(np.float32), np.array(ROLL_SHIFT), np.array(ROLL_AXES)


# ----------------------------------------------------------------------------------------------
# Section 1: one large roll


def bench_large(config: Config, pairs: list[Pair]) -> dict[str, Any]:
    data, shift, axes = roll_arrays(config.mib * MiB)
    expected = np.roll(data, ROLL_SHIFT, ROLL_AXES)
    request = roll_request(data, shift, axes)
    calls: list[tuple[str, str, str, Callable[[], Array]]] = []  # (client, pair, server, call)
    clients: list[Any] = []
    for pair in pairs:
        for name in ("service", "echo"):
            triton = grpcclient.InferenceServerClient(pair.targets[name])
            ours = TensorOpsClient(
                pair.urls[name], transport="grpc", grpc_target=pair.targets[name], timeout=600
            )
            channel = grpc.insecure_channel(pair.targets[name], options=CHANNEL_OPTIONS)
            clients += [triton, ours, channel]
            raw_call: Any = channel.unary_unary(METHOD)

            def via_triton(client: Any = triton) -> Array:
                return triton_roll(client, data, shift, axes)

            def via_ours(client: TensorOpsClient = ours) -> Array:
                return client.roll(data, shift, axes)

            def via_raw(call: Any = raw_call) -> Array:
                return raw_answer(call(request))

            calls.append((TRITON, pair.label, name, via_triton))
            calls.append((OURS, pair.label, name, via_ours))
            calls.append((RAW, pair.label, name, via_raw))
    samples: dict[tuple[str, str, str], list[float]] = {key[:3]: [] for key in calls}
    for round_ in range(config.repeat + 1):
        for client, label, name, call in calls if round_ % 2 == 0 else calls[::-1]:
            start = time.perf_counter()
            answer = call()
            elapsed = time.perf_counter() - start
            if round_ == 0:  # untimed: warms up, and checks every answer bit for bit
                assert_same_bits(answer, expected if name == "service" else data)
            else:
                samples[client, label, name].append(elapsed)
            del answer
    for client in clients:
        client.close()
    print(f"  large: done ({config.repeat} rounds)", file=sys.stderr, flush=True)
    return {
        "nbytes": data.nbytes,
        "shape": data.shape,
        "request_bytes": len(request),
        "seconds": {key: statistics.median(values) for key, values in samples.items()},
    }


def print_large(results: dict[str, Any], config: Config, pairs: list[Pair]) -> list[list[str]]:
    seconds = results["seconds"]
    print(
        f"\n== 1. One roll of {results['nbytes'] / MiB:.0f} MiB float32 {results['shape']} over "
        f"gRPC, median of {config.repeat} rounds, interleaved.\n"
        "tritonclient.grpc: set_data_from_numpy + infer + as_numpy, timed whole; "
        "tensor_ops_client: TensorOpsClient(transport='grpc').roll;\nraw bytes: the request "
        "serialised beforehand, the answer's tensor a view of the received bytes (the servers' "
        "share).\nEcho: grpc_echo.py sends the same tensor back."
    )
    rows, targets = [], []
    for pair in pairs:
        for client in CLIENTS:
            service = seconds[client, pair.label, "service"]
            echo = seconds[client, pair.label, "echo"]
            ratio = service / echo
            met = ratio <= LARGE_TARGET
            target = f"<= {LARGE_TARGET}x: {verdict(met)}" if client == TRITON else "(info)"
            rows.append(
                [client, pair.label, f"{service * 1e3:.0f}", f"{echo * 1e3:.0f}",
                 f"{ratio:.2f}x", target]
            )  # fmt: skip
            if client == TRITON:
                targets.append(
                    [
                        f"gRPC {results['nbytes'] // MiB} MiB roll (tritonclient, "
                        f"{pair.label}) <= {LARGE_TARGET}x echo",
                        f"{ratio:.2f}x ({service * 1e3:.0f} vs {echo * 1e3:.0f} ms)",
                        verdict(met),
                    ]
                )
    print(table(["client", "servers", "service ms", "echo ms", "service/echo", "target"], rows,
                left=2))  # fmt: skip
    if len(pairs) > 1:
        base, other = pairs[0].label, pairs[1].label
        rows = [
            [client, name, f"{seconds[client, other, name] / seconds[client, base, name]:.2f}x"]
            for client in CLIENTS
            for name in ("service", "echo")
        ]
        print(f"\n{other} vs default (time with / time without):")
        print(table(["client", "server", "ratio"], rows, left=2))
    return targets


# ----------------------------------------------------------------------------------------------
# Section 2: small calls, many in flight


async def burst(
    call: Any, request: bytes, seconds: float, in_flight: int, limit: int
) -> tuple[list[float], float]:
    """``in_flight`` loops of calls until ``seconds`` have passed (or ``limit`` calls were made):
    the latencies and the elapsed time."""
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def loop() -> None:
        while time.perf_counter() < deadline and len(latencies) < limit:
            start = time.perf_counter()
            await call(request)
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(in_flight)))
    return latencies, time.perf_counter() - start


async def load(config: Config, target: str, pid: int, request: bytes) -> dict[str, float]:
    async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
        call: Any = channel.unary_unary(METHOD)
        await burst(call, request, 0.3, config.in_flight, config.max_calls)  # warm-up
        client_cpu, server_cpu = time.process_time(), cpu_seconds(pid)
        latencies, elapsed = await burst(
            call, request, config.seconds, config.in_flight, config.max_calls
        )
        client_cpu = time.process_time() - client_cpu
        server_cpu = cpu_seconds(pid) - server_cpu
    latencies.sort()
    return {
        "cps": len(latencies) / elapsed,
        "p50": latencies[len(latencies) // 2],
        "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "calls": len(latencies),
        "client_cpu": client_cpu / elapsed,
        "server_cpu": server_cpu / elapsed,
        # Steadier than calls/s on a shared machine: what a call costs the server.
        "server_cpu_per_call": server_cpu / max(1, len(latencies)),
    }


async def check_small(pair: Pair, request: bytes, data: Array) -> None:
    rolled = np.roll(data, 1)
    for name, expected in (("service", rolled), ("echo", data), (ROLL_ECHO, rolled)):
        async with grpc.aio.insecure_channel(pair.targets[name]) as channel:
            call: Any = channel.unary_unary(METHOD)
            answer = await call(request)
        assert_same_bits(raw_answer(answer), expected)


async def small_runs(config: Config, pairs: list[Pair], request: bytes, data: Array) -> Any:
    """Each round loads every server of every pair once, the order reversed every other round:
    with ``--env``, the two pairs are compared under the same load of the rest of the machine."""
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    order: list[tuple[Pair, str]] = []
    for pair in pairs:
        await check_small(pair, request, data)
        results[pair.label] = {name: [] for name in SMALL_SERVERS}
        order.extend((pair, name) for name in SMALL_SERVERS)
    for round_ in range(config.rounds):
        for pair, name in order if round_ % 2 == 0 else order[::-1]:
            figures = await load(config, pair.targets[name], pair.pids[name], request)
            results[pair.label][name].append(figures)
    return results


def bench_small(config: Config, pairs: list[Pair]) -> dict[str, Any]:
    data = np.array([1.5, 2.5, 3.5], dtype=np.float32)
    request = roll_request(data, np.array([1]), np.array([0]))
    runs = asyncio.run(small_runs(config, pairs, request, data))
    summary: dict[str, Any] = {}
    spread: dict[str, dict[str, list[float]]] = {}
    for label, by_server in runs.items():
        summary[label] = {
            name: {metric: statistics.median(run[metric] for run in values) for metric in values[0]}
            for name, values in by_server.items()
        }
        # Each round's own ratio (the service's load beside each anchor's of the same round):
        # how far one run's figure may move on this machine.
        spread[label] = {
            anchor: [
                service["cps"] / other["cps"]
                for service, other in zip(by_server["service"], by_server[anchor], strict=True)
            ]
            for anchor in SMALL_SERVERS[1:]
        }
    print("  small calls: done", file=sys.stderr, flush=True)
    return {"request_bytes": len(request), "servers": summary, "rounds": spread}


def print_small(results: dict[str, Any], config: Config) -> list[list[str]]:
    print(
        f"\n== 2. Small rolls: 3 float32 elements ({results['request_bytes']} bytes a request), "
        f"{config.in_flight} calls in flight on one grpc.aio channel, {config.seconds:g} s a "
        f"load,\nmedians of {config.rounds} load(s) each, interleaved. CPU us/call: the "
        "server's CPU time (all its threads) per call;\nserver and client CPU: of one core, "
        "over the load (the client is this process)."
    )
    rows, targets = [], []
    for label, summary in results["servers"].items():
        service = summary["service"]
        for name in SMALL_SERVERS:
            run = summary[name]
            rows.append(
                [label if name == "service" else "", name, f"{run['cps']:.0f}",
                 f"{run['p50'] * 1e3:.2f}", f"{run['p99'] * 1e3:.2f}",
                 f"{run['server_cpu_per_call'] * 1e6:.0f}", f"{run['server_cpu']:.0%}",
                 f"{run['client_cpu']:.0%}"]
            )  # fmt: skip
        # The target is the echo's (the transport's floor); the roll echo's ratio, the anchor
        # HTTP's small requests are held to (the framework's floor plus the same NumPy call).
        for anchor in SMALL_SERVERS[1:]:
            other = summary[anchor]
            ratio = service["cps"] / other["cps"]
            met = ratio >= SMALL_TARGET
            rows.append(
                ["", f"service/{anchor}", f"{ratio:.2f}x", f"{service['p50'] / other['p50']:.2f}x",
                 f"{service['p99'] / other['p99']:.2f}x",
                 f"{service['server_cpu_per_call'] / other['server_cpu_per_call']:.2f}x", "",
                 f">= {SMALL_TARGET}x: {verdict(met)}"]
            )  # fmt: skip
            targets.append(
                [
                    f"gRPC small rolls, {config.in_flight} in flight ({label}) >= {SMALL_TARGET}x "
                    f"{anchor} calls/s",
                    f"{ratio:.2f}x ({service['cps']:.0f} vs {other['cps']:.0f} calls/s)",
                    verdict(met),
                ]
            )
    headers = [
        "servers", "server", "calls/s", "p50 ms", "p99 ms", "CPU us/call", "server CPU",
        "client CPU",
    ]  # fmt: skip
    print(table(headers, rows, left=2))
    for label, by_anchor in results["rounds"].items():
        for anchor, ratios in by_anchor.items():
            print(
                f"  service/{anchor} calls/s round by round ({label}): "
                + " ".join(f"{ratio:.2f}x" for ratio in ratios)
                + f" (spread {min(ratios):.2f}x-{max(ratios):.2f}x)"
            )
    return targets


# ----------------------------------------------------------------------------------------------
# Section 4: small rolls over one stream, against unary calls


async def stream_burst(call: Any, request: bytes, seconds: float, window: int, limit: int) -> Any:
    """Requests written on one stream for ``seconds`` (at most ``window`` unanswered, at most
    ``limit`` in all), every answer read: the answers and the elapsed time."""
    stream = call()
    room = asyncio.Semaphore(window)
    deadline = time.perf_counter() + seconds
    answers: list[bytes] = []

    async def write() -> None:
        sent = 0
        while time.perf_counter() < deadline and sent < limit:
            await room.acquire()
            await stream.write(request)
            sent += 1
        await stream.done_writing()

    start = time.perf_counter()
    writer = asyncio.ensure_future(write())
    while (answer := await stream.read()) is not grpc.aio.EOF:
        answers.append(answer)
        room.release()
    await writer
    return answers, time.perf_counter() - start


async def stream_load(config: Config, target: str, pid: int, request: bytes) -> dict[str, float]:
    async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
        call: Any = channel.stream_stream(STREAM_METHOD)
        await stream_burst(call, request, 0.3, config.in_flight, config.max_calls)  # warm-up
        server_cpu = cpu_seconds(pid)
        answers, elapsed = await stream_burst(
            call, request, config.seconds, config.in_flight, config.max_calls
        )
        server_cpu = cpu_seconds(pid) - server_cpu
    first = service_pb2.ModelStreamInferResponse.FromString(answers[0])
    assert not first.error_message, first.error_message
    return {
        "cps": len(answers) / elapsed,
        "calls": len(answers),
        "server_cpu_per_call": server_cpu / max(1, len(answers)),
    }


async def stream_runs(config: Config, pairs: list[Pair], request: bytes) -> Any:
    """Each server's stream and unary loads, interleaved (the order turned every round): the
    service's, and the echo's, whose ratio is the transport's own (what ``grpc.aio`` makes of a
    stream against unary calls when the answer costs nothing)."""
    results = {}
    for pair in pairs:
        runs: dict[tuple[str, str], list[dict[str, float]]] = {}
        order = [(who, way) for who in ("service", "echo") for way in ("stream", "unary")]
        for round_ in range(config.rounds):
            for who, way in order if round_ % 2 == 0 else order[::-1]:
                target, pid = pair.targets[who], pair.pids[who]
                run = stream_load if way == "stream" else load
                runs.setdefault((who, way), []).append(await run(config, target, pid, request))
        results[pair.label] = {
            who: {
                way: {
                    metric: statistics.median(item[metric] for item in runs[who, way])
                    for metric in runs[who, way][0]
                }
                for way in ("stream", "unary")
            }
            for who in ("service", "echo")
        }
    return results


def bench_stream(config: Config, pairs: list[Pair]) -> dict[str, Any]:
    data = np.array([1.5, 2.5, 3.5], dtype=np.float32)
    request = roll_request(data, np.array([1]), np.array([0]))
    results = asyncio.run(stream_runs(config, pairs, request))
    print("  stream: done", file=sys.stderr, flush=True)
    return {"request_bytes": len(request), "servers": results}


def print_stream(results: dict[str, Any], config: Config) -> list[list[str]]:
    print(
        f"\n== 4. Small rolls ({results['request_bytes']} bytes a request) over one "
        f"ModelStreamInfer stream ({config.in_flight} written ahead of their answers) and as "
        f"unary ModelInfer calls ({config.in_flight} in flight), one channel each, of the "
        f"service and of the echo (grpc_echo.py answers each message as it comes); "
        f"{config.seconds:g} s a load, medians of {config.rounds} load(s) each, "
        "interleaved."
    )
    rows, targets = [], []
    for label, servers in results["servers"].items():
        ratios = {}
        for who, summary in servers.items():
            stream, unary = summary["stream"], summary["unary"]
            for name, run in (("stream", stream), ("unary", unary)):
                rows.append(
                    [label if (who, name) == ("service", "stream") else "",
                     who if name == "stream" else "", name, f"{run['cps']:.0f}",
                     f"{run['server_cpu_per_call'] * 1e6:.0f}"]
                )  # fmt: skip
            ratios[who] = stream["cps"] / unary["cps"]
            note = f">= {STREAM_TARGET}x: {verdict(ratios[who] >= STREAM_TARGET)}"
            rows.append(["", "", "stream/unary", f"{ratios[who]:.2f}x",
                         note if who == "service" else "the transport's own"])  # fmt: skip
        stream, unary = servers["service"]["stream"], servers["service"]["unary"]
        met = ratios["service"] >= STREAM_TARGET
        targets.append(
            [
                f"gRPC small rolls, one stream ({label}) >= {STREAM_TARGET}x unary calls/s",
                f"{ratios['service']:.2f}x ({stream['cps']:.0f} vs {unary['cps']:.0f} calls/s; "
                f"the echo's {ratios['echo']:.2f}x)",
                verdict(met),
            ]
        )
    print(table(["servers", "server", "calls", "calls/s", "CPU us/call"], rows, left=2))
    return targets


# ----------------------------------------------------------------------------------------------
# Section 3: where a large call copies its tensor


def grpc_receive(slices: list[memoryview]) -> bytes:
    """What grpc._cython 1.85 does with a received message: a bytes of each slice, joined."""
    return b"".join([bytes(piece) for piece in slices])


def bench_stages(config: Config) -> dict[str, Any]:
    data, shift, axes = roll_arrays(config.mib * MiB)
    request = roll_request(data, shift, axes)
    answer = echo_answer(request)  # a ModelInferResponse with the tensor as raw output
    warm = np.empty_like(data)
    settings = Settings(max_body_bytes=1 << 30, max_output_bytes=1 << 31)
    limits = Limits.of(settings)
    exchange = GrpcExchange()
    exchange.prepare(request)
    job = exchange.decode(limits)
    slices = [memoryview(request)[i : i + GRPC_SLICE] for i in range(0, len(request), GRPC_SLICE)]
    triton_input = grpcclient.InferInput("data", list(data.shape), "FP32")
    triton_input.set_data_from_numpy(data)
    raw = data.tobytes()

    def triton_request() -> Any:
        message = service_pb2.ModelInferRequest(model_name="roll")
        message.raw_input_contents.extend([raw])
        return message

    triton_message = triton_request()
    parsed = service_pb2.ModelInferResponse.FromString(answer)

    def service_decode() -> Any:
        fresh = GrpcExchange()
        fresh.prepare(request)
        return fresh.decode(limits)

    def protobuf_in() -> Any:  # what a protobuf request_deserializer would cost the service
        return pb.ModelInferRequest.FromString(request).raw_input_contents[0]

    def protobuf_out() -> bytes:  # and a protobuf response_serializer
        response = pb.ModelInferResponse(model_name="roll")
        response.raw_output_contents.append(raw)
        return response.SerializeToString()

    cases: dict[str, tuple[str, Callable[[], object]]] = {
        "copyto": ("memcpy into a warm buffer: np.copyto", lambda: np.copyto(warm, data)),
        "fresh": ("a copy into new memory: bytes(memoryview(tensor))", lambda: bytes(memoryview(raw))),
        "fresh_numpy": (
            "a copy into a new NumPy array (it asks for huge pages)",
            data.copy,
        ),
        "kernel": ("roll kernel into a warm buffer", lambda: job.output(warm)),
        "t_tobytes_real": (
            "client: InferInput.set_data_from_numpy (tobytes)",
            lambda: triton_input.set_data_from_numpy(data),
        ),
        "t_request": ("client: raw_input_contents.extend (into upb's arena)", triton_request),
        "t_serialise": (
            "client: ModelInferRequest.SerializeToString",
            triton_message.SerializeToString,
        ),
        "t_parse": (
            "client: ModelInferResponse.FromString (into upb's arena)",
            lambda: service_pb2.ModelInferResponse.FromString(answer),
        ),
        "t_read": (
            "client: as_numpy reads raw_output_contents[0] (a new bytes)",
            lambda: parsed.raw_output_contents[0],
        ),
        "g_send": (
            "grpc send: grpc_slice_from_copied_buffer (modelled: a new copy)",
            lambda: bytes(memoryview(request)),
        ),
        "g_receive": ("grpc receive: bytes of each 64 KiB slice, b''.join", lambda: grpc_receive(slices)),
        "s_prepare": ("split_raw: the raw contents as views", lambda: split_raw(request, 7)),
        "s_decode": ("GrpcExchange prepare + decode", service_decode),
        "s_encode": ("GrpcExchange.encode (kernel into np.empty, join_raw)", lambda: exchange.encode(job)),
        "e_answer": ("echo_answer (split_raw, join_raw)", lambda: echo_answer(request)),
        "p_in": ("ModelInferRequest.FromString + raw_input_contents[0]", protobuf_in),
        "p_out": ("raw_output_contents.append + SerializeToString", protobuf_out),
    }  # fmt: skip
    medians = interleaved(
        [(key, call) for key, (_, call) in cases.items()],
        number=1,
        rounds=config.stage_rounds,
        min_rounds=3,
        budget=30.0,
    )
    print("  stages: done", file=sys.stderr, flush=True)
    return {
        "nbytes": data.nbytes,
        "labels": {key: label for key, (label, _) in cases.items()},
        "seconds": medians,
    }


STAGE_GROUPS = [
    ("anchors", ["copyto", "fresh", "fresh_numpy", "kernel"]),
    ("tritonclient, per call", ["t_tobytes_real", "t_request", "t_serialise", "t_parse", "t_read"]),
    ("gRPC's Python layer, each side", ["g_send", "g_receive"]),
    ("exchange (app/grpc/exchange.py)", ["s_prepare", "s_decode", "s_encode"]),
    ("echo (grpc_echo.py)", ["e_answer"]),
    ("what split_raw/join_raw avoid", ["p_in", "p_out"]),
]


def print_stages(results: dict[str, Any]) -> None:
    seconds, labels = results["seconds"], results["labels"]
    fresh = seconds["fresh"]
    print(
        f"\n== 3. Where a {results['nbytes'] / MiB:.0f} MiB call copies its tensor, timed in this "
        "process (medians). A copy into new memory costs\nmostly its page faults (the kernel "
        "maps and zeroes each 4 KiB page first); 'copies' = time / that copy."
    )
    rows = []
    for group, keys in STAGE_GROUPS:
        for index, key in enumerate(keys):
            rows.append(
                [group if index == 0 else "", labels[key], time_label(seconds[key]),
                 f"{seconds[key] / fresh:.2f}"]
            )  # fmt: skip
    print(table(["", "stage", "median", "copies"], rows, left=2))


# ----------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, shorter loads")
    parser.add_argument("--mib", type=int, default=64, help="size of the large roll's tensor")
    parser.add_argument("--repeat", type=int, help="timed rounds of large calls (7; quick 3)")
    parser.add_argument("--seconds", type=float, help="duration of a small-call load (5; quick 2)")
    parser.add_argument("--rounds", type=int, help="small-call loads of each server (3; quick 1)")
    parser.add_argument("--in-flight", type=int, default=32, help="small calls in flight")
    parser.add_argument("--only", default="large,small,stages", help="sections to run")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a second service and echo started with this variable too, compared with the "
        "first pair (repeat for more variables: one pair has them all)",
    )
    parser.add_argument(
        "--pair",
        action="append",
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="one more pair of servers started with these variables (repeat for more pairs); "
        "the small calls of every pair are loaded in turns, round after round",
    )
    args = parser.parse_args()
    config = Config.from_args(args)
    started = time.monotonic()
    print(
        f"tensor-ops gRPC benchmark{' (quick)' if config.quick else ''}: {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}, Python {platform.python_version()}, grpcio "
        f"{grpc.__version__}, protobuf {protobuf_version}, tritonclient {version('tritonclient')}"
    )
    print(
        "service: python -m uvicorn app.main:app, 1 worker; echo: tests/benchmarks/grpc_echo.py;"
        " both on 127.0.0.1"
    )
    targets: list[list[str]] = []
    with contextlib.ExitStack() as stack:
        pairs = []
        if config.sections & {"large", "small", "stream"}:
            pairs = [stack.enter_context(servers(env)) for env in config.envs]
        if "large" in config.sections:
            targets += print_large(bench_large(config, pairs), config, pairs)
        if "small" in config.sections:
            targets += print_small(bench_small(config, pairs), config)
        if "stream" in config.sections:
            targets += print_stream(bench_stream(config, pairs), config)
    if "stages" in config.sections:
        print_stages(bench_stages(config))
    if targets:
        print("\nTargets (printed, never asserted)")
        print(table(["target", "figure", ""], targets))
    print(f"\nDone in {time.monotonic() - started:.0f} s; load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
