"""The HTTP layer: request models, error responses and thin route handlers."""
