"""Scaling of tensor-ops over worker processes: requests/s, p99 and memory for 1, 2 and 4 workers.

    .venv/bin/python tests/benchmarks/scaling.py                  # full run, about 3 minutes
    .venv/bin/python tests/benchmarks/scaling.py --quick          # short runs, under a minute
    .venv/bin/python tests/benchmarks/scaling.py --workers 1,2 --json scaling.json
    .venv/bin/python tests/benchmarks/scaling.py --replot scaling.json  # tables and plot again

The full run writes the plot ``docs/scaling.png``; ``--quick`` writes it to the temporary
directory instead (``--plot PATH`` chooses). Both print the tables as Markdown too, ready for
the README's "Scaling" section.

For each number of workers the service runs as in production, ``python -m app`` with
``TENSOR_OPS_WORKERS`` (uvicorn's supervisor and its spawned workers), gRPC off and the default
log level ``info``: one JSON access line per request, as production writes (``--log-level
warning`` leaves it out, as ``bench.py`` does). Its anchor is the bare FastAPI app of
``tests/benchmarks/echo_app.py`` under uvicorn with the same number of workers (no access log,
as in ``bench.py``). Both run side by side; ``wrk`` (2 threads, 16 connections by default:
4 per worker at 4 workers) loads each in turn with:

1. small: ``{"data":[1,2,3],"shift":1,"axes":0}`` to ``POST /roll``; anchor: the same body to
   the echo app's ``POST /constant`` (reads the body, answers a constant);
2. large: a 1M-element float32 roll (1024 x 1024, 4 MiB) as an ``.npz`` body to ``POST /roll``
   with ``Accept: application/x-npy`` (the raw ``.npy`` answer, 4 MiB); anchor: the echo app's
   ``POST /echo`` of the same bytes.

Each figure is a median of runs interleaved with its anchor (the four loads in turn, the order
reversed every other round). Memory: the RSS (``VmRSS``) of each worker process at idle after
start-up (before any request), its peak while loaded (sampled every 50 ms, and ``VmHWM`` reset
before each load) and at idle again after the loads. On a 2-core machine 4 workers are more
processes than cores (and ``wrk`` takes CPU from them too): what they show is oversubscription.
Beside each figure, the cores kept busy by the server's workers, by wrk and by everything else
(``/proc/stat``): on a shared machine, a run where others took a core is not a clean one.

It prints tables and ratios, counts wrk's non-2xx answers and socket errors and reads the
servers' logs (statuses other than 200, errors, tracebacks), and never asserts a time; every
loop is bounded in count and time. The Markdown tables it prints are the README's.
"""

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.bench import (  # noqa: E402
    SMALL_ANSWER,
    SMALL_BODY,
    WRK,
    KiB,
    MiB,
    RawHttp,
    Transport,
    check_transport,
    descendants,
    echo_command,
    parse_wrk,
    reset_peak,
    square_shape,
    status_kib,
    table,
    transports,
)
from tests.support import launch_server, server_output, stop_server  # noqa: E402

CASES = {
    "small": "3-element roll, JSON",
    "large": "4 MiB roll, .npz in, .npy out",
}
KINDS = {"service": "tensor-ops", "anchor": "echo app"}
#: The echo app's uvicorn options, as in bench.py's small requests.
ECHO_OPTIONS = ["--no-access-log", "--log-level", "warning", "--no-server-header"]
JSON_TYPE = {"content-type": "application/json"}
LARGE_NBYTES = 4 * MiB
SAMPLE_EVERY = 0.05  # seconds between two RSS samples during a load
WRK_TIMEOUT = 10  # seconds after which wrk counts a request as timed out


@dataclass
class Config:
    quick: bool
    workers: list[int]
    seconds: int  # duration of each wrk run
    rounds: int  # runs of each load, interleaved
    warm_up: int  # seconds of an untimed load of each route first (0: none)
    connections: int
    threads: int
    log_level: str
    plot_path: Path

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Config":
        workers = [int(count) for count in args.workers.split(",")]
        if not workers or min(workers) < 1:
            raise SystemExit("--workers: counts of 1 or more, comma-separated")
        if args.connections < args.threads:
            raise SystemExit("--connections: at least one for each wrk thread")
        return cls(
            quick=args.quick,
            workers=workers,
            seconds=args.seconds or (1 if args.quick else 4),
            rounds=args.rounds or (1 if args.quick else 3),
            warm_up=0 if args.quick else 1,
            connections=args.connections,
            threads=args.threads,
            log_level=args.log_level,
            plot_path=args.plot,
        )


