"""The keys in force are the key file's within about a second of it becoming readable, whatever
renames, writes and mode changes made it so: a file renamed into place with mode 000 and then
made readable (``chmod`` changes none of inode, size or modification time) is read once it can
be, against a real ``python -m app`` and with ``ApiKeys`` alone. Also: unreadable files logged
once, not every second; a file turned keyless keeps the keys; one hash under two labels."""

import hashlib
import logging
import os
import sys
import time
from pathlib import Path

import httpx
import pytest

import app.access as access_module
from app import keyfile
from app.access import ApiKeys
from app.keyfile import KeyFileError, parse_keys
from tests.support import launch_server, server_output, stop_server

OLD_KEY = "k-old-2f9d0c7e51a34b8c9d0e1f2a3b4c5d6e"
NEW_KEY = "k-new-8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d"
ROLL = {"data": [1, 2, 3], "shift": 1, "axes": 0}

# Root reads a file of mode 000 all the same (CAP_DAC_OVERRIDE): the server is started without
# the two capabilities that let it, so that mode 000 keeps it out as it keeps out anyone else.
DROP_DAC = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, from the bounding set
    if libc.prctl(24, capability, 0, 0, 0) != 0:
        sys.exit("cannot drop CAP_DAC_OVERRIDE: errno %d" % ctypes.get_errno())
os.execv(sys.executable, [sys.executable, "-m", "app"])
"""


def line(key: str, label: str) -> str:
    return f"{hashlib.sha256(key.encode()).hexdigest()} {label}\n"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def unreadable_to_us(path: Path) -> bool:
    try:
        path.read_bytes()
    except PermissionError:
        return True
    return False


def swap_in_mode_000(path: Path, text: str) -> None:
    """``text`` renamed over ``path`` as a file of mode 000 (a new inode, unreadable)."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_text(text)
    # Set in the past: the new file is not "just written", the stamp alone would have to tell.
    past = time.time() - 60
    os.utime(fresh, (past, past))
    fresh.chmod(0)
    fresh.replace(path)


def test_a_key_file_renamed_in_unreadable_then_made_readable_is_read(tmp_path: Path) -> None:
    folder = tmp_path / "keys"
    folder.mkdir()
    folder.chmod(0o755)
    tmp_path.chmod(0o755)
    path = folder / "api-keys"
    path.write_text(line(OLD_KEY, "old"))
    command = ["-c", DROP_DAC] if os.geteuid() == 0 else ["-m", "app"]
    url, process = launch_server({"TENSOR_OPS_API_KEYS_FILE": str(path)}, command=command)
    try:
        assert httpx.post(f"{url}/roll", json=ROLL, headers=bearer(OLD_KEY)).status_code == 200
        swap_in_mode_000(path, line(NEW_KEY, "new"))
        time.sleep(1.2)  # the server has looked, and could not read it: the old keys stay
        answer = httpx.post(f"{url}/roll", json=ROLL, headers=bearer(OLD_KEY))
        assert answer.status_code == 200, server_output(process)
        assert httpx.post(f"{url}/roll", json=ROLL, headers=bearer(NEW_KEY)).status_code == 401
        assert "Permission denied" in server_output(process)
        path.chmod(0o644)  # changes the ctime alone
        made_readable = time.monotonic()
        deadline = made_readable + 2.5
        old = new = 0
        while time.monotonic() < deadline:
            old = httpx.post(f"{url}/roll", json=ROLL, headers=bearer(OLD_KEY)).status_code
            answer = httpx.post(f"{url}/roll", json=ROLL, headers=bearer(NEW_KEY))
            new = answer.status_code
            if old == 401 and new == 200:
                break
            time.sleep(0.05)
        assert (old, new) == (401, 200), server_output(process)
        assert answer.json()["data"] == [3, 1, 2]
        assert process.poll() is None
        # One error for the file that could not be read, not one a second.
        assert server_output(process).count("Permission denied") == 1, server_output(process)
    finally:
        stop_server(process)


@pytest.fixture
def quick_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(access_module, "RECHECK_SECONDS", 0.0)


def logged(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "tensor_ops.access" and record.levelno == level
    ]


