"""The user documentation (README.md and docs/*.md) states how the service behaves now; how it
got there belongs in CHANGELOG.md, which is exempt. A page fails, naming file:line, when it
refers to the project's history: an issue ("issue 13", "#13"), a commit hash in backticks
(`cbff944`), "this round" (and "before this round"), or an internal name of the code that a
reader of the docs has no use for ("front door", ``Exchange.prepare``).

The commit-hash pattern is a backticked run of 7 to 40 hex digits holding at least one digit and
one letter a-f: plain numbers in backticks (`268435456`), ``0x`` constants and 64-digit SHA-256
digests do not match. ``ALLOWED`` lists the few strings that match a pattern and are not
history; add to it only with the reason beside the entry.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: What a page may not say, each with the reason shown when it does.
FORBIDDEN: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE), "an issue number"),
    (re.compile(r"(?<![\w&/#])#\d+\b"), "an issue reference"),
    (
        re.compile(r"`(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}`"),
        "a commit hash",
    ),
    (re.compile(r"\bthis round\b", re.IGNORECASE), "development history ('this round')"),
    (re.compile(r"\bfront door\b", re.IGNORECASE), "an internal name ('front door')"),
    (re.compile(r"\bExchange\.prepare\b"), "an internal name ('Exchange.prepare')"),
]

#: Matches that are not history: (page name, matched text) -> why it is allowed.
ALLOWED: dict[tuple[str, str], str] = {}


def history_in(name: str, text: str) -> list[str]:
    """Each forbidden match in a page's text, as ``name:line: reason: matched text``."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for pattern, reason in FORBIDDEN:
            for match in pattern.finditer(line):
                if (name, match.group(0)) not in ALLOWED:
                    found.append(f"{name}:{number}: {reason}: {match.group(0)!r}")
    return found


def test_the_user_docs_carry_no_development_history() -> None:
    found = [
        problem
        for page in PAGES
        for problem in history_in(str(page.relative_to(ROOT)), page.read_text())
    ]
    assert not found, "history belongs in CHANGELOG.md:\n" + "\n".join(found)


def test_the_pages_are_found() -> None:
    names = {page.name for page in PAGES}
    assert {"README.md", "contract.md", "benchmarks.md", "settings.md"} <= names, names
    assert "CHANGELOG.md" not in names


@pytest.mark.parametrize(
    ("text", "flagged"),
    [
        ("fixed in issue 13", True),
        ("Issue 11's example", True),
        ("see #25 for the plan", True),
        ("measured at `cbff944`", True),
        ("at `30a8fd1d2e4b5c6f7a8b9c0d1e2f3a4b5c6d7e8f`", True),
        ("0.37x before this round", True),
        ("served by the front door", True),
        ("the cost of `Exchange.prepare`", True),
        ("the default is `268435456` (256 MiB)", False),
        ("a hex constant `0x7fffffff`", False),
        ("sha256 `" + "ab12" * 16 + "`", False),
        ("a word in backticks `deadbeef`", False),
        ("a link to [the errors](contract.md#errors-one-fault)", False),
        ("an HTML entity &#124; in a table", False),
        ("the changelog of the round trip", False),
    ],
)
def test_the_patterns(text: str, flagged: bool) -> None:
    assert bool(history_in("page.md", text)) is flagged
