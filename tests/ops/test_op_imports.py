"""No op imports from another op: what ops share lives in neutral modules of app/ops/ (index
rules, split rules, raw views and copies, the compiled loops), so an op's module can be read,
moved or removed alone (issue 43, point 2)."""

import ast
import importlib
from pathlib import Path

import app.ops

OPS_FOLDER = Path(app.ops.__file__).resolve().parent


def _declares_an_op(tree: ast.Module) -> bool:
    """True when the module assigns ``OP`` at its top level."""
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(target, ast.Name) and target.id == "OP" for target in targets):
            return True
    return False


def _imported_modules(tree: ast.Module) -> set[str]:
    """Every module ``tree`` imports, anywhere in it (``from app.ops import x`` names
    ``app.ops.x``, which may be a module)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _op_modules() -> dict[str, ast.Module]:
    trees = {
        f"app.ops.{path.stem}": ast.parse(path.read_text(encoding="utf-8"))
        for path in sorted(OPS_FOLDER.glob("*.py"))
    }
    return {name: tree for name, tree in trees.items() if _declares_an_op(tree)}


def test_the_scan_finds_every_op_the_registry_serves() -> None:
    """The modules the scan below reads are exactly those whose ``OP`` the registry holds (else
    it would check too little)."""
    from app.registry import REGISTRY  # noqa: PLC0415

    declared = {importlib.import_module(name).OP.name: name for name in _op_modules()}
    assert sorted(declared) == sorted(REGISTRY)
    for op, name in declared.items():
        assert importlib.import_module(name).OP is REGISTRY[op]


def test_no_op_module_imports_another_op_module() -> None:
    """Each module of app/ops/ that declares an OP imports no other such module."""
    modules = _op_modules()
    crossing = {
        name: sorted(_imported_modules(tree) & (set(modules) - {name}))
        for name, tree in modules.items()
    }
    assert {name: others for name, others in crossing.items() if others} == {}