# ----------------------------------------------------------------------------------------------
# Processes and their memory


def rss_kib(pid: int) -> int:
    """The resident memory of ``pid`` in KiB; 0 once it is gone."""
    try:
        return status_kib(pid, "VmRSS")
    except OSError:
        return 0


def worker_pids(pid: int) -> list[int]:
    """The workers uvicorn's supervisor ``pid`` spawned (not its resource tracker)."""
    workers = []
    for child in descendants(pid):
        with contextlib.suppress(OSError):
            if b"multiprocessing.spawn" in Path(f"/proc/{child}/cmdline").read_bytes():
                workers.append(child)
    return sorted(workers)


def wait_for_workers(pid: int, count: int, timeout: float = 60) -> list[int]:
    """The ``count`` worker processes of server ``pid`` (itself when one) once all have started:
    ``launch_server`` returns when one answers, the others may still be importing. Started means
    every worker's RSS steady (within 256 KiB) over half a second."""
    deadline = time.monotonic() + timeout
    before: list[int] = []
    for _ in range(int(timeout / 0.5) + 1):
        workers = worker_pids(pid) if count > 1 else [pid]
        sizes = [rss_kib(worker) for worker in workers]
        started = len(workers) == count == len(before) and all(sizes)
        if started and all(abs(a - b) <= 256 for a, b in zip(sizes, before, strict=True)):
            return workers
        before = sizes
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    raise RuntimeError(f"server {pid}: {count} workers did not start within {timeout:.0f} s")


def tree_kib(pid: int) -> int:
    """The RSS of ``pid`` and every process it started (supervisor, resource tracker, workers)."""
    return sum(rss_kib(member) for member in [pid, *descendants(pid)])


def cpu_seconds(pids: list[int]) -> float:
    """The CPU time (user and system) ``pids`` have used so far; 0 for those gone."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            # After the command's name (in parentheses), utime and stime are fields 12 and 13.
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def machine_busy() -> float:
    """The CPU time all of the machine's cores have been busy (not idle nor waiting), from
    /proc/stat: with ``cpu_seconds`` and ``children_cpu``, what other processes took."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # guest time is in user already


def children_cpu() -> float:
    """The CPU time of this process's children that have ended (wrk, once it has)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@contextlib.contextmanager
def serving(env: dict[str, str], command: list[str], logs: list[str]) -> Iterator[tuple[str, int]]:
    """bench.py's ``server`` (a server started by ``launch_server``, yielding its URL and pid,
    stopped with its workers), its log appended to ``logs`` once it has stopped, for
    ``log_summary`` rather than printed."""
    url, process = launch_server(env, command)
    try:
        yield url, process.pid
    finally:
        children = descendants(process.pid)
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)
        logs.append(server_output(process))
        stop_server(process)
        for pid in children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def log_summary(output: str, lengths: set[int]) -> dict[str, dict[str, int]]:
    """What a server's log says, counted: the statuses of the POSTs it logged (the service's
    access lines; "cut off" where less than a whole body of ``lengths`` came in), its warnings
    and errors, the exceptions its tracebacks end with."""
    statuses: Counter[str] = Counter()
    messages: Counter[str] = Counter()
    exceptions: Counter[str] = Counter()
    in_traceback = False
    for line in output.splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if record.get("logger") == "tensor_ops.access":
                    if record.get("method") == "POST":
                        whole = record.get("bytes_in") in lengths
                        statuses[f"{record.get('status')}{'' if whole else ' cut off'}"] += 1
                elif record.get("level") in {"warning", "error", "critical"}:
                    messages[f"{record['level']}: {record.get('message', '')}"[:100]] += 1
                if record.get("exception"):
                    exceptions[record["exception"].strip().splitlines()[-1][:100]] += 1
        elif line.startswith("Traceback"):
            in_traceback = True
        elif in_traceback and line and not line[0].isspace():
            exceptions[line[:100]] += 1
            in_traceback = False
        elif re.match(r"(ERROR|WARNING|CRITICAL):", line):
            messages[line[:100]] += 1
    return {"statuses": dict(statuses), "messages": dict(messages), "exceptions": dict(exceptions)}


# ----------------------------------------------------------------------------------------------
# Loads


@dataclass
class Route:
    """One server's route under load and the request wrk repeats."""

    path: str
    body: bytes
    headers: dict[str, str]


