"""Personal data planted in traces, for the redaction tests (docs/redaction.md quotes the corpus's figures).

``VALUES``: values of every supported entity, as people write them; ``MISSED``: values the recognizers are known
not to catch (recall is not 1); ``NEGATIVES``: text with numbers and codes that holds no personal data (what the
wider entity sets mistake for some: precision is not 1 either). ``pii_trace`` puts values in every part of a
whole-trace run; ``pii_text`` makes a sentence of them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from opentelemetry.trace import SpanKind, Tracer

from sidecar.core import names as n
from tests.support.otel import otlp_proto, record_spans

__all__ = [
    "ALLOWED",
    "MISSED",
    "NEGATIVES",
    "VALUES",
    "PiiTrace",
    "every_value",
    "pii_text",
    "pii_trace",
]

# The company's own support address: allow-listed in the tests, it must reach the judge as written.
ALLOWED = "support@acme-shop.example.com"

VALUES: dict[str, tuple[str, ...]] = {
    "EMAIL_ADDRESS": ("maria.lopez@example.com", "J.Smith+orders@mail.example.org"),
    "CREDIT_CARD": ("4111 1111 1111 1111", "5500-0000-0000-0004", "378282246310005"),
    "IBAN_CODE": ("DE89 3704 0044 0532 0130 00", "GB82WEST12345698765432"),
    "IP_ADDRESS": ("203.0.113.42", "2001:db8::8a2e:370:7334"),
    "PHONE_NUMBER": ("+1 415 555 0132", "(212) 555-0199", "+44 20 7946 0958"),
    "URL": ("https://shop.example.com/orders/8812?user=maria",),
    "MAC_ADDRESS": ("00:1A:2B:3C:4D:5E",),
    "CRYPTO": ("1BoatSLRHtKNngkdXEeobR76b53LETtpyT",),
    "DATE_TIME": ("1984-07-21", "21/07/1984"),
    "US_SSN": ("536-90-4399", "219-09-9999"),
    "US_ITIN": ("912-70-1234",),
    "US_PASSPORT": ("912803456",),
    "US_BANK_NUMBER": ("12345678901",),
    "US_DRIVER_LICENSE": ("H12345678",),
    "ABA_ROUTING_NUMBER": ("021000021",),
    "UK_NHS": ("401 023 2137",),
    "UK_NINO": ("AB 12 34 56 C",),
    "UK_POSTCODE": ("SW1A 1AA",),
    "ES_NIF": ("12345678Z",),
    "ES_NIE": ("X1234567L",),
    "IT_FISCAL_CODE": ("RSSMRA85T10A562S",),
    "PL_PESEL": ("44051401359",),
    "FI_PERSONAL_IDENTITY_CODE": ("131052-308T",),
    "SE_PERSONNUMMER": ("811218-9876",),
    "DE_TAX_ID": ("86095742719",),
    "AU_TFN": ("876 543 210",),
    "AU_MEDICARE": ("2123 45670 1",),
    "IN_PAN": ("AAAPZ1234C",),
    "IN_AADHAAR": ("2341 2341 2346",),
    "SG_NRIC_FIN": ("S1234567D",),
}


@dataclass(frozen=True)
class Missed:
    entity: str
    value: str
    why: str


# What the recognizers do not catch: each of these reaches a judge even with its entity on (docs/redaction.md).
MISSED: tuple[Missed, ...] = (
    Missed("EMAIL_ADDRESS", "maria (at) example (dot) com", "an address written out in words"),
    Missed("EMAIL_ADDRESS", "maria@localhost", "a domain without a public suffix"),
    Missed("CREDIT_CARD", "4111 1111 1111 1112", "a card number that fails the Luhn check (a typo)"),
    Missed("IBAN_CODE", "de89 3704 0044 0532 0130 00", "an IBAN written in lower case"),
    Missed("PHONE_NUMBER", "call me on 555 0132", "a local number without its area code"),
    Missed("US_SSN", "078-05-1120", "a number the SSA never issued (the Woolworth card)"),
    Missed("IP_ADDRESS", "10.0.0.256", "not an address (an octet over 255)"),
)

# Text that holds no personal data, with what looks like some: order and invoice numbers, versions, SKUs, ids.
NEGATIVES: tuple[str, ...] = (
    "Order #A-55120 shipped on 2024-03-01 at 14:05, tracking 1Z999AA10123456784.",
    "Version 2.3.11 fixed bug 4412; see commit 9f8e7d6.",
    "The total is $1,249.99 for 3 items, SKU 889912.",
    "Ticket 123456789 was closed after 45 minutes.",
    "Use port 8080 and a timeout of 30000 ms.",
    "The invoice number is 2024110500123.",
    "Temperatures ranged from 12 to 18 degrees.",
    "def factorial(n):\n    return 1 if n < 2 else n * factorial(n - 1)",
    "Three museums in Paris: the Louvre (9:00-18:00), the Musee d'Orsay (9:30-18:00).",
    "Run pip install numpy==1.26.4 and restart.",
    "Request 123e4567-e89b-12d3-a456-426614174000 failed in the log.",
    "The meeting is in room 4B on floor 12.",
    "ISBN 978-3-16-148410-0 is the second edition.",
    "Our support address is in the footer of every page.",
)


def every_value(entities: Iterable[str] | None = None) -> list[str]:
    """The corpus's values of ``entities`` (all of them by default), each once."""
    chosen = VALUES if entities is None else {e: VALUES[e] for e in entities}
    return [value for values in chosen.values() for value in values]


