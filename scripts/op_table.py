"""The docs' generated sections, made from the registry (``app/registry.py``): README's op table
(one row an op: routes, inputs, attributes, outputs) and docs/contract.md's per-op readings and
disagreements (each op module's ``decisions`` and ``disagreements``). ``--check`` exits 1 when a
section is not what the registry makes (``tests/test_op_table.py`` runs it); without it, the
sections are rewritten."""

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "client"))

from app.registry import REGISTRY, every_version, versions  # noqa: E402

README = ROOT / "README.md"
CONTRACT = ROOT / "docs" / "contract.md"
BEGIN = "<!-- ops: made by scripts/op_table.py from app/registry.py; do not edit by hand -->"
END = "<!-- end of ops -->"
OPS_BEGIN = "<!-- op decisions: made by scripts/op_table.py from app/ops/; do not edit by hand -->"
OPS_END = "<!-- end of op decisions -->"


def table() -> str:
    """The op table as markdown."""
    rows = [
        "| op | spec | versions | routes | inputs | attributes |",
        "|---|---|---|---|---|---|",
    ]
    for op in REGISTRY.values():
        served = ", ".join(str(number) for number in versions(op.name))
        attributes = ", ".join(_attribute(item) for item in op.attributes)
        inputs = ", ".join(
            f"`{item.name}_0`, `{item.name}_1`, ..."
            if item.variadic
            else f"`{item.name}`" + (" (optional)" if item.optional else "")
            for item in op.inputs
        )
        outputs = "; outputs `output_0`, `output_1`, ..." if op.several_outputs else ""
        rows.append(
            f"| {op.name} | {op.summary} | {served} | `POST /{op.name}` (`/{op.name}/v<N>`), "
            f"`/v2/models/{op.name}/infer`, gRPC model `{op.name}` | {inputs}{outputs} | "
            f"{attributes or 'none'} |"
        )
    return "\n".join(rows)


def _attribute(item: Any) -> str:
    name, default, choices = item.name, item.default, item.choices
    words = {"bool": "boolean", "ints": "list of integers", "int": "int"}
    kind = " \\| ".join(f"`{choice}`" for choice in choices) if choices else words[item.kind]
    if default is None:
        return f"`{name}` ({kind}, required)"
    shown = item.shown(default) if item.kind in ("ints", "bool") else default
    if item.kind == "ints":
        shown = f"[{shown}]"
    return f"`{name}` = {shown}" + (f" ({kind})" if choices or item.kind != "int" else "")


def decisions() -> str:
    """Each op's readings of its spec, and where OpenVINO's CPU plugin answers otherwise."""
    parts: list[str] = []
    for op in every_version():
        differences = _differences(op)
        if not (op.decisions or op.disagreements or differences):
            continue
        parts.append(f"### {op.spec} (`{op.name}`, version {op.version})\n")
        if differences:
            parts.append(f"How it differs from the newest version, {REGISTRY[op.name].spec}:\n")
            parts += [f"- {text}" for text in differences]
            parts.append("")
        if op.decisions:
            parts.append("Readings taken where the spec is silent or ambiguous:\n")
            parts += [f"- {text}" for text in op.decisions]
            parts.append("")
        if op.disagreements:
            parts.append("Where OpenVINO's CPU plugin answers otherwise (the spec wins):\n")
            parts += [f"- {text}" for text in op.disagreements]
            parts.append("")
    return "\n".join(parts).rstrip("\n") or "(none yet)"


def _differences(op: Any) -> list[str]:
    """How an older version's declaration differs from its op's newest: inputs, attributes
    and element types (the rules in words are its description's); none for the newest."""
    newest = REGISTRY[op.name]
    if newest is op:
        return []
    found = [op.description]
    mine = {item.name: item for item in op.inputs}
    theirs = {item.name: item for item in newest.inputs}
    for name in sorted(theirs.keys() - mine.keys()):
        found.append(f"No input `{name}`.")
    for name in sorted(mine.keys() - theirs.keys()):
        found.append(f"An input `{name}` the newest has not.")
    for name in [name for name in mine if name in theirs]:
        if mine[name].element_types != theirs[name].element_types:
            found.append(f"`{name}`: {mine[name].type_words} (newest: {theirs[name].type_words}).")
        if mine[name].constraint != theirs[name].constraint:
            found.append(f"`{name}`: {mine[name].constraint}")
    names = {item.name for item in op.attributes}
    for item in newest.attributes:
        if item.name not in names:
            found.append(f"No attribute `{item.name}` (refused when sent, its default too).")
    return found


def with_section(text: str, begin: str, end: str, made: str, where: str) -> str:
    """``text`` with the section between ``begin`` and ``end`` made anew."""
    head, found, rest = text.partition(begin)
    if not found:
        raise SystemExit(f"{where} has no line {begin!r}")
    _, found, tail = rest.partition(end)
    if not found:
        raise SystemExit(f"{where} has no line {end!r} after the section")
    return f"{head}{begin}\n{made}\n{end}{tail}"


def with_table(text: str) -> str:
    """README's text with its op table made anew."""
    return with_section(text, BEGIN, END, table(), "README.md")


SECTIONS: list[tuple[Path, Callable[[str], str]]] = [
    (README, with_table),
    (CONTRACT, lambda text: with_section(text, OPS_BEGIN, OPS_END, decisions(), "contract.md")),
]


def main(argv: list[str]) -> int:
    stale = []
    for path, make in SECTIONS:
        text = path.read_text()
        made = make(text)
        if made == text:
            continue
        if "--check" in argv:
            stale.append(path.relative_to(ROOT))
        else:
            path.write_text(made)
    if stale:
        names = ", ".join(str(path) for path in stale)
        print(f"{names}: a generated section is not the registry's: run scripts/op_table.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
