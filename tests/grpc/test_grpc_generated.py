"""The committed gRPC modules are what ``scripts/generate-grpc`` makes from the .proto today."""

import os
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT

PACKAGE = Path("tensor_ops_wire/grpc_v2")
GENERATED = ("grpc_predict_v2_pb2.py", "grpc_predict_v2_pb2.pyi", "grpc_predict_v2_pb2_grpc.py")


def test_generated_modules_match_the_proto(tmp_path: Path) -> None:
    (tmp_path / PACKAGE).mkdir(parents=True)
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "generate-grpc"), str(tmp_path)],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for name in GENERATED:
        committed = (ROOT / "client" / PACKAGE / name).read_text()
        fresh = (tmp_path / PACKAGE / name).read_text()
        assert fresh == committed, f"{name} differs from the .proto's: run scripts/generate-grpc"
