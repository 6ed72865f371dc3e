"""User-facing errors: one line saying what is wrong and one saying how to fix it.

Every error a user can cause (bad input, missing toolchain, ...) is raised as a
:class:`LlamaforgeError`; the CLI prints it as a single red line (plus the fix) and exits
non-zero. Tracebacks are shown only with ``--debug``.
"""

from __future__ import annotations


class LlamaforgeError(Exception):
    """An error with a message and a suggested fix, shown to the user without a traceback."""

    exit_code = 2

    def __init__(self, message: str, fix: str | None = None) -> None:
        # secrets in URLs and the HF_TOKEN value never reach a message
        from .redact import redact_text

        message = redact_text(message) or message
        super().__init__(message)
        self.message = message
        self.fix = redact_text(fix)

    def __str__(self) -> str:
        return f"{self.message} (fix: {self.fix})" if self.fix else self.message


class ConfigError(LlamaforgeError):
    """Malformed pins.toml, unknown pin, bad option value."""


class SourceError(LlamaforgeError):
    """A source cannot provide the requested commit."""


class ToolchainError(LlamaforgeError):
    """A compiler / SDK / tool needed for a backend is missing or too old."""


class BuildError(LlamaforgeError):
    """CMake configure or build failed."""

    def __init__(self, message: str, fix: str | None = None, log_path: str | None = None,
                 first_error: str | None = None) -> None:
        super().__init__(message, fix)
        self.log_path = log_path
        self.first_error = first_error


class VerifyError(LlamaforgeError):
    """A built binary does not report the pinned commit or cannot see its backend's device."""


class ModelError(LlamaforgeError):
    """Unknown model reference, truncated or non-GGUF file, bad preset or quant type."""


class BenchError(LlamaforgeError):
    """Bad benchmark plan or an unrecoverable benchmark failure."""


class StoreError(LlamaforgeError):
    """Unknown run, empty run, bad store."""


class FleetError(LlamaforgeError):
    """A fleet host is unreachable, lacks Python, runs another llamaforge, or a remote step failed."""
