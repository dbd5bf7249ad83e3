"""The ``tensor-ops`` command line's local inputs under the service's limits: a device or a FIFO
named as an input is refused before anything is read, a file is read up to the limit (counted
while reading), an ``.npz`` member may inflate to the limit and no further (a 2 MiB archive of a
2 GiB member, a member whose header lies), each an exit status 2 with one line, no traceback.

No server is needed: inputs are read before any request (the URL is a closed port)."""

import io
import os
import resource
import struct
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from numpy.lib import format as npy_format

from tensor_ops_client import _cli_io
from tensor_ops_client._cli_io import InputError, read_tensor
from tests.support import free_port

SCRIPT = Path(sys.executable).parent / "tensor-ops"
#: The CLI runs with this much address space at most: what a 2 GiB member would need is not
#: there, so inflating it would end in MemoryError rather than pass unseen.
ADDRESS_SPACE = 3 << 30


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def refused(*argv: str, env: dict[str, str] | None = None) -> str:
    """The one line the CLI prints as it refuses ``roll argv...`` with exit status 2."""
    done = subprocess.run(
        [str(SCRIPT), "--url", f"http://127.0.0.1:{free_port()}", "roll", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
        preexec_fn=_limited,  # a resource limit, set in the child alone
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert done.stdout == ""
    return lines[0]


INDEX = ("--shift", "1", "--axes", "0")


def npy_header(shape: tuple[int, ...], descr: str = "|u1") -> bytes:
    header = io.BytesIO()
    npy_format.write_array_header_1_0(
        header, {"descr": descr, "fortran_order": False, "shape": shape}
    )
    return header.getvalue()


@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A 2 MiB ``.npz`` whose member ``data`` inflates to 2 GiB of zeros (an honest header)."""
    path = tmp_path_factory.mktemp("bomb") / "bomb.npz"
    with (
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive,
        archive.open("data.npy", "w", force_zip64=True) as member,
    ):
        member.write(npy_header((2 << 30,)))
        zeros = bytes(64 << 20)
        for _ in range(32):
            member.write(zeros)
    assert path.stat().st_size < 4 << 20
    yield path


def test_a_device_named_as_a_json_input_is_refused_unread(tmp_path: Path) -> None:
    device = tmp_path / "zero.json"
    device.symlink_to("/dev/zero")
    line = refused(str(device), *INDEX)
    assert "zero.json: is a device; a local input must be a regular file" in line


@pytest.mark.parametrize("suffix", [".json", ".csv", ".npy", ".npz"])
def test_a_fifo_or_a_directory_is_refused_without_blocking(tmp_path: Path, suffix: str) -> None:
    fifo = tmp_path / f"pipe{suffix}"
    os.mkfifo(fifo)
    assert "is a FIFO; a local input must be a regular file" in refused(str(fifo), *INDEX)
    folder = tmp_path / f"folder{suffix}"
    folder.mkdir()
    assert "is a directory; a local input must be a regular file" in refused(str(folder), *INDEX)


def test_an_npz_member_inflating_to_2_gib_is_refused_before_inflating(bomb: Path) -> None:
    line = refused(str(bomb), *INDEX)
    assert f"{bomb}:data: inflates to {(2 << 30) + 128} bytes" in line
    assert "more than the service's limit of 268435456" in line


def test_a_member_whose_header_lies_inflates_no_further_than_it_says(tmp_path: Path) -> None:
    # 64 MiB of zeros inflate from the member, whose sizes in the directory and the local
    # header say 4 KiB: zipfile stops at 4 KiB, and the CRC does not match.
    path = tmp_path / "liar.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("data.npy", npy_header((64 << 20,)) + bytes(64 << 20))
    raw = bytearray(path.read_bytes())
    central = raw.rindex(b"PK\x01\x02")
    struct.pack_into("<I", raw, central + 24, 4096)  # uncompressed size, central directory
    struct.pack_into("<I", raw, 22, 4096)  # and in the local header
    path.write_bytes(raw)
    line = refused(str(path), *INDEX)
    assert "liar.npz:data: not a readable .npz member" in line
    assert "CRC" in line


def test_the_limit_is_the_services_and_follows_its_variable(tmp_path: Path) -> None:
    data = np.zeros(1 << 20, np.uint8)  # 1 MiB and a header
    npy = tmp_path / "data.npy"
    np.save(npy, data)
    archive = tmp_path / "data.npz"
    np.savez_compressed(archive, data=data)
    small = {"TENSOR_OPS_MAX_BODY_BYTES": str(512 << 10)}
    line = refused(str(npy), *INDEX, env=small)
    assert f"data.npy: more than {512 << 10} bytes, the service's limit" in line
    line = refused(str(archive), *INDEX, env=small)
    assert "data.npz:data: inflates to 1048704 bytes, more than the service's limit" in line
    bad = refused(str(npy), *INDEX, env={"TENSOR_OPS_MAX_BODY_BYTES": "lots"})
    assert "TENSOR_OPS_MAX_BODY_BYTES = 'lots': expected a positive number of bytes" in bad


def test_sizes_are_counted_while_reading_not_taken_from_stat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # /proc files say 0 bytes and hold more; a file may grow after stat. The count is of what
    # is read: a JSON file over the text limit is refused at the limit, whatever stat says.
    monkeypatch.setattr(_cli_io, "TEXT_LIMIT", 64)
    big = tmp_path / "big.json"
    big.write_text("[" + ", ".join("1" for _ in range(100)) + "]")
    with pytest.raises(InputError, match="more than 64 bytes; JSON and CSV are for small"):
        read_tensor(str(big), "data")
    status = Path("/proc/self/status")
    monkeypatch.setattr(_cli_io, "INPUT_LIMIT", 16)
    with pytest.raises(InputError, match="more than 16 bytes, the service's limit"):
        _cli_io._read_bytes(str(status))


def test_standard_input_is_read_up_to_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cli_io, "INPUT_LIMIT", 1024)
    payload = io.BytesIO()
    np.save(payload, np.zeros(4096, np.uint8))

    class Stdin:
        buffer = io.BytesIO(payload.getvalue())

    monkeypatch.setattr(sys, "stdin", Stdin)
    with pytest.raises(InputError, match="standard input: more than 1024 bytes"):
        read_tensor("-", "data")


def test_inputs_within_the_limits_are_read_as_before(tmp_path: Path) -> None:
    data = np.arange(12, dtype=np.int32).reshape(3, 4)
    archive = tmp_path / "inputs.npz"
    np.savez_compressed(archive, data=data, shift=np.array(1), axes=np.array(0))
    assert read_tensor(str(archive), "data").tolist() == data.tolist()
    assert read_tensor(f"{tmp_path / 'inputs'}.npz:shift", "shift").tolist() == 1
    assert _cli_io.npz_members(str(archive)) == {"data", "shift", "axes"}
    (tmp_path / "data.json").write_text("[[1, 2], [3, 4]]")
    assert read_tensor(str(tmp_path / "data.json"), "data").tolist() == [[1, 2], [3, 4]]
    with pytest.raises(InputError, match="has no member 'indices'"):
        read_tensor(f"{tmp_path / 'inputs'}.npz:indices", "indices")
