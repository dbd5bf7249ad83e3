"""The Docker image, built from the Dockerfile by buildah and run the way Docker would run it.

There is no Docker engine here. buildah builds the Dockerfile unchanged (``--format docker``, so
the HEALTHCHECK is kept) over a local stand-in for its base image that ``scripts/base-image``
makes with debootstrap and commits under the base image's name. The image is then run as a
container would be: its CMD, as its USER, in its WORKDIR, with its ENV, on a read-only root
filesystem with a tmpfs at /tmp (as docker-compose.yml and the Kubernetes files give it), in
network, mount and PID namespaces of its own (so its own ports, 8000 and 8001, are free). The
test rolls a tensor, checks the process's user and capabilities, runs the image's own HEALTHCHECK
command, sends SIGTERM and waits for a clean exit. ``pytest -s`` shows the image's size, layer
by layer. Needs root, buildah and debootstrap (``.ci/run`` installs them); about a minute to build,
and a minute more the first time on a machine, for debootstrap.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The layers the Dockerfile adds to its base (the service's virtual environment, almost all of
#: it llvmlite's LLVM, numpy and grpc), in bytes as stored uncompressed. 306 MB when this was
#: written: the budget leaves room for the dependencies to grow a little, not for a build tool,
#: a pip cache or a second copy of the environment to creep in.
ADDED_LAYERS_BUDGET = 350_000_000


def _missing_requirement() -> str | None:
    """Why the image cannot be built and run here, or None."""
    if sys.platform != "linux":
        return "buildah runs on Linux only"
    if os.geteuid() != 0:
        return "building and running the image needs root (debootstrap, mounts, chroot)"
    for tool in ("buildah", "debootstrap", "unshare", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} is missing (apt-get install buildah debootstrap; .ci/run does)"
    return None


@pytest.fixture(scope="module")
def requirements() -> None:
    reason = _missing_requirement()
    if reason is None:
        return
    # CI installs the tools when it runs as root (.ci/run): there the test must not skip.
    if os.environ.get("CI") and os.geteuid() == 0:
        pytest.fail(reason)
    pytest.skip(reason)


def buildah(*args: str, timeout: float = 120) -> str:
    completed = subprocess.run(
        ["buildah", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert completed.returncode == 0, f"buildah {' '.join(args)}:\n{completed.stderr}"
    return completed.stdout


@dataclass
class Image:
    name: str
    base: str
    seconds_to_build: float
    inspect: dict[str, Any]

    @property
    def config(self) -> dict[str, Any]:
        docker: dict[str, Any] = self.inspect["Docker"]
        config: dict[str, Any] = docker["config"]
        return config


@pytest.fixture(scope="module")
def image(requirements: None) -> Iterator[Image]:
    """The image built from the working tree, removed afterwards (the base stays, cached)."""
    started = time.monotonic()
    made = subprocess.run(
        [str(ROOT / "scripts" / "base-image")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    print(f"{made.stdout.strip()} ({time.monotonic() - started:.0f} s)")
    base = subprocess.run(
        [str(ROOT / "scripts" / "base-image"), "--print"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    name = f"localhost/tensor-ops-image-test:{os.getpid()}"
    before = set(buildah("images", "--all", "--quiet", "--no-trunc").split())
    started = time.monotonic()
    # chroot isolation: no OCI runtime is installed. Host network: pip reaches PyPI.
    # --pull=never: the base is the local stand-in, never Docker Hub. --layers: one layer for
    # each step that changes files, as Docker makes them (without it buildah makes one for the
    # whole stage), so each step's cost shows; the intermediate images it keeps are removed below.
    built = subprocess.run(
        [
            "buildah",
            "bud",
            "--format",
            "docker",
            "--isolation",
            "chroot",
            "--network",
            "host",
            "--pull=never",
            "--layers",
            "--tag",
            name,
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    seconds = time.monotonic() - started
    try:
        assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
        inspect = json.loads(buildah("inspect", "--type", "image", name))
        yield Image(name, base, seconds, inspect)
    finally:
        subprocess.run(["buildah", "rmi", name], capture_output=True, check=False)
        # What this build added and nothing else: newest first, each child before its parent.
        added = set(buildah("images", "--all", "--quiet", "--no-trunc").split()) - before
        for image_id in sorted(added, key=created, reverse=True):
            subprocess.run(["buildah", "rmi", image_id], capture_output=True, check=False)


def created(image_id: str) -> str:
    inspect = json.loads(buildah("inspect", "--type", "image", image_id))
    stamp: str = inspect["Docker"]["created"]
    return stamp


def layer_table(image: Image) -> tuple[list[tuple[int, str]], int]:
    """Each layer's size (bytes, uncompressed) with the step that made it; how many are the base's."""
    layers = json.loads(image.inspect["Manifest"])["layers"]
    steps = [
        entry["created_by"]
        for entry in image.inspect["Docker"]["history"]
        if not entry.get("empty_layer")
    ]
    assert len(steps) == len(layers)
    base = json.loads(json.loads(buildah("inspect", "--type", "image", image.base))["Manifest"])
    base_digests = [layer["digest"] for layer in base["layers"]]
    assert [layer["digest"] for layer in layers[: len(base_digests)]] == base_digests
    rows = [(layer["size"], step) for layer, step in zip(layers, steps, strict=True)]
    return rows, len(base_digests)


def test_image_builds_unchanged_keeps_its_config_and_stays_small(image: Image) -> None:
    config = image.config
    layers, base_count = layer_table(image)
    total = sum(size for size, _ in layers)
    print(f"\nimage {image.name}: built in {image.seconds_to_build:.0f} s, {total / 1e6:.1f} MB")
    print(f"{'MB':>8}  layer")
    for index, (size, step) in enumerate(layers):
        shown = re.sub(r"\s+", " ", re.sub(r"^/bin/sh -c (#\(nop\) )?", "", step))
        print(f"{size / 1e6:8.1f}  {'(base) ' if index < base_count else ''}{shown[:110]}")
    # The Dockerfile's final stage, as Docker would see it: --format docker keeps the HEALTHCHECK.
    assert config["User"] == "10001:10001"
    assert config["WorkingDir"] == "/tmp"
    assert config["Cmd"] == ["python", "-m", "app"]
    assert set(config["ExposedPorts"]) == {"8000/tcp", "8001/tcp"}
    assert config["Healthcheck"]["Test"][0] == "CMD"
    assert "http://127.0.0.1:8000/health" in config["Healthcheck"]["Test"][-1]
    assert (config["Healthcheck"]["Interval"], config["Healthcheck"]["Retries"]) == (15 * 10**9, 3)
    # The Dockerfile adds two layers: its user (a few kB) and the copied virtual environment.
    added = layers[base_count:]
    assert [step for _, step in added][-1].startswith("/bin/sh -c #(nop) COPY ")
    added_size = sum(size for size, _ in added)
    print(
        f"{added_size / 1e6:8.1f}  added by the Dockerfile (budget {ADDED_LAYERS_BUDGET / 1e6:.0f})"
    )
    assert added_size <= ADDED_LAYERS_BUDGET
    assert sum(size for size, _ in added[:-1]) < 100_000


#: Runs as root inside fresh network, mount and PID namespaces: makes the image's root
#: filesystem read-only, gives it /proc, /dev and a tmpfs /tmp, starts the CMD chrooted as the
#: image's user, probes it, stops it, and prints what it saw as JSON.
RUNTIME = textwrap.dedent(
    """
    import errno, json, os, signal, subprocess, sys, time, urllib.request

    root, config, log_path = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    result = {}

    def run(*command):
        subprocess.run(command, check=True)

    run("mount", "--make-rprivate", "/")
    run("mount", "--bind", root, root)
    run("mount", "-o", "remount,bind,ro", root)
    run("mount", "-t", "proc", "proc", root + "/proc")
    run("mount", "-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", "tmpfs", root + "/tmp")
    # /dev as a container has it: a tmpfs with the harmless devices and /dev/shm.
    run("mount", "-t", "tmpfs", "-o", "mode=755,nosuid", "tmpfs", root + "/dev")
    for device in ("null", "zero", "full", "random", "urandom", "tty"):
        open(root + "/dev/" + device, "w").close()
        run("mount", "--bind", "/dev/" + device, root + "/dev/" + device)
    os.mkdir(root + "/dev/shm")
    run("mount", "-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", "tmpfs", root + "/dev/shm")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, root + "/dev/" + name)
    run("ip", "link", "set", "lo", "up")

    try:
        open(root + "/written-at-run-time", "w").close()
        result["root_write"] = "written"
    except OSError as error:
        result["root_write"] = errno.errorcode[error.errno]

    user, _, group = config["User"].partition(":")
    uid, gid = int(user), int(group or user)
    # Docker's environment: the image's, HOSTNAME, and HOME from the user's passwd entry.
    env = dict(item.split("=", 1) for item in config["Env"])
    env["HOSTNAME"] = "tensor-ops-image-test"
    # Not Docker's: numba says where each compiled loop comes from (loaded, or compiled and saved).
    env["NUMBA_DEBUG_CACHE"] = "1"
    home = "/"
    with open(root + "/etc/passwd") as passwd:
        for line in passwd:
            fields = line.rstrip("\\n").split(":")
            if len(fields) > 5 and fields[2] == str(uid):
                home = fields[5]
    env.setdefault("HOME", home)

    def enter():
        os.chroot(root)
        os.chdir(config["WorkingDir"] or "/")
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)

    def in_container(command, **options):
        return subprocess.Popen(command, env=env, preexec_fn=enter, **options)

    log = open(log_path, "wb")
    started = time.monotonic()
    server = in_container(config["Cmd"], stdout=log, stderr=subprocess.STDOUT)
    health = None
    while server.poll() is None and time.monotonic() - started < 180:
        try:
            with urllib.request.urlopen("http://127.0.0.1:8000/health", timeout=2) as reply:
                health = [reply.status, json.loads(reply.read())]
                break
        except OSError:
            time.sleep(0.2)
    result["seconds_to_health"] = round(time.monotonic() - started, 1)
    result["health"] = health
    if health is None:
        server.kill()
        result["exit_code"] = server.wait()
        print(json.dumps(result))
        sys.exit(0)

    with open(f"{root}/proc/{server.pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    result["uids"] = fields["Uid"].split()
    result["gids"] = fields["Gid"].split()
    result["groups"] = fields["Groups"].split()
    result["cap_eff"] = fields["CapEff"].strip()
    with open(f"{root}/proc/{server.pid}/mountinfo") as mountinfo:
        for line in mountinfo:
            parts = line.split()
            if parts[4] == "/":
                result["root_mount_options"] = parts[5].split(",")

    request = urllib.request.Request(
        "http://127.0.0.1:8000/roll",
        data=json.dumps({"data": [[1.5, 2, 3], [4, 5, 6]], "shift": [-1, 1], "axes": [0, 1]}).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        result["roll"] = [reply.status, json.loads(reply.read())]
    # gRPC from a process of its own: grpc's threads would make the fork of the next
    # preexec_fn (the healthcheck's) unsafe in this one.
    grpc_probe = (
        "import grpc, sys; "
        "from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb, grpc_predict_v2_pb2_grpc as pbg; "
        "channel = grpc.insecure_channel('127.0.0.1:' + sys.argv[1]); "
        "print(pbg.GRPCInferenceServiceStub(channel).ServerLive(pb.ServerLiveRequest(), timeout=30).live)"
    )
    live = subprocess.run([sys.executable, "-c", grpc_probe, env["TENSOR_OPS_GRPC_PORT"]],
                          capture_output=True, text=True, timeout=60)
    result["grpc_live"] = live.stdout.strip() or live.stderr[-2000:]

    test = config["Healthcheck"]["Test"]
    probe = test[1:] if test[0] == "CMD" else ["/bin/sh", "-c", test[1]]
    result["healthcheck"] = in_container(probe, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL).wait(60)

    # The kernels load in the background after the first answer: their log line is waited for,
    # so that every loop's load from the image's cache is seen before the stop (on a loaded
    # machine it may come after the checks above).
    waited = time.monotonic()
    while time.monotonic() - waited < 180:
        with open(log_path, "rb") as seen:
            text = seen.read()
        if b"kernels ready in" in text or b"the kernels did not compile" in text:
            break
        time.sleep(0.2)

    stopping = time.monotonic()
    server.send_signal(signal.SIGTERM)
    try:
        result["exit_code"] = server.wait(float(env.get("TENSOR_OPS_GRACEFUL_TIMEOUT", 30)) + 30)
    except subprocess.TimeoutExpired:
        server.kill()
        result["exit_code"] = "did not stop"
    result["seconds_to_stop"] = round(time.monotonic() - stopping, 1)
    # The same probe, with nothing listening: it must fail, or it proves nothing.
    result["healthcheck_after_stop"] = in_container(probe, stdout=subprocess.DEVNULL,
                                                    stderr=subprocess.DEVNULL).wait(60)
    print(json.dumps(result))
    """
)


def test_image_serves_as_its_user_on_a_read_only_root_and_stops_on_sigterm(
    image: Image, tmp_path: Path
) -> None:
    container = f"tensor-ops-image-test-{os.getpid()}"
    buildah("from", "--pull=never", "--name", container, image.name)
    try:
        rootfs = buildah("mount", container).strip()
        compiled_loops = len(
            list(Path(rootfs).glob("opt/venv/lib/python3*/site-packages/app/ops/__pycache__/*.nbc"))
        )
        script = tmp_path / "runtime.py"
        script.write_text(RUNTIME)
        log = tmp_path / "server.log"
        # --kill-child: if this test is interrupted, the namespace's first process and with it
        # every process in the namespace is killed.
        completed = subprocess.run(
            [
                "unshare",
                "--net",
                "--mount",
                "--pid",
                "--fork",
                "--kill-child",
                sys.executable,
                str(script),
                rootfs,
                json.dumps(image.config),
                str(log),
            ],
            capture_output=True,
            text=True,
            timeout=420,
            check=False,
        )
    finally:
        subprocess.run(["buildah", "umount", container], capture_output=True, check=False)
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
    output = log.read_text(errors="replace") if log.exists() else ""
    assert completed.returncode == 0, completed.stderr + output
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    print(
        f"\nstarted in {result['seconds_to_health']} s, "
        f"stopped {result.get('seconds_to_stop')} s after SIGTERM"
    )
    assert result["health"] == [200, {"status": "ok"}], output
    # The root filesystem is read-only, as the process itself sees it.
    assert result["root_write"] == "EROFS"
    assert "ro" in result["root_mount_options"]
    # The image's user, with no supplementary groups and no capabilities.
    assert result["uids"] == ["10001"] * 4
    assert result["gids"] == ["10001"] * 4
    assert result["groups"] == []
    assert result["cap_eff"] == "0000000000000000"
    assert result["roll"] == [
        200,
        {"data": [[6.0, 4.0, 5.0], [3.0, 1.5, 2.0]], "dtype": "float64", "shape": [2, 3]},
    ]
    assert result["grpc_live"] == "True"
    # Each of the kernels' compiled loops is loaded from the cache the image was built with, on a
    # read-only root, as the Dockerfile says: none compiled again at start-up, none saved.
    assert compiled_loops > 0
    assert output.count("[cache] data loaded from") == compiled_loops, output
    assert "saved to" not in output
    assert result["healthcheck"] == 0
    # uvicorn re-raises SIGTERM after a clean shutdown: 0 and -15 are both clean exits.
    assert result["exit_code"] in (0, -15), output
    assert "Finished server process" in output
    assert "Traceback" not in output
    assert result["healthcheck_after_stop"] != 0
