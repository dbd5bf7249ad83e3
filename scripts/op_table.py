"""README's op table, made from the registry (``app/registry.py``): one row an op, its routes,
inputs and attributes. ``--check`` exits 1 when README's table is not what the registry makes
(``tests/test_op_table.py`` runs it); without it, README's table is rewritten."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.registry import REGISTRY  # noqa: E402

README = ROOT / "README.md"
BEGIN = "<!-- ops: made by scripts/op_table.py from app/registry.py; do not edit by hand -->"
END = "<!-- end of ops -->"


def table() -> str:
    """The op table as markdown."""
    rows = [
        "| op | spec | routes | inputs | attributes |",
        "|---|---|---|---|---|",
    ]
    for op in REGISTRY.values():
        attributes = ", ".join(f"`{item.name}` = {item.default}" for item in op.attributes)
        rows.append(
            f"| {op.name} | {op.summary} | `POST /{op.name}`, `/v2/models/{op.name}/infer`, "
            f"gRPC model `{op.name}` | {', '.join(f'`{name}`' for name in op.input_names)} | "
            f"{attributes or 'none'} |"
        )
    return "\n".join(rows)


def with_table(text: str) -> str:
    """README's text with its op table made anew."""
    head, found, rest = text.partition(BEGIN)
    if not found:
        raise SystemExit(f"README.md has no line {BEGIN!r}")
    _, found, tail = rest.partition(END)
    if not found:
        raise SystemExit(f"README.md has no line {END!r} after the table")
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    text = README.read_text()
    made = with_table(text)
    if "--check" in argv:
        if made != text:
            print("README.md's op table is not the registry's: run scripts/op_table.py")
            return 1
        return 0
    README.write_text(made)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
