"""The fuzz apps for each fuzz module, and the count of cases run, printed at the end."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuzz.driver import CASES, FUZZ_EXAMPLES, STATUSES, Service, service

_HERE = Path(__file__).resolve().parent
_SPENT: dict[str, float] = {}


@pytest.fixture(scope="module")
def fuzz() -> Iterator[Service]:
    with service() as running:
        yield running


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Every phase (setup, call, teardown) of every test in this folder.
    path = Path(report.nodeid.split("::")[0])
    if path.parent.name == _HERE.name or (path.parent == Path() and Path.cwd() == _HERE):
        _SPENT[report.nodeid] = _SPENT.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not CASES:
        return
    mode = (
        f"TENSOR_OPS_FUZZ_EXAMPLES={FUZZ_EXAMPLES}, fresh examples"
        if FUZZ_EXAMPLES
        else "CI mode, fixed examples"
    )
    terminalreporter.write_sep("-", "fuzz")
    terminalreporter.write_line(
        f"fuzz: {sum(CASES.values())} cases in {sum(_SPENT.values()):.1f} s ({mode})"
    )
    for name, count in sorted(CASES.items()):
        statuses = ", ".join(
            f"{status}: {n}" for status, n in sorted(STATUSES.get(name, {}).items())
        )
        terminalreporter.write_line(f"  {name}: {count}" + (f" ({statuses})" if statuses else ""))
