"""README's op table is the registry's (scripts/op_table.py makes it)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_op_table_is_made_from_the_registry() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "op_table.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
