"""One exception tree for everything a judge call can end with.

Class names match litellm's exception names, so a judge record's ``error.name`` is the same whichever
transport made the call (the fast HTTP path or ``litellm.acompletion``).
"""

from __future__ import annotations

from typing import ClassVar, Literal

__all__ = [
    "APIConnectionError",
    "APIError",
    "AuthenticationError",
    "BadGatewayError",
    "BadRequestError",
    "ContextWindowExceededError",
    "InternalServerError",
    "JSONParseError",
    "JudgeError",
    "JudgeUnavailableError",
    "NoObjectGeneratedError",
    "NotFoundError",
    "PaymentRequiredError",
    "PermissionDeniedError",
    "PromptTooLargeError",
    "ProviderError",
    "RateLimitError",
    "ServiceUnavailableError",
    "ShedReason",
    "StructuredOutputError",
    "Timeout",
    "TypeValidationError",
    "UnprocessableEntityError",
    "error_for_status",
]

CallOutcome = Literal["rate_limited", "timeout", "connection_error", "error", "invalid_output"]
# Why a judge gate refused a call before it reached the provider. The service sheds (skips and counts) only
# over the spend cap, and only when the judge's policy says so; a bounded hold (``eval``) gives up with the
# state that held it.
ShedReason = Literal["paused", "circuit_open", "spend_cap"]


class JudgeError(Exception):
    """Base of judge failures. ``code`` is the provider's code or the HTTP status, as text."""

    outcome: ClassVar[CallOutcome] = "error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    @property
    def name(self) -> str:
        return type(self).__name__


class ProviderError(JudgeError):
    """The provider or the transport failed: never a reason for the structured-output fallback."""

    retryable: ClassVar[bool] = False
    # Fatal errors mean "this judge cannot work until a human acts" (bad key, no quota, no model).
    fatal: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status_code: int | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message, code=code if code is not None else (str(status_code) if status_code else None))
        self.status_code = status_code
        self.retry_after_s = retry_after_s


class APIError(ProviderError):
    pass


class BadRequestError(ProviderError):
    pass


class ContextWindowExceededError(BadRequestError):
    pass


class PromptTooLargeError(ContextWindowExceededError):
    """The prompt is over the judge's ``max_prompt_chars``: refused before it was sent (no call, nothing billed)."""


class AuthenticationError(ProviderError):
    fatal = True


class PaymentRequiredError(ProviderError):
    fatal = True


class PermissionDeniedError(ProviderError):
    fatal = True


class NotFoundError(ProviderError):
    fatal = True


class UnprocessableEntityError(ProviderError):
    pass


class RateLimitError(ProviderError):
    outcome = "rate_limited"
    retryable = True


class InternalServerError(ProviderError):
    retryable = True


class BadGatewayError(ProviderError):
    retryable = True


class ServiceUnavailableError(ProviderError):
    retryable = True


class Timeout(ProviderError):
    outcome = "timeout"
    retryable = True


class APIConnectionError(ProviderError):
    outcome = "connection_error"
    retryable = True


class JudgeUnavailableError(ProviderError):
    """The judge's gate refused the call: no request was sent. ``reason`` (also ``code``) says why.

    Never retried inside the attempt: the work is shed and counted, not failed.
    """

    def __init__(self, message: str, *, reason: ShedReason) -> None:
        super().__init__(message, code=reason)
        self.reason: ShedReason = reason


class StructuredOutputError(JudgeError):
    """The judge answered, but not with what the step's schema asks: a format failure."""

    outcome = "invalid_output"

    def __init__(self, message: str, *, raw_output: str | None, finish_reason: str | None = None) -> None:
        super().__init__(message)
        self.raw_output = raw_output
        self.finish_reason = finish_reason


class JSONParseError(StructuredOutputError):
    pass


class TypeValidationError(StructuredOutputError):
    pass


class NoObjectGeneratedError(StructuredOutputError):
    pass


_BY_STATUS: dict[int, type[ProviderError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    402: PaymentRequiredError,
    403: PermissionDeniedError,
    404: NotFoundError,
    408: Timeout,
    422: UnprocessableEntityError,
    429: RateLimitError,
    500: InternalServerError,
    502: BadGatewayError,
    503: ServiceUnavailableError,
    504: Timeout,
}

_CONTEXT_WINDOW_MARKERS = ("context_length_exceeded", "maximum context length", "context window")


def error_for_status(
    status: int, message: str, *, code: str | None = None, retry_after_s: float | None = None
) -> ProviderError:
    cls = _BY_STATUS.get(status)
    if cls is None:
        cls = InternalServerError if status >= 500 else APIError
    if cls is BadRequestError and any(m in message.lower() for m in _CONTEXT_WINDOW_MARKERS):
        cls = ContextWindowExceededError
    if status == 429 and code == "insufficient_quota":
        # OpenAI reports an empty balance as 429: retrying cannot help, a human must act.
        return PaymentRequiredError(message, code=code, status_code=status)
    return cls(message, code=code or str(status), status_code=status, retry_after_s=retry_after_s)
