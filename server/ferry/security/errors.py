"""The one error type of security settings, so start-up can report any of them the same way."""


class SecurityConfigError(ValueError):
    """Security options that cannot work: no token, unreadable files, TLS options that do not fit."""
