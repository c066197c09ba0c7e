"""What an OTLP endpoint says of one signal, asked directly after an export of it failed.

The SDK's exporters report a failed export as a bare ``FAILURE``: whether the receiver was down, refused
the credentials or has no such signal at all is only in their log lines. So after a failed export the
sink asks the endpoint itself, with an *empty* export request of that signal (valid OTLP: a receiver that
takes the signal answers success), and reads the answer:

* ``accepted``: the endpoint takes the signal (the failed export had another cause: size, content, a blip);
* ``unsupported``: the endpoint has no such signal, and asking again will not change that: HTTP 404, 405,
  415 or 501, gRPC ``UNIMPLEMENTED``. Tempo, Jaeger, Phoenix and Langfuse answer this on logs;
* ``refused``: the endpoint refuses these credentials: HTTP 401 or 403, gRPC ``UNAUTHENTICATED`` or
  ``PERMISSION_DENIED``;
* ``failing``: anything else (unreachable, timeouts, 429, 5xx): it may pass.

Asking this way works with every SDK version the package accepts, and costs one small request per failed
export. Headers are sent as configured and never logged.

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

from exporters.delivery import CONFIRMED, DISCARDED, Outcome, failed, rejected

__all__ = [
    "REFUSED_GRPC",
    "REFUSED_HTTP",
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
Verdict = Literal["accepted", "unsupported", "refused", "failing"]

UNSUPPORTED_HTTP: Final = frozenset({404, 405, 415, 501})
REFUSED_HTTP: Final = frozenset({401, 403})
UNSUPPORTED_GRPC: Final = frozenset({"UNIMPLEMENTED"})
REFUSED_GRPC: Final = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})
_PROBE_TIMEOUT_S: Final = 5.0

# The package's logger: records are named exporters.otlp whichever of its modules logs.
log = logging.getLogger("exporters.otlp")


@dataclass(frozen=True, slots=True)
class SignalAnswer:
    verdict: Verdict
    detail: str  # "HTTP 405", "gRPC UNIMPLEMENTED", "ConnectionRefusedError": never a header value
    where: str  # the URL (HTTP) or the address and service (gRPC) that answered


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
    return "failing"


def probe_http(base: str, signal: Signal, headers: Mapping[str, str], timeout_s: float) -> SignalAnswer:
    """POST an empty export request of ``signal`` to ``<base>/v1/<signal>``."""
    url = http_signal_url(base, signal)
    request = urllib.request.Request(
        url, data=b"", method="POST", headers={**headers, "Content-Type": "application/x-protobuf"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        status = int(exc.code)
    except (OSError, ValueError) as exc:  # refused, reset, DNS, TLS, timeout; a malformed URL
        return SignalAnswer("failing", type(exc).__name__, url)
    return SignalAnswer(_http_verdict(status), f"HTTP {status}", url)


def probe_grpc(endpoint: str, signal: Signal, headers: Mapping[str, str], timeout_s: float) -> SignalAnswer:
    """Call the ``signal`` service's ``Export`` with an empty request on ``endpoint`` (``http(s)://host:port``)."""
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
                logs_service_pb2.ExportLogsServiceRequest(), timeout=timeout_s, metadata=metadata
            )
        else:
            trace_service_pb2_grpc.TraceServiceStub(channel).Export(  # type: ignore[no-untyped-call]
                trace_service_pb2.ExportTraceServiceRequest(), timeout=timeout_s, metadata=metadata
            )
    except grpc.RpcError as exc:
        code = exc.code().name if hasattr(exc, "code") and exc.code() is not None else "UNKNOWN"
        if code in UNSUPPORTED_GRPC:
            verdict: Verdict = "unsupported"
        elif code in REFUSED_GRPC:
            verdict = "refused"
        else:
            verdict = "failing"
        return SignalAnswer(verdict, f"gRPC {code}", where)
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

    def probe(self, signal: Signal) -> SignalAnswer:
        if self.protocol == "grpc":
            return probe_grpc(self.endpoint, signal, self._headers, self._timeout_s)
        return probe_http(http_base(self.endpoint), signal, self._headers, self._timeout_s)

    def judge(self, signal: Signal, answer: SignalAnswer | None) -> Outcome:
        """An export of ``signal`` ended: ``answer`` is ``None`` on success, else what the receiver said of
        the signal when asked after the failure. Acts on a lasting answer; returns the batch's outcome."""
        if answer is None:
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
        if answer.verdict == "accepted":
            self._refusals.pop(signal, None)
            return rejected(
                f"the export failed though {answer.where} takes {signal} ({answer.detail} to an empty export): "
                "the batch's size or content, or a passing fault"
            )
        return failed(f"{answer.detail} from {answer.where}")

    def _logs_off(self, answer: SignalAnswer) -> None:
        if "logs" in self._off:
            return
        self._off.add("logs")
        self._refusals.pop("logs", None)
        discarded = self._turn_off("logs")
        log.error(
            "OTLP receiver has no logs signal (%s from %s): the gen_ai.evaluation.result log records are off "
            "until restart (%d discarded) and commits go on; the scores' spans and their span events are "
            "unaffected. Set exporters.otlp.evaluation_logs: false for this receiver, or send to a Collector "
            "with a logs pipeline to keep them.",
            answer.detail,
            answer.where,
            discarded,
        )


def _key_to_change(answer: SignalAnswer) -> str:
    if answer.verdict == "refused":
        return "exporters.otlp.headers (the receiver's credentials)"
    return "exporters.otlp.endpoint and exporters.otlp.protocol"
