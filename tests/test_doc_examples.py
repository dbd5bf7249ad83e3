"""Every example in README.md and docs/*.md runs against a real service and prints what the page
says it prints: the docs cannot drift from the service.

The pages follow these rules (docs/README.md repeats them for writers):

- A fenced block whose info string is ``sh``, ``python``, ``js``, ``java`` or ``go`` is an
  example, and runs: ``sh`` with bash (``-e -o pipefail``), ``python`` with this interpreter,
  ``js`` with ``node`` (as an ES module), ``java`` with ``java File.java`` (the source launcher,
  the file named after its public class), ``go`` with ``go run main.go`` (a directory of its
  own, outside any module: the standard library only). Blocks of other languages (``text``, ``json``, ``yaml``,
  ``pycon``, ``pyi``...) are not run.
- Its expected output is the ``text`` block right after it (blank lines between allowed):
  stdout must be the same, line for line, trailing spaces aside; ``...`` in an expected line
  stands for any characters. Every example has one: that is how its values are checked.
- ``<!-- not run: REASON -->`` on the line before a block leaves it out, with the reason
  (which test covers it, or why it cannot run here); the summary test lists them.
- Examples name the service ``http://127.0.0.1:8000`` (gRPC ``127.0.0.1:8001``); the test
  points them at its own server. The blocks of one page run in order in one temporary
  directory (a block may write ``in.npy`` for the next), against one server, whichever worker
  runs their tests (the first of a page's tests runs the whole page, under the page's lock), with this virtual environment's
  ``bin`` first on PATH (``python``, ``tensor-ops``) and ``TENSOR_OPS_URL`` naming the test's
  server (the command line's default is the pages' ``http://127.0.0.1:8000``).
- When ``node``, ``java``, ``go`` or ``curl`` is missing, its examples are skipped, saying so
  (CI installs node, java and curl, not Go: its examples run where ``go`` is).
"""

import fcntl
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from tests.support import ROOT, free_port, launch_server, stop_server

pytestmark = pytest.mark.e2e

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = {"sh", "python", "js", "java", "go"}
DOC_HTTP = "127.0.0.1:8000"
DOC_GRPC = "127.0.0.1:8001"
NOT_RUN = re.compile(r"^<!-- not run: (.+?) -->$")
FENCE = re.compile(r"^```([\w+-]*)\s*$")


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    expected: str | None = None
    not_run: str | None = None

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}-{self.language}"


