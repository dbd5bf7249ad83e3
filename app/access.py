"""API keys: the key file read and kept current, and each request's bearer key checked.

The file holds SHA-256 hashes, never keys: one ``<64 hex digits> [label]`` a line, ``#`` starting
a comment. A request's key is hashed and compared with every stored hash by
``hmac.compare_digest`` (no early exit), so the time taken says nothing of which hash, or how
much of one, matched. The label, never the key, is what logs and metrics see.
"""

import hashlib
import hmac
import logging
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

from app.errors import Fault, ServiceError
from app.keyfile import Key, KeyFileError, keys_of, no_keys_message, read_regular

__all__ = ["AccessControl", "ApiKeys", "KeyFileError", "access_control"]

LOG = logging.getLogger("tensor_ops.access")

#: The header and scheme of RFC 6750; the scheme is case-insensitive.
_AUTHORIZATION = b"authorization"
_BEARER = "bearer"
#: How often, at most, a request looks whether the key file has changed (a ``stat``).
RECHECK_SECONDS = 1.0
#: A file whose modification time is this close to the moment it was read may still change
#: within the same tick of its file system's clock (a few milliseconds; a whole second, or
#: two, where times are kept in whole seconds), with no change of stamp to show for it: its
#: stamp is not trusted, and it is read again at the next look.
RACY_NANOSECONDS = 50_000_000
RACY_WHOLE_SECONDS_NANOSECONDS = 2_000_000_000

Stamp = tuple[int, int, int, int]


def _stamp_of(info: os.stat_result) -> Stamp:
    # What changes when the file is rewritten, replaced (a new inode: editors, Kubernetes'
    # atomic symlink swap of a mounted Secret) or touched.
    return (info.st_ino, info.st_dev, info.st_size, info.st_mtime_ns)


def _stamp(path: Path) -> Stamp | None:
    try:
        return _stamp_of(os.stat(path))
    except OSError:
        return None


class ApiKeys:
    """The keys of one key file, re-read when the file changes (looked at no more than once a
    second) and on ``reload()`` (SIGHUP).

    The keys in force are the file's within about a second of it becoming readable, whatever
    renames, writes and mode changes made it so:

    - the stamp kept (inode, device, size, modification time) is that of the file the keys were
      read from (``fstat`` of the descriptor read), and it is kept only when the read succeeded;
    - a file that cannot be read (missing, no permission: a file renamed into place with mode
      000 and then made readable, which changes none of the stamp) is tried again at every look,
      once a second, until it can be; its error is logged once, not every second;
    - a file that was read but is malformed is not read again until its stamp changes;
    - a file modified within a tick of its file system's clock of its reading
      (``RACY_NANOSECONDS``) is read again at the next look: a rewrite of the same size within
      the same tick would change no stamp.

    What a change cannot show: a rewrite of the same size whose modification time is set back
    (``touch -d``, ``os.utime``); SIGHUP reads the file at once.

    A file that turns unreadable or malformed leaves the keys as they were, with an error in the
    log: a bad edit never locks everyone out, nor in. So does a file that turns to hold no key
    (a warning: it would lock everyone out; a file rewritten in place is empty for a moment). A
    file that holds no key when the service starts locks everyone out, with a warning;
    ``python -m app`` refuses to start with one (exit status 2)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        raw, info = read_regular(path)
        self.keys = keys_of(raw, path)
        self._settled = self._settle(info)
        self._stamp: Stamp | None = _stamp_of(info)
        #: The stamp of a file read but not taken (malformed, no key): not read again as is.
        self._refused: Stamp | None = None
        self._last_error = ""
        if not self.keys:
            LOG.warning(
                "API keys: %s; every request that needs a key is refused", no_keys_message(path)
            )
        self._checked = time.monotonic()

    @staticmethod
    def _settle(info: os.stat_result) -> bool:
        """Whether a later change of the file read would change its stamp: past its clock's
        tick (file systems of whole-second times show as a whole number of seconds)."""
        whole = info.st_mtime_ns % 1_000_000_000 == 0
        racy = RACY_WHOLE_SECONDS_NANOSECONDS if whole else RACY_NANOSECONDS
        return time.time_ns() - info.st_mtime_ns >= racy

    def reload(self) -> bool:
        """Read the file again; returns whether the keys were replaced."""
        return self._read(explicit=True)

    def _read(self, explicit: bool) -> bool:
        try:
            raw, info = read_regular(self.path)
        except KeyFileError as error:
            # Not read: tried again at the next look, whatever the stamp then.
            self._refused = None
            self._report(str(error), explicit)
            return False
        stamp = _stamp_of(info)
        settled = self._settle(info)
        try:
            keys = keys_of(raw, self.path)
        except KeyFileError as error:
            self._refused = stamp if settled else None
            self._report(str(error), explicit)
            return False
        if not keys and self.keys:
            self._refused = stamp if settled else None
            message = no_keys_message(self.path)
            if explicit or message != self._last_error:
                LOG.warning("API keys not reloaded, the previous ones stay: %s", message)
            self._last_error = message
            return False
        changed = keys != self.keys
        self.keys = keys
        self._stamp = stamp
        self._settled = settled
        self._refused = None
        self._last_error = ""
        if explicit or changed:
            LOG.info("API keys loaded", extra={"keys": len(keys), "labels": _labels(keys)})
        return True

    def _report(self, message: str, explicit: bool) -> None:
        # Once for each error in a row, not once a second while a file stays unreadable.
        if explicit or message != self._last_error:
            LOG.error("API keys not reloaded, the previous ones stay: %s", message)
        self._last_error = message

    def _current(self) -> tuple[Key, ...]:
        now = time.monotonic()
        if now - self._checked >= RECHECK_SECONDS:
            self._checked = now
            stamp = _stamp(self.path)
            if not self._settled or stamp not in (self._stamp, self._refused):
                self._read(explicit=False)
        return self.keys

    def label_of(self, key: str) -> str | None:
        """The label of ``key``, or None when no stored hash is the key's."""
        digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()
        found = None
        for stored in self._current():
            if hmac.compare_digest(stored.digest, digest) and found is None:
                found = stored.label
        return found

    def admit(self, headers: Iterable[tuple[bytes, bytes]]) -> str:
        """The label of the request's bearer key; a ``ServiceError`` (401) when it has none or
        one that is not stored."""
        value = None
        count = 0
        for name, raw in headers:
            if len(name) == 13 and name.lower() == _AUTHORIZATION:
                count += 1
                if value is None:
                    # The header's own bytes, hashed as sent: a key of non-ASCII characters
                    # sent as UTF-8 (as gRPC's metadata carries it) matches the hash of its
                    # UTF-8 bytes, as the file's hashes are made (printf %s "$KEY" | sha256sum).
                    value = raw.decode("utf-8", "surrogateescape")
        return self.admit_value(value, count)

    def admit_value(self, value: str | None, count: int = 1) -> str:
        """As ``admit``, from the ``Authorization`` value itself (gRPC's metadata) and the
        number of entries that named it: more than one is refused, whatever they hold (a
        request has one set of credentials: RFC 9110 11.6.2, RFC 6750 2)."""
        if count > 1:
            raise unauthenticated(
                f"the request has {count} Authorization headers; send exactly one, "
                "'Authorization: Bearer <key>'",
                "invalid_request",
            )
        if value is None:
            raise unauthenticated("a key is needed: send 'Authorization: Bearer <key>'", None)
        scheme, _, token = value.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != _BEARER or not token:
            raise unauthenticated(
                "the Authorization header must be 'Bearer <key>'", "invalid_request"
            )
        label = self.label_of(token)
        if label is None:
            raise unauthenticated("the key is not valid", "invalid_token")
        return label


