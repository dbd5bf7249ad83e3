"""API keys, TLS, tracing and the NetworkPolicy in deploy/kubernetes, and Compose's access settings:
the manifests as kustomize builds them (base and components) against Kubernetes' schema, offline,
and against the app's routes; servers run as the Deployment sets them up, with and without TLS.
"""

import contextlib
import copy
import hashlib
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc
import httpx
import numpy as np
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pydantic import TypeAdapter

from app.access import GRPC_PROBES, PROBE_PATHS, AccessControl, ApiKeys
from app.keyfile import parse_keys
from app.main import create_app
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2_grpc as pbg
from tests.support import free_port, launch_server, stop_server

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
ROUTES = set(create_app().openapi()["paths"])
KUBECTL = shutil.which("kubectl")
#: The variants an operator may build: the base, and the base with each component.
VARIANTS: dict[str, tuple[str, ...]] = {
    "base": (),
    "tls": ("tls",),
    "tracing": ("tracing",),
    "tls+tracing": ("tls", "tracing"),
}
#: The keys of a Secret of type kubernetes.io/tls (what cert-manager writes, and
#: ``kubectl create secret tls``).
TLS_SECRET_KEYS = ("tls.crt", "tls.key")
KEY = "k-deployment-test-4c1d9e0b7a25f3e8"
SECOND_KEY = "k-deployment-rotated-93b0e5c2a7d4f168"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"


# ------------------------------------------------------------------------------------------------
# kustomize, as far as these files use it: resources, components, RFC 6902 patches by target


def documents(path: Path) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


def _pointer(path: str) -> list[str]:
    return [part.replace("~1", "/").replace("~0", "~") for part in path.split("/")[1:]]


