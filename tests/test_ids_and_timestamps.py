"""Score ids, record timestamps and key partitioning: the fast forms equal their reference definitions."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from exporters.partitioner import KeyPartitioner, murmur2
from sidecar.core import SCORE_ID_NAMESPACE, score_id_for
from sidecar.core.timestamps import iso_millis

hex_ids = st.text(alphabet="0123456789abcdefABCDEF", min_size=1, max_size=32)


@given(st.text(max_size=40), hex_ids, hex_ids)
def test_score_id_is_uuid5_of_fingerprint_trace_and_span(fingerprint: str, trace_id: str, span_id: str) -> None:
    name = f"{fingerprint}:{trace_id.lower()}:{span_id.lower()}"
    assert score_id_for(fingerprint, trace_id, span_id) == str(uuid.uuid5(SCORE_ID_NAMESPACE, name))
    # Case of the hex ids never changes the score.
    assert score_id_for(fingerprint, trace_id.upper(), span_id.upper()) == score_id_for(fingerprint, trace_id, span_id)


@given(st.integers(min_value=0, max_value=253_402_300_799_999_999_999))  # up to 9999-12-31T23:59:59.999
def test_iso_millis_is_javascripts_to_iso_string(unix_nano: int) -> None:
    seconds, nanos = divmod(unix_nano, 1_000_000_000)
    moment = datetime.fromtimestamp(seconds, UTC).replace(microsecond=nanos // 1000)
    assert iso_millis(unix_nano) == moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@given(st.binary(max_size=80))
def test_murmur2_is_kafkas(data: bytes) -> None:
    from aiokafka.partitioner import DefaultPartitioner
    from aiokafka.partitioner import murmur2 as reference

    assert murmur2(data) == reference(data) & 0xFFFFFFFF
    partitions = list(range(7))
    assert KeyPartitioner()(data, partitions, partitions) == DefaultPartitioner()(data, partitions, partitions)
