"""What an OTLP endpoint says of one batch of a signal, asked directly after the SDK exporter failed it.

The SDK's exporters report a failed export as a bare ``FAILURE``: whether the receiver was down, refused
the credentials, has no such signal or will never take this batch is only in their log lines. So after a
failed export (the SDK exporter retried what it deems retryable, within ``timeout_s``) the sink sends the same
batch once more itself, uncompressed and without retries, and reads the answer:

* ``accepted``: the receiver took the batch this time (the failure passed): the batch is exported;
* ``unsupported``: the endpoint has no such signal, and asking again will not change that: HTTP 404, 405,
  415 or 501, gRPC ``UNIMPLEMENTED``. Tempo, Jaeger, Phoenix and Langfuse answer this on logs;
* ``refused``: the endpoint refuses these credentials: HTTP 401 or 403, gRPC ``UNAUTHENTICATED`` or
  ``PERMISSION_DENIED``;
* ``rejected``: the receiver will never take this batch as it is (its content or size): HTTP 400, 413, 422
  and the other 4xx but 408 and 429, gRPC ``INVALID_ARGUMENT``, ``FAILED_PRECONDITION``, ``ALREADY_EXISTS``.
  The delivery loop's one rule for such items applies (docs/delivery.md): the batch is split to find the
  culprit, which is dropped, counted and set aside on the score dead-letter topic;
* ``failing``: anything else (unreachable, timeouts, 408, 429, 5xx, other gRPC codes): it may pass.

Asking this way works with every SDK version the package accepts, reads the receiver's own words for the
log line, and costs one request per failed export. Headers are sent as configured and never logged.

:class:`ReceiverSignals` keeps what the sink makes of those answers, on the event loop: the signals the
receiver refuses (the traces' refusal is the sink's readiness problem) and the optional ones turned off,
and each export's outcome for its delivery queue.
"""

from __future__ import annotations

import logging
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from google.protobuf.message import Message  # type: ignore[import-untyped]

from exporters.delivery import CONFIRMED, DISCARDED, Outcome, failed, rejected

__all__ = [
    "PASSING_HTTP",
    "REFUSED_GRPC",
    "REFUSED_HTTP",
    "REJECTED_GRPC",
    "UNSUPPORTED_GRPC",
    "UNSUPPORTED_HTTP",
    "ReceiverSignals",
    "Signal",
    "SignalAnswer",
    "Verdict",
    "http_base",
    "http_signal_url",
    "probe_grpc",
    "probe_http",
]

Signal = Literal["traces", "logs"]
Verdict = Literal["accepted", "unsupported", "refused", "rejected", "failing"]

UNSUPPORTED_HTTP: Final = frozenset({404, 405, 415, 501})
REFUSED_HTTP: Final = frozenset({401, 403})
PASSING_HTTP: Final = frozenset({408, 429})  # 4xx that may pass: the receiver's time or load
UNSUPPORTED_GRPC: Final = frozenset({"UNIMPLEMENTED"})
REFUSED_GRPC: Final = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})
# The OTLP specification's permanent errors about the request itself (UNKNOWN and INTERNAL may pass).
REJECTED_GRPC: Final = frozenset({"INVALID_ARGUMENT", "FAILED_PRECONDITION", "ALREADY_EXISTS"})
_PROBE_TIMEOUT_S: Final = 5.0
_DETAIL_CHARS: Final = 300

# The package's logger: records are named exporters.otlp whichever of its modules logs.
log = logging.getLogger("exporters.otlp")


@dataclass(frozen=True, slots=True)
class SignalAnswer:
    verdict: Verdict
    detail: str  # "HTTP 405", "gRPC UNIMPLEMENTED", "ConnectionRefusedError": never a header value
    where: str  # the URL (HTTP) or the address and service (gRPC) that answered
    message: str = ""  # what the receiver said of a rejected batch


def http_base(endpoint: str) -> str:
    """The receiver's base URL from an HTTP endpoint that may already name a signal's path."""
    base = endpoint.rstrip("/")
    for suffix in ("/v1/traces", "/v1/logs"):
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base


def http_signal_url(base: str, signal: Signal) -> str:
    return f"{base.rstrip('/')}/v1/{signal}"


def _http_verdict(status: int) -> Verdict:
    if 200 <= status < 300:
        return "accepted"
    if status in UNSUPPORTED_HTTP:
        return "unsupported"
    if status in REFUSED_HTTP:
        return "refused"
    if 400 <= status < 500 and status not in PASSING_HTTP:
        return "rejected"
    return "failing"


def _receiver_words(body: bytes) -> str:
    """An OTLP/HTTP error body: a protobuf ``google.rpc.Status`` (its message), else text."""
    from google.rpc import status_pb2  # type: ignore[import-untyped]

    try:
        message = str(status_pb2.Status.FromString(body).message)
    except Exception:  # not a Status: plain text or JSON
        message = ""
    return (message or body.decode("utf-8", "replace")).strip()[:_DETAIL_CHARS]


