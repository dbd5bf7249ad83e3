"""The one exception the kernels raise when an input breaks a rule of the spec."""


class SpecError(ValueError):
    """An input breaks a rule of the op's specification.

    ``field`` names the input that broke the rule (``"axes"``, ``"batch_dims"``, ...), so that a
    caller can point at it; the message says the rule in the spec's own words.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message
