"""``tensor-ops verify CASES...``: a harness in one command, with JUnit XML and Markdown reports.

Each case file (``write_case``) is sent to ``POST /verify/{op}``, several at a time, each call
retried as the service options say; every case ends in one of five outcomes:

- ``equal``: the verdict says the candidate is the op's output (under the case's tolerance);
- ``mismatched``: the verdict says it is not (a wrong element, shape, type or output name);
- ``refused``: the op refused the case's inputs (the service's 4xx: the case itself is wrong);
- ``unreachable``: no verdict came (no connection, a timeout, a 5xx, after the retries);
- ``unreadable``: the file is no case file.

Exit status: 0 when every case is equal; 1 when any is mismatched; else 3 when any was refused,
4 when any could not be sent, 2 when a file could not be read (or no case was found).
"""

import argparse
import json
import socket
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from tensor_ops_client._cases import Case, CaseError, read_case
from tensor_ops_client._errors import TensorOpsError
from tensor_ops_client._verdict import Verdict
from tensor_ops_wire.verdict import ToleranceError, parse_tolerance

OUTCOMES = ("equal", "mismatched", "refused", "unreachable", "unreadable")
#: Exit statuses (the command line's own: 0 done, 2 usage, 3 refused, 4 no answer; 1 here).
OK, MISMATCHED, USAGE, REFUSED, UNREACHABLE = 0, 1, 2, 3, 4
#: Cases whose details are printed on stdout; the rest are in the reports.
SHOWN_FAILURES = 20
DEFAULT_JOBS = 4

EPILOG = f"""\
examples:
  tensor-ops verify cases/                              # every .npz under cases/, recursively
  tensor-ops verify cases/ --junit report.xml --markdown summary.md --jobs 8
  tensor-ops verify roll-1.npz --tolerance '{{"ulp": 1}}'

Case files: tensor_ops_client.write_case(path, op, inputs, outputs, attributes); the layout is
in docs/verify.md. A case's own tolerance applies unless --tolerance is given.

exit status:
  {OK}  every case equal
  {MISMATCHED}  some case not equal (a wrong element, shape, type or output)
  {USAGE}  no mismatch, but a file is no case file (or no case was found, or a bad option)
  {REFUSED}  no mismatch, but the op refused some case's inputs
  {UNREACHABLE}  no mismatch, but some case could not be sent (no answer after the retries)
"""


@dataclass
class Outcome:
    """What became of one case file."""

    path: Path
    name: str
    outcome: str
    seconds: float = 0.0
    op: str = ""
    verdict: Verdict | None = None
    #: The refusal's or failure's words (refused, unreachable, unreadable).
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        """One line saying what differs (or why there is no verdict)."""
        if self.verdict is None:
            return self.message
        parts = []
        for output in self.verdict.outputs:
            if output.equal:
                continue
            words = f"{output.name}: {output.why or 'differs'}"
            if output.max_ulp:
                words += f", up to {output.max_ulp} ULP"
            if output.first:
                first = output.first[0]
                words += (
                    f"; first at {first['index']}: expected {first['expected']} "
                    f"({first['expected_bits']}), got {first['got']} ({first['got_bits']})"
                )
            parts.append(words)
        return "; ".join(parts) or "equal"


