"""The docs' generated sections, made from the registry (``app/registry.py``): README's op table
(one row an op: routes, inputs, attributes, outputs), docs/contract.md's per-op readings and
disagreements (each op module's ``decisions`` and ``disagreements``), and one reference page per
op, docs/ops/<op>.md, with docs/ops/README.md as their index. ``--check`` exits 1 when a
section is not what the registry makes (``tests/test_op_table.py`` runs it); without it, the
sections are rewritten."""

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "client"))

import numpy as np  # noqa: E402

from app.ops.declaration import ELEMENT_TYPE_NAMES  # noqa: E402
from app.registry import REGISTRY, every_version, versions  # noqa: E402
from tensor_ops_wire.npy import decode_npy_base64  # noqa: E402

README = ROOT / "README.md"
CONTRACT = ROOT / "docs" / "contract.md"
PAGES = ROOT / "docs" / "ops"
#: The first line of every generated page.
PAGE_MARK = "<!-- made by scripts/op_table.py from app/ops/; do not edit by hand -->"
#: The group of OpenVINO's spec folder the ops come from, as the index shows them.
GROUP = "movement"
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


def _grid(value: Any, dtype: str | None = None) -> str:
    """A tensor of an example as an aligned grid (NumPy's layout: rows of columns, blocks of
    rows for higher ranks), with its shape and type."""
    array = decode_npy_base64(value) if isinstance(value, str) else np.array(value, dtype=dtype)
    text = np.array2string(array, separator=" ", threshold=1 << 20, max_line_width=96)
    return f"{text}\n  (shape {list(array.shape)}, {array.dtype})"


def _output_type(op: Any, number: int, value: dict[str, Any]) -> str | None:
    """The element type of an example's output ``number``: the data's (the example's
    ``dtype``), or the one its element-type attribute names (Unique-10's ``index_element_type``)."""
    if not op.outputs or not op.outputs[number].element_type:
        dtype: str | None = value.get("dtype")
        return dtype
    attribute = op.attribute(op.outputs[number].element_type)
    named = str(value.get(attribute.name, attribute.default))
    return ELEMENT_TYPE_NAMES.get(named, named)


def _attribute_row(item: Any) -> str:
    default = "required" if item.default is None else f"`{item.shown(item.default)}`"
    allowed = ", ".join(f"`{choice}`" for choice in item.choices) if item.choices else "-"
    return f"| `{item.name}` | {item.kind} | {default} | {allowed} | {item.description} |"


def _refusals(op: Any) -> list[str]:
    """The refusals the declaration gives an op, in words, with their status and fault kind;
    the op's rules in its readings and in the spec's text are its planner's (422)."""
    found = [
        "An unknown field, input or attribute: 422 `extra_forbidden` naming it, and the "
        "nearest name the op takes.",
        "A tensor that cannot be decoded (ragged lists, bad base64, bytes that are not `.npy`): "
        "400 `tensor_decode` naming the input.",
        "An input or output past the size limits: 413, before anything is allocated.",
    ]
    for item in op.inputs:
        name = f"{item.name}_0, {item.name}_1, ..." if item.variadic else item.name
        if item.variadic:
            found.append(f"No `{item.name}_0`: 422 `missing` (at least one input).")
        elif not item.optional:
            found.append(f"`{name}` left out: 422 `missing`.")
        source = item.name == op.output_type_from.removesuffix("_0")
        if item.like_data and not source:
            found.append(f"`{name}` of another type than the data's: 422 `tensor_type`.")
        elif item.type_words == "a supported type":
            found.append(
                f"`{name}` of a type the service does not take (complex, strings...): "
                "422 `tensor_type`."
            )
        else:
            found.append(f"`{name}` of another type than {item.type_words}: 422 `tensor_type`.")
        if item.rank != "any":
            found.append(f"`{name}` of another rank than {item.rank}: 422 `spec_violation`.")
    for attribute in op.attributes:
        if attribute.required:
            found.append(f"`{attribute.name}` left out: 422 `missing` (no default).")
        found.append(f"`{attribute.name}` other than {attribute.kind_words}: 422 `invalid_field`.")
    found.append(
        "A request that breaks the spec's rules (below and in the description above): 422 "
        "`spec_violation` naming the input."
    )
    return found


