"""A real OTLP receiver on loopback: gRPC (traces and logs services) and HTTP/protobuf (/v1/traces, /v1/logs).

It decodes what the real OTLP exporters send and keeps it; ``fail()`` makes it answer with errors
(HTTP 503 / gRPC UNAVAILABLE by default) until ``recover()``, to test delivery failures. ``logs=False``
makes a traces-only receiver, as Tempo, Jaeger and Phoenix are: HTTP 404 on ``/v1/logs``, no gRPC logs
service (UNIMPLEMENTED).
"""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import AsyncIterator
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc  # type: ignore[import-untyped]
import pytest
import pytest_asyncio
from aiohttp import web
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.support.loopback import serve_on_loopback

__all__ = [
    "OtlpReceiver",
    "ReceivedLog",
    "ReceivedSpan",
    "attributes",
    "otlp_receiver",
    "otlp_receiver_session",
    "traces_only_receiver",
    "traces_only_receiver_session",
]


def any_value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    return getattr(value, kind)


def attributes(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs:
        assert isinstance(kv, KeyValue)
        out[kv.key] = any_value(kv.value)
    return out


@dataclass(frozen=True)
class ReceivedSpan:
    span: Span
    resource: dict[str, Any]
    protocol: str

    @property
    def name(self) -> str:
        return str(self.span.name)

    @property
    def trace_id(self) -> str:
        return bytes(self.span.trace_id).hex()

    @property
    def span_id(self) -> str:
        return bytes(self.span.span_id).hex()

    @property
    def parent_span_id(self) -> str:
        return bytes(self.span.parent_span_id).hex()

    @property
    def attributes(self) -> dict[str, Any]:
        return attributes(self.span.attributes)


@dataclass(frozen=True)
class ReceivedLog:
    record: LogRecord
    resource: dict[str, Any]
    protocol: str

    @property
    def trace_id(self) -> str:
        return bytes(self.record.trace_id).hex()

    @property
    def span_id(self) -> str:
        return bytes(self.record.span_id).hex()

    @property
    def attributes(self) -> dict[str, Any]:
        return attributes(self.record.attributes)


class OtlpReceiver:
    def __init__(self, *, logs: bool = True) -> None:
        self.takes_logs = logs
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self._logs: list[ReceivedLog] = []
        self._trace_requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self._http_status: int | None = None
        self._grpc_code: grpc.StatusCode | None = None
        self.requests = 0  # export requests answered (ok or failed), both protocols and signals
        self.refused_logs = 0  # log exports answered "no such signal" (traces-only receiver)
        self.encodings: list[str] = []  # Content-Encoding of the HTTP requests
        self.headers: list[dict[str, str]] = []  # HTTP headers / gRPC metadata of every request
        self._grpc_server: grpc.Server | None = None
        self._runner: web.AppRunner | None = None
        self.grpc_port = 0
        self.http_port = 0

    # -- control --

    def reset(self) -> None:
        with self._lock:
            self._spans.clear()
            self._logs.clear()
            self._trace_requests.clear()
            self._http_status = None
            self._grpc_code = None
            self.requests = 0
            self.refused_logs = 0
            self.encodings.clear()
            self.headers.clear()

    def fail(self, http_status: int = 503, grpc_code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE) -> None:
        with self._lock:
            self._http_status, self._grpc_code = http_status, grpc_code

    def recover(self) -> None:
        with self._lock:
            self._http_status, self._grpc_code = None, None

    def endpoint(self, protocol: str) -> str:
        port = self.grpc_port if protocol == "grpc" else self.http_port
        return f"http://127.0.0.1:{port}"

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    @property
    def trace_requests(self) -> list[trace_service_pb2.ExportTraceServiceRequest]:
        """Every accepted trace export request, as received."""
        with self._lock:
            return list(self._trace_requests)

    @property
    def logs(self) -> list[ReceivedLog]:
        with self._lock:
            return list(self._logs)

    # -- intake --

    def _take_traces(self, request: trace_service_pb2.ExportTraceServiceRequest, protocol: str) -> None:
        received = [
            ReceivedSpan(span, attributes(rs.resource.attributes), protocol)
            for rs in request.resource_spans
            for ss in rs.scope_spans
            for span in ss.spans
        ]
        with self._lock:
            self._spans.extend(received)
            self._trace_requests.append(request)

    def _take_logs(self, request: logs_service_pb2.ExportLogsServiceRequest, protocol: str) -> None:
        received = [
            ReceivedLog(record, attributes(rl.resource.attributes), protocol)
            for rl in request.resource_logs
            for sl in rl.scope_logs
            for record in sl.log_records
        ]
        with self._lock:
            self._logs.extend(received)

    def _grpc_failure(self, context: grpc.ServicerContext) -> bool:
        with self._lock:
            self.requests += 1
            self.headers.append({str(k): str(v) for k, v in context.invocation_metadata()})
            code = self._grpc_code
        if code is not None:
            context.abort(code, "receiver told to fail")
        return False

    # -- servers --

    async def start(self) -> OtlpReceiver:
        receiver = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(
                self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.ServicerContext
            ) -> trace_service_pb2.ExportTraceServiceResponse:
                receiver._grpc_failure(context)
                receiver._take_traces(request, "grpc")
                return trace_service_pb2.ExportTraceServiceResponse()

        class Logs(logs_service_pb2_grpc.LogsServiceServicer):
            def Export(
                self, request: logs_service_pb2.ExportLogsServiceRequest, context: grpc.ServicerContext
            ) -> logs_service_pb2.ExportLogsServiceResponse:
                receiver._grpc_failure(context)
                receiver._take_logs(request, "grpc")
                return logs_service_pb2.ExportLogsServiceResponse()

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)  # type: ignore[no-untyped-call]
        if self.takes_logs:
            logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), server)  # type: ignore[no-untyped-call]
        self.grpc_port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self._grpc_server = server

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._http_traces)
        app.router.add_post("/v1/logs", self._http_logs if self.takes_logs else self._http_no_logs)
        self._runner, self.http_port = await serve_on_loopback(app)
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._grpc_server is not None:
            self._grpc_server.stop(grace=None)
            self._grpc_server = None

    async def _http_body(self, request: web.Request) -> tuple[bytes | None, web.Response | None]:
        raw = await request.read()
        encoding = request.headers.get("Content-Encoding", "").lower()
        with self._lock:
            self.requests += 1
            self.encodings.append(encoding)
            self.headers.append(dict(request.headers))
            status = self._http_status
        if status is not None:
            return None, web.Response(status=status, text="receiver told to fail")
        if request.content_type != "application/x-protobuf":
            return None, web.Response(status=415, text=f"unsupported content type {request.content_type}")
        # aiohttp already inflates gzip/deflate request bodies; inflate here only if it did not.
        if encoding == "gzip" and raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        elif encoding == "deflate" and raw[:1] == b"\x78":
            raw = zlib.decompress(raw)
        return raw, None

    async def _http_traces(self, request: web.Request) -> web.Response:
        body, error = await self._http_body(request)
        if error is not None:
            return error
        message = trace_service_pb2.ExportTraceServiceRequest()
        message.ParseFromString(body)
        self._take_traces(message, "http/protobuf")
        response = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=response, content_type="application/x-protobuf")

    async def _http_no_logs(self, request: web.Request) -> web.Response:
        await request.read()
        with self._lock:
            self.refused_logs += 1
        return web.Response(status=404, text="404: Not Found")

    async def _http_logs(self, request: web.Request) -> web.Response:
        body, error = await self._http_body(request)
        if error is not None:
            return error
        message = logs_service_pb2.ExportLogsServiceRequest()
        message.ParseFromString(body)
        self._take_logs(message, "http/protobuf")
        response = logs_service_pb2.ExportLogsServiceResponse().SerializeToString()
        return web.Response(body=response, content_type="application/x-protobuf")


@pytest_asyncio.fixture(scope="session")
async def otlp_receiver_session() -> AsyncIterator[OtlpReceiver]:
    receiver = await OtlpReceiver().start()
    yield receiver
    await receiver.stop()


@pytest.fixture
def otlp_receiver(otlp_receiver_session: OtlpReceiver) -> OtlpReceiver:
    otlp_receiver_session.reset()
    return otlp_receiver_session


@pytest_asyncio.fixture(scope="session")
async def traces_only_receiver_session() -> AsyncIterator[OtlpReceiver]:
    receiver = await OtlpReceiver(logs=False).start()
    yield receiver
    await receiver.stop()


@pytest.fixture
def traces_only_receiver(traces_only_receiver_session: OtlpReceiver) -> OtlpReceiver:
    traces_only_receiver_session.reset()
    return traces_only_receiver_session
