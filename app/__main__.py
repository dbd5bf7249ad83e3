"""``python -m app``: serve tensor-ops with uvicorn as its settings say (host, port, workers)."""

import os
import shutil
import tempfile
from typing import Any

import uvicorn

from app.settings import Settings


def main() -> None:
    """Run uvicorn from the ``TENSOR_OPS_*`` settings; several workers share one metrics dir."""
    settings = Settings()
    metrics_dir = None
    if settings.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Set before any worker imports prometheus_client: each writes its samples there.
        metrics_dir = tempfile.mkdtemp(prefix="tensor-ops-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    try:
        uvicorn.run(
            "app.main:app",
            host=settings.host,
            port=settings.port,
            workers=settings.workers,
            log_level=settings.log_level,
            access_log=False,  # the service logs each request itself, as JSON
            timeout_graceful_shutdown=int(settings.graceful_timeout),
            server_header=False,
            log_config=_log_config(settings.log_format),
        )
    finally:
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _log_config(form: str) -> dict[str, Any]:
    """uvicorn's own messages in the service's log format."""
    formatter = (
        {"()": "app.observability.JsonFormatter"}
        if form == "json"
        else {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"service": formatter},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "service",
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": "INFO"},
        },
    }


if __name__ == "__main__":
    main()