@pytest.mark.skipif(sys.platform != "linux", reason="file modes as Linux has them")
def test_api_keys_read_a_file_once_it_can_be_read(
    tmp_path: Path,
    quick_looks: None,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO, logger="tensor_ops.access")
    path = tmp_path / "api-keys"
    path.write_text(line(OLD_KEY, "old"))
    keys = ApiKeys(path)
    assert keys.label_of(OLD_KEY) == "old"
    swap_in_mode_000(path, line(NEW_KEY, "new"))
    if not unreadable_to_us(path):
        # Root: mode 000 does not keep it out. The file's read fails all the same when
        # reading is made to fail as it would (EACCES), then succeeds.
        real = keyfile.read_regular
        refuse = [True]

        def read_regular(target: Path, limit: int = 16 << 20) -> tuple[bytes, os.stat_result]:
            if refuse[0]:
                raise KeyFileError(f"{target}: cannot be read: Permission denied")
            return real(target, limit)

        monkeypatch.setattr(access_module, "read_regular", read_regular)
        for _ in range(3):  # looked at three times, still unreadable
            assert keys.label_of(OLD_KEY) == "old"
            assert keys.label_of(NEW_KEY) is None
        path.chmod(0o644)
        refuse[0] = False
        assert keys.label_of(NEW_KEY) == "new"
        assert keys.label_of(OLD_KEY) is None
    else:
        for _ in range(3):
            assert keys.label_of(OLD_KEY) == "old"
            assert keys.label_of(NEW_KEY) is None
        path.chmod(0o644)
        assert keys.label_of(NEW_KEY) == "new"
        assert keys.label_of(OLD_KEY) is None
    failures = logged(caplog, logging.ERROR)
    assert len(failures) == 1 and "Permission denied" in failures[0]


def test_a_file_that_turns_keyless_keeps_the_keys_with_a_warning(
    tmp_path: Path, quick_looks: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tensor_ops.access")
    path = tmp_path / "api-keys"
    path.write_text(line(OLD_KEY, "old"))
    keys = ApiKeys(path)
    path.write_text("# every key revoked by mistake\n")
    for _ in range(3):
        assert keys.label_of(OLD_KEY) == "old"
    warnings = logged(caplog, logging.WARNING)
    assert len(warnings) == 1
    assert "holds no key" in warnings[0] and "the previous ones stay" in warnings[0]
    assert keys.reload() is False
    path.write_text(line(NEW_KEY, "new"))
    assert keys.label_of(NEW_KEY) == "new" and keys.label_of(OLD_KEY) is None


def test_a_keyless_file_at_the_start_locks_everyone_out_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tensor_ops.access")
    path = tmp_path / "api-keys"
    path.write_text("")
    keys = ApiKeys(path)
    assert keys.keys == () and keys.label_of(OLD_KEY) is None
    [warning] = logged(caplog, logging.WARNING)
    assert "holds no key" in warning and "every request that needs a key is refused" in warning


def test_a_rewrite_of_the_same_size_within_the_same_tick_is_read(
    tmp_path: Path, quick_looks: None
) -> None:
    # Written and read within the same tick of the file system's clock, then rewritten with
    # the same size and the same modification time: the stamp cannot tell, the look after the
    # read does not trust it.
    path = tmp_path / "api-keys"
    path.write_text(line(OLD_KEY, "aaa"))
    keys = ApiKeys(path)
    stamp = path.stat()
    path.write_text(line(NEW_KEY, "bbb"))
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert keys.label_of(NEW_KEY) == "bbb"
    assert keys.label_of(OLD_KEY) is None


def test_device_and_fifo_key_files_are_refused_unread(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(KeyFileError, match="is a FIFO, not a regular file"):
        ApiKeys(fifo)
    with pytest.raises(KeyFileError, match="is a device, not a regular file"):
        ApiKeys(Path("/dev/zero"))


def test_one_hash_under_two_labels_is_refused_and_twice_under_one_read_once() -> None:
    digest = hashlib.sha256(b"k").hexdigest()
    with pytest.raises(KeyFileError, match="line 4: the same key hash as line 2, under another"):
        parse_keys(f"# keys\n{digest} ci\n\n{digest.upper()} laptop\n", "keys")
    keys = parse_keys(f"{digest} ci\n{digest} ci\n")
    assert len(keys) == 1 and keys[0].label == "ci"
