"""A stand-in OpenAI-compatible model server (aiohttp.web) whose latencies the tests control.

Run as ``python serving_standin.py CONFIG_JSON``; it binds 127.0.0.1 on a free port, prints
``PORT <n>`` on stdout and serves until killed. Routes, for each profile name P of the config:
``POST /P/v1/chat/completions`` and ``POST /P/v1/completions`` (streaming server-sent events
like vLLM: a first chunk with the role and empty content, one chunk per token, a usage chunk,
``data: [DONE]``), ``GET /P/v1/models``; ``POST /admin/live?profile=P`` makes the routes of ``live`` serve
profile P (two configurations behind one URL, switched between windows).

CONFIG (JSON): ``{"seed": int, "profiles": {P: {"ttft_s", "tpot_s", "sigma", "fail",
"stop_after", "usage_factor"}},
"step_after": int | null, "step_factor": float}``: a request's time to first token is
``ttft_s * lognormal(0, sigma)`` (seeded), times ``step_factor`` once the server has begun more
than ``step_after`` requests in all (a drift with a known onset); each further token takes
``tpot_s``. A profile with ``fail`` answers HTTP 500; with ``stop_after`` N it ends answers
after N tokens unless the request asks ``ignore_eos``; with ``usage_factor`` F it reports F times
the tokens it sent.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiohttp import web

#: A fast profile: 50 ms to the first token, 4 ms per further token, 10 % lognormal spread.
BASE = {"ttft_s": 0.05, "tpot_s": 0.004, "sigma": 0.1}


@contextmanager
def standin(config: dict[str, Any]) -> Iterator[str]:
    """Start the stand-in server with ``config`` in a process of its own; yield its base,
    ``http://127.0.0.1:PORT``; kill it on exit."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), json.dumps(config)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("PORT "), line
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.kill()
        proc.wait(timeout=10)


def make_app(config: dict[str, Any]) -> web.Application:
    """The aiohttp application of ``config`` (see the module docstring)."""
    rng = random.Random(config.get("seed", 0))
    state: dict[str, Any] = {"begun": 0, "live": None}
    profiles: dict[str, dict[str, Any]] = config["profiles"]

    def lookup(name: str) -> dict[str, Any] | None:
        # ``live`` serves the profile last chosen by POST /admin/live?profile=P (a stand-in for
        # a server restarted with another configuration)
        return profiles.get(state["live"] if name == "live" else name)

    async def choose(request: web.Request) -> web.Response:
        if request.query.get("profile") not in profiles:
            raise web.HTTPBadRequest(text="unknown profile")
        state["live"] = request.query["profile"]
        return web.json_response({"live": state["live"]})

    async def completions(request: web.Request) -> web.StreamResponse:
        profile = lookup(request.match_info["profile"])
        if profile is None:
            raise web.HTTPNotFound()
        if profile.get("fail"):
            return web.json_response({"error": {"message": "failing on purpose"}}, status=500)
        body = await request.json()
        chat = request.path.endswith("/chat/completions")
        state["begun"] += 1
        factor = 1.0
        step_after = config.get("step_after")
        if step_after is not None and state["begun"] > step_after:
            factor = float(config.get("step_factor", 1.0))
        ttft = profile["ttft_s"] * rng.lognormvariate(0.0, profile.get("sigma", 0.0)) * factor
        tokens = int(body["max_tokens"])
        if profile.get("stop_after") and not body.get("ignore_eos"):
            tokens = min(tokens, int(profile["stop_after"]))  # an end of sequence comes early
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def send(obj: Any) -> None:
            await resp.write(f"data: {json.dumps(obj)}\n\n".encode())

        if chat:
            await send({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        await resp.write(b": keep-alive\n\n")
        await asyncio.sleep(ttft)
        for i in range(tokens):
            if i:
                await asyncio.sleep(profile["tpot_s"])
            piece = {"delta": {"content": f"t{i} "}} if chat else {"text": f"t{i} "}
            await send({"choices": [{"index": 0, **piece}]})
        usage = int(tokens * profile.get("usage_factor", 1))
        await send({"choices": [], "usage": {"completion_tokens": usage}})
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def models(request: web.Request) -> web.Response:
        if lookup(request.match_info["profile"]) is None:
            raise web.HTTPServiceUnavailable()
        return web.json_response({"data": [{"id": request.match_info["profile"]}]})

    app = web.Application()
    app.router.add_post("/{profile}/v1/chat/completions", completions)
    app.router.add_post("/{profile}/v1/completions", completions)
    app.router.add_get("/{profile}/v1/models", models)
    app.router.add_post("/admin/live", choose)
    return app


async def _serve(config: dict[str, Any]) -> None:
    runner = web.AppRunner(make_app(config), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"PORT {port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_serve(json.loads(sys.argv[1])))
