"""What a release carries is consistent: one licence (Apache-2.0) in both distributions and the
image, one version in the package, the client, ``/v2``, the image's tags and labels, the
deployment files and CHANGELOG.md, and a changelog a user can read before upgrading."""

import datetime
import json
import re
import tomllib
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from app.main import create_app
from app.settings import Settings
from app.version import VERSION

ROOT = Path(__file__).resolve().parent.parent
SERVER = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
CLIENT = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
CHANGELOG = (ROOT / "CHANGELOG.md").read_text()
RELEASE = SERVER["version"]

#: Every file that names the image by its tag, and how many times.
IMAGE_TAGS = {
    "docs/deployment.md": 3,
    "docs/operators.md": 2,
    "docker-compose.yml": 1,
    "deploy/kubernetes/deployment.yaml": 1,
    "deploy/kubernetes/kserve-servingruntime.yaml": 1,
}


def test_both_distributions_are_apache_2_with_the_licence_text() -> None:
    licence = (ROOT / "LICENSE").read_text()
    assert licence.split()[:3] == ["Apache", "License", "Version"], licence[:80]
    assert "http://www.apache.org/licenses/LICENSE-2.0" in licence
    # The client's wheel is built from client/ alone, so it carries a copy of its own.
    assert (ROOT / "client" / "LICENSE").read_text() == licence
    for project in (SERVER, CLIENT):
        assert project["license"] == "Apache-2.0", project["name"]
        assert project["license-files"] == ["LICENSE"], project["name"]


def test_the_image_is_labelled_with_the_licence_and_the_version() -> None:
    labels = dict(re.findall(r'(org\.opencontainers\.image\.[a-z]+)="([^"]*)"', DOCKERFILE))
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.version"] == RELEASE
    # The build copies what pyproject.toml's license-files names.
    assert re.search(r"^COPY [^\n]*\bLICENSE\b", DOCKERFILE, re.M)


def test_the_client_and_the_server_are_released_together() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", RELEASE), RELEASE
    assert CLIENT["version"] == RELEASE
    assert f"tensor-ops-client[grpc]=={RELEASE}" in SERVER["dependencies"]


@pytest.mark.parametrize(("path", "count"), IMAGE_TAGS.items())
def test_every_image_tag_is_the_release(path: str, count: int) -> None:
    tags = re.findall(r"\btensor-ops:([0-9A-Za-z.+-]*[0-9A-Za-z])", (ROOT / path).read_text())
    assert tags == [RELEASE] * count, tags


def test_the_kubernetes_version_label_is_the_release() -> None:
    documents = list(yaml.safe_load_all((ROOT / "deploy/kubernetes/deployment.yaml").read_text()))
    (deployment,) = [d for d in documents if d and d["kind"] == "Deployment"]
    assert deployment["metadata"]["labels"]["app.kubernetes.io/version"] == RELEASE


def installed_from_this_checkout() -> bool:
    """Whether the installed tensor-ops is this checkout's (an editable or local install), so
    that its metadata's version is this pyproject.toml's."""
    try:
        origin = distribution("tensor-ops").read_text("direct_url.json")
    except PackageNotFoundError:
        return False
    if origin is None:
        return False
    url: str = json.loads(origin).get("url", "")
    return url.removeprefix("file://").rstrip("/") == str(ROOT)


@pytest.mark.anyio
async def test_v2_server_metadata_says_the_release() -> None:
    app = create_app(Settings(grpc_port=0))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        metadata = (await client.get("/v2")).json()
    assert metadata["version"] == VERSION
    if not installed_from_this_checkout():
        pytest.skip("the installed tensor-ops is another checkout's: its version is not this one")
    assert metadata["version"] == RELEASE


#: A version's heading, Keep a Changelog's form: ``## [0.3.0] - 2026-11-28``.
HEADING = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", re.M)
#: The sections a version may have, in the order a reader upgrading wants them.
SECTIONS = ["Breaking changes", "Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"]


def releases() -> list[tuple[str, datetime.date, str]]:
    """Each version of CHANGELOG.md, newest first: its number, date and text."""
    found = list(HEADING.finditer(CHANGELOG))
    ends = [match.start() for match in found[1:]] + [len(CHANGELOG)]
    return [
        (match[1], datetime.date.fromisoformat(match[2]), CHANGELOG[match.end() : end])
        for match, end in zip(found, ends, strict=True)
    ]


def test_the_changelog_has_a_dated_heading_per_version_newest_first() -> None:
    every = releases()
    assert every, "no '## [x.y.z] - YYYY-MM-DD' heading in CHANGELOG.md"
    assert every[0][0] == RELEASE
    numbers = [tuple(int(part) for part in number.split(".")) for number, _, _ in every]
    assert numbers == sorted(numbers, reverse=True), numbers
    dates = [date for _, date, _ in every]
    assert dates == sorted(dates, reverse=True), dates
    # Any other second-level heading would be a version without its date.
    assert len(re.findall(r"^## ", CHANGELOG, re.M)) == len(every)


def test_each_version_lists_its_breaking_changes_first() -> None:
    for number, _, text in releases():
        sections = re.findall(r"^### (.+)$", text, re.M)
        assert sections, number
        assert all(section in SECTIONS for section in sections), (number, sections)
        assert sections == sorted(sections, key=SECTIONS.index), (number, sections)


def test_the_release_tells_of_tracing_moving_to_an_extra_as_breaking() -> None:
    # 0.3.0 moved tracing to an extra; its section says so under its breaking changes.
    text: Any = next(body for version, _, body in releases() if version == "0.3.0")
    breaking = text.split("### ", 2)[1]
    assert breaking.startswith("Breaking changes")
    assert "tensor-ops[tracing]" in breaking


def test_the_release_tells_first_what_version_1_of_gather_and_pad_means_now() -> None:
    # Issue 44: the versions change what "1" means; the release says so first, and how to move.
    text: Any = releases()[0][2]
    first = text.split("### ", 2)[1].split("\n- ", 2)[1]
    assert "Gather-1" in first and "Pad-1" in first and "send no version" in first


def test_the_changelog_leaves_engineering_figures_to_the_benchmarks_page() -> None:
    # Measurements (microseconds, ratios against an anchor, requests/s) belong to
    # docs/benchmarks.md, which the changelog links to.
    assert not re.search(r"\d\s?(us|µs)\b|\d\.\d+x\b|requests/s", CHANGELOG)
    assert "docs/benchmarks.md" in CHANGELOG