def add_verify_command(
    commands: "argparse._SubParsersAction[argparse.ArgumentParser]",
    service: Callable[[argparse.ArgumentParser], None],
) -> None:
    """The ``verify`` command's parser."""
    sub = commands.add_parser(
        "verify",
        help="Verify case files (a device's outputs) against the service's ops",
        description="Send each case file to POST /verify/{op} and report the verdicts.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    service(sub)
    sub.add_argument("cases", nargs="+", metavar="PATH", help="case files (.npz) or folders")
    sub.add_argument(
        "--jobs",
        "-j",
        type=_jobs,
        default=DEFAULT_JOBS,
        metavar="N",
        help=f"cases verified at once (default: {DEFAULT_JOBS})",
    )
    sub.add_argument(
        "--tolerance",
        metavar="JSON",
        help="the tolerance for every case, e.g. '{\"ulp\": 1}' (default: each case's own)",
    )
    sub.add_argument(
        "--junit", metavar="FILE", help="write a JUnit XML report (one testcase a case)"
    )
    sub.add_argument("--markdown", metavar="FILE", help="write a Markdown summary")


def _jobs(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a positive count: {text!r}")
    return int(text)


def find_cases(paths: Sequence[str]) -> list[Path]:
    """The case files named: each file as given, each folder's ``.npz`` files (recursively,
    sorted); a path that does not exist raises ``FileNotFoundError``."""
    found: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found += sorted(item for item in path.rglob("*.npz") if item.is_file())
        elif path.exists():
            found.append(path)
        else:
            raise FileNotFoundError(f"{given}: no such file or folder")
    return found


def verify_one(client: Any, path: Path, name: str, tolerance: Any) -> Outcome:
    """Read one case and have it judged; never raises."""
    started = time.perf_counter()
    try:
        case: Case = read_case(path)
    except (CaseError, OSError) as error:
        return Outcome(path, name, "unreadable", message=str(error).removeprefix(f"{path}: "))
    outcome = Outcome(path, name, "unreadable", op=case.op)
    try:
        verdict = client.verify(
            case.op,
            case.inputs,
            case.outputs,
            case.attributes,
            tolerance if tolerance is not None else case.tolerance,
        )
    except TensorOpsError as error:
        reached = 400 <= error.status < 500
        outcome.outcome = "refused" if reached else "unreachable"
        head = f"[{error.status} {error.kind or ''}] " if error.status else ""
        said = error.field and error.message.startswith(error.field)
        where = f"{error.field}: " if error.field and not said else ""
        outcome.message = f"{head.replace(' ]', ']')}{where}{error.message}"
    except ValueError as error:  # a name or a tolerance no request can carry
        outcome.message = str(error)
    else:
        outcome.verdict = verdict
        outcome.outcome = "equal" if verdict.equal else "mismatched"
    outcome.seconds = time.perf_counter() - started
    return outcome


def exit_status(outcomes: Sequence[Outcome]) -> int:
    counts = {kind: sum(1 for o in outcomes if o.outcome == kind) for kind in OUTCOMES}
    if counts["mismatched"]:
        return MISMATCHED
    if counts["refused"]:
        return REFUSED
    if counts["unreachable"]:
        return UNREACHABLE
    if counts["unreadable"] or not outcomes:
        return USAGE
    return OK


@contextmanager
def _progress(enabled: bool, total: int) -> Iterator[Callable[[Outcome], None]]:
    """A progress bar on stderr (cases done, equal so far), or nothing."""
    if not enabled:
        yield lambda outcome: None
        return
    from rich.console import Console  # noqa: PLC0415
    from rich.progress import (  # noqa: PLC0415
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    bars = Progress(
        TextColumn("verify"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[failed]} not equal"),
        TimeElapsedColumn(),
        console=Console(file=sys.stderr),
    )
    task = bars.add_task("verify", total=total, failed=0)
    failed = 0

    def advance(outcome: Outcome) -> None:
        nonlocal failed
        failed += outcome.outcome != "equal"
        bars.update(task, advance=1, failed=failed)

    with bars:
        yield advance


def run_verify(args: argparse.Namespace, make_client: Callable[[argparse.Namespace], Any]) -> int:
    """The ``verify`` command: its exit status."""
    tolerance = None
    if args.tolerance is not None:
        try:
            tolerance = json.loads(args.tolerance)
            parse_tolerance(tolerance)
        except (ValueError, ToleranceError) as error:
            print(f"tensor-ops: --tolerance: {error}", file=sys.stderr)
            return USAGE
    try:
        paths = find_cases(args.cases)
    except FileNotFoundError as error:
        print(f"tensor-ops: {error}", file=sys.stderr)
        return USAGE
    if not paths:
        print("tensor-ops: no case file (.npz) found", file=sys.stderr)
        return USAGE
    names = _names(paths)
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    started = time.perf_counter()
    outcomes: list[Outcome] = []
    with (
        make_client(args) as client,
        _progress(show, len(paths)) as advance,
        ThreadPoolExecutor(max_workers=args.jobs) as pool,
    ):
        futures = [
            pool.submit(verify_one, client, path, name, tolerance)
            for path, name in zip(paths, names, strict=True)
        ]
        for future in futures:
            outcome = future.result()
            advance(outcome)
            outcomes.append(outcome)
    elapsed = time.perf_counter() - started
    print_report(outcomes, elapsed, sys.stdout)
    if args.junit is not None:
        write_junit(outcomes, elapsed, Path(args.junit))
    if args.markdown is not None:
        Path(args.markdown).write_text(markdown(outcomes, elapsed))
    return exit_status(outcomes)


def _names(paths: Sequence[Path]) -> list[str]:
    """Each case's name in the reports: its path relative to the current folder when under it."""
    here = Path.cwd()
    names = []
    for path in paths:
        try:
            names.append(path.resolve().relative_to(here).as_posix())
        except ValueError:
            names.append(path.as_posix())
    return names


def counts(outcomes: Sequence[Outcome]) -> dict[str, int]:
    """Cases, and how many ended each way."""
    return {
        "cases": len(outcomes),
        **{kind: sum(1 for o in outcomes if o.outcome == kind) for kind in OUTCOMES},
    }


_LABELS = {
    "cases": "cases",
    "equal": "equal",
    "mismatched": "mismatched",
    "refused": "refused by the op",
    "unreachable": "failed to reach",
    "unreadable": "unreadable",
}


def print_report(outcomes: Sequence[Outcome], elapsed: float, out: TextIO) -> None:
    """The cases not equal (the first few) and the summary table."""
    failures = [o for o in outcomes if o.outcome != "equal"]
    for outcome in failures[:SHOWN_FAILURES]:
        print(f"{outcome.outcome.upper():<11} {outcome.name}: {outcome.summary()}", file=out)
    if len(failures) > SHOWN_FAILURES:
        print(f"... and {len(failures) - SHOWN_FAILURES} more (see --junit, --markdown)", file=out)
    if failures:
        print(file=out)
    tally = counts(outcomes)
    width = max(len(label) for label in _LABELS.values())
    for key, label in _LABELS.items():
        if key == "unreadable" and not tally[key]:
            continue
        print(f"{label:<{width}}  {tally[key]:>6}", file=out)
    print(f"{'seconds':<{width}}  {elapsed:>6.1f}", file=out)


def _xml_text(text: str) -> str:
    # XML 1.0 has no place for most control characters: a message holding one keeps the rest.
    return "".join(c if c in "\t\n\r" or ord(c) >= 0x20 else "?" for c in text)


def write_junit(outcomes: Sequence[Outcome], elapsed: float, path: Path) -> None:
    """A JUnit XML report: one testsuite, one testcase per case file; a ``failure`` for a case
    not equal, an ``error`` for one refused, unreachable or unreadable (CI systems show them
    apart)."""
    tally = counts(outcomes)
    errors = tally["refused"] + tally["unreachable"] + tally["unreadable"]
    totals = {
        "tests": str(tally["cases"]),
        "failures": str(tally["mismatched"]),
        "errors": str(errors),
        "skipped": "0",
        "time": f"{elapsed:.3f}",
    }
    root = ET.Element("testsuites", {"name": "tensor-ops verify", **totals})
    suite = ET.SubElement(
        root,
        "testsuite",
        {
            "name": "tensor-ops verify",
            **totals,
            "timestamp": datetime.now(UTC).replace(tzinfo=None).isoformat(timespec="seconds"),
            "hostname": socket.gethostname(),
        },
    )
    for outcome in outcomes:
        case = ET.SubElement(
            suite,
            "testcase",
            {
                "name": _xml_text(outcome.name),
                "classname": f"tensor-ops.verify.{outcome.op or 'unknown'}",
                "file": _xml_text(outcome.path.as_posix()),
                "time": f"{outcome.seconds:.3f}",
            },
        )
        if outcome.outcome == "mismatched":
            assert outcome.verdict is not None
            failure = ET.SubElement(
                case, "failure", {"message": _xml_text(outcome.summary()), "type": "mismatched"}
            )
            failure.text = json.dumps(outcome.verdict.as_dict(), indent=2)
        elif outcome.outcome != "equal":
            error = ET.SubElement(
                case, "error", {"message": _xml_text(outcome.message), "type": outcome.outcome}
            )
            error.text = _xml_text(outcome.message)
    ET.indent(root)
    path.write_bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(outcomes: Sequence[Outcome], elapsed: float) -> str:
    """A Markdown summary for a pull request: the counts, then each case not equal."""
    tally = counts(outcomes)
    verdict = "all equal" if exit_status(outcomes) == OK else "**not all equal**"
    lines = [
        f"## tensor-ops verify: {verdict}",
        "",
        "| " + " | ".join(_LABELS[key] for key in _LABELS) + " | seconds |",
        "|" + "---:|" * (len(_LABELS) + 1),
        "| " + " | ".join(str(tally[key]) for key in _LABELS) + f" | {elapsed:.1f} |",
    ]
    failures = [o for o in outcomes if o.outcome != "equal"]
    if failures:
        lines += ["", "| case | op | outcome | what |", "|---|---|---|---|"]
        lines += [
            f"| `{_cell(o.name)}` | {o.op or ''} | {o.outcome} | {_cell(o.summary())} |"
            for o in failures
        ]
    return "\n".join(lines) + "\n"