def probe_http(
    base: str, signal: Signal, headers: Mapping[str, str], timeout_s: float, body: bytes = b""
) -> SignalAnswer:
    """POST ``body`` (a serialised export request of ``signal``; empty by default, valid OTLP) to
    ``<base>/v1/<signal>`` once."""
    url = http_signal_url(base, signal)
    request = urllib.request.Request(
        url, data=body, method="POST", headers={**headers, "Content-Type": "application/x-protobuf"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            status = int(response.status)
            answer = b""
    except urllib.error.HTTPError as exc:
        status = int(exc.code)
        answer = exc.read()
    except (OSError, ValueError) as exc:  # refused, reset, DNS, TLS, timeout; a malformed URL
        return SignalAnswer("failing", type(exc).__name__, url)
    verdict = _http_verdict(status)
    return SignalAnswer(verdict, f"HTTP {status}", url, _receiver_words(answer) if verdict == "rejected" else "")


def probe_grpc(
    endpoint: str, signal: Signal, headers: Mapping[str, str], timeout_s: float, request: Message | None = None
) -> SignalAnswer:
    """Call the ``signal`` service's ``Export`` once with ``request`` (empty by default) on ``endpoint``
    (``http(s)://host:port``)."""
    import grpc  # type: ignore[import-untyped]
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    secure = endpoint.startswith("https://")
    target = endpoint.split("://", 1)[-1].rstrip("/")
    where = f"{endpoint} ({signal} service)"
    channel = grpc.secure_channel(target, grpc.ssl_channel_credentials()) if secure else grpc.insecure_channel(target)
    metadata = [(k.lower(), v) for k, v in headers.items()]
    try:
        if signal == "logs":
            logs_service_pb2_grpc.LogsServiceStub(channel).Export(  # type: ignore[no-untyped-call]
                request or logs_service_pb2.ExportLogsServiceRequest(), timeout=timeout_s, metadata=metadata
            )
        else:
            trace_service_pb2_grpc.TraceServiceStub(channel).Export(  # type: ignore[no-untyped-call]
                request or trace_service_pb2.ExportTraceServiceRequest(), timeout=timeout_s, metadata=metadata
            )
    except grpc.RpcError as exc:
        code = exc.code().name if hasattr(exc, "code") and exc.code() is not None else "UNKNOWN"
        message = ""
        if code in UNSUPPORTED_GRPC:
            verdict: Verdict = "unsupported"
        elif code in REFUSED_GRPC:
            verdict = "refused"
        elif code in REJECTED_GRPC:
            verdict = "rejected"
            message = str(exc.details() or "")[:_DETAIL_CHARS] if hasattr(exc, "details") else ""
        else:
            verdict = "failing"
        return SignalAnswer(verdict, f"gRPC {code}", where, message)
    finally:
        channel.close()
    return SignalAnswer("accepted", "gRPC OK", where)


class ReceiverSignals:
    """What the sink knows of the receiver's signals (see the module doc). ``probe`` runs on the export
    threads; everything else on the event loop. ``turn_off(signal)`` stops the delivery of an optional signal
    and says how many items it discarded."""

    def __init__(
        self,
        endpoint: str,
        protocol: Literal["grpc", "http/protobuf"],
        headers: Mapping[str, str],
        timeout_s: float,
        turn_off: Callable[[Signal], int],
    ) -> None:
        self.endpoint = endpoint
        self.protocol = protocol
        self._headers = dict(headers)
        self._timeout_s = min(timeout_s, _PROBE_TIMEOUT_S)
        self._turn_off = turn_off
        self._refusals: dict[Signal, str] = {}  # signal -> what the receiver said
        self._off: set[Signal] = set()

    @property
    def problem(self) -> str | None:
        refusal = self._refusals.get("traces")
        return f"traces refused: {refusal}" if refusal else None

    @property
    def off(self) -> frozenset[str]:
        return frozenset(self._off)

    def probe(self, signal: Signal, request: Message) -> SignalAnswer:
        """Send ``request`` (the failed batch's export request) once more, and read the receiver's answer."""
        if self.protocol == "grpc":
            return probe_grpc(self.endpoint, signal, self._headers, self._timeout_s, request)
        body = request.SerializeToString()
        return probe_http(http_base(self.endpoint), signal, self._headers, self._timeout_s, body)

    def judge(self, signal: Signal, answer: SignalAnswer | None) -> Outcome:
        """An export of ``signal`` ended: ``answer`` is ``None`` on success, else what the receiver said of
        the batch when it was sent again after the failure. Acts on a lasting answer; returns the batch's
        outcome."""
        if answer is None or answer.verdict == "accepted":
            if self._refusals.pop(signal, None) is not None:
                log.info("OTLP receiver %s takes %s again", self.endpoint, signal)
            return CONFIRMED
        if signal == "logs" and answer.verdict == "unsupported":
            self._logs_off(answer)
            return DISCARDED
        if answer.verdict in ("refused", "unsupported"):
            text = f"{answer.detail} from {answer.where}: check {_key_to_change(answer)}"
            if self._refusals.get(signal) != text:
                self._refusals[signal] = text
                log.error(
                    "OTLP receiver refuses %s (%s); the %s are kept and sent again, nothing is committed past them",
                    signal,
                    text,
                    "scores' spans" if signal == "traces" else "evaluation log records",
                )
            return failed(text)
        if answer.verdict == "rejected":
            self._refusals.pop(signal, None)
            words = f": {answer.message}" if answer.message else ""
            return rejected(f"{answer.detail} from {answer.where}{words}")
        return failed(f"{answer.detail} from {answer.where}")

    def _logs_off(self, answer: SignalAnswer) -> None:
        if "logs" in self._off:
            return
        self._off.add("logs")
        self._refusals.pop("logs", None)
        discarded = self._turn_off("logs")
        log.error(
            "OTLP receiver has no logs signal (%s from %s): the gen_ai.evaluation.result log records are off "
            "until restart (%d discarded) and commits go on; the evaluations go out as span events on the "
            "scores' spans. Set exporters.otlp.events: span for this receiver, or send to a Collector with a "
            "logs pipeline to keep them.",
            answer.detail,
            answer.where,
            discarded,
        )


def _key_to_change(answer: SignalAnswer) -> str:
    if answer.verdict == "refused":
        return "exporters.otlp.headers (the receiver's credentials)"
    return "exporters.otlp.endpoint and exporters.otlp.protocol"
