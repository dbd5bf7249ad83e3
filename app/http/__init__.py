"""HTTP: the op routes on the one router, body reading, answers, the uvicorn protocol and loop,
the observer every request passes, OpenAPI and /docs' examples, the service's own routes, and
KServe V2 over HTTP with its shared-memory routes."""
