"""A line as each test module finishes, with its count and time, on the run's console: a long run
(README's command, minutes on two cores) shows what it has done, not only dots. Loaded by
tests/conftest.py; on pytest-xdist's controller it counts each module's tests as the workers
report them, and alone it counts what it collected."""

import time
from collections import Counter
from typing import Any

import pytest


class ModuleProgress:
    """Counts each module's tests and says when the last one is reported."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.total: Counter[str] = Counter()
        self.done: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.started = time.monotonic()
        self.seen: set[str] = set()

    def _count(self, nodeids: list[str]) -> None:
        if self.total:
            return  # every worker collects the same tests: counted once
        for nodeid in nodeids:
            self.total[nodeid.split("::", 1)[0]] += 1

    @pytest.hookimpl
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not hasattr(self.config, "workerinput"):
            self._count([item.nodeid for item in session.items])

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown" or report.nodeid in self.seen:
            return
        self.seen.add(report.nodeid)
        module = report.nodeid.split("::", 1)[0]
        self.done[module] += 1
        if report.failed:
            self.failed[module] += 1
        if self.done[module] == self.total.get(module):
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is None or reporter.verbosity < 0:
                return
            failed = f", {self.failed[module]} failed" if self.failed[module] else ""
            elapsed = time.monotonic() - self.started
            if reporter.currentfspath is None:
                reporter.write("\n")  # after xdist's dots, which leave the line open
            reporter.write_line(
                f"  done: {module} ({self.done[module]} tests{failed}; {elapsed:.0f} s into the run)"
            )


class XdistCollection:
    """xdist's hook, registered only where xdist is loaded: pytest refuses a hook it does not
    know (``-p no:xdist``, or xdist not installed)."""

    def __init__(self, progress: ModuleProgress) -> None:
        self.progress = progress

    @pytest.hookimpl
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.progress._count(ids)


def register(config: pytest.Config) -> None:
    """The progress lines, on the process that writes the console (not on xdist's workers)."""
    if hasattr(config, "workerinput"):
        return
    progress = ModuleProgress(config)
    config.pluginmanager.register(progress, "tensor-ops-progress")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistCollection(progress), "tensor-ops-progress-xdist")