def unauthenticated(message: str, error: str | None) -> ServiceError:
    """A 401 with the challenge RFC 6750 asks for (the error code when a key was sent)."""
    challenge = 'Bearer realm="tensor-ops"'
    if error:
        challenge += f', error="{error}"'
    return ServiceError(
        Fault.UNAUTHENTICATED,
        ("header", "authorization"),
        message,
        headers={"www-authenticate": challenge},
    )


def _labels(keys: tuple[Key, ...]) -> list[str]:
    return sorted({key.label for key in keys})


#: Paths any client may read with API keys on: the docs UI and its schema (the UI is where a
#: key is entered), as Triton and KServe leave them.
OPEN_PATHS = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
OPEN_PREFIXES = ("/static-offline-docs/",)
#: Probes: open unless TENSOR_OPS_AUTH_PROBES asks for keys there too (an orchestrator's
#: probe rarely carries a secret). The V2 protocol's health group: server live and ready,
#: model ready.
PROBE_PATHS = frozenset(
    {"/health", "/health/ready", "/metrics", "/v2/health/live", "/v2/health/ready"}
)
_MODEL_READY = re.compile(r"/v2/models/[^/]+(/versions/[^/]+)?/ready")


#: The gRPC methods that are probes (``grpc.health.v1`` and the V2 health group); the rest of
#: the V2 service needs a key, server reflection (gRPC's ``/openapi.json``) does not.
GRPC_PROBES = frozenset(
    {
        "/inference.GRPCInferenceService/ServerLive",
        "/inference.GRPCInferenceService/ServerReady",
        "/inference.GRPCInferenceService/ModelReady",
        "/grpc.health.v1.Health/Check",
        "/grpc.health.v1.Health/Watch",
    }
)


class AccessControl:
    """Which requests need a key, and the keys that admit them."""

    def __init__(self, keys: ApiKeys, probes: bool) -> None:
        self.keys = keys
        #: Whether probes need a key too (TENSOR_OPS_AUTH_PROBES).
        self.probes = probes

    def needs_key(self, path: str) -> bool:
        """Whether an HTTP request for ``path`` must carry a key."""
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            return False
        if path in PROBE_PATHS or _MODEL_READY.fullmatch(path):
            return self.probes
        return True

    def grpc_needs_key(self, method: str) -> bool:
        """Whether a gRPC call of ``method`` (``/package.Service/Method``) must carry a key."""
        if method.startswith("/grpc.reflection."):
            return False
        if method in GRPC_PROBES:
            return self.probes
        return True


def access_control(api_keys_file: Path | None, probes: bool) -> AccessControl | None:
    """The service's access control from its settings; None when no key file is set (open)."""
    if api_keys_file is None:
        return None
    return AccessControl(ApiKeys(api_keys_file), probes)