def lua_script(folder: Path, name: str, route: Route) -> Path:
    """A wrk script that POSTs ``route``'s body (read from a file: it may be binary)."""
    body = folder / f"{name}.body"
    body.write_bytes(route.body)
    lines = [
        'wrk.method = "POST"',
        f'local file = assert(io.open({json.dumps(str(body))}, "rb"))',
        'wrk.body = file:read("*a")',
        "file:close()",
    ]
    lines += [f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in route.headers.items()]
    script = folder / f"{name}.lua"
    script.write_text("\n".join(lines) + "\n")
    return script


def parse_errors(output: str) -> dict[str, float]:
    """What ``parse_wrk`` leaves out: the requests made and each kind of socket error."""
    made = re.search(r"(\d+) requests in", output)
    errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    counts = [int(value) for value in errors.groups()] if errors else [0, 0, 0, 0]
    return {
        "requests": float(made[1]) if made else 0.0,
        "socket_errors": float(sum(counts)),
        "timeouts": float(counts[3]),
    }


def load(
    url: str, script: Path, seconds: int, config: Config, pids: list[int]
) -> tuple[dict[str, float], list[int], list[int]]:
    """One wrk run; its figures, and each of ``pids``' peak RSS in KiB: sampled every 50 ms, and
    VmHWM (reset first; 0 where the kernel does not allow the reset)."""
    command = [
        WRK, f"-t{config.threads}", f"-c{config.connections}", f"-d{seconds}s", "--latency",
        "--timeout", f"{WRK_TIMEOUT}s", "-s", str(script), url,
    ]  # fmt: skip
    resets = [reset_peak(pid) for pid in pids]
    peaks = [rss_kib(pid) for pid in pids]
    server_before, client_before, busy_before = cpu_seconds(pids), children_cpu(), machine_busy()
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for _ in range(int((seconds + 30) / SAMPLE_EVERY)):
        if process.poll() is not None:
            break
        time.sleep(SAMPLE_EVERY)
        peaks = [max(peak, rss_kib(pid)) for peak, pid in zip(peaks, pids, strict=True)]
    else:
        process.kill()
    output = process.communicate(timeout=30)[0].decode(errors="replace")
    wall = time.monotonic() - start
    server_cpu, client_cpu = cpu_seconds(pids) - server_before, children_cpu() - client_before
    other_cpu = machine_busy() - busy_before - server_cpu - client_cpu
    if process.returncode != 0:
        raise RuntimeError(f"wrk failed ({process.returncode}):\n{output}")
    hwm = []
    for pid, reset in zip(pids, resets, strict=True):
        try:
            hwm.append(status_kib(pid, "VmHWM") if reset else 0)
        except OSError:  # gone: the check of the worker pids after the loads tells
            hwm.append(0)
    run = parse_wrk(output)
    run.update(parse_errors(output))
    # Cores kept busy: by the server's workers, by wrk, by everything else (this process, the
    # other server, other users of the machine).
    run.update(
        server_cores=server_cpu / wall,
        client_cores=client_cpu / wall,
        other_cores=max(0.0, other_cpu / wall),
    )
    return run, peaks, hwm


def routes(data: Any) -> dict[tuple[str, str], Route]:
    large = large_transport(data)
    return {
        ("small", "service"): Route("/roll", SMALL_BODY, JSON_TYPE),
        ("small", "anchor"): Route("/constant", SMALL_BODY, JSON_TYPE),
        ("large", "service"): Route("/roll", large.body, large.headers),
        ("large", "anchor"): Route("/echo", large.body, large.headers),
    }


def large_transport(data: Any) -> Transport:
    """bench.py's ``.npz`` transport (roll by (3, -7) along (0, 1)), asking for ``.npy``."""
    npz = next(item for item in transports(data) if item.key == "npz")
    return dataclasses.replace(npz, headers={**npz.headers, "accept": "application/x-npy"})