def pii_text(label: str, entities: Iterable[str] | None = None) -> str:
    """One sentence per value, naming where it stands (so a test can tell the fields apart in a prompt)."""
    return " ".join(f"{label} {i}: {value}." for i, value in enumerate(every_value(entities), 1))


@dataclass(frozen=True)
class PiiTrace:
    trace_id: str
    agent_span_id: str
    record: bytes  # the whole trace, OTLP protobuf, as the Collector writes it


def pii_trace(*, agent: str = "support-bot", allowed: str = ALLOWED) -> PiiTrace:
    """A GenAI agent trace with every value in its system instructions, the user's request, the answer, a tool
    call's arguments and its result, and a retrieved document; the allow-listed address beside them."""

    def build(tracer: Tracer) -> None:
        with (
            tracer.start_as_current_span("POST /support", kind=SpanKind.SERVER),
            tracer.start_as_current_span(
                f"invoke_agent {agent}",
                attributes={
                    n.GEN_AI_OPERATION_NAME: "invoke_agent",
                    n.GEN_AI_AGENT_NAME: agent,
                    "enduser.id": VALUES["EMAIL_ADDRESS"][0],
                    n.GEN_AI_SYSTEM_INSTRUCTIONS: json.dumps(
                        [{"type": "text", "content": f"Escalate to {allowed}. {pii_text('System')}"}]
                    ),
                    n.GEN_AI_INPUT_MESSAGES: json.dumps(
                        [{"role": "user", "parts": [{"type": "text", "content": pii_text("Request")}]}]
                    ),
                    n.GEN_AI_OUTPUT_MESSAGES: json.dumps(
                        [{"role": "assistant", "parts": [{"type": "text", "content": pii_text("Answer")}]}]
                    ),
                },
            ) as span,
        ):
            context = span.get_span_context()
            ids.append((f"{context.trace_id:032x}", f"{context.span_id:016x}"))
            with tracer.start_as_current_span(
                "execute_tool lookup_customer",
                attributes={
                    n.GEN_AI_OPERATION_NAME: "execute_tool",
                    "gen_ai.tool.name": "lookup_customer",
                    "gen_ai.tool.call.id": "call_1",
                    "gen_ai.tool.call.arguments": json.dumps({"query": pii_text("Argument")}),
                    "gen_ai.tool.call.result": json.dumps({"customer": pii_text("Result"), "contact": allowed}),
                },
            ):
                pass
            with tracer.start_as_current_span(
                "retrieve",
                attributes={
                    n.GEN_AI_OPERATION_NAME: "retrieval",
                    "retrieval.documents.0.document.content": pii_text("Document"),
                },
            ):
                pass

    ids: list[tuple[str, str]] = []
    spans = record_spans(build, service_name="support-api")
    trace_id, span_id = ids[0]
    return PiiTrace(trace_id, span_id, otlp_proto(spans))