def blocks_of(page: Path) -> list[Block]:
    """The fenced blocks of a page, each runnable one with its expected output or reason."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    position = 0
    while position < len(lines):
        opening = FENCE.match(lines[position])
        if opening is None:
            position += 1
            continue
        start = position
        position += 1
        body = []
        while position < len(lines) and lines[position].rstrip() != "```":
            body.append(lines[position])
            position += 1
        position += 1  # the closing fence
        previous = lines[start - 1].strip() if start > 0 else ""
        marker = NOT_RUN.match(previous)
        found.append(
            Block(
                page,
                start + 1,
                opening.group(1),
                "\n".join(body) + "\n",
                not_run=marker.group(1) if marker else None,
            )
        )
    # Each runnable block's output: the text block right after it.
    for block, after in itertools.pairwise(found):
        if block.language in RUNNABLE and after.language == "text":
            between = lines[block.line : after.line - 1]
            closing = between.index("```") if "```" in between else len(between)
            if all(not line.strip() for line in between[closing + 1 :]):
                block.expected = after.code
    return found


ALL = [block for page in PAGES for block in blocks_of(page)]
EXAMPLES = [block for block in ALL if block.language in RUNNABLE and block.not_run is None]


def test_every_example_has_its_output_or_a_reason() -> None:
    """A runnable block is run and checked, or says why not; the counts, for the record."""
    missing = [
        block.id for block in EXAMPLES if block.expected is None and block.language in RUNNABLE
    ]
    assert not missing, f"examples without a ```text block of their output: {missing}"
    skipped = [block for block in ALL if block.language in RUNNABLE and block.not_run]
    for block in skipped:
        assert len(block.not_run or "") >= 20, f"{block.id}: say why it is not run"
    counts: dict[str, int] = {}
    for block in EXAMPLES:
        counts[block.language] = counts.get(block.language, 0) + 1
    print(f"\ndoc examples run: {len(EXAMPLES)} {counts}; not run: {len(skipped)}")
    for block in skipped:
        print(f"  {block.id}: {block.not_run}")
    # Every page a newcomer is sent to has examples, and each language its own.
    pages = {block.page.name for block in EXAMPLES}
    newcomers = {"README.md", "json.md", "npz.md", "v2.md", "grpc.md", "client.md", "languages.md"}
    assert newcomers <= pages, pages
    assert {"sh", "python", "js", "java"} <= set(counts), counts


@pytest.fixture(scope="module")
def service() -> Iterator[tuple[str, str]]:
    """A server with gRPC on, for every page: its HTTP ``host:port`` and gRPC target."""
    grpc_port = free_port()
    url, process = launch_server(env={"TENSOR_OPS_GRPC_PORT": str(grpc_port)})
    try:
        yield url.removeprefix("http://"), f"127.0.0.1:{grpc_port}"
    finally:
        stop_server(process)


#: One run of the tests: all its workers share it (pytest-xdist's run id), or this process.
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"{os.getpid()}-{time.monotonic_ns()}"


def _directory(page: Path) -> Path:
    """The page's working directory: one for all its blocks, in order, whichever worker runs
    them (the run's workers share it)."""
    directory = Path(tempfile.gettempdir()) / f"doc-{_RUN}-{page.stem}"
    directory.mkdir(exist_ok=True)
    return directory


@dataclass
class Ran:
    """What a block printed, as it ran in its page's directory (or why it could not run)."""

    returncode: int
    stdout: str
    stderr: str
    skipped: str | None = None


def _in_page_order(block: Block, service: tuple[str, str]) -> Ran:
    """What ``block`` printed when its page ran: the first test of a page to come (on any
    worker) runs all of the page's blocks, in order, against its own server, under the page's
    lock, and keeps each result for the test of its block."""
    directory = _directory(block.page)
    with (directory / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for item in (item for item in EXAMPLES if item.page == block.page):
            kept = directory / f".ran-{item.line}.json"
            if not kept.exists():
                kept.write_text(json.dumps(asdict(_run(item, service, directory))))
        return Ran(**json.loads((directory / f".ran-{block.line}.json").read_text()))


def _run(block: Block, service: tuple[str, str], directory: Path) -> Ran:
    http, grpc_target = service
    code = block.code.replace(DOC_GRPC, grpc_target).replace(DOC_HTTP, http)
    environment = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "COLUMNS": "100",
    }
    # The command line's own default address, 127.0.0.1:8000, is the test server's too.
    environment["TENSOR_OPS_URL"] = f"http://{http}"
    environment.pop("TENSOR_OPS_API_KEY", None)
    # Go's build cache needs a home; a machine without $HOME gets one under the temporary dir.
    if "HOME" not in environment and "GOCACHE" not in environment:
        environment["GOCACHE"] = str(Path(tempfile.gettempdir()) / "tensor-ops-go-cache")
    try:
        command = _command(block, code, directory)
    except pytest.skip.Exception as skipped:
        return Ran(0, "", "", skipped=str(skipped.msg))
    done = subprocess.run(
        command,
        cwd=directory,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def _command(block: Block, code: str, directory: Path) -> list[str]:
    tool = {"sh": "bash", "python": sys.executable, "js": "node", "java": "java", "go": "go"}[
        block.language
    ]
    if block.language != "python" and shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed on this machine")
    if block.language == "sh" and "curl " in code and shutil.which("curl") is None:
        pytest.skip("curl is not installed on this machine")
    if block.language == "sh":
        return ["bash", "-e", "-o", "pipefail", "-c", code]
    if block.language == "python":
        return [sys.executable, "-c", code]
    if block.language == "js":
        script = directory / f"example_{block.line}.mjs"
        script.write_text(code)
        return ["node", str(script)]
    if block.language == "go":
        program = directory / f"go_{block.line}" / "main.go"
        program.parent.mkdir(exist_ok=True)
        program.write_text(code)
        return ["go", "run", str(program)]
    public = re.search(r"public\s+(?:final\s+)?class\s+(\w+)", code)
    assert public, f"{block.id}: a Java example needs a public class"
    source = directory / f"{public.group(1)}.java"
    source.write_text(code)
    return ["java", str(source)]


def matches(expected: str, printed: str) -> bool:
    """Line for line, trailing spaces aside; ``...`` in an expected line matches anything."""
    want = [line.rstrip() for line in expected.rstrip("\n").splitlines()]
    got = [line.rstrip() for line in printed.rstrip("\n").splitlines()]
    if len(want) != len(got):
        return False
    for pattern, line in zip(want, got, strict=True):
        regex = ".*".join(re.escape(part) for part in pattern.split("..."))
        if not re.fullmatch(regex, line):
            return False
    return True


@pytest.mark.parametrize("block", EXAMPLES, ids=[block.id for block in EXAMPLES])
def test_example_prints_what_the_page_says(block: Block, service: tuple[str, str]) -> None:
    done = _in_page_order(block, service)
    if done.skipped is not None:
        pytest.skip(done.skipped)
    assert done.returncode == 0, f"{block.id} failed:\n{done.stderr[-3000:]}\n{done.stdout[-2000:]}"
    assert block.expected is not None
    assert matches(block.expected, done.stdout), (
        f"{block.id} printed:\n{done.stdout}\nthe page says:\n{block.expected}"
    )


@pytest.mark.parametrize(
    ("expected", "printed", "same"),
    [
        ("a\nb\n", "a  \nb\n\n", True),
        ("a\nb\n", "a\n", False),
        ('{"data":"k05V..."}', '{"data":"k05VTVBZAQB2"}', True),
        ('{"data":"k05V..."}', '{"data":"xx"}', False),
        ("x 1", "x 2", False),
    ],
)
def test_the_output_comparison(expected: str, printed: str, same: bool) -> None:
    assert matches(expected, printed) is same
