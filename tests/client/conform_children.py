"""Stand-ins for ``tensor-ops conform``'s child process: one that crashes and hangs on cue."""

import os
import time
from typing import Any

import numpy as np

from tensor_ops_client._conform import ConformCase


def crash_or_hang(cases: list[ConformCase], device: str, answers: Any) -> None:
    """Answers each case with its index, but dies on an op named "crash" (exit code 3) and
    sleeps past any timeout on an op named "hang", as a device plugin may."""
    for index, case in enumerate(cases):
        answers.send((index, "started", None))
        if case.op == "crash":
            os._exit(3)
        if case.op == "hang":
            time.sleep(3600)
        answers.send((index, "outputs", {"output": np.array([len(cases) - index])}))
