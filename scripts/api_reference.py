#!/usr/bin/env python3
"""Write docs/api-reference.md from the client's docstrings and signatures.

    .venv/bin/python scripts/api_reference.py          # rewrite the page
    .venv/bin/python scripts/api_reference.py --check  # exit 1 when the page is stale

tests/client/test_client_docs.py runs the check, and the docstrings' examples against a live service:
the page cannot drift from the code.
"""

import ast
import inspect
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "api-reference.md"

#: What the page documents, in its order: (name in tensor_ops_client, members to list).
ENTRIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("TensorOpsClient", ("call", "verify", "roll", "gather", "health", "info", "close")),
    ("AsyncTensorOpsClient", ("aclose",)),
    ("Retry", ("off", "of")),
    ("TensorOpsError", ("unreachable",)),
    ("Health", ()),
    ("Verdict", ("as_dict",)),
    ("OutputVerdict", ()),
    ("write_case", ()),
    ("read_case", ()),
    ("Case", ()),
)
CONSTANTS = ("DEFAULT_URL", "DEFAULT_TIMEOUT", "API_KEY_VARIABLE", "TRANSPORTS")


def _markdown(doc: str) -> str:
    """A docstring as markdown: its ``>>>`` examples in ``pycon`` blocks, the rest as it is
    (double backticks are code spans in markdown too)."""
    lines = textwrap.dedent(doc).strip("\n").splitlines()
    out: list[str] = []
    in_example = False
    for line in lines:
        example = line.lstrip().startswith((">>>", "..."))
        if example and not in_example:
            if out and out[-1] != "":
                out.append("")
            out.append("```pycon")
            in_example = True
        elif in_example and not line.strip():
            out.append("```")
            in_example = False
        out.append(line)
    if in_example:
        out.append("```")
    return "\n".join(out)


def _doc(target: Any) -> str:
    return inspect.getdoc(target) or ""


def _signature(name: str, target: Any) -> str:
    """``name(arguments) -> result`` as the source writes it (``npt.ArrayLike``, not the union
    it stands for); the shared methods' results as the sync client gives them."""
    function = target.__init__ if inspect.isclass(target) else target
    function = getattr(function, "__func__", function)
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):  # made by dataclass: its signature is short and exact
        return f"{name}{inspect.signature(target)}".removesuffix(" -> None")
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    arguments = node.args
    positional = arguments.posonlyargs + arguments.args
    if positional and positional[0].arg in ("self", "cls"):
        if arguments.posonlyargs:
            arguments.posonlyargs = arguments.posonlyargs[1:]
        else:
            arguments.args = arguments.args[1:]
    text = f"{name}({ast.unparse(arguments)})"
    if node.returns is not None and not inspect.isclass(target):
        result = ast.unparse(node.returns)
        text += " -> " + RESULTS.get(result, result)
    return text


#: What the shared methods give, as TensorOpsClient gives it (AsyncTensorOpsClient: awaitable).
RESULTS = {
    "ArrayT": "npt.NDArray[Any]",
    "HealthT": "Health",
    "InfoT": "dict[str, Any]",
    "VerdictT": "Verdict",
}


def render() -> str:
    import tensor_ops_client  # noqa: PLC0415
    from tensor_ops_client import client as client_module  # noqa: PLC0415

    parts = [
        "# The Python client: API reference",
        "",
        "<!-- Generated from the docstrings by scripts/api_reference.py; do not edit. -->",
        "",
        "`pip install ./client` (add `[grpc]` for the gRPC transport). Tutorial and command "
        "line: [client.md](client.md).",
        "",
        "## The package",
        "",
        _markdown(_doc(tensor_ops_client)),
        "",
        "## Transports, timeouts, retries, keys and TLS, errors",
        "",
        _markdown(_doc(client_module)),
        "",
    ]
    for name, members in ENTRIES:
        target = getattr(tensor_ops_client, name)
        parts += [f"## `{name}`", "", "```pyi", _signature(name, target), "```", ""]
        parts += [_markdown(_doc(target)), ""]
        for member in members:
            value = inspect.getattr_static(target, member)
            if isinstance(value, property):
                parts += [f"### `{name}.{member}` (property)", "", _markdown(_doc(value)), ""]
                continue
            function = getattr(target, member)
            prefix = "async " if inspect.iscoroutinefunction(function) else ""
            parts += [
                f"### `{name}.{member}`",
                "",
                "```pyi",
                prefix + _signature(member, function),
                "```",
                "",
                _markdown(_doc(function)),
                "",
            ]
    parts += ["## Constants and types", ""]
    for name in CONSTANTS:
        parts.append(f"- `{name} = {getattr(tensor_ops_client, name)!r}`")
    parts += [
        "- `Transport`: `Literal['npz', 'json', 'v2', 'grpc']`",
        "- `ProgressHook`: `Callable[[str, int, int | None], None]`, called as "
        '`progress("upload" | "download", bytes_done, bytes_total_or_None)`',
        "- `Verify`: `bool | str | os.PathLike[str] | ssl.SSLContext`",
        "- `ClientCert`: `tuple[path, path]` (certificate chain, private key)",
        "- `CaseError`: a `ValueError`, raised by `read_case` for a file that is not a case",
        "",
    ]
    return "\n".join(parts).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(
                f"{PAGE.relative_to(ROOT)} is stale: run scripts/api_reference.py", file=sys.stderr
            )
            return 1
        return 0
    PAGE.parent.mkdir(exist_ok=True)
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
