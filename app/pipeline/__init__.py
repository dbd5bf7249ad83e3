"""Running a request, whatever its transport: admission, body, decode, compute, encode."""
