"""``app.transports.http_protocol:ServiceHttpProtocol``, the path 0.2's docs gave uvicorn's
``--http``: the class now lives in ``app.http.protocol``. Remove in 0.4."""

from app.http.protocol import ServiceHttpProtocol

__all__ = ["ServiceHttpProtocol"]
