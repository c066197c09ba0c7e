"""Synthetic agent traffic for the compose stack: OTLP/HTTP protobuf export requests to the Collector.

Several agents with excellent, partial and poor answers (sidecar.embedded.traffic.TrafficGenerator), so the
dashboard shows different alignment per agent. Env: OTLP_TRACES_URL (default
http://otel-collector:4318/v1/traces), TRACES_PER_SECOND (default 2), SEED.
"""

from __future__ import annotations

import os
import sys
import time
import urllib.error
import urllib.request

from sidecar.embedded.traffic import TrafficGenerator


def main() -> None:
    url = os.environ.get("OTLP_TRACES_URL", "http://otel-collector:4318/v1/traces")
    per_second = float(os.environ.get("TRACES_PER_SECOND", "2"))
    generator = TrafficGenerator(seed=int(os.environ.get("SEED", "7")))
    sent = 0
    print(f"sending {per_second:g} traces/s to {url}", flush=True)
    while True:
        trace = generator.trace()
        request = urllib.request.Request(
            url,
            data=trace.request.SerializeToString(),
            headers={"Content-Type": "application/x-protobuf"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                response.read()
            sent += 1
            if sent % 100 == 0:
                print(f"{sent} traces sent", flush=True)
        except (urllib.error.URLError, OSError) as exc:  # the Collector is starting: retry
            print(f"export failed ({exc}); retrying", file=sys.stderr, flush=True)
            time.sleep(2)
            continue
        time.sleep(1 / per_second if per_second > 0 else 1)


if __name__ == "__main__":
    main()
