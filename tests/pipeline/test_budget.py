"""A memory budget that fits its container: read from the cgroup limit when not set, logged."""

import logging
from pathlib import Path

import pytest

import app.main
from app.errors import ServiceError
from app.pipeline.admission import (
    DEFAULT_BUDGET,
    MemoryBudget,
    container_limit,
    derive_budget,
)
from app.settings import Settings

MiB = 1 << 20


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        ("4294967296\n", 4 << 30),  # cgroup v2 (or v1) with a limit
        ("max\n", None),  # cgroup v2 without one
        ("9223372036854771712\n", None),  # cgroup v1 without one: 2**63 - 1 to a page
        ("lots", None),
        ("", None),
    ],
)
def test_the_limit_is_read_from_the_cgroup(tmp_path: Path, text: str, limit: int | None) -> None:
    assert container_limit((write(tmp_path / "memory.max", text),)) == limit


def test_v1_is_read_when_v2_is_absent(tmp_path: Path) -> None:
    v1 = write(tmp_path / "memory.limit_in_bytes", "2147483648")
    assert container_limit((tmp_path / "absent", v1)) == 2 << 30


def test_the_setting_wins() -> None:
    assert derive_budget(123 * MiB, 4 << 30, 1, 150 * MiB) == (
        123 * MiB,
        "TENSOR_OPS_MEMORY_BUDGET_BYTES",
    )


def test_without_a_limit_the_default() -> None:
    assert derive_budget(None, None, 1, 150 * MiB)[0] == DEFAULT_BUDGET


@pytest.mark.parametrize(
    ("limit", "workers"),
    [(1 << 30, 1), (1 << 30, 2), (4 << 30, 1), (4 << 30, 2), (4 << 30, 4), (16 << 30, 4)],
)
def test_the_budget_and_what_it_may_grow_to_fit_the_limit(limit: int, workers: int) -> None:
    baseline = 150 * MiB
    budget, source = derive_budget(None, limit, workers, baseline)
    # What the memory model lets a worker reach: its baseline, and 1.25x its reservations
    # plus 16 MiB; every worker at once stays under the limit less its margin (a tenth).
    peak = workers * (baseline + 1.25 * budget + 16 * MiB)
    margin = max(64 * MiB, limit // 10)
    assert limit - margin - 1024 * workers <= peak <= limit - margin
    assert f"container limit {limit} bytes" in source


def test_a_limit_too_small_still_gives_a_working_budget() -> None:
    assert derive_budget(None, 200 * MiB, 4, 150 * MiB)[0] == 64 * MiB


def test_the_budget_is_logged_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app.main, "container_limit", lambda: 2 << 30)
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    logging.getLogger("tensor_ops.service").addHandler(handler)
    try:
        built = app.main.create_app(Settings())
    finally:
        logging.getLogger("tensor_ops.service").removeHandler(handler)
    budget = built.state.budget.capacity
    assert [r.getMessage() for r in records] == ["memory budget"]
    assert records[0].__dict__["budget_bytes"] == budget
    assert budget < 2 << 30
    assert "container limit 2147483648" in records[0].__dict__["from"]


@pytest.mark.anyio
@pytest.mark.parametrize("asked", [10**39, 2 << 30])
async def test_an_estimate_refused_is_not_counted_as_held(asked: int) -> None:
    """What a request held at its peak (the access line's reserved_bytes) counts what was
    granted: an estimate refused (past the whole budget: 413) was never held."""
    budget = MemoryBudget(1 << 30, timeout=0.05)
    reservation = budget.reserve()
    await reservation.grow_to(8 * MiB)
    with pytest.raises(ServiceError) as refused:
        await reservation.grow_to(asked)
    assert refused.value.status == 413
    assert (reservation.peak, reservation.held) == (8 * MiB, 8 * MiB)
    await reservation.grow_to(16 * MiB)
    assert reservation.peak == 16 * MiB
