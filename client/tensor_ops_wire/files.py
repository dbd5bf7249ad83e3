"""What a path is when it is not a regular file, in words: for refusing settings files and local
inputs before reading them (standard library only: ``python -m app`` checks its files with it in
a process that must stay small)."""

import stat


def file_kind(mode: int) -> str:
    """``mode`` (``st_mode``) in words: a directory, a FIFO, a device, a socket, or else."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"
