"""The Dockerfile, Compose and Kubernetes files, checked statically (no Docker engine here)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from app.main import create_app
from tests.deploy.nginx_config import (
    NGINX,
    Directive,
    nginx_version,
    parse,
    render,
    seconds,
    size_bytes,
)
from tests.support import free_port, image_env, malloc_env

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
DOCKERFILE = (ROOT / "Dockerfile").read_text()
KUBERNETES = ROOT / "deploy" / "kubernetes"
ROUTES = set(create_app().openapi()["paths"])


def instructions(text: str) -> list[tuple[str, str]]:
    """The Dockerfile's instructions, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    pairs = []
    for raw in joined.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            pairs.append((keyword.upper(), rest.strip()))
    return pairs


def test_hadolint_passes_without_a_warning() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    result = subprocess.run(
        [str(hadolint), "--no-color", "Dockerfile"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_dockerfile_is_multi_stage_pinned_non_root_with_healthcheck() -> None:
    steps = instructions(DOCKERFILE)
    bases = [rest for keyword, rest in steps if keyword == "FROM"]
    assert len(bases) >= 2, "multi-stage"
    for base in bases:
        assert re.match(r"python:3\.11\.\d+-slim", base), base
    final = steps[max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM") :]
    keywords = [keyword for keyword, _ in final]
    assert "USER" in keywords
    user = next(rest for keyword, rest in final if keyword == "USER")
    assert not user.startswith(("root", "0")), user
    exposed = {port for keyword, rest in final if keyword == "EXPOSE" for port in rest.split()}
    assert exposed == {"8000", "8001"}
    cmd = next(rest for keyword, rest in final if keyword == "CMD")
    assert isinstance(json.loads(cmd), list), "exec form"
    healthcheck = next(rest for keyword, rest in final if keyword == "HEALTHCHECK")
    assert "/health" in healthcheck
    # The final stage copies the built environment and nothing that builds.
    assert not any(keyword == "RUN" and "pip install" in rest for keyword, rest in final)
    assert "--from=build" in " ".join(rest for keyword, rest in final if keyword == "COPY")


def test_dockerfile_serves_http_and_grpc_on_the_ports_it_exposes() -> None:
    env = image_env()
    final = instructions(DOCKERFILE[DOCKERFILE.rindex("\nFROM ") :])
    exposed = [port for keyword, rest in final if keyword == "EXPOSE" for port in rest.split()]
    assert exposed == [env["TENSOR_OPS_PORT"], env["TENSOR_OPS_GRPC_PORT"]] == ["8000", "8001"]
    assert env["TENSOR_OPS_HOST"] == "0.0.0.0"
    # The healthcheck asks the HTTP port the image serves.
    healthcheck = next(rest for keyword, rest in final if keyword == "HEALTHCHECK")
    assert f"http://127.0.0.1:{env['TENSOR_OPS_PORT']}/health'" in healthcheck


def test_dockerignore_keeps_the_context_small() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    for entry in (".git", ".venv", "tests"):
        assert entry in ignored


def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return document


def test_compose_validates_against_the_compose_specification() -> None:
    schema_path = SHARED / "schemas" / "compose-spec.json"
    if not schema_path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{schema_path} is missing")
        pytest.skip("shared/ is not beside this checkout")
    schema = json.loads(schema_path.read_text())
    jsonschema.validate(compose(), schema, cls=jsonschema.Draft7Validator)


def test_compose_service_and_scaled_profile() -> None:
    services = compose()["services"]
    main = services["tensor-ops"]
    assert main["build"] == "."
    assert main["ports"] == ["8000:8000", "8001:8001"]
    assert main["environment"]["TENSOR_OPS_GRPC_PORT"] == "8001"
    assert main["restart"] in ("unless-stopped", "always")
    assert "/health" in " ".join(main["healthcheck"]["test"])
    assert main["deploy"]["resources"]["limits"]["memory"]
    assert main["deploy"]["resources"]["limits"]["cpus"]
    assert any(key.startswith("TENSOR_OPS_") for key in main["environment"])
    replica = services["tensor-ops-replica"]
    assert replica["profiles"] == ["scaled"]
    assert replica["deploy"]["replicas"] >= 2
    balancer = services["load-balancer"]
    assert balancer["profiles"] == ["scaled"]
    assert balancer["ports"] == ["8080:8080", "8081:8081"]
    config = balancer["volumes"][0].split(":")[0]
    assert (ROOT / config).is_file()
    assert "tensor-ops-replica:8000" in (ROOT / config).read_text()
    assert "tensor-ops-replica:8001" in (ROOT / config).read_text()


def test_nginx_balances_grpc_over_http2_to_the_replicas_grpc_port() -> None:
    http = parse((ROOT / "deploy" / "nginx" / "nginx.conf").read_text()).one("http")
    servers: dict[str, Directive] = {
        server.value("listen")[0]: server for server in http.all("server")
    }
    published = {
        mapping.split(":")[1] for mapping in compose()["services"]["load-balancer"]["ports"]
    }
    assert set(servers) == published == {"8080", "8081"}
    grpc = servers["8081"]
    # HTTP/2, which gRPC needs: "http2 on" from nginx 1.25.1 (the image runs 1.27), "listen
    # ... http2" before it.
    assert grpc.value("http2") == ["on"] or "http2" in grpc.value("listen")
    assert not servers["8080"].all("http2") and servers["8080"].value("listen") == ["8080"]
    location = grpc.one("location")
    assert location.args == ["/"]
    scheme, _, upstream_name = location.value("grpc_pass")[0].partition("://")
    assert scheme == "grpc", "cleartext HTTP/2 to the replicas"
    upstream = next(block for block in http.all("upstream") if block.args == [upstream_name])
    assert [server.args[0] for server in upstream.all("server")] == ["tensor-ops-replica:8001"]
    assert upstream.all("least_conn") and upstream.all("keepalive")
    # The service's body limit decides, with its own status; nginx's must let a whole call in.
    limit = int(
        compose()["services"]["tensor-ops-replica"]["environment"]["TENSOR_OPS_MAX_BODY_BYTES"]
    )
    assert size_bytes(grpc.value("client_max_body_size")[0]) >= limit + 5
    assert size_bytes(grpc.value("client_max_body_size")[0]) == size_bytes(
        servers["8080"].value("client_max_body_size")[0]
    )
    # As long as HTTP may take: a large op computes before it answers.
    for name in ("grpc_read_timeout", "grpc_send_timeout"):
        assert seconds(grpc.value(name)[0]) == seconds(
            servers["8080"].value("proxy_" + name[5:])[0]
        )
    # Another replica only when none was reached: a call is never sent twice.
    assert location.value("grpc_next_upstream") == ["error", "timeout"]
    assert location.value("grpc_set_header")[0].lower() == "x-request-id"


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed")
def test_nginx_config_is_valid(tmp_path: Path) -> None:
    # nginx -t resolves upstream names; the replicas' name only exists inside Compose.
    config = render(
        tmp_path,
        {8000: ["127.0.0.1:8000"], 8001: ["127.0.0.1:8001"]},
        {8080: free_port(), 8081: free_port()},
        version=nginx_version(),
    )
    result = subprocess.run(
        [str(NGINX), "-t", "-c", str(config), "-p", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "[warn]" not in result.stderr and "[emerg]" not in result.stderr, result.stderr


BUILT_IN = ["deployment.yaml", "service.yaml", "hpa.yaml", "pdb.yaml", "networkpolicy.yaml"]


def kubernetes_validate(paths: list[Path]) -> None:
    """Every resource of ``paths`` passes Kubernetes' own schema, unknown fields refused."""
    tool = Path(sys.executable).parent / "kubernetes-validate"
    result = subprocess.run(
        [str(tool), "--strict", *map(str, paths)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("passed") == len(paths), result.stdout


def test_kubernetes_built_in_kinds_validate_offline() -> None:
    kubernetes_validate([KUBERNETES / name for name in BUILT_IN])


def manifest(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((KUBERNETES / name).read_text())
    return document


def test_deployment_probes_resources_and_security() -> None:
    deployment = manifest("deployment.yaml")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    # Startup and readiness over HTTP, on routes the app has; readiness is the one that turns
    # 503 on shutdown, not the liveness route.
    assert container["startupProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/health/ready", "port": "http"}
    assert {"/health", "/health/ready"} <= ROUTES
    # Liveness through the standard gRPC health service on the container's gRPC port (a grpc
    # probe takes a number), asking the overall service.
    assert container["livenessProbe"]["grpc"] == {"port": 8001}
    assert "httpGet" not in container["livenessProbe"]
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    env = {item["name"]: item["value"] for item in container["env"]}
    ports = {port["name"]: port for port in container["ports"]}
    assert ports == {
        "http": {"name": "http", "containerPort": 8000, "protocol": "TCP"},
        "grpc": {"name": "grpc", "containerPort": 8001, "protocol": "TCP"},
    }
    assert int(env["TENSOR_OPS_PORT"]) == ports["http"]["containerPort"]
    assert int(env["TENSOR_OPS_GRPC_PORT"]) == ports["grpc"]["containerPort"]
    # The Service carries both, gRPC marked as cleartext HTTP/2 for the proxies in front.
    service_ports = {port["name"]: port for port in manifest("service.yaml")["spec"]["ports"]}
    assert service_ports == {
        "http": {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"},
        "grpc": {
            "name": "grpc",
            "port": 8001,
            "targetPort": "grpc",
            "protocol": "TCP",
            "appProtocol": "kubernetes.io/h2c",
        },
    }
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert manifest("service.yaml")["spec"]["selector"] == selector
    assert manifest("pdb.yaml")["spec"]["selector"]["matchLabels"] == selector
    assert manifest("hpa.yaml")["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]


def test_every_deployment_sets_the_allocator_as_the_image_does() -> None:
    # glibc reads these once, at process start: they must be in the environment, not set later.
    image = malloc_env()
    assert image == {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": str(1 << 20)}
    for service in ("tensor-ops", "tensor-ops-replica"):
        env = compose()["services"][service]["environment"]
        assert {key: env.get(key) for key in image} == image, service
    for name in ("deployment.yaml", "kserve-servingruntime.yaml"):
        document = manifest(name)
        pod = (
            document["spec"]["template"]["spec"]
            if "template" in document["spec"]
            else document["spec"]
        )
        env = {item["name"]: item["value"] for item in pod["containers"][0]["env"]}
        assert {key: env.get(key) for key in image} == image, name


INFERENCE_SERVICES = {
    "v2": "kserve-inferenceservice.yaml",
    "grpc-v2": "kserve-inferenceservice-grpc.yaml",
}


def test_kserve_serving_runtime_fields() -> None:
    runtime = manifest("kserve-servingruntime.yaml")
    assert runtime["apiVersion"] == "serving.kserve.io/v1alpha1"
    assert runtime["kind"] == "ServingRuntime"
    spec = runtime["spec"]
    assert set(spec) <= {
        "annotations", "supportedModelFormats", "protocolVersions", "multiModel", "containers",
        "disabled", "grpcEndpoint", "grpcDataEndpoint", "httpDataEndpoint", "replicas",
        "storageHelper", "builtInAdapter", "nodeSelector", "affinity", "tolerations", "volumes",
        "imagePullSecrets", "labels", "workerSpec", "hostIPC",
    }  # fmt: skip
    # HTTP and gRPC: an InferenceService of either protocol may use this runtime.
    assert spec["protocolVersions"] == ["v2", "grpc-v2"]
    formats = spec["supportedModelFormats"]
    assert all(set(f) <= {"name", "version", "autoSelect", "priority"} for f in formats)
    container = spec["containers"][0]
    assert container["name"] == "kserve-container"
    env = {item["name"]: item["value"] for item in container["env"]}
    # KServe's own ports (HTTP 8080 unless told otherwise, gRPC 8081 as its model server).
    assert (env["TENSOR_OPS_PORT"], env["TENSOR_OPS_GRPC_PORT"]) == ("8080", "8081")
    # No ports of its own: each InferenceService's one port is merged in (see below).
    assert "ports" not in container
    served_ports = {"v2": int(env["TENSOR_OPS_PORT"]), "grpc-v2": int(env["TENSOR_OPS_GRPC_PORT"])}
    for protocol, name in INFERENCE_SERVICES.items():
        service = manifest(name)
        assert service["apiVersion"] == "serving.kserve.io/v1beta1"
        assert service["kind"] == "InferenceService"
        model = service["spec"]["predictor"]["model"]
        assert set(model) <= {
            "modelFormat",
            "runtime",
            "protocolVersion",
            "storageUri",
            "env",
            "resources",
            "args",
            "ports",
        }
        assert model["runtime"] == runtime["metadata"]["name"]
        assert model["modelFormat"]["name"] in {f["name"] for f in formats}
        assert model["protocolVersion"] == protocol
        assert model["protocolVersion"] in spec["protocolVersions"]
        # The one port of this protocol: Knative routes "h2c" as HTTP/2, "http1" as HTTP/1.1.
        [port] = model["ports"]
        assert port == {
            "name": {"v2": "http1", "grpc-v2": "h2c"}[protocol],
            "containerPort": served_ports[protocol],
            "protocol": "TCP",
        }
    # What KServe probes and routes to exists in the app.
    assert {"/v2/health/live", "/v2/health/ready", "/v2/models/{name}/infer"} <= ROUTES


def test_kserve_predictor_pods_validate_and_suit_knative(tmp_path: Path) -> None:
    # The container KServe makes of the runtime's and an InferenceService's (ports merged by
    # containerPort), as a Pod: Kubernetes' schema must take it, and Knative's rules for a
    # serverless revision too (one port, named "", "h2c" or "http1", TCP).
    runtime = manifest("kserve-servingruntime.yaml")["spec"]["containers"][0]
    paths = []
    for protocol, name in INFERENCE_SERVICES.items():
        model = manifest(name)["spec"]["predictor"]["model"]
        ports = {port["containerPort"]: port for port in runtime.get("ports", [])}
        ports.update({port["containerPort"]: port for port in model.get("ports", [])})
        container = {**runtime, "ports": list(ports.values())}
        assert len(container["ports"]) == 1, protocol
        assert container["ports"][0].get("name", "") in {"", "h2c", "http1"}
        assert container["ports"][0].get("protocol", "TCP") == "TCP"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": manifest(name)["metadata"]["name"]},
            "spec": {"containers": [container]},
        }
        paths.append(tmp_path / f"{protocol}.yaml")
        paths[-1].write_text(yaml.safe_dump(pod))
    kubernetes_validate(paths)