def check_answers(service_url: str, echo_url: str, data: Any) -> None:
    """Each route answers as it should, once (untimed): wrong answers would be fast ones."""
    service, echo = RawHttp(service_url), RawHttp(echo_url)
    try:
        status, _, answer = service.post("/roll", SMALL_BODY, JSON_TYPE)
        if status != 200 or orjson.loads(answer) != SMALL_ANSWER:
            raise AssertionError(f"small roll: {status} {bytes(answer[:300])!r}")
        status, _, answer = echo.post("/constant", SMALL_BODY, JSON_TYPE)
        if status != 200:
            raise AssertionError(f"echo /constant: {status}")
        check_transport(service, echo, large_transport(data), data)
    finally:
        service.close()
        echo.close()


def summary(runs: list[dict[str, float]]) -> dict[str, Any]:
    """Medians of the rates and latencies; sums of the requests and errors."""
    result: dict[str, Any] = {
        metric: statistics.median(run[metric] for run in runs)
        for metric in ("rps", "p50", "p99", "server_cores", "client_cores", "other_cores")
    }
    for metric in ("requests", "non_2xx", "socket_errors", "timeouts"):
        result[metric] = sum(run[metric] for run in runs)
    result["runs"] = runs
    return result


def bench_workers(workers: int, config: Config, folder: Path, data: Any) -> dict[str, Any]:
    """Service and echo app with ``workers`` workers each, side by side: the loads, interleaved,
    and the memory of each worker."""
    env = {
        "TENSOR_OPS_WORKERS": str(workers),
        "TENSOR_OPS_GRPC_PORT": "0",
        "TENSOR_OPS_LOG_LEVEL": config.log_level,
    }
    echo = echo_command("--workers", str(workers), *ECHO_OPTIONS)
    requests = routes(data)
    paths = {key: route.path for key, route in requests.items()}
    scripts = {key: lua_script(folder, "-".join(key), route) for key, route in requests.items()}
    order = list(paths)
    logs: dict[str, list[str]] = {kind: [] for kind in KINDS}
    with (
        serving(env, ["-m", "app"], logs["service"]) as (service_url, service_pid),
        serving({}, echo, logs["anchor"]) as (echo_url, echo_pid),
    ):
        urls = {"service": service_url, "anchor": echo_url}
        supervisors = {"service": service_pid, "anchor": echo_pid}
        pids = {kind: wait_for_workers(pid, workers) for kind, pid in supervisors.items()}
        memory: dict[str, Any] = {
            kind: {
                "idle": [rss_kib(pid) for pid in pids[kind]],
                "all_idle": tree_kib(supervisors[kind]),
                "peak": {case: [0] * workers for case in CASES},
                "peak_hwm": {case: [0] * workers for case in CASES},
            }
            for kind in KINDS
        }
        check_answers(service_url, echo_url, data)
        for case, kind in order if config.warm_up else []:
            url = urls[kind] + paths[case, kind]
            load(url, scripts[case, kind], config.warm_up, config, pids[kind])
        runs: dict[tuple[str, str], list[dict[str, float]]] = {key: [] for key in order}
        for round_ in range(config.rounds):
            for case, kind in order if round_ % 2 == 0 else order[::-1]:
                url = urls[kind] + paths[case, kind]
                run, peaks, hwm = load(url, scripts[case, kind], config.seconds, config, pids[kind])
                runs[case, kind].append(run)
                for key, values in (("peak", peaks), ("peak_hwm", hwm)):
                    held = memory[kind][key][case]
                    memory[kind][key][case] = [max(a, b) for a, b in zip(held, values, strict=True)]
        time.sleep(1)
        for kind, pid in supervisors.items():
            memory[kind]["after"] = [rss_kib(worker) for worker in pids[kind]]
            memory[kind]["workers_replaced"] = (worker_pids(pid) if workers > 1 else [pid]) != pids[
                kind
            ]
    result: dict[str, Any] = {
        case: {kind: summary(runs[case, kind]) for kind in KINDS} for case in CASES
    }
    result["memory"] = memory
    lengths = {len(route.body) for route in requests.values()}
    result["logs"] = {kind: log_summary("".join(logs[kind]), lengths) for kind in KINDS}
    return result


# ----------------------------------------------------------------------------------------------
# Tables and the plot


