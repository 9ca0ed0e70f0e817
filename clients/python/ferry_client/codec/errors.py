"""The one error type the codec raises: its message is written for the caller of the API."""


class CodecError(ValueError):
    """A tensor or message that does not decode; the text says exactly what is wrong."""
