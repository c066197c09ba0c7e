"""The compose stack's stand-in judge: OpenAI-compatible, answers with transparent word rules.

It is NOT a language model (see sidecar.embedded.heuristic_judge): it lets the stack run with no API key.
Runs in the scoring-sidecar image: python /demo/stand_in_judge.py (PORT, default 8080).
"""

from __future__ import annotations

import asyncio
import os

from sidecar.embedded.heuristic_judge import STAND_IN_NOTICE, heuristic_reply
from sidecar.testing.judge_server import JudgeServer


async def main() -> None:
    port = int(os.environ.get("PORT", "8080"))
    server = await JudgeServer(heuristic_reply, record=False).start(host="0.0.0.0", port=port)
    print(f"{STAND_IN_NOTICE}\nlistening on 0.0.0.0:{server.port} (OpenAI-compatible, /v1)", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
