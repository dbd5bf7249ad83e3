"""``tensor-ops verify PATH...``: a harness in one command, with a summary, JUnit XML and Markdown.

Each case file (``write_case``) is sent to ``POST /verify/{op}`` (or judged in this process,
``--local``), several at a time, each call retried as the service options say; every case ends
in one of these outcomes (``_verify_reports.OUTCOMES``):

- ``equal``: the verdict says the candidate is the op's output (under the case's tolerance);
- ``not_equal``: the verdict says it is not (a wrong element, shape, type or output name);
- ``waived``: not equal, but every mismatched element is a known issue (``--waivers``);
- ``device_failed``: the case says the device failed (``write_case(..., device_error=)``);
- ``refused``: the op refused the case's inputs (the service's 4xx: the case itself is wrong);
- ``unreachable``: no verdict came (no connection, a timeout, a 5xx, after the retries);
- ``unreadable``: the file is no case file.

Exit status: 0 when every case is equal or waived; 1 when any is not equal or its device
failed; else 3 when any was refused, 4 when any could not be sent, 2 when a file could not be
read, no case was found, or a PATH is no regular file or folder or is beyond the case limit.
"""

import argparse
import json
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from tensor_ops_client._cases import CASE_LIMIT, Case, CaseError, read_case
from tensor_ops_client._errors import TensorOpsError
from tensor_ops_client._http import failure
from tensor_ops_client._verdict import Verdict
from tensor_ops_client._verify_reports import (
    Outcome,
    markdown,
    print_report,
    report_text,
    tally,
    write_junit,
)
from tensor_ops_client._waivers import Waiver, WaiverError, read_waivers, waive
from tensor_ops_wire.cases import encode_case
from tensor_ops_wire.dtypes import UnknownDTypeError, dtype_from_name, element_type_of
from tensor_ops_wire.verdict import PRESETS, ToleranceError, parse_tolerance, tolerance_json

#: Exit statuses (the command line's own: 0 done, 2 usage, 3 refused, 4 no answer; 1 here).
OK, NOT_EQUAL, USAGE, REFUSED, UNREACHABLE = 0, 1, 2, 3, 4
DEFAULT_JOBS = 4
#: What to install for ``--local`` (the service's distribution beside the client).
LOCAL_INSTALL = (
    "--local judges in this process and needs the service's package (app) installed beside "
    "the client: pip install tensor-ops (from the service's source: pip install .)"
)

EPILOG = f"""\
examples:
  tensor-ops verify cases/                              # every .npz under cases/, recursively
  tensor-ops verify cases/ --junit report.xml --markdown summary.md --jobs 8
  tensor-ops verify cases/ --waivers known.toml --op gather,roll --dtype float64
  tensor-ops verify cases/ --local                      # no service: judged in this process
  tensor-ops verify roll-1.npz --tolerance '{{"ulp": 1}}'
  tensor-ops verify cases/ --tolerance ieee             # a named preset

Case files: tensor_ops_client.write_case(path, op, inputs, outputs, attributes); the layout is
in docs/verify.md. A case's own tolerance applies unless --tolerance is given. Presets:
{", ".join(PRESETS)}.

exit status:
  {OK}  every case equal (or waived)
  {NOT_EQUAL}  some case not equal (a wrong element, shape, type or output), or its device failed
  {USAGE}  none of those, but a file is no case file (or no case was found, a PATH is no regular
     file or folder or beyond the case limit, or a bad option)
  {REFUSED}  none of those, but the op refused some case's inputs
  {UNREACHABLE}  none of those, but some case could not be sent (no answer after the retries)
"""


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
        help="the tolerance for every case: JSON, e.g. '{\"ulp\": 1}', or a preset's name "
        "(default: each case's own)",
    )
    sub.add_argument(
        "--junit", metavar="FILE", help="write a JUnit XML report (one testcase a case)"
    )
    sub.add_argument("--markdown", metavar="FILE", help="write a Markdown summary")
    sub.add_argument(
        "--waivers",
        metavar="FILE",
        help="a TOML file of known issues ([[waiver]]: reason, op, dtype, cause, version)",
    )
    sub.add_argument(
        "--op",
        action="append",
        type=_names,
        metavar="NAMES",
        help="only the cases of these ops (comma-separated; repeatable)",
    )
    sub.add_argument(
        "--dtype",
        action="append",
        type=_dtypes,
        metavar="TYPES",
        help="only the cases of these element types (comma-separated; repeatable)",
    )
    sub.add_argument(
        "--local",
        action="store_true",
        help="judge in this process, without a service (needs the service's package)",
    )
    sub.add_argument(
        "--max-case-bytes",
        type=_jobs,
        default=CASE_LIMIT,
        metavar="N",
        help=f"the largest case file read (default: {CASE_LIMIT}, the service's body limit)",
    )


