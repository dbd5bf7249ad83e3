"""What ``tensor-ops verify`` reports: the outcome of each case, the summary per op and element
type, the terminal's text, the Markdown report and the JUnit XML, every field escaped once.

Case files, names, ops, the service's words and a device's error text are the outside world's:
each goes through ``report_text`` (one function) before it reaches a report, so no control
character, line break or markup in them can forge a line, a heading, a link or bad XML.
"""

import json
import socket
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from tensor_ops_client._verdict import Verdict
from tensor_ops_wire.verdict import CAUSES

#: How a case can end. ``unreachable`` and ``unreadable`` are the command's own troubles.
OUTCOMES = (
    "equal",
    "not_equal",
    "waived",
    "refused",
    "device_failed",
    "unreachable",
    "unreadable",
)
#: The summary's columns (api.md section 10), then the command's own troubles when any.
SUMMARY_COLUMNS = ("cases", "equal", "not_equal", "waived", "refused", "device_failed")
#: Cases whose details are printed on stdout; the rest are in the reports.
SHOWN_FAILURES = 20
#: Case names listed under each cause on stdout.
SHOWN_PER_CAUSE = 5

#: Characters never written as they are: C0 and C1 controls, DEL, line and paragraph
#: separators, bidirectional overrides and isolates, lone surrogates (a file name's undecodable
#: bytes), and the two non-characters XML forbids.
_HIDDEN = frozenset(
    [
        *range(0x00, 0x20),
        *range(0x7F, 0xA0),
        0x2028,
        0x2029,
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
        0x200E,
        0x200F,
        0x061C,
        0xFFFE,
        0xFFFF,
    ]
)


