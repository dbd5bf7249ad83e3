"""docs/operators.md answers an operator's first questions first, and its figures are those of
the other pages and of the deployment files: a worker's memory as benchmarks.md measured it and
limits.md states it, and each memory budget as the service derives it from the container limits
that Compose and the Kubernetes manifest set."""

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.pipeline.admission import derive_budget

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGE = (DOCS / "operators.md").read_text()
LIMITS = (DOCS / "limits.md").read_text()
BENCHMARKS = (DOCS / "benchmarks.md").read_text()
MiB = 1 << 20


def worker_mib() -> int:
    """The page's figure for one idle worker's resident memory."""
    match = re.search(r"\*\*A worker: about (\d+) MiB resident at idle\*\*", PAGE)
    assert match, "operators.md does not say a worker's memory in its first answer"
    return int(match[1])


def test_the_four_questions_come_first_in_order() -> None:
    headings = re.findall(r"^## (.+)$", PAGE, re.M)
    assert headings[:4] == [
        "Memory per worker",
        "How many workers",
        "How to scale out",
        "Docker in one command",
    ]


def test_limits_md_states_the_same_worker_memory() -> None:
    assert f"one worker of about {worker_mib()} MiB" in LIMITS
    assert "~150 MiB" not in LIMITS


def test_the_measured_idle_workers_agree_with_the_figure() -> None:
    # benchmarks.md's scaling table (idle MiB per worker, as "228" or "227-228") and its 64 MiB
    # paragraph's idle worker: each within the page's stated range.
    low, high = (int(n) for n in re.findall(r"\((\d+)-(\d+) MiB measured", PAGE)[0])
    assert low <= worker_mib() <= high
    rows = re.findall(r"^\| [124] \| (\d+)(?:-(\d+))? \| \d", BENCHMARKS, re.M)
    assert len(rows) == 3, rows
    measured = [int(n) for row in rows for n in row if n]
    measured += [int(n) for n in re.findall(r"\((\d+) MiB idle", BENCHMARKS)]
    assert measured and all(low <= n <= high for n in measured), measured


def compose_limit() -> tuple[int, int]:
    service: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"][
        "tensor-ops"
    ]
    limit = service["deploy"]["resources"]["limits"]["memory"]
    assert limit == "4G", limit
    return 4 << 30, int(service["environment"]["TENSOR_OPS_WORKERS"])


def kubernetes_limit() -> tuple[int, int]:
    documents = yaml.safe_load_all((ROOT / "deploy/kubernetes/deployment.yaml").read_text())
    (deployment,) = [d for d in documents if d and d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    limit = container["resources"]["limits"]["memory"]
    assert limit == "4Gi", limit
    workers = next(e["value"] for e in container["env"] if e["name"] == "TENSOR_OPS_WORKERS")
    return 4 << 30, int(workers)


def stated_gib(budget: int) -> str:
    return f"about {budget / (1 << 30):.1f} GiB"


@pytest.mark.parametrize(
    ("where", "limit_and_workers"),
    [("Compose", compose_limit), ("Kubernetes", kubernetes_limit)],
    ids=["compose", "kubernetes"],
)
def test_the_budgets_stated_are_what_the_service_derives(
    where: str, limit_and_workers: Any
) -> None:
    limit, workers = limit_and_workers()
    budget, _ = derive_budget(None, limit, workers, worker_mib() * MiB)
    stated = stated_gib(budget)
    page = re.search(rf"under the {where}[^.]*?{re.escape(stated)}", PAGE)
    assert page, f"operators.md does not give {stated} for {where} ({workers} worker(s))"
    assert re.search(rf"{where}[^.]*?{re.escape(stated)}", LIMITS), (where, stated)