def _jobs(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a positive count: {text!r}")
    return int(text)


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def _dtypes(text: str) -> list[str]:
    names = []
    for name in _names(text):
        try:
            names.append(element_type_of(dtype_from_name(name)).numpy)
        except UnknownDTypeError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return names


class PathError(ValueError):
    """A PATH the command does not read: no such file, no regular file or folder, too large."""


def _kind(mode: int) -> str:
    for test, words in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return words
    return "not a regular file"


def _checked(path: Path, limit: int) -> None:
    """Refuse (``PathError``) a path that is no regular file or is beyond ``limit`` bytes,
    from its ``stat`` alone: nothing is opened."""
    try:
        info = path.stat()
    except OSError as error:
        raise PathError(f"{report_text(path)}: {error.strerror or error}") from None
    if not stat.S_ISREG(info.st_mode):
        raise PathError(f"{report_text(path)}: {_kind(info.st_mode)}, not a case file")
    if info.st_size > limit:
        raise PathError(
            f"{report_text(path)}: {info.st_size} bytes, more than the case limit ({limit}; "
            "--max-case-bytes)"
        )


def find_cases(paths: Sequence[str], limit: int = CASE_LIMIT) -> list[tuple[Path, str]]:
    """The case files named, each with its name in the reports: a file as given (its name), a
    folder's ``.npz`` files (recursively, sorted, symbolic links to folders not followed) by
    their path relative to it. ``PathError`` for a PATH that does not exist, and for any file
    that is no regular file or is beyond ``limit`` bytes (checked on ``stat``, unopened)."""
    found: list[tuple[Path, str]] = []
    for given in paths:
        path = Path(given)
        try:
            info = path.stat()
        except OSError as error:
            raise PathError(f"{report_text(given)}: {error.strerror or error}") from None
        if stat.S_ISDIR(info.st_mode):
            inside = []
            for folder, subfolders, files in os.walk(path):
                subfolders.sort()
                inside += [Path(folder) / name for name in files if name.endswith(".npz")]
            for item in sorted(inside):
                _checked(item, limit)
                found.append((item, item.relative_to(path).as_posix()))
        else:
            _checked(path, limit)
            found.append((path, path.name))
    return found


class LocalJudge:
    """``--local``: the verdicts of ``POST /verify/{op}`` computed in this process, with the
    service's own code (its package must be importable) and default settings."""

    def __init__(self) -> None:
        from app.http.verify import judge_case  # noqa: PLC0415
        from app.settings import Settings  # noqa: PLC0415

        self._judge = judge_case
        self._settings = Settings()

    def __enter__(self) -> "LocalJudge":
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        return None

    def verify(
        self,
        op: str,
        inputs: Any,
        outputs: Any,
        attributes: Any,
        tolerance: Any,
        *,
        version: str | None = None,
    ) -> Verdict:
        from app.errors import ServiceError  # noqa: PLC0415

        rule = None if tolerance is None else tolerance_json(parse_tolerance(tolerance))
        body = encode_case(op, inputs, outputs, attributes, rule, version=version)
        try:
            return Verdict.of(self._judge(op, body, self._settings))
        except ServiceError as error:
            # The route's own error body, read as the client reads the service's.
            detail = json.dumps({"detail": [problem.as_item() for problem in error.problems]})
            raise failure(error.status, detail.encode(), {}) from None


def local_judge() -> LocalJudge | None:
    """The in-process judge, or None when the service's package is not installed here."""
    try:
        return LocalJudge()
    except ImportError:
        return None


def verify_one(
    client: Any,
    path: Path,
    name: str,
    tolerance: Any,
    keep: Callable[[Case], bool] = lambda case: True,
) -> Outcome | None:
    """Read one case and have it judged (None when the filters leave it out); never raises."""
    started = time.perf_counter()
    try:
        case: Case = read_case(path)
    except (CaseError, OSError) as error:
        message = str(error).removeprefix(f"{path}: ")
        return Outcome(path, name, "unreadable", message=message)
    if not keep(case):
        return None
    outcome = Outcome(path, name, "unreadable", op=case.op, dtype=case.dtype, version=case.version)
    if case.device_error is not None:
        outcome.outcome, outcome.message = "device_failed", case.device_error
        return outcome
    try:
        verdict = client.verify(
            case.op,
            case.inputs,
            case.outputs,
            case.attributes,
            tolerance if tolerance is not None else case.tolerance,
            version=case.version,
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
        outcome.outcome = "equal" if verdict.equal else "not_equal"
    outcome.seconds = time.perf_counter() - started
    return outcome


def exit_status(outcomes: Sequence[Outcome]) -> int:
    counts = tally(outcomes)
    if counts["not_equal"] or counts["device_failed"]:
        return NOT_EQUAL
    if counts["refused"]:
        return REFUSED
    if counts["unreachable"]:
        return UNREACHABLE
    if counts["unreadable"] or not outcomes:
        return USAGE
    return OK


def _tolerance_option(text: str | None) -> Any:
    if text is None:
        return None
    value: Any = text if text in PRESETS else json.loads(text)
    parse_tolerance(value)
    return value


def _filter(args: argparse.Namespace) -> Callable[[Case], bool]:
    ops = {name for names in args.op or [] for name in names}
    dtypes = {name for names in args.dtype or [] for name in names}
    return lambda case: (not ops or case.op in ops) and (not dtypes or case.dtype in dtypes)


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
        failed += outcome.outcome not in ("equal", "waived")
        bars.update(task, advance=1, failed=failed)

    with bars:
        yield advance


def run_verify(args: argparse.Namespace, make_client: Callable[[argparse.Namespace], Any]) -> int:
    """The ``verify`` command: its exit status."""
    try:
        tolerance = _tolerance_option(args.tolerance)
    except (ValueError, ToleranceError) as error:
        print(f"tensor-ops: --tolerance: {error}", file=sys.stderr)
        return USAGE
    waivers: list[Waiver] = []
    if args.waivers is not None:
        try:
            waivers = read_waivers(Path(args.waivers))
        except WaiverError as error:
            print(f"tensor-ops: --waivers: {report_text(error)}", file=sys.stderr)
            return USAGE
    try:
        found = find_cases(args.cases, args.max_case_bytes)
    except PathError as error:
        print(f"tensor-ops: {error}", file=sys.stderr)
        return USAGE
    if not found:
        print("tensor-ops: no case file (.npz) found", file=sys.stderr)
        return USAGE
    judge: Any
    if args.local:
        judge = local_judge()
        if judge is None:
            print(f"tensor-ops: {LOCAL_INSTALL}", file=sys.stderr)
            return USAGE
    else:
        judge = make_client(args)
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    started = time.perf_counter()
    outcomes = judge_cases(judge, found, tolerance, waivers, _filter(args), args.jobs, show)
    return report_outcomes(
        outcomes, time.perf_counter() - started, waivers, args.junit, args.markdown
    )


def judge_cases(
    judge: Any,
    found: Sequence[tuple[Path, str]],
    tolerance: Any,
    waivers: list[Waiver],
    keep: Callable[[Case], bool] = lambda case: True,
    jobs: int = DEFAULT_JOBS,
    show: bool = False,
) -> list[Outcome]:
    """Each case file found judged by ``judge`` (a client, or ``LocalJudge``), ``jobs`` at a
    time, the waivers applied: the outcomes, in the order found (``tensor-ops conform`` too)."""
    outcomes: list[Outcome] = []
    with (
        judge as client,
        _progress(show, len(found)) as advance,
        ThreadPoolExecutor(max_workers=jobs) as pool,
    ):
        futures = [
            pool.submit(verify_one, client, path, name, tolerance, keep) for path, name in found
        ]
        for future in futures:
            outcome = future.result()
            if outcome is None:
                continue
            if outcome.outcome == "not_equal" and outcome.verdict is not None:
                reasons = waive(
                    waivers, outcome.op, outcome.dtype, outcome.version, outcome.verdict
                )
                if reasons is not None:
                    outcome.outcome, outcome.reasons = "waived", reasons
            advance(outcome)
            outcomes.append(outcome)
    return outcomes


def report_outcomes(
    outcomes: Sequence[Outcome],
    elapsed: float,
    waivers: Sequence[Waiver],
    junit: str | None,
    markdown_file: str | None,
) -> int:
    """The summary on stdout, the JUnit and Markdown files when asked: the exit status."""
    stale = [waiver.words() for waiver in waivers if not waiver.matched]
    print_report(outcomes, elapsed, stale, sys.stdout)
    status = exit_status(outcomes)
    if junit is not None:
        write_junit(outcomes, elapsed, Path(junit))
    if markdown_file is not None:
        Path(markdown_file).write_text(markdown(outcomes, elapsed, stale, status == OK))
    return status