def spread(values: list[int]) -> str:
    """Figures of each worker, in MiB: one, or the lowest-highest."""
    low, high = f"{min(values) / KiB:.0f}", f"{max(values) / KiB:.0f}"
    return low if low == high else f"{low}-{high}"


def milliseconds(seconds: float) -> str:
    return f"{seconds * 1e3:.0f}" if seconds >= 0.1 else f"{seconds * 1e3:.1f}"


def peak(memory: dict[str, Any], case: str) -> list[int]:
    """Each worker's peak under a load: VmHWM where it could be reset, else the samples."""
    return [max(a, b) for a, b in zip(memory["peak"][case], memory["peak_hwm"][case], strict=True)]


def log_problems(workers: str, label: str, logs: dict[str, dict[str, int]]) -> list[str]:
    """A line for each kind of thing a server's log holds besides 200s and start-up."""
    found = []
    statuses = {code: n for code, n in logs["statuses"].items() if code != "200"}
    if statuses:
        note = ""
        if all(code.endswith("cut off") for code in statuses):
            note = (
                " (requests wrk cut off mid-body as each run ends: the service's `disconnected`"
                " fault, a 400, never seen by wrk)"
            )
        found.append(f"{workers} worker(s), {label}: logged statuses {statuses}{note}")
    for kind in ("messages", "exceptions"):
        for text, count in logs[kind].items():
            note = ""
            if "ClientDisconnect" in text:
                note = " (wrk closing connections with requests in flight as each run ends)"
            found.append(f"{workers} worker(s), {label}: {count} x {text}{note}")
    return found


