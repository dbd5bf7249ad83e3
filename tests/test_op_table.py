"""The docs' generated parts are the registry's (scripts/op_table.py makes them): README's op
table, contract.md's readings, and one reference page per op under docs/ops/, each with the same
headings in the same order."""

import re
import subprocess
import sys
from pathlib import Path

from app.registry import REGISTRY

ROOT = Path(__file__).resolve().parent.parent
#: The headings of every op's page, in order.
HEADINGS = [
    "Versions",
    "Inputs",
    "Attributes",
    "Outputs",
    "Examples",
    "Refusals",
    "Readings of the spec",
    "Where OpenVINO disagrees",
]


def test_readme_op_table_is_made_from_the_registry() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "op_table.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_op_has_its_page_under_fixed_headings() -> None:
    index = (ROOT / "docs" / "ops" / "README.md").read_text()
    for op in REGISTRY.values():
        text = (ROOT / "docs" / "ops" / f"{op.name}.md").read_text()
        assert text.splitlines()[1] == f"# {op.spec} (`{op.name}`)"
        assert re.findall(r"^## (.+)$", text, flags=re.MULTILINE) == HEADINGS, op.name
        # Every example of the spec, its inputs and output as grids.
        examples = re.findall(r"^### (.+)$", text, flags=re.MULTILINE)
        assert examples == list(op.examples), op.name
        for item in op.inputs:
            shown = f"`{item.name}_0`" if item.variadic else f"`{item.name}`"
            assert f"| {shown}" in text, (op.name, item.name)
        for attribute in op.attributes:
            assert f"| `{attribute.name}` | {attribute.kind} |" in text, (op.name, attribute.name)
        assert f"[{op.spec}]({op.name}.md)" in index
