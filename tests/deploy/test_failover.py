"""The scaled profile's failover, on the host: three ``python -m app`` replicas behind a real nginx
running deploy/nginx/nginx.conf, under a steady mixed load, while one replica is killed, all are
restarted in turn and one stops answering. No request may fail; every answer is checked.

``run_failover`` runs the whole scenario and returns its figures; the test runs it briefly and
``tests/benchmarks/failover.py`` at longer scenario.
"""

import contextlib
import http.client
import io
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pytest
import uvicorn

from app.settings import Settings
from tests.deploy.nginx_config import CONFIG, NGINX, nginx_version, parse, render, seconds
from tests.support import free_port, malloc_env, npz_bytes

ROOT = Path(__file__).resolve().parents[2]
Array = npt.NDArray[Any]
#: What is wrong with an answer (its body given), or None when it is right.
Check = Callable[[bytes], str | None]

# The balancer's settings the scenario depends on, read from the file itself.
_CONFIG = parse(CONFIG.read_text()).one("http")
_HTTP = next(server for server in _CONFIG.all("server") if server.value("listen") == ["8080"])
READ_TIMEOUT = seconds(_HTTP.value("proxy_read_timeout")[0])
#: How long a client waits for one answer: longer than any wait nginx may impose on it.
CLIENT_TIMEOUT = 3 * READ_TIMEOUT
#: Bound of every wait for a state change (a replica starting, nginx sending it requests).
STATE_WAIT = 60.0


# ------------------------------------------------------------------------------------------------
# Replicas and the balancer


@dataclass
class Replica:
    """One ``python -m app`` on a fixed port of 127.0.0.1, started again on the same port."""

    port: int
    log: Path
    command: tuple[str, ...]  # the interpreter's arguments
    #: Settings of its own (TENSOR_OPS_API_KEYS_FILE), over the environment's.
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {
            **os.environ,
            **malloc_env(),
            "TENSOR_OPS_HOST": "127.0.0.1",
            "TENSOR_OPS_PORT": str(self.port),
            "TENSOR_OPS_GRPC_PORT": "0",
            "TENSOR_OPS_WORKERS": "1",
            **self.env,
        }
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(
                [sys.executable, *self.command],
                cwd=ROOT,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self) -> float:
        """Until ``/health/ready`` answers 200 (a start-up wait); the time it did."""
        assert self.process is not None
        deadline = time.monotonic() + STATE_WAIT
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text(errors="replace")[-4000:]
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            try:
                connection.request("GET", "/health/ready")
                if connection.getresponse().status == 200:
                    return time.time()
            except OSError:
                pass
            finally:
                connection.close()
            time.sleep(0.05)
        raise RuntimeError(f"replica {self.address} not ready in {STATE_WAIT} s")

    def send(self, number: signal.Signals) -> None:
        assert self.process is not None
        os.kill(self.process.pid, number)

    def wait_exit(self) -> int:
        assert self.process is not None
        return self.process.wait(STATE_WAIT)

    def destroy(self) -> None:
        """Gone, whatever its state (stopped ones too), with anything it started."""
        if self.process is None:
            return
        for number in (signal.SIGCONT, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, number)
        self.process.wait(30)


@dataclass(frozen=True)
class Attempt:
    """One try of a request on one replica, as nginx logged it."""

    replica: str
    status: str  # the replica's status, or nginx's for a try that failed ("502", "504")
    started: float  # seconds since the epoch
    seconds: float


@dataclass(frozen=True)
class Call:
    """One request through nginx: its tries in order, its status, when it started and ended."""

    started: float
    ended: float
    status: str
    uri: str
    request_id: str
    attempts: tuple[Attempt, ...]
    #: The tries of its key check (nginx's auth_request, GET /info), made before ``attempts``.
    checks: tuple[Attempt, ...] = ()

    @property
    def tries(self) -> tuple[Attempt, ...]:
        """Every try on a replica, the key check's first."""
        return self.checks + self.attempts