def report_text(value: object, form: str = "text") -> str:
    """``value`` as a report may show it: every hidden character written as an escape
    (``\\x1b``, ``\\u2028``, ``\\udcff``); in ``form`` ``"markdown"``, a code span (fenced
    with more backticks than it holds, its ``|`` escaped for a table), which Markdown shows
    as it is: no heading, link, emphasis or HTML. ``"text"`` serves the terminal and XML
    (ElementTree escapes ``&``, ``<`` and quotes; nothing XML forbids is left)."""
    text = str(value)
    shown = "".join(
        (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        if (code := ord(char)) in _HIDDEN or 0xD800 <= code <= 0xDFFF
        else char
        for char in text
    )
    if form != "markdown":
        return shown
    if not shown:
        return ""
    runs = [len(part) for part in "".join(c if c == "`" else " " for c in shown).split()]
    longest = max(runs, default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {shown.replace('|', chr(92) + '|')} {fence}"


@dataclass
class Outcome:
    """What became of one case file."""

    path: Path
    #: Its name in the reports: relative to the PATH it was found under.
    name: str
    outcome: str
    seconds: float = 0.0
    op: str = ""
    dtype: str = ""
    version: str | None = None
    verdict: Verdict | None = None
    #: The refusal's, failure's or device's words (refused, unreachable, unreadable,
    #: device_failed).
    message: str = ""
    #: The waivers' reasons (waived).
    reasons: list[str] = field(default_factory=list)

    @property
    def causes(self) -> Counter[str]:
        """The mismatched elements' causes, summed over the outputs."""
        total: Counter[str] = Counter()
        if self.verdict is not None:
            for output in self.verdict.outputs:
                total.update(output.raw.get("causes", {}))
        return total

    def summary(self) -> str:
        """One line saying what differs (or why there is no verdict); not yet escaped."""
        if self.outcome == "device_failed":
            return f"device failed: {self.message}"
        if self.verdict is None:
            return self.message
        parts = []
        for output in self.verdict.outputs:
            if output.equal:
                continue
            words = f"{output.name}: {output.why or 'differs'}"
            causes = output.raw.get("causes") or {}
            if causes:
                words += " [" + ", ".join(f"{name} {count}" for name, count in causes.items()) + "]"
            if output.max_ulp:
                words += f", up to {output.max_ulp} ULP"
            if output.first:
                first = output.first[0]
                words += (
                    f"; first at {first['index']}: expected {first['expected']} "
                    f"({first['expected_bits']}), got {first['got']} ({first['got_bits']})"
                )
            parts.append(words)
        text = "; ".join(parts) or "equal"
        if self.outcome == "waived":
            text = f"waived ({'; '.join(self.reasons)}): {text}"
        return text


def tally(outcomes: Iterable[Outcome]) -> dict[str, int]:
    """Cases, and how many ended each way."""
    counts = dict.fromkeys(OUTCOMES, 0)
    total = 0
    for outcome in outcomes:
        counts[outcome.outcome] += 1
        total += 1
    return {"cases": total, **counts}


def groups(outcomes: Sequence[Outcome]) -> list[tuple[str, str, list[Outcome]]]:
    """The cases by op and element type, sorted (unreadable ones under op ``?``)."""
    grouped: dict[tuple[str, str], list[Outcome]] = {}
    for outcome in outcomes:
        grouped.setdefault((outcome.op or "?", outcome.dtype or "?"), []).append(outcome)
    return [(op, dtype, grouped[(op, dtype)]) for op, dtype in sorted(grouped)]


def _columns(outcomes: Sequence[Outcome]) -> tuple[str, ...]:
    counts = tally(outcomes)
    extra = tuple(kind for kind in ("unreachable", "unreadable") if counts[kind])
    return (*SUMMARY_COLUMNS, *extra)


def _causes_words(outcomes: Iterable[Outcome]) -> str:
    total: Counter[str] = Counter()
    for outcome in outcomes:
        if outcome.outcome in ("not_equal", "waived"):
            total.update(outcome.causes)
    return ", ".join(f"{name} {total[name]}" for name in cause_order(total) if total[name])


def cause_order(causes: Iterable[str]) -> list[str]:
    """The verdict's causes in their order, then any other (tensor-ops conform's
    ``ignored_<input>``), sorted."""
    return [*CAUSES, *sorted(set(causes) - set(CAUSES))]


def summary_rows(outcomes: Sequence[Outcome]) -> tuple[list[str], list[list[str]]]:
    """The summary table: a head, then a row per op and element type and a total; each row
    ends with the causes of its mismatched elements (not escaped)."""
    columns = _columns(outcomes)
    head = ["op", "dtype", *columns, "causes"]
    rows = []
    for op, dtype, members in groups(outcomes):
        counts = tally(members)
        rows.append([op, dtype, *(str(counts[c]) for c in columns), _causes_words(members)])
    counts = tally(outcomes)
    rows.append(["all", "", *(str(counts[c]) for c in columns), _causes_words(outcomes)])
    return head, rows


def by_cause(outcomes: Sequence[Outcome]) -> list[tuple[str, list[Outcome]]]:
    """The cases not equal, grouped by each cause among their mismatches (a case of several
    causes in each group); shape, type and output-name faults under ``no element compared``."""
    grouped: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        if outcome.outcome != "not_equal":
            continue
        causes = outcome.causes
        for name in cause_order(causes):
            if causes[name]:
                grouped.setdefault(name, []).append(outcome)
        if not causes:
            grouped.setdefault("no element compared", []).append(outcome)
    order = [*cause_order(grouped), "no element compared"]
    return [(name, grouped[name]) for name in order if name in grouped]


def print_report(
    outcomes: Sequence[Outcome], elapsed: float, stale: Sequence[str], out: TextIO
) -> None:
    """The cases not equal (the first few), the summary table, the failing cases by cause, and
    the stale waivers."""
    failures = [o for o in outcomes if o.outcome not in ("equal", "waived")]
    for outcome in failures[:SHOWN_FAILURES]:
        label = outcome.outcome.upper()
        print(
            f"{label:<13} {report_text(outcome.name)}: {report_text(outcome.summary())}", file=out
        )
    if len(failures) > SHOWN_FAILURES:
        print(f"... and {len(failures) - SHOWN_FAILURES} more (see --junit, --markdown)", file=out)
    if failures:
        print(file=out)
    head, rows = summary_rows(outcomes)
    cells = [head, *([report_text(cell) for cell in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(head) - 1)]
    for row in cells:
        line = "  ".join(
            cell.ljust(width) if i < 2 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=False))
        )
        print(f"{line}  {row[-1]}".rstrip(), file=out)
    print(f"seconds {elapsed:.1f}", file=out)
    causes = by_cause(outcomes)
    if causes:
        print("\nnot equal, by cause:", file=out)
        for name, members in causes:
            listed = ", ".join(report_text(o.name) for o in members[:SHOWN_PER_CAUSE])
            more = f", ... ({len(members)} cases)" if len(members) > SHOWN_PER_CAUSE else ""
            print(f"  {name}: {listed}{more}", file=out)
    for reason in stale:
        print(f"stale waiver (matched nothing): {report_text(reason)}", file=out)


def _md_table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def markdown(
    outcomes: Sequence[Outcome], elapsed: float, stale: Sequence[str], all_equal: bool
) -> str:
    """The Markdown report: the summary table first, then the failing cases by cause, every
    case not equal (or waived, refused, failed) and the stale waivers."""
    verdict = "all equal" if all_equal else "**not all equal**"
    head, rows = summary_rows(outcomes)
    lines = [f"## tensor-ops verify: {verdict}", ""]
    # The op and type come from case files; the counts and cause names are the command's.
    lines += _md_table(
        head,
        (
            [report_text(row[0], "markdown"), report_text(row[1], "markdown"), *row[2:]]
            for row in rows
        ),
    )
    lines += ["", f"{elapsed:.1f} seconds"]
    causes = by_cause(outcomes)
    if causes:
        lines += ["", "### Not equal, by cause", ""]
        lines += _md_table(
            ["cause", "cases"],
            (
                [name, ", ".join(report_text(o.name, "markdown") for o in members)]
                for name, members in causes
            ),
        )
    others = [o for o in outcomes if o.outcome != "equal"]
    if others:
        lines += ["", "### Cases not equal", ""]
        lines += _md_table(
            ["case", "op", "dtype", "outcome", "what"],
            (
                [
                    report_text(o.name, "markdown"),
                    report_text(o.op, "markdown"),
                    report_text(o.dtype, "markdown"),
                    o.outcome,
                    report_text(o.summary(), "markdown"),
                ]
                for o in others
            ),
        )
    if stale:
        lines += ["", "### Stale waivers (matched nothing)", ""]
        lines += [f"- {report_text(reason, 'markdown')}" for reason in stale]
    return "\n".join(lines) + "\n"


def _short_verdict(outcome: Outcome) -> str:
    return report_text(outcome.summary())


def write_junit(outcomes: Sequence[Outcome], elapsed: float, path: Path) -> None:
    """JUnit XML: one testsuite per op, one testcase per case (named relative to the PATH
    given; its element type a property); a ``failure`` for a case not equal (the short verdict,
    the whole one in ``system-out``), ``skipped`` for a waived one (the reasons), an ``error``
    for a device that failed, a refused, unreachable or unreadable case."""
    counts = tally(outcomes)

    def totals(members: Sequence[Outcome], seconds: float) -> dict[str, str]:
        each = tally(members)
        errors = sum(each[k] for k in ("refused", "device_failed", "unreachable", "unreadable"))
        return {
            "tests": str(each["cases"]),
            "failures": str(each["not_equal"]),
            "errors": str(errors),
            "skipped": str(each["waived"]),
            "time": f"{seconds:.3f}",
        }

    root = ET.Element("testsuites", {"name": "tensor-ops verify", **totals(outcomes, elapsed)})
    by_op: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        by_op.setdefault(outcome.op or "?", []).append(outcome)
    stamp = datetime.now(UTC).replace(tzinfo=None).isoformat(timespec="seconds")
    for op in sorted(by_op):
        members = by_op[op]
        suite = ET.SubElement(
            root,
            "testsuite",
            {
                "name": report_text(op),
                **totals(members, sum(o.seconds for o in members)),
                "timestamp": stamp,
                "hostname": socket.gethostname(),
            },
        )
        for outcome in members:
            _testcase(suite, outcome, op)
    assert counts["cases"] == len(outcomes)
    ET.indent(root)
    path.write_bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n")


def _testcase(suite: ET.Element, outcome: Outcome, op: str) -> None:
    case = ET.SubElement(
        suite,
        "testcase",
        {
            "name": report_text(outcome.name),
            "classname": f"tensor-ops.verify.{report_text(op)}",
            "file": report_text(outcome.path.as_posix()),
            "time": f"{outcome.seconds:.3f}",
        },
    )
    properties = ET.SubElement(case, "properties")
    ET.SubElement(properties, "property", {"name": "dtype", "value": report_text(outcome.dtype)})
    if outcome.version is not None:
        ET.SubElement(
            properties, "property", {"name": "version", "value": report_text(outcome.version)}
        )
    full = ""
    if outcome.outcome == "not_equal":
        failure = ET.SubElement(
            case, "failure", {"message": _short_verdict(outcome), "type": "not_equal"}
        )
        failure.text = _short_verdict(outcome)
    elif outcome.outcome == "waived":
        skipped = ET.SubElement(
            case, "skipped", {"message": report_text("waived: " + "; ".join(outcome.reasons))}
        )
        skipped.text = _short_verdict(outcome)
    elif outcome.outcome != "equal":
        error = ET.SubElement(
            case, "error", {"message": _short_verdict(outcome), "type": outcome.outcome}
        )
        error.text = _short_verdict(outcome)
    if outcome.verdict is not None and outcome.outcome != "equal":
        full = json.dumps(outcome.verdict.as_dict(), indent=2)
    if full:
        # JSON's own escaping (ensure_ascii) leaves no control character in it.
        ET.SubElement(case, "system-out").text = full