def print_report(report: dict[str, Any]) -> None:
    setup = report["config"]
    results = report["workers"]
    counts = sorted(results, key=int)
    base = results[counts[0]]
    rows, markdown, problems = [], [], []
    for workers in counts:
        for case, label in CASES.items():
            service, anchor = results[workers][case]["service"], results[workers][case]["anchor"]
            cells = [
                f"{service['rps']:,.0f}",
                f"{anchor['rps']:,.0f}",
                f"{service['rps'] / anchor['rps']:.2f}x",
                f"{service['rps'] / base[case]['service']['rps']:.2f}x",
                milliseconds(service["p99"]),
                milliseconds(anchor["p99"]),
                f"{service['p99'] / anchor['p99']:.2f}x",
            ]
            cores = [
                f"{item['server_cores']:.1f}+{item['client_cores']:.1f}+{item['other_cores']:.1f}"
                for item in (service, anchor)
            ]
            errors = [
                f"{item['non_2xx'] + item['socket_errors']:.0f}" for item in (service, anchor)
            ]
            rows.append([workers, label, *cells, *cores, "/".join(errors)])
            markdown.append(f"| {workers} | {label} | " + " | ".join([*cells, *cores]) + " |")
            for kind, item in (("tensor-ops", service), ("echo app", anchor)):
                if item["non_2xx"] or item["socket_errors"]:
                    problems.append(
                        f"{workers} worker(s), {label}, {kind}: {item['non_2xx']:.0f} non-2xx, "
                        f"{item['socket_errors']:.0f} socket errors ({item['timeouts']:.0f} "
                        f"timeouts) in {item['requests']:.0f} requests"
                    )
    print(
        f"\nRequests/s and p99 (ms): wrk -t{setup['threads']} -c{setup['connections']} "
        f"-d{setup['seconds']}s, medians of {setup['rounds']} run(s) each, interleaved with the "
        "anchor (echo app, same workers);\nratio = tensor-ops / echo; scaling = tensor-ops' "
        f"req/s over its own with {counts[0]} worker(s); cores = CPU cores kept busy by the "
        "server's workers + by wrk\n+ by all else (this script, other users; medians); errors = non-2xx + socket errors counted by wrk, "
        f"tensor-ops/echo. {report['machine']['cpus']} CPUs."
    )
    headers = [
        "workers", "requests", "req/s", "echo req/s", "ratio", "scaling", "p99", "echo p99",
        "p99 ratio", "cores", "echo cores", "errors",
    ]  # fmt: skip
    print(table(headers, rows, left=2))
    memory_rows, memory_markdown = [], []
    for workers in counts:
        memory = results[workers]["memory"]
        for kind, label in KINDS.items():
            item = memory[kind]
            memory_rows.append(
                [
                    workers if kind == "service" else "",
                    label,
                    spread(item["idle"]),
                    spread(peak(item, "small")),
                    spread(item["peak"]["large"]),
                    spread(item["peak_hwm"]["large"]) if all(item["peak_hwm"]["large"]) else "-",
                    spread(item["after"]),
                    f"{item['all_idle'] / KiB:.0f}",
                    "REPLACED" if item["workers_replaced"] else "",
                ]
            )
            if item["workers_replaced"]:
                problems.append(f"{workers} worker(s), {label}: workers died and were replaced")
            problems += log_problems(workers, label, results[workers]["logs"][kind])
        service, anchor = memory["service"], memory["anchor"]
        memory_markdown.append(
            f"| {workers} | {spread(service['idle'])} | {spread(peak(service, 'large'))} | "
            f"{spread(service['after'])} | {service['all_idle'] / KiB:.0f} | "
            f"{spread(anchor['idle'])} | {spread(peak(anchor, 'large'))} |"
        )
    print(
        "\nMemory of each worker process, MiB (lowest-highest over the workers): RSS at idle "
        "after start-up, peak under the small load and under the 4 MiB load\n(sampled every "
        f"{SAMPLE_EVERY * 1e3:.0f} ms, and VmHWM), RSS at idle after the loads; all = the whole "
        "process tree at idle (supervisor and resource tracker too)"
    )
    headers = [
        "workers", "server", "idle", "peak small", "peak 4 MiB", "VmHWM 4 MiB", "after", "all",
        "",
    ]  # fmt: skip
    print(table(headers, memory_rows, left=2))
    print("\nProblems (wrk's counts, worker processes, server logs):")
    print("\n".join(f"- {line}" for line in problems) if problems else "- none")
    print("\nMarkdown (README, Benchmarks, Scaling):\n")
    print(
        f"`{report['command']}`, {report['machine']['cpus']} cores, "
        f"`wrk -t{setup['threads']} -c{setup['connections']}`, medians of {setup['rounds']} "
        f"run(s) of {setup['seconds']} s, log level {setup['log_level']}:\n"
    )
    print(
        "| workers | requests | req/s | echo req/s | ratio | scaling | p99 ms | echo p99 ms "
        "| p99 ratio | cores | echo cores |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(markdown))
    print(
        "\n| workers | idle, MiB per worker | peak, 4 MiB load | idle after | all processes "
        "idle | echo idle | echo peak, 4 MiB load |"
    )
    print("|---|---|---|---|---|---|---|")
    print("\n".join(memory_markdown))


def plot(report: dict[str, Any], path: Path) -> None:
    # Imported here: only the plot needs it (the `test` extra), and it must get Agg first.
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    results = report["workers"]
    counts = sorted(int(workers) for workers in results)
    cpus = report["machine"]["cpus"]
    figure, axes = plt.subplots(2, 2, figsize=(13, 9), constrained_layout=True)
    panels = [("rps", 1.0, "requests/s (higher is better)"), ("p99", 1e3, "p99 latency, ms")]
    for row, (metric, scale, ylabel) in enumerate(panels):
        for column, (case, label) in enumerate(CASES.items()):
            ax = axes[row][column]
            for kind, style, color in (("service", "o-", "tab:blue"), ("anchor", "s--", "black")):
                values = [results[str(n)][case][kind][metric] * scale for n in counts]
                ax.plot(counts, values, style, color=color, label=KINDS[kind], linewidth=1.8)
            if cpus and min(counts) <= cpus <= max(counts):
                ax.axvline(cpus, color="grey", linestyle=":", label=f"{cpus} cores")
            ax.set_xscale("log", base=2)
            ax.set_xticks(counts, [str(n) for n in counts])
            ax.set_ylim(bottom=0)
            ax.set_xlabel("uvicorn workers")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{label}: {'requests/s' if metric == 'rps' else 'p99'}")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=9, loc="best")
    setup = report["config"]
    figure.suptitle(
        f"tensor-ops scaling over workers ({cpus} cores, {report['machine']['processor']}); "
        f"wrk -t{setup['threads']} -c{setup['connections']}, medians of {setup['rounds']} run(s) "
        f"of {setup['seconds']} s, interleaved with the echo app (dashed)"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)


# ----------------------------------------------------------------------------------------------
# Main


def wrk_version() -> str:
    done = subprocess.run([WRK, "-v"], check=False, capture_output=True, text=True, timeout=10)
    return (done.stdout + done.stderr).split(" Copyright")[0].strip()


def code_state() -> dict[str, Any]:
    """The commit measured, and the server's files that differ from it (a shared working tree)."""

    def git(*arguments: str) -> str:
        done = subprocess.run(
            ["git", *arguments], cwd=ROOT, check=False, capture_output=True, text=True, timeout=30
        )
        return done.stdout.rstrip()

    changed = git("status", "--porcelain", "--", "app", "client")
    return {"commit": git("rev-parse", "--short", "HEAD"), "changed": changed.splitlines()}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 run of 1 s per load, no warm-up")
    parser.add_argument("--workers", default="1,2,4", help="worker counts, comma-separated")
    parser.add_argument("--seconds", type=int, help="duration of each wrk run (4; quick 1)")
    parser.add_argument("--rounds", type=int, help="runs of each load (3; quick 1)")
    parser.add_argument("--connections", type=int, default=16, help="wrk connections")
    parser.add_argument("--threads", type=int, default=2, help="wrk threads")
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["info", "warning"],
        help="the service's (info, the default, writes the access log line of each request)",
    )
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    parser.add_argument(
        "--plot", type=Path, help="where to write the plot (docs/scaling.png; quick: temp dir)"
    )
    parser.add_argument(
        "--replot", type=Path, help="only print the tables and redraw the plot of an earlier --json"
    )
    args = parser.parse_args()
    if args.replot:
        earlier = json.loads(args.replot.read_text())
        print_report(earlier)
        plot(earlier, args.plot or ROOT / "docs" / "scaling.png")
        return
    if args.plot is None:
        quick_plot = Path(tempfile.gettempdir()) / "tensor-ops-scaling-quick.png"
        args.plot = quick_plot if args.quick else ROOT / "docs" / "scaling.png"
    if not Path(WRK).exists():
        raise SystemExit(f"{WRK} is needed (apt-get install wrk)")
    config = Config.from_args(args)
    started = time.monotonic()
    load_before = os.getloadavg()
    report: dict[str, Any] = {
        "command": " ".join([".venv/bin/python", "tests/benchmarks/scaling.py", *sys.argv[1:]]),
        "machine": {
            "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "uvicorn": version("uvicorn"),
            "wrk": wrk_version(),
        },
        "code": code_state(),
        "config": {
            key: value
            for key, value in dataclasses.asdict(config).items()
            if key not in {"plot_path"}
        },
        "workers": {},
    }
    print(
        f"tensor-ops scaling{' (quick)' if config.quick else ''}: {os.cpu_count()} CPUs, load "
        f"average {load_before[0]:.2f}, Python {platform.python_version()}, uvicorn "
        f"{report['machine']['uvicorn']}, {report['machine']['wrk']}\n"
        f"service: python -m app, TENSOR_OPS_WORKERS=N, gRPC off, log level {config.log_level}; "
        f"anchor: tests/benchmarks/echo_app.py, uvicorn --workers N {' '.join(ECHO_OPTIONS)}\n"
        f"code: {report['code']['commit']}, "
        + (
            f"with changes: {', '.join(report['code']['changed'])}"
            if report["code"]["changed"]
            else "clean"
        )
    )
    shape = square_shape(LARGE_NBYTES, 4)
    data = np.random.default_rng(17).standard_normal(shape).astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="tensor-ops-scaling-") as folder:
        for workers in config.workers:
            report["workers"][str(workers)] = bench_workers(workers, config, Path(folder), data)
            print(f"  {workers} worker(s): done", file=sys.stderr, flush=True)
    report["seconds"] = time.monotonic() - started
    report["load_average"] = {"before": load_before, "after": os.getloadavg()}
    print_report(report)
    plot(report, config.plot_path)
    print(
        f"\nPlot written to {config.plot_path}. Done in {report['seconds']:.0f} s; load average "
        f"before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}"
    )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str) + "\n")
        print(f"Figures written to {args.json}")


if __name__ == "__main__":
    main()