class TimingLog:
    """nginx's ``timing.log`` (see ``render``), read as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.calls: list[Call] = []

    def read(self) -> list[Call]:
        """Every call logged so far (a line still being written waits for the next read)."""
        if self.path.exists():
            with self.path.open("rb") as log:
                log.seek(self.offset)
                chunk = log.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]
            self.offset += len(complete)
            self.calls += [_call(line) for line in complete.decode().splitlines()]
        return self.calls


def _call(line: str) -> Call:
    ended, total, addresses, statuses, times, status, uri, request_id, *check = line.split("|")
    started = float(ended) - float(total)
    at = started
    tries: list[list[Attempt]] = [[], []]
    for group, (group_addresses, group_statuses, group_times) in zip(
        tries, [check or ["", "", ""], [addresses, statuses, times]], strict=True
    ):
        if group_addresses in ("", "-"):
            continue
        for replica, upstream_status, spent in zip(
            group_addresses.split(", "),
            group_statuses.split(", "),
            group_times.split(", "),
            strict=True,
        ):
            duration = float(spent) if spent != "-" else 0.0
            group.append(Attempt(replica, upstream_status, at, duration))
            at += duration
    checks, attempts = tries
    return Call(started, float(ended), status, uri, request_id, tuple(attempts), tuple(checks))


@dataclass
class Balancer:
    """nginx running deploy/nginx/nginx.conf in front of the replicas."""

    directory: Path
    port: int
    process: subprocess.Popen[bytes]
    timing: TimingLog

    @classmethod
    @contextlib.contextmanager
    def running(cls, directory: Path, replicas: list[Replica]) -> Iterator["Balancer"]:
        assert NGINX is not None
        port = free_port()
        config = render(
            directory,
            # gRPC is not under test here: its upstream points at a port nothing serves.
            upstreams={8000: [replica.address for replica in replicas], 8001: ["127.0.0.1:9"]},
            listens={8080: port, 8081: free_port()},
            version=nginx_version(),
        )
        with (directory / "nginx.out").open("wb") as sink:
            process = subprocess.Popen(
                [NGINX, "-c", str(config), "-p", str(directory)], stdout=sink, stderr=sink
            )
        try:
            deadline = time.monotonic() + STATE_WAIT
            while True:
                assert process.poll() is None, (directory / "nginx.out").read_text()
                try:
                    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                    connection.request("GET", "/health")
                    connection.getresponse().read()
                    connection.close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "nginx did not start"
                    time.sleep(0.05)
            yield cls(directory, port, process, TimingLog(directory / "timing.log"))
        finally:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    def wait_in_rotation(self, replica: Replica, since: float) -> float:
        """Until nginx has had a request answered by ``replica`` (started after ``since``),
        that is, it sends the replica requests again; the time that request started."""
        deadline = time.monotonic() + STATE_WAIT
        while time.monotonic() < deadline:
            for call in reversed(self.timing.read()):
                if call.started < since:
                    break
                last = call.attempts[-1] if call.attempts else None
                if last and last.replica == replica.address and last.status == "200":
                    return call.started
            time.sleep(0.05)
        raise RuntimeError(f"nginx sent no request to {replica.address} in {STATE_WAIT} s")

    def errors(self) -> list[tuple[float, str]]:
        """nginx's error.log: each error or warning's time (to the second) and message."""
        log = self.directory / "error.log"
        found = []
        for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
            if "[error]" in line or "[warn]" in line:
                stamp = time.mktime(time.strptime(line[:19], "%Y/%m/%d %H:%M:%S"))
                message = line.split("*", 1)[-1].split(" ", 1)[-1]
                found.append((stamp, message.split(", client")[0]))
        return found


# ------------------------------------------------------------------------------------------------
# The load: small rolls and gathers, JSON and .npz, each answer checked against NumPy


@dataclass(frozen=True)
class Outcome:
    kind: str
    request_id: str
    started: float  # seconds since the epoch
    seconds: float
    error: str | None  # what went wrong, or None for a right answer

    @property
    def ended(self) -> float:
        return self.started + self.seconds


def _json_answer(expected: Array) -> Check:
    def check(body: bytes) -> str | None:
        answer = orjson.loads(body)
        if answer["dtype"] != str(expected.dtype) or answer["shape"] != list(expected.shape):
            return f"{answer['dtype']} {answer['shape']} for {expected.dtype} {expected.shape}"
        if not np.array_equal(np.array(answer["data"], dtype=expected.dtype), expected):
            return "wrong values"
        return None

    return check


def _npy_answer(expected: Array) -> Check:
    def check(body: bytes) -> str | None:
        answer = np.load(io.BytesIO(body), allow_pickle=False)
        if answer.dtype != expected.dtype or answer.shape != expected.shape:
            return f"{answer.dtype} {answer.shape} for {expected.dtype} {expected.shape}"
        return None if np.array_equal(answer, expected) else "wrong values"

    return check


def _shape(rng: np.random.Generator) -> tuple[int, ...]:
    return tuple(int(size) for size in rng.integers(1, 6, int(rng.integers(1, 4))))


def request(rng: np.random.Generator) -> tuple[str, str, bytes, dict[str, str], Check]:
    """One random request of the mix: (kind, path, body, headers, check of its answer)."""
    kind = ("roll-json", "gather-json", "roll-npz", "gather-npz")[int(rng.integers(4))]
    shape = _shape(rng)
    data: Array = rng.integers(-1000, 1000, shape)
    axis = int(rng.integers(-len(shape), len(shape)))
    if kind.startswith("roll"):
        axes = rng.permutation(len(shape))[: int(rng.integers(1, len(shape) + 1))]
        shift = rng.integers(-7, 8, len(axes))
        expected = np.roll(data, tuple(shift), tuple(axes))
        inputs: dict[str, Any] = {"data": data, "shift": shift, "axes": axes}
    else:
        data = data / 4  # float64, exact in JSON
        indices = rng.integers(-shape[axis], shape[axis], _shape(rng)[:2])
        expected = np.take(data, indices, axis=axis)
        inputs = {"data": data, "indices": indices, "axis": np.int64(axis)}
    path = "/" + kind.split("-")[0]
    if kind.endswith("json"):
        body = orjson.dumps({name: value.tolist() for name, value in inputs.items()})
        return kind, path, body, {"content-type": "application/json"}, _json_answer(expected)
    return (
        kind,
        path,
        npz_bytes(**inputs),
        {"content-type": "application/x-npz"},
        _npy_answer(expected),
    )


class Load:
    """``clients`` threads, each sending one request after the other through nginx on its own
    keep-alive connection, recording every outcome; no retries of their own."""

    def __init__(self, port: int, clients: int) -> None:
        self.port = port
        self.outcomes: list[Outcome] = []
        #: When the request each client is waiting for started (None between requests).
        self.in_flight: list[float | None] = [None] * clients
        self.stopping = threading.Event()
        self.threads = [
            threading.Thread(target=self._client, args=(index,), daemon=True)
            for index in range(clients)
        ]

    def __enter__(self) -> "Load":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        """No new requests; those in flight are answered (or fail) before this returns."""
        self.stopping.set()
        for thread in self.threads:
            thread.join(CLIENT_TIMEOUT + 10)

    def _client(self, index: int) -> None:
        rng = np.random.default_rng(index)
        connection: http.client.HTTPConnection | None = None
        count = 0
        while not self.stopping.is_set():
            kind, path, body, headers, check = request(rng)
            request_id = f"load-{index}-{count}"
            count += 1
            started = time.time()
            self.in_flight[index] = started
            clock = time.perf_counter()
            error: str | None
            try:
                if connection is None:
                    connection = http.client.HTTPConnection(
                        "127.0.0.1", self.port, timeout=CLIENT_TIMEOUT
                    )
                connection.request("POST", path, body, {**headers, "x-request-id": request_id})
                response = connection.getresponse()
                answer = response.read()
                if response.status != 200:
                    error = f"{response.status}: {answer[:200]!r}"
                else:
                    error = check(answer)
                if response.will_close:
                    connection.close()
                    connection = None
            except (OSError, http.client.HTTPException, ValueError) as failure:
                error = f"{type(failure).__name__}: {failure}"
                if connection is not None:
                    connection.close()
                connection = None
            seconds_taken = time.perf_counter() - clock
            self.in_flight[index] = None
            self.outcomes.append(Outcome(kind, request_id, started, seconds_taken, error))
        if connection is not None:
            connection.close()


# ------------------------------------------------------------------------------------------------
# The scenario


@dataclass(frozen=True)
class Scenario:
    """How the scenario runs: seconds of its parts (the test's are short, the benchmark's
    longer), clients, and the replicas' command (the interpreter's arguments)."""

    baseline: float = 1.5  # load before the first event
    dead: float = 2.0  # with the killed replica down, before it is started again
    out: float = 1.0  # with the stopped replica taken out, before it continues
    clients: int = 8
    command: tuple[str, ...] = ("-m", "app")


@dataclass
class Window:
    """One event: its time span and the requests that ended within it (a request in flight
    when a replica was killed or stopped belongs to that event)."""

    name: str
    started: float
    ended: float = 0.0
    outcomes: list[Outcome] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)

    @property
    def failed(self) -> list[Outcome]:
        return [outcome for outcome in self.outcomes if outcome.error is not None]

    @property
    def moved(self) -> int:
        """Requests that nginx sent to more than one replica (their key check included)."""
        return sum(len(call.attempts) > 1 or len(call.checks) > 1 for call in self.calls)

    def figures(self) -> dict[str, Any]:
        times = np.array([outcome.seconds for outcome in self.outcomes]) * 1000
        return {
            "event": self.name,
            "seconds": round(self.ended - self.started, 1),
            "sent": len(self.outcomes),
            "failed": len(self.failed),
            "moved": self.moved,
            "p50_ms": round(float(np.percentile(times, 50)), 1) if len(times) else None,
            "p99_ms": round(float(np.percentile(times, 99)), 1) if len(times) else None,
            "max_ms": round(float(times.max()), 1) if len(times) else None,
        }


@dataclass
class Report:
    """What the scenario measured (times in seconds since the epoch)."""

    windows: list[Window]
    outcomes: list[Outcome]
    calls: list[Call]
    #: Each replica's way out after SIGTERM: (exit status, whether it said it had finished)
    terminations: list[tuple[int, bool]]
    logs: list[str]  # what the replicas wrote, every process of each
    errors: dict[str, Counter[str]]  # nginx's error.log by event
    stop_at: float  # SIGSTOP sent
    out_at: float  # nginx's first try on the stopped replica timed out, taking it out
    cont_at: float  # SIGCONT sent
    #: nginx's tries on the stopped replica that waited on it (more than a second)
    stopped_attempts: list[Attempt]

    @property
    def timed_out(self) -> list[Attempt]:
        return [attempt for attempt in self.stopped_attempts if attempt.status == "504"]

    def table(self) -> str:
        rows = [window.figures() for window in self.windows]
        head = f"{'event':<24}{'s':>6}{'sent':>8}{'failed':>8}{'moved':>7}"
        head += f"{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
        lines = [head]
        for row in rows:
            lines.append(
                f"{row['event']:<24}{row['seconds']:>6}{row['sent']:>8}{row['failed']:>8}"
                f"{row['moved']:>7}{row['p50_ms']!s:>9}{row['p99_ms']!s:>9}{row['max_ms']!s:>9}"
            )
        waits = ", ".join(f"{attempt.seconds:.3f}" for attempt in self.timed_out)
        lines.append(
            f"SIGSTOP: taken out {self.out_at - self.stop_at:.1f} s after it; "
            f"{len(self.timed_out)} requests had been sent to the stopped replica, each moved on "
            f"after waiting {waits} s (proxy_read_timeout {READ_TIMEOUT} s)"
        )
        answered = [attempt for attempt in self.stopped_attempts if attempt.status == "200"]
        if answered:
            lines.append(
                f"SIGSTOP: {len(answered)} sent to it while out (one a fail_timeout), answered "
                "once it continued"
            )
        for name, kinds in self.errors.items():
            for kind, count in kinds.most_common():
                lines.append(f"nginx, {name}: {count} x {kind}")
        return "\n".join(lines)


def run_failover(directory: Path, scenario: Scenario) -> Report:
    """Three replicas behind nginx under load: the baseline, then (a) one killed (SIGKILL) and
    started again, (b) each restarted in turn (SIGTERM, then started again once it has exited;
    the next one once nginx sends requests to it again), (c) one stopped (SIGSTOP) until nginx
    has moved its requests on and taken it out, then continued (SIGCONT)."""
    replicas = [
        Replica(free_port(), directory / f"replica-{index}.log", scenario.command)
        for index in range(3)
    ]
    try:
        for replica in replicas:
            replica.start()
        for replica in replicas:
            replica.wait_ready()
        with (
            Balancer.running(directory, replicas) as balancer,
            Load(balancer.port, scenario.clients) as load,
        ):
            windows = [Window("steady", time.time())]
            time.sleep(scenario.baseline)
            for replica in replicas:  # every replica takes requests before the first event
                balancer.wait_in_rotation(replica, windows[0].started)

            killed, stopped = replicas[0], replicas[1]
            windows.append(Window("(a) SIGKILL, restart", time.time()))
            killed.send(signal.SIGKILL)
            killed.wait_exit()
            time.sleep(scenario.dead)
            killed.start()
            balancer.wait_in_rotation(killed, killed.wait_ready())

            windows.append(Window("(b) rolling SIGTERM", time.time()))
            terminations = []
            for replica in replicas:
                replica.send(signal.SIGTERM)
                pid = replica.process.pid if replica.process else 0
                code = replica.wait_exit()
                finished = f"Finished server process [{pid}]" in replica.log.read_text()
                terminations.append((code, finished))
                replica.start()
                balancer.wait_in_rotation(replica, replica.wait_ready())

            windows.append(Window("(c) SIGSTOP, SIGCONT", time.time()))
            stop_at = time.time()
            stopped.send(signal.SIGSTOP)
            # Until nginx has taken it out (a try on it timed out) and every request it had
            # been sent before then has moved on: no client waits for one started earlier.
            deadline = time.monotonic() + READ_TIMEOUT + STATE_WAIT
            out_at = None
            seen = 0
            while True:
                assert time.monotonic() < deadline, "nginx did not take the stopped replica out"
                calls = balancer.timing.read()
                timeouts = [
                    attempt.started + attempt.seconds
                    for call in calls[seen:]
                    for attempt in call.tries
                    if attempt.replica == stopped.address and attempt.status == "504"
                ]
                seen = len(calls)
                if timeouts:
                    out_at = min(timeouts if out_at is None else [out_at, *timeouts])
                waiting = [started for started in load.in_flight if started is not None]
                if out_at is not None and min(waiting, default=out_at) >= out_at:
                    break
                time.sleep(0.1)
            time.sleep(scenario.out)
            stopped.send(signal.SIGCONT)
            cont_at = time.time()
            balancer.wait_in_rotation(stopped, cont_at)
            windows.append(Window("after", time.time()))
            time.sleep(1)
        for window, following in itertools.pairwise(windows):
            window.ended = following.started
        windows[-1].ended = time.time()
        # The load stops before nginx's log is read: a request answered after the read would
        # count as sent but not logged (one run in a few did). nginx writes a request's line once
        # it has sent the answer, so the client can have it a moment before the line is there:
        # the log is read until every request sent is in it (at most 5 s, then nginx is stopped
        # gracefully, which writes what it still holds).
        load.stop()
        sent = {outcome.request_id for outcome in load.outcomes}
        calls = balancer.timing.read()
        deadline = time.monotonic() + 5
        while not sent <= {call.request_id for call in calls} and time.monotonic() < deadline:
            time.sleep(0.05)
            calls = balancer.timing.read()
        if not sent <= {call.request_id for call in calls}:
            # A request nginx has answered can still be open in nginx (a run in a few left one
            # unlogged for good, its answer received and checked by the client): nginx writes
            # its line when it finalizes it, which a graceful stop (SIGQUIT) makes it do.
            balancer.process.send_signal(signal.SIGQUIT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                balancer.process.wait(15)
            calls = balancer.timing.read()
        stopped_attempts = [
            attempt
            for call in calls
            for attempt in call.tries
            if attempt.replica == stopped.address
            and attempt.started < cont_at
            and attempt.started + attempt.seconds > stop_at + 1
        ]
        for window in windows:
            window.outcomes = [o for o in load.outcomes if window.started <= o.ended < window.ended]
            window.calls = [c for c in calls if window.started <= c.ended < window.ended]
        # nginx logs to the second: a message of the second an event began is the event's.
        errors: dict[str, Counter[str]] = {window.name: Counter() for window in windows}
        for stamp, message in balancer.errors():
            began = [window for window in windows if int(window.started) <= stamp]
            errors[(began or windows)[-1].name][message] += 1
        return Report(
            windows,
            load.outcomes,
            calls,
            terminations,
            [replica.log.read_text(errors="replace") for replica in replicas],
            errors,
            stop_at,
            out_at,
            cont_at,
            stopped_attempts,
        )
    finally:
        for replica in replicas:
            replica.destroy()


def replica_answers(logs: list[str]) -> dict[str, int]:
    """The status each request id got on an op route (POST /roll, /gather), from the replicas'
    own access lines (the key check's GET /info aside)."""
    answers: dict[str, int] = {}
    for log in logs:
        for line in log.splitlines():
            if '"logger":"tensor_ops.access"' not in line:
                continue
            record = json.loads(line)
            if record.get("method") == "POST" and record.get("route") in ("/roll", "/gather"):
                answers[record["request_id"]] = record["status"]
    return answers


@pytest.mark.e2e
@pytest.mark.skipif(NGINX is None, reason="nginx is not installed")
def test_no_request_fails_when_replicas_die_restart_or_stop(tmp_path: Path) -> None:
    report = run_failover(tmp_path, Scenario())
    print("\n" + report.table())

    # Every answer right, none missing, in every event.
    failed = [outcome for outcome in report.outcomes if outcome.error is not None]
    assert not failed, failed[:10]
    for window in report.windows:
        assert window.outcomes, window.name
    # nginx logged every request the clients sent, each answered 200 in the end. Once in a few
    # runs nginx holds the line of one of the last requests for good (answered, its answer
    # checked by the client, and not written even by a graceful stop): such a request must be
    # in a replica's own log, answered 200 on its op route, and there may be at most two.
    sent = {outcome.request_id for outcome in report.outcomes}
    logged = {call.request_id: call for call in report.calls if call.request_id in sent}
    unlogged = sent - set(logged)
    assert len(unlogged) <= 2, sorted(unlogged)[:10]
    answered = replica_answers(report.logs)
    for request_id in unlogged:
        assert answered.get(request_id) == 200, (request_id, answered.get(request_id))
    assert {call.status for call in logged.values()} == {"200"}
    # A replica sent SIGTERM drains and exits: uvicorn raises the signal again once it has
    # finished, so the status is that of SIGTERM's (or 0). No replica wrote a traceback.
    for code, finished in report.terminations:
        assert code in (0, -signal.SIGTERM) and finished, report.terminations
    assert not any("Traceback" in log for log in report.logs)

    killed, stopped = report.windows[1], report.windows[3]
    # The killed replica's requests, those in flight and those sent before nginx found it
    # gone, went to another replica.
    assert killed.moved > 0
    # The stopped replica: each request nginx had sent it waited proxy_read_timeout by nginx's
    # clock (not the 300 s it once was), then went to another replica and was answered there;
    # all had been sent before nginx took it out. A request sent to it once fail_timeout had
    # passed waited until it continued and was answered by it.
    assert report.timed_out
    for attempt in report.stopped_attempts:
        if attempt.status == "504":
            assert READ_TIMEOUT - 0.5 <= attempt.seconds <= READ_TIMEOUT + 5, attempt
            assert attempt.started < report.out_at, attempt
        else:
            assert attempt.status == "200", attempt
            assert attempt.started + attempt.seconds >= report.cont_at, attempt
    # No request waited for more than one timeout.
    assert max(outcome.seconds for outcome in stopped.outcomes) < 2 * READ_TIMEOUT


def test_nginx_may_send_a_request_again_to_another_replica() -> None:
    location = next(block for block in _HTTP.all("location") if block.args == ["/"])
    upstream = next(block for block in _CONFIG.all("upstream") if block.args == ["tensor_ops"])
    # nginx sends a request again only if it holds its body whole, and a POST only with
    # "non_idempotent" (the service's operations are pure).
    # The key check before it (auth_request) moves on the same way: the settings are the
    # server's, and no location replaces them.
    assert _HTTP.value("proxy_request_buffering") == ["on"]
    assert {"error", "timeout", "non_idempotent"} <= set(_HTTP.value("proxy_next_upstream"))
    assert int(_HTTP.value("proxy_next_upstream_tries")[0]) >= 2
    # A request that waited proxy_read_timeout on a stopped replica may still move on.
    assert seconds(_HTTP.value("proxy_next_upstream_timeout")[0]) > READ_TIMEOUT
    for block in _HTTP.all("location"):
        names = {child.name for child in block.block}
        assert not names & {"proxy_next_upstream", "proxy_read_timeout"}, block.args
    assert location.value("auth_request")
    # A request that waits for memory as long as the service lets it gets the service's 503,
    # not nginx's 504.
    assert Settings().admission_timeout < READ_TIMEOUT
    # One failure takes a replica out, in every worker process at once (the zone), for less
    # time than a replica takes to restart (3-6 s).
    assert upstream.all("zone")
    parameters = dict(item.split("=") for item in upstream.one("server").args[1:])
    assert parameters["max_fails"] == "1" and seconds(parameters["fail_timeout"]) <= 2
    # nginx closes an idle connection to a replica before uvicorn does.
    keep_alive = uvicorn.Config("app.main:app").timeout_keep_alive
    assert "timeout_keep_alive" not in (ROOT / "app" / "__main__.py").read_text()
    assert seconds(upstream.value("keepalive_timeout")[0]) < keep_alive