def page(op: Any) -> str:
    """The reference page of ``op`` (its newest version), under fixed headings."""
    served = ", ".join(f"{versions(op.name)[number].spec}" for number in versions(op.name))
    lines = [
        PAGE_MARK,
        f"# {op.spec} (`{op.name}`)",
        "",
        op.summary,
        "",
        op.description,
        "",
        "## Versions",
        "",
        f"Served: {served}. The newest at `POST /{op.name}`, each at `POST /{op.name}/v<N>`, "
        f"`/v2/models/{op.name}/versions/<N>/infer` and the gRPC model `{op.name}`.",
        "",
        "## Inputs",
        "",
        "| input | types | rank | required | JSON form |",
        "|---|---|---|---|---|",
    ]
    for item in op.inputs:
        name = f"`{item.name}_0`, `{item.name}_1`, ..." if item.variadic else f"`{item.name}`"
        json_form = {"data": "the data's type", "int64": "int64", "inferred": "as NumPy infers"}
        lines.append(
            f"| {name} | {item.constraint} | {item.rank} | {'no' if item.optional else 'yes'} "
            f"| {json_form.get(item.json_typing, item.json_typing)} |"
        )
    lines += ["", "## Attributes", ""]
    if op.attributes:
        lines += [
            "| attribute | kind | default | allowed values | meaning |",
            "|---|---|---|---|---|",
        ]
        lines += [_attribute_row(item) for item in op.attributes]
    else:
        lines.append("None.")
    lines += ["", "## Outputs", ""]
    if op.outputs:
        lines += [f"- `{item.name}`: {item.description}" for item in op.outputs]
    elif op.several_outputs:
        lines.append("`output_0`, `output_1`, ...: one tensor each, of the data's type.")
    else:
        lines.append(f"`output`: one tensor, of the type of `{op.output_type_from}`.")
    lines += ["", "## Examples", ""]
    for name, example in op.examples.items():
        value = example["value"]
        lines += [f"### {name}", "", example["summary"], "", "```text"]
        for key, given in value.items():
            if key == "dtype":
                continue
            if op.attribute(key) is not None:
                lines.append(f"{key} = {json.dumps(given)}")
                continue
            typed = value.get("dtype") if key == op.output_type_from else None
            lines.append(f"{key} =")
            lines.append(_grid(given, typed))
        expected = example["x-expected-output"]
        outputs = list(expected) if op.several_outputs else [expected]
        for number, output in enumerate(outputs):
            form = output if isinstance(output, dict) else {"data": output}
            label = f"output_{number}" if op.several_outputs else "output"
            # An output of the data's type is shown in the example's dtype.
            dtype = form.get("dtype") or _output_type(op, number, value)
            lines.append(f"{label} =")
            lines.append(_grid(form.get("data", output), dtype))
        lines += ["```", ""]
    lines += ["## Refusals", ""]
    lines += [f"- {text}" for text in _refusals(op)]
    lines += ["", "## Readings of the spec", ""]
    lines += [f"- {text}" for text in op.decisions] or ["None: the spec says it all."]
    lines += ["", "## Where OpenVINO disagrees", ""]
    lines += [f"- {text}" for text in op.disagreements] or ["No known disagreement."]
    return "\n".join(lines) + "\n"


def index() -> str:
    """docs/ops/README.md: the pages, grouped as OpenVINO's spec folder groups the ops."""
    lines = [
        PAGE_MARK,
        "# The ops, one page each",
        "",
        "Each page is made from the op's module (`app/ops/<op>.py`): inputs, attributes, "
        "outputs, the spec's examples, refusals, readings and OpenVINO's disagreements.",
        "",
        f"## {GROUP.capitalize()} (OpenVINO's `operation-specs/{GROUP}/`)",
        "",
    ]
    lines += [f"- [{op.spec}]({op.name}.md): {op.summary}" for op in REGISTRY.values()]
    return "\n".join(lines) + "\n"


def pages() -> dict[Path, str]:
    """Every generated page by its path."""
    made = {PAGES / f"{op.name}.md": page(op) for op in REGISTRY.values()}
    made[PAGES / "README.md"] = index()
    return made


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
    written = pages()
    left = [
        path
        for path in (PAGES.glob("*.md") if PAGES.is_dir() else [])
        if path not in written and path.read_text().startswith(PAGE_MARK)
    ]
    for path, made in written.items():
        if path.exists() and path.read_text() == made:
            continue
        if "--check" in argv:
            stale.append(path.relative_to(ROOT))
        else:
            path.parent.mkdir(exist_ok=True)
            path.write_text(made)
    for path in left:  # a page of an op the registry no longer has
        if "--check" in argv:
            stale.append(path.relative_to(ROOT))
        else:
            path.unlink()
    if stale:
        names = ", ".join(str(path) for path in stale)
        print(f"{names}: a generated section is not the registry's: run scripts/op_table.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
