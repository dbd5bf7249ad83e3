"""The failover scenario of tests/deploy/test_failover.py at longer durations, its figures printed.

    .venv/bin/python tests/benchmarks/failover.py                 # 10 s of each state, 8 clients
    .venv/bin/python tests/benchmarks/failover.py --runs 5        # five runs, one table each
    .venv/bin/python tests/benchmarks/failover.py --seconds 2     # the test's own durations
    .venv/bin/python tests/benchmarks/failover.py --json out.json # the figures as JSON too
    .venv/bin/python tests/benchmarks/failover.py --command 'other_launcher.py'  # other replicas

Three ``python -m app`` replicas behind nginx running deploy/nginx/nginx.conf (its ports
rewritten), under a steady load of small rolls and gathers (JSON and .npz, every answer checked
against NumPy): a steady period, then (a) one replica killed (SIGKILL) and started again,
(b) every replica restarted in turn (SIGTERM, as a rolling update), (c) one stopped (SIGSTOP)
until nginx has taken it out, then continued. For each: requests sent, failed, moved to a second
replica by nginx, and the latency's p50, p99 and maximum; what nginx logged; the waits of the
requests sent to the stopped replica. A run takes about a minute plus three times ``--seconds``.
Nothing is asserted; the exit status is 1 if any request failed.
"""

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.deploy.nginx_config import NGINX  # noqa: E402
from tests.deploy.test_failover import Scenario, run_failover  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="of each state (default 10)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--command", default="-m app", help="the replicas' Python arguments (default: -m app)"
    )
    parser.add_argument("--json", type=Path, help="write every run's figures there")
    arguments = parser.parse_args()
    if NGINX is None:
        print("nginx is not installed", file=sys.stderr)
        return 2
    scenario = Scenario(
        baseline=arguments.seconds,
        dead=arguments.seconds,
        out=arguments.seconds,
        clients=arguments.clients,
        command=tuple(shlex.split(arguments.command)),
    )
    runs = []
    failed = 0
    for number in range(1, arguments.runs + 1):
        with tempfile.TemporaryDirectory(prefix="failover-") as directory:
            report = run_failover(Path(directory), scenario)
        print(f"run {number} of {arguments.runs}")
        print(report.table(), flush=True)
        errors = [outcome for outcome in report.outcomes if outcome.error is not None]
        for outcome in errors[:10]:
            print(f"  failed: {outcome}")
        failed += len(errors)
        runs.append(
            {
                "windows": [window.figures() for window in report.windows],
                "stopped_waits": [attempt.seconds for attempt in report.stopped_attempts],
                "nginx_errors": {name: dict(kinds) for name, kinds in report.errors.items()},
                "failed": [str(outcome) for outcome in errors],
            }
        )
    if arguments.json:
        arguments.json.write_text(json.dumps(runs, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
