"""The Dockerfile, Compose and Kubernetes files, checked statically (no Docker engine here)."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from app.main import create_app
from tests.support import malloc_env

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
    assert ("EXPOSE", "8000") in final
    cmd = next(rest for keyword, rest in final if keyword == "CMD")
    assert isinstance(json.loads(cmd), list), "exec form"
    healthcheck = next(rest for keyword, rest in final if keyword == "HEALTHCHECK")
    assert "/health" in healthcheck
    # The final stage copies the built environment and nothing that builds.
    assert not any(keyword == "RUN" and "pip install" in rest for keyword, rest in final)
    assert "--from=build" in " ".join(rest for keyword, rest in final if keyword == "COPY")


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
    assert "8000:8000" in main["ports"]
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
    config = balancer["volumes"][0].split(":")[0]
    assert (ROOT / config).is_file()
    assert "tensor-ops-replica:8000" in (ROOT / config).read_text()


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed")
def test_nginx_config_is_valid(tmp_path: Path) -> None:
    # nginx -t resolves upstream names; the replicas' name only exists inside Compose.
    text = (
        (ROOT / "deploy" / "nginx" / "nginx.conf")
        .read_text()
        .replace("tensor-ops-replica", "127.0.0.1")
    )
    text = f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\n" + text
    text = text.replace(
        "http {",
        f"http {{\n    access_log off;\n    client_body_temp_path {tmp_path};\n    proxy_temp_path {tmp_path};",
        1,
    )
    (tmp_path / "nginx.conf").write_text(text)
    result = subprocess.run(
        ["nginx", "-t", "-c", str(tmp_path / "nginx.conf"), "-p", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


BUILT_IN = ["deployment.yaml", "service.yaml", "hpa.yaml", "pdb.yaml"]


def test_kubernetes_built_in_kinds_validate_offline() -> None:
    tool = Path(sys.executable).parent / "kubernetes-validate"
    files = [str(KUBERNETES / name) for name in BUILT_IN]
    result = subprocess.run(
        [str(tool), "--strict", *files], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("passed") == len(BUILT_IN), result.stdout


def manifest(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((KUBERNETES / name).read_text())
    return document


def test_deployment_probes_resources_and_security() -> None:
    deployment = manifest("deployment.yaml")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] in ROUTES
    assert container["readinessProbe"]["httpGet"]["path"] in ROUTES
    assert (
        container["readinessProbe"]["httpGet"]["path"]
        != container["livenessProbe"]["httpGet"]["path"]
    )
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["ports"][0]["containerPort"] == 8000
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
    assert spec["protocolVersions"] == ["v2"]
    formats = spec["supportedModelFormats"]
    assert all(set(f) <= {"name", "version", "autoSelect", "priority"} for f in formats)
    container = spec["containers"][0]
    assert container["name"] == "kserve-container"
    port = next(env["value"] for env in container["env"] if env["name"] == "TENSOR_OPS_PORT")
    assert container["ports"][0]["containerPort"] == int(port) == 8080
    service = manifest("kserve-inferenceservice.yaml")
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
    }
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["modelFormat"]["name"] in {f["name"] for f in formats}
    assert model["protocolVersion"] == "v2"
    # What KServe probes and routes to exists in the app.
    assert {"/v2/health/live", "/v2/health/ready", "/v2/models/{name}/infer"} <= ROUTES
