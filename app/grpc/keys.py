"""The API key check of the gRPC calls: one for the V2 service's calls and streams, and the
health service's (its key in the call's metadata, ``Bearer <key>``, as HTTP's header)."""

from __future__ import annotations

from typing import Any

from app.access import AccessControl, ApiKeys
from app.grpc.status import AUTHORIZATION_KEY, metadata_value


def route_keys(access: AccessControl | None, route: str) -> ApiKeys | None:
    """The keys a call of ``route`` must show one of; None: it needs none."""
    if access is None or not access.grpc_needs_key(route):
        return None
    return access.keys


def admitted_key(keys: ApiKeys | None, metadata: Any) -> str | None:
    """The label of the key a call's metadata shows (None where the route needs none); a key
    missing, repeated or unknown refused 401 (``ServiceError``)."""
    if keys is None:
        return None
    value, count = metadata_value(metadata, AUTHORIZATION_KEY)
    return keys.admit_value(value, count)
