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
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "REFUSED_GRPC",
    "REFUSED_HTTP",
    "UNSUPPORTED_GRPC",
    "UNSUPPORTED_HTTP",
    "Signal",
    "SignalAnswer",
    "Verdict",
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


@dataclass(frozen=True, slots=True)
class SignalAnswer:
    verdict: Verdict
    detail: str  # "HTTP 405", "gRPC UNIMPLEMENTED", "ConnectionRefusedError": never a header value
    where: str  # the URL (HTTP) or the address and service (gRPC) that answered


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