def json_patch(document: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """``document`` with the RFC 6902 ``operations`` (add, replace, remove, test) applied."""
    patched = copy.deepcopy(document)
    for operation in operations:
        *parents, last = _pointer(operation["path"])
        node: Any = patched
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        kind = operation["op"]
        if isinstance(node, list):
            index = len(node) if last == "-" else int(last)
            if kind == "add":
                node.insert(index, operation["value"])
            elif kind == "replace":
                node[index] = operation["value"]
            elif kind == "remove":
                del node[index]
            else:
                assert kind == "test" and node[index] == operation["value"], operation
        elif kind in ("add", "replace"):
            assert kind == "add" or last in node, operation
            node[last] = operation["value"]
        elif kind == "remove":
            del node[last]
        else:
            assert kind == "test" and node[last] == operation["value"], operation
    return patched


def build(components: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The resources ``kustomize build`` makes of the base with ``components``."""
    base = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    resources = [doc for name in base["resources"] for doc in documents(KUBERNETES / name)]
    for name in components:
        folder = KUBERNETES / name
        component = yaml.safe_load((folder / "kustomization.yaml").read_text())
        assert component["kind"] == "Component"
        resources += [
            doc for item in component.get("resources", []) for doc in documents(folder / item)
        ]
        for patch in component["patches"]:
            operations = yaml.safe_load((folder / patch["path"]).read_text())
            target = patch["target"]
            matched = [
                index
                for index, resource in enumerate(resources)
                if resource["kind"] == target["kind"]
                and resource["metadata"]["name"] == target["name"]
            ]
            assert len(matched) == 1, patch
            resources[matched[0]] = json_patch(resources[matched[0]], operations)
    return resources


def resource(
    resources: list[dict[str, Any]], kind: str, name: str = "tensor-ops"
) -> dict[str, Any]:
    [found] = [r for r in resources if r["kind"] == kind and r["metadata"]["name"] == name]
    return found


def container_of(resources: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = resource(resources, "Deployment")
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container["env"]}


def kubernetes_validate(paths: list[Path]) -> None:
    """Every file of ``paths`` (one resource each) passes Kubernetes' own schema, shipped with
    kubernetes-validate (no cluster, no network), unknown fields refused."""
    tool = Path(sys.executable).parent / "kubernetes-validate"
    result = subprocess.run(
        [str(tool), "--strict", *map(str, paths)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("passed") == len(paths), result.stdout


# ------------------------------------------------------------------------------------------------
# The manifests, statically


def test_kubernetes_every_build_and_the_secret_example_validate_offline(tmp_path: Path) -> None:
    paths = []
    for variant, components in VARIANTS.items():
        for index, built in enumerate(build(components)):
            paths.append(tmp_path / f"{variant}-{index}-{built['kind']}.yaml")
            paths[-1].write_text(yaml.safe_dump(built))
    paths.append(KUBERNETES / "secret-api-keys.example.yaml")
    kubernetes_validate(paths)
    kinds = {built["kind"] for built in build(("tls", "tracing"))}
    assert kinds == {
        "Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy",
    }  # fmt: skip


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (its built-in kustomize) is not installed")
def test_kubernetes_builds_are_what_kustomize_makes_of_them(tmp_path: Path) -> None:
    # An overlay as an operator writes one; kustomize loads nothing by an absolute path, so the
    # directory is copied beside it.
    assert KUBECTL is not None
    shutil.copytree(KUBERNETES, tmp_path / "kubernetes")
    for variant, components in VARIANTS.items():
        overlay = tmp_path / variant
        overlay.mkdir()
        (overlay / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "resources": ["../kubernetes"],
                    "components": [f"../kubernetes/{name}" for name in components],
                }
            )
        )
        result = subprocess.run(
            [KUBECTL, "kustomize", str(overlay)], capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stderr
        made = [doc for doc in yaml.safe_load_all(result.stdout) if doc]

        def by_name(items: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
            return {(item["kind"], item["metadata"]["name"]): item for item in items}

        assert by_name(made) == by_name(build(components)), variant


def test_kubernetes_api_keys_come_from_a_secret_mounted_as_a_directory() -> None:
    resources = build()
    container = container_of(resources)
    pod = resource(resources, "Deployment")["spec"]["template"]["spec"]
    example = yaml.safe_load((KUBERNETES / "secret-api-keys.example.yaml").read_text())
    [volume] = [v for v in pod["volumes"] if "secret" in v and v["name"] == "api-keys"]
    assert volume["secret"]["secretName"] == example["metadata"]["name"] == "tensor-ops-api-keys"
    assert volume["secret"]["defaultMode"] == 0o440
    [mount] = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    # The whole Secret as a directory: a subPath mount never sees the Secret change.
    assert "subPath" not in mount and "subPathExpr" not in mount
    assert mount["readOnly"] is True
    [key_name] = example["stringData"]
    env = env_of(container)
    assert env["TENSOR_OPS_API_KEYS_FILE"] == f"{mount['mountPath']}/{key_name}"
    # The shipped placeholders hold no key, so no guessable key admits anyone.
    assert parse_keys(example["stringData"][key_name]) == ()
    assert parse_keys((KUBERNETES / "api-keys.example").read_text()) == ()
    assert "sha256sum" in example["stringData"][key_name]
    # The Secret is the operator's: applying the directory again never overwrites it.
    assert all(
        built["kind"] != "Secret" for variant in VARIANTS.values() for built in build(variant)
    )


def test_kubernetes_probes_ask_what_stays_open_with_keys_on(tmp_path: Path) -> None:
    placeholder = tmp_path / "api-keys"
    placeholder.write_text("")
    for variant in ("base", "tls"):
        container = container_of(build(VARIANTS[variant]))
        env = env_of(container)
        assert "TENSOR_OPS_API_KEYS_FILE" in env
        probes_need_keys = TypeAdapter(bool).validate_python(env["TENSOR_OPS_AUTH_PROBES"])
        assert probes_need_keys is False
        access = AccessControl(ApiKeys(placeholder), probes_need_keys)
        assert access.needs_key("/roll") and access.grpc_needs_key(
            "/inference.GRPCInferenceService/ModelInfer"
        )
        ports = {port["name"]: port["containerPort"] for port in container["ports"]}
        kinds = {}
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = container[kind]
            if "httpGet" in probe:
                get = probe["httpGet"]
                assert get["path"] in ROUTES and get["path"] in PROBE_PATHS, (variant, kind)
                assert not access.needs_key(get["path"]), (variant, kind)
                assert ports[get["port"]] == int(env["TENSOR_OPS_PORT"]), (variant, kind)
                kinds[kind] = get.get("scheme", "HTTP")
            else:
                # The kubelet's grpc probe: grpc.health.v1.Health/Check, cleartext.
                assert probe["grpc"]["port"] == int(env["TENSOR_OPS_GRPC_PORT"])
                assert HEALTH_CHECK in GRPC_PROBES and not access.grpc_needs_key(HEALTH_CHECK)
                kinds[kind] = "grpc"
        if variant == "base":
            assert kinds == {
                "startupProbe": "HTTP",
                "readinessProbe": "HTTP",
                "livenessProbe": "grpc",
            }
        else:
            # Over TLS every probe is an HTTPS GET: Kubernetes' grpc probe cannot speak TLS.
            assert set(kinds.values()) == {"HTTPS"}, kinds


def test_kubernetes_tls_component_serves_the_mounted_kubernetes_tls_secret() -> None:
    resources = build(("tls",))
    deployment = resource(resources, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = container_of(resources)
    env = env_of(container)
    [volume] = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == "tensor-ops-tls"
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "tls"]
    assert "subPath" not in mount and mount["readOnly"] is True
    certificate, key = TLS_SECRET_KEYS
    assert env["TENSOR_OPS_TLS_CERT_FILE"] == f"{mount['mountPath']}/{certificate}"
    assert env["TENSOR_OPS_TLS_KEY_FILE"] == f"{mount['mountPath']}/{key}"
    # The kubelet presents no client certificate: mutual TLS would fail every probe.
    assert "TENSOR_OPS_TLS_CLIENT_CA_FILE" not in env
    # The API keys stay as in the base.
    assert (
        env["TENSOR_OPS_API_KEYS_FILE"] == env_of(container_of(build()))["TENSOR_OPS_API_KEYS_FILE"]
    )
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scheme"] == "https"
    ports = {port["name"]: port for port in resource(resources, "Service")["spec"]["ports"]}
    assert ports == {
        "https": {
            "name": "https", "port": 443, "targetPort": "http", "protocol": "TCP",
            "appProtocol": "https",
        },
        "grpc": {
            "name": "grpc", "port": 8001, "targetPort": "grpc", "protocol": "TCP",
            "appProtocol": "https",
        },
    }  # fmt: skip


def peer_name(peer: dict[str, Any]) -> str:
    """A NetworkPolicy peer as ``namespace/app`` (``*`` for any pod of the namespace)."""
    namespace = peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
    pods = peer.get("podSelector", {}).get("matchLabels", {})
    app = pods.get("app.kubernetes.io/name") or pods.get("k8s-app") or "*"
    return f"{namespace}/{app}"


def test_kubernetes_networkpolicy_admits_the_ingress_controller_and_prometheus_only() -> None:
    resources = build()
    deployment = resource(resources, "Deployment")
    template = deployment["spec"]["template"]
    container = container_of(resources)
    policy = resource(resources, "NetworkPolicy")
    # It selects the Deployment's Pods.
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= template["metadata"]["labels"].items()
    assert selector == deployment["spec"]["selector"]["matchLabels"]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    admitted: dict[str, set[int]] = {}
    for rule in policy["spec"]["ingress"]:
        assert all(port["protocol"] == "TCP" for port in rule["ports"])
        numbers = {ports[port["port"]] for port in rule["ports"]}
        for peer in rule["from"]:
            admitted.setdefault(peer_name(peer), set()).update(numbers)
    env = env_of(container)
    http, grpc_port = int(env["TENSOR_OPS_PORT"]), int(env["TENSOR_OPS_GRPC_PORT"])
    assert admitted == {
        "ingress-nginx/ingress-nginx": {http, grpc_port},
        "monitoring/prometheus": {http},
    }
    # Prometheus scrapes /metrics on the HTTP port (there is no other), which keys leave open.
    annotations = template["metadata"]["annotations"]
    assert int(annotations["prometheus.io/port"]) == http
    assert annotations["prometheus.io/path"] == "/metrics"
    assert "/metrics" in ROUTES and "/metrics" in PROBE_PATHS
    # No egress without tracing: the service calls out to nothing.
    assert policy["spec"]["egress"] == []


def test_kubernetes_tracing_component_opens_dns_and_the_collector_alone() -> None:
    resources = build(("tracing",))
    env = env_of(container_of(resources))
    endpoint = urlsplit(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
    assert env["OTEL_SERVICE_NAME"] == "tensor-ops"
    assert endpoint.hostname is not None and endpoint.port is not None
    _, namespace, *rest = endpoint.hostname.split(".")
    assert rest[:1] == ["svc"], endpoint.hostname
    egress = resource(resources, "NetworkPolicy", "tensor-ops-tracing")
    assert (
        egress["spec"]["podSelector"] == resource(resources, "NetworkPolicy")["spec"]["podSelector"]
    )
    assert egress["spec"]["policyTypes"] == ["Egress"]
    allowed = {
        (peer_name(peer), port["port"], port["protocol"])
        for rule in egress["spec"]["egress"]
        for peer in rule["to"]
        for port in rule["ports"]
    }
    assert allowed == {
        ("kube-system/kube-dns", 53, "UDP"),
        ("kube-system/kube-dns", 53, "TCP"),
        (f"{namespace}/*", 4318, "TCP"),
        (f"{namespace}/*", 4317, "TCP"),
    }
    assert endpoint.port == 4318  # OTLP over HTTP, the exporter's default protocol


def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return document


def test_compose_carries_access_settings_unset_unless_given() -> None:
    document = compose()
    passed_on = (
        "TENSOR_OPS_API_KEYS_FILE",
        "TENSOR_OPS_CORS_ORIGINS",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_SERVICE_NAME",
    )
    for name in ("tensor-ops", "tensor-ops-replica"):
        service = document["services"][name]
        env = service["environment"]
        # No value: Compose passes the variable on when it is set where it runs, and leaves it
        # unset in the container otherwise (an empty value would be refused as a path).
        assert {key: env[key] for key in passed_on} == dict.fromkeys(passed_on), name
        # The healthcheck sends no key and speaks plain HTTP.
        assert not any(key.startswith(("TENSOR_OPS_AUTH_PROBES", "TENSOR_OPS_TLS_")) for key in env)
        assert "http://127.0.0.1:8000/health" in " ".join(service["healthcheck"]["test"])
        assert service["secrets"] == ["api-keys"]
    source = document["secrets"]["api-keys"]["file"]
    default = re.fullmatch(r"\$\{TENSOR_OPS_API_KEYS_SOURCE:-(.+)\}", source)
    assert default is not None, source
    assert parse_keys((ROOT / default[1]).read_text()) == ()
    # The documented command names the file where Compose mounts the secret.
    text = (ROOT / "docker-compose.yml").read_text()
    assert "TENSOR_OPS_API_KEYS_FILE=/run/secrets/api-keys " in text


# ------------------------------------------------------------------------------------------------
# Servers set up as the Deployment


def mount_secret(directory: Path, files: Mapping[str, str | bytes]) -> None:
    """Write ``files`` as the kubelet writes a Secret volume, and swap them in as it updates one:
    a new timestamped folder, ``..data`` pointed at it by an atomic rename, each key a link
    through ``..data``."""
    directory.mkdir(parents=True, exist_ok=True)
    version = Path(tempfile.mkdtemp(prefix="..", dir=directory))
    for name, content in files.items():
        path = version / name
        if isinstance(content, str):
            path.write_text(content)
        else:
            path.write_bytes(content)
    data = directory / "..data"
    previous = data.resolve() if data.is_symlink() else None
    (directory / "..data_tmp").symlink_to(version.name)
    os.rename(directory / "..data_tmp", data)
    for name in files:
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(f"..data/{name}")
    if previous is not None:
        shutil.rmtree(previous)


def key_line(key: str, label: str) -> str:
    return f"{hashlib.sha256(key.encode()).hexdigest()} {label}\n"


def deployment_env(container: dict[str, Any], mounts: Mapping[str, Path]) -> dict[str, str]:
    """The container's environment with each mount path replaced by the folder standing in for
    it, gRPC on a free port; host and port are the launcher's."""
    paths = {
        m["mountPath"]: mounts[m["name"]] for m in container["volumeMounts"] if m["name"] in mounts
    }
    env = env_of(container)
    for name, value in env.items():
        for mount_path, folder in paths.items():
            if value.startswith(mount_path + "/"):
                env[name] = str(folder) + value[len(mount_path) :]
    for name in ("TENSOR_OPS_HOST", "TENSOR_OPS_PORT"):
        del env[name]
    env["TENSOR_OPS_GRPC_PORT"] = str(free_port())
    return env


def roll_request() -> Any:
    data = np.arange(6, dtype=np.int64)
    return pb.ModelInferRequest(
        model_name="roll",
        inputs=[
            pb.ModelInferRequest.InferInputTensor(name=name, datatype="INT64", shape=[len(values)])
            for name, values in (("data", data), ("shift", [2]), ("axes", [0]))
        ],
        raw_input_contents=[
            data.tobytes(),
            np.array([2], np.int64).tobytes(),
            np.array([0], np.int64).tobytes(),
        ],
    )


def grpc_checks(channel: grpc.Channel) -> None:
    """Health answers without a key, ModelInfer only with one."""
    health: Any = health_pb2_grpc.HealthStub(channel)
    reply = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    stub: Any = pbg.GRPCInferenceServiceStub(channel)  # type: ignore[no-untyped-call]
    with pytest.raises(grpc.RpcError) as refused:
        stub.ModelInfer(roll_request(), timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    answer = stub.ModelInfer(
        roll_request(), metadata=[("authorization", f"Bearer {KEY}")], timeout=30
    )
    result = np.frombuffer(answer.raw_output_contents[0], dtype=np.int64)
    assert result.tolist() == [4, 5, 0, 1, 2, 3]


def roll(url: str, key: str | None, **options: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    body = {"data": [1, 2, 3, 4], "shift": 1, "axes": 0}
    return httpx.post(f"{url}/roll", json=body, headers=headers, timeout=30, **options)


def probe_checks(container: dict[str, Any], url: str, grpc_target: str, **options: Any) -> None:
    """Each of the container's probes as the kubelet makes it: no key; HTTPS without checking
    the certificate; grpc in cleartext."""
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = container[kind]
        if "httpGet" in probe:
            scheme = probe["httpGet"].get("scheme", "HTTP").lower()
            assert url.startswith(f"{scheme}://"), kind
            reply = httpx.get(url + probe["httpGet"]["path"], timeout=10, **options)
            assert reply.status_code == 200, (kind, reply.text)
            assert reply.json()["status"] in {"ok", "ready"}, kind
        else:
            with grpc.insecure_channel(grpc_target) as channel:
                health: Any = health_pb2_grpc.HealthStub(channel)
                request = health_pb2.HealthCheckRequest(service=probe["grpc"].get("service", ""))
                status = health.Check(request, timeout=10).status
                assert status == health_pb2.HealthCheckResponse.SERVING, kind
    metrics = httpx.get(f"{url}/metrics", timeout=10, **options)
    assert metrics.status_code == 200 and "tensor_ops_" in metrics.text


def admitted_everywhere(url: str, key: str, **options: Any) -> bool:
    """Whether 8 requests in a row, each on a new connection (so on any worker), take ``key``."""
    return all(roll(url, key, **options).status_code == 200 for _ in range(8))


def wait_for(condition: Any, what: str) -> None:
    """Until ``condition()`` holds (a wait for the workers' once-a-second look at the file)."""
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.mark.e2e
def test_deployment_as_set_up_answers_probes_without_a_key_and_ops_with_one_only(
    tmp_path: Path,
) -> None:
    container = container_of(build())
    keys = tmp_path / "api-keys"
    placeholder = yaml.safe_load((KUBERNETES / "secret-api-keys.example.yaml").read_text())
    [key_name] = placeholder["stringData"]
    mount_secret(keys, {key_name: placeholder["stringData"][key_name] + key_line(KEY, "deploy")})
    env = deployment_env(container, {"api-keys": keys})
    assert env["TENSOR_OPS_WORKERS"] == "2"
    url, process = launch_server(env=env, command=["-m", "app"])
    try:
        grpc_target = f"127.0.0.1:{env['TENSOR_OPS_GRPC_PORT']}"
        probe_checks(container, url, grpc_target)
        refused = roll(url, None)
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == 'Bearer realm="tensor-ops"'
        assert refused.json()["detail"][0]["loc"] == ["header", "authorization"]
        answer = roll(url, KEY)
        assert answer.status_code == 200 and answer.json()["data"] == [4, 1, 2, 3]
        with grpc.insecure_channel(grpc_target) as channel:
            grpc_checks(channel)

        # The Secret edited: the kubelet swaps the mounted directory, and every worker reads
        # the new keys without a restart (which a subPath mount would never see).
        mount_secret(keys, {key_name: key_line(SECOND_KEY, "rotated")})
        wait_for(lambda: admitted_everywhere(url, SECOND_KEY), "the new key was not taken")
        assert all(roll(url, KEY).status_code == 401 for _ in range(8))
        assert process.poll() is None
    finally:
        stop_server(process)


@contextlib.contextmanager
def tls_server(
    env: dict[str, str], ca: ssl.SSLContext
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``python -m app`` with ``env`` on a free port, once it answers /health over HTTPS."""
    port = free_port()
    with tempfile.NamedTemporaryFile(prefix="tensor-ops-tls-", suffix=".log", delete=False) as sink:
        log = Path(sink.name)
        process = subprocess.Popen(
            [sys.executable, "-m", "app"],
            cwd=ROOT,
            env={**os.environ, **env, "TENSOR_OPS_HOST": "127.0.0.1", "TENSOR_OPS_PORT": str(port)},
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"https://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log.read_text()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health", verify=ca, timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield url, process
    finally:
        stop_server(process)
        log.unlink(missing_ok=True)


@pytest.mark.e2e
def test_deployment_with_tls_answers_its_https_probes_and_refuses_cleartext(tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme")
    authority = trustme.CA()
    issued = authority.issue_cert("tensor-ops.default.svc", "127.0.0.1")
    ca = tmp_path / "ca.pem"
    authority.cert_pem.write_to_path(str(ca))
    certificate, private_key = TLS_SECRET_KEYS
    tls = tmp_path / "tls"
    mount_secret(
        tls,
        {
            certificate: b"".join(blob.bytes() for blob in issued.cert_chain_pems),
            private_key: issued.private_key_pem.bytes(),
        },
    )
    keys = tmp_path / "api-keys"
    mount_secret(keys, {"api-keys": key_line(KEY, "deploy")})
    container = container_of(build(("tls",)))
    env = deployment_env(container, {"api-keys": keys, "tls": tls})
    grpc_target = f"127.0.0.1:{env['TENSOR_OPS_GRPC_PORT']}"
    trusted = ssl.create_default_context(cafile=ca)
    with tls_server(env, trusted) as (url, _):
        # The kubelet's HTTPS probes check no certificate.
        probe_checks(container, url, grpc_target, verify=False)
        assert roll(url, None, verify=trusted).status_code == 401
        answer = roll(url, KEY, verify=trusted)
        assert answer.status_code == 200 and answer.json()["data"] == [4, 1, 2, 3]
        # Cleartext, as an httpGet probe without scheme HTTPS would ask, gets no answer...
        with pytest.raises(httpx.TransportError):
            httpx.get(url.replace("https://", "http://") + "/health", timeout=10)
        # ...nor does gRPC in cleartext, as Kubernetes' grpc probe asks, hence no grpc probe.
        with grpc.insecure_channel(grpc_target) as channel:
            health: Any = health_pb2_grpc.HealthStub(channel)
            with pytest.raises(grpc.RpcError) as failed:
                health.Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
        credentials = grpc.ssl_channel_credentials(root_certificates=ca.read_bytes())
        with grpc.secure_channel(
            grpc_target, credentials, options=[("grpc.ssl_target_name_override", "127.0.0.1")]
        ) as channel:
            grpc_checks(channel)
