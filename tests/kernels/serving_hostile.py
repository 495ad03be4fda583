"""A hostile OpenAI-compatible server (aiohttp.web) for the serving cheat tests: each route
prefix is one behaviour of a server that wants better recorded figures than it earns, or wants
to hang or mislead the client.

Run as ``python serving_hostile.py``; it binds 127.0.0.1 on a free port, prints ``PORT <n>`` and
serves until killed. Routes ``POST /B/v1/chat/completions`` and ``GET /B/v1/models`` for each
behaviour B:

- ``honest``: a role chunk, then ``max_tokens`` content chunks (20 ms to the first, 2 ms
  each further), a usage chunk with the true count, ``data: [DONE]``;
- ``fast``: the same with a 2 ms first token (the "other server" a redirect points to);
- ``error_forever``: HTTP 500 whose body never ends (1 KiB every 50 ms);
- ``split_no_usage``: each token streamed as two content chunks, no usage chunk (twice as many
  "tokens" as ``max_tokens`` in the same time);
- ``redirect``: HTTP 307 to the ``fast`` route (a candidate measured as another server);
- ``short_claims_full``: streams half of ``max_tokens`` and reports ``max_tokens`` in its
  usage (an answer that ends early, counted as a full one);
- ``cold_connections``: the first request on each new connection takes 300 ms to its first
  token (connection set-up, per-connection state) and answers ``coldN`` tokens, later ones
  20 ms and ``tN``;
- ``choices_not_a_list``: a chunk whose ``choices`` is a number;
- ``error_object``: half the tokens, then a top-level error object (``"object": "error"``, the
  form of vLLM's errors) instead of the rest, then ``data: [DONE]``;
- ``long_line``: a ``data:`` line of 1 MiB (longer than the client reads as one line);
- ``deep_json``: a chunk of 50,000 nested JSON arrays (deeper than a recursive decoder goes);
- ``dup_choices``: streams half of ``max_tokens``, each token twice (as choices 0 and 1 of one
  chunk), no usage: the count and the text of a full answer;
- ``memo``: remembers the prompts it answered: 40 ms to the first token of a new one, 2 ms of
  one seen before (an answer cache: it profits from the run repeating its requests);
- ``hang``: sends its headers and then nothing, ever;
- ``drifts_where_slow``: by blocks of 10 requests, fast (10 ms to the first token) in its first
  three blocks, 30 times slower in the fourth: a window made to look like drift, so that its
  pair is left out;
- ``selective``: by blocks of 8 requests (one window of the tests' load), fast (10 ms to the
  first token) in even blocks; slow (200 ms) in odd blocks, where it also fails the block's
  fourth request (HTTP 500) so that the window's pair is left out of the comparison.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiohttp import web


@contextmanager
def hostile() -> Iterator[str]:
    """Start the hostile server in a process of its own; yield ``http://127.0.0.1:PORT``; kill
    it on exit."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve())], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("PORT "), line
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.kill()
        proc.wait(timeout=10)


#: Requests begun, per behaviour.
COUNTS: dict[str, int] = {}
#: Prompts the ``memo`` behaviour answered.
SEEN: set[str] = set()
#: Connections (their transports' ids) that have carried a request.
CONNECTIONS: set[int] = set()


async def _stream(
    request: web.Request,
    tokens: int,
    ttft_s: float,
    *,
    split: bool = False,
    usage: bool = True,
    claimed: int | None = None,
    word: str = "t",
) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)

    async def send(obj: Any) -> None:
        await resp.write(f"data: {json.dumps(obj)}\n\n".encode())

    await send({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    await asyncio.sleep(ttft_s)
    for i in range(tokens):
        if i:
            await asyncio.sleep(0.002)
        pieces = [f"{word}{i}", " "] if split else [f"{word}{i} "]
        for piece in pieces:
            await send({"choices": [{"index": 0, "delta": {"content": piece}}]})
    if usage:
        await send({"choices": [], "usage": {"completion_tokens": claimed or tokens}})
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def completions(request: web.Request) -> web.StreamResponse:
    """One behaviour's answer (see the module docstring)."""
    behaviour = request.match_info["behaviour"]
    body = await request.json()
    tokens = int(body["max_tokens"])
    if behaviour == "honest":
        return await _stream(request, tokens, 0.02)
    if behaviour == "fast":
        return await _stream(request, tokens, 0.002)
    if behaviour == "split_no_usage":
        return await _stream(request, tokens, 0.02, split=True, usage=False)
    if behaviour == "short_claims_full":
        return await _stream(request, tokens // 2, 0.02, claimed=tokens)
    if behaviour == "cold_connections":
        fresh = id(request.transport) not in CONNECTIONS
        CONNECTIONS.add(id(request.transport))
        return await _stream(request, tokens, 0.3 if fresh else 0.02, word="cold" if fresh else "t")
    if behaviour in ("choices_not_a_list", "deep_json", "long_line"):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        line = {
            "choices_not_a_list": '{"choices": 5}',
            "deep_json": "[" * 50_000,
            "long_line": "0" * (1 << 20),
        }[behaviour]
        await resp.write(f"data: {line}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
    if behaviour == "error_object":
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(tokens // 2):
            piece = {"choices": [{"index": 0, "delta": {"content": f"t{i} "}}]}
            await resp.write(f"data: {json.dumps(piece)}\n\n".encode())
        error = {"object": "error", "message": "out of memory", "type": "InternalServerError"}
        await resp.write(f"data: {json.dumps(error)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
    if behaviour == "dup_choices":
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await asyncio.sleep(0.02)
        for i in range(tokens // 2):
            piece = {"content": f"t{i} "}
            choices = [{"index": 0, "delta": piece}, {"index": 1, "delta": piece}]
            await resp.write(f"data: {json.dumps({'choices': choices})}\n\n".encode())
            await asyncio.sleep(0.002)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
    if behaviour == "memo":
        key = json.dumps(body.get("messages") or body.get("prompt"))
        seen = key in SEEN
        SEEN.add(key)
        return await _stream(request, tokens, 0.002 if seen else 0.04)
    if behaviour == "hang":
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await asyncio.Event().wait()
    if behaviour == "redirect":
        raise web.HTTPTemporaryRedirect("/fast/v1/chat/completions")
    if behaviour == "drifts_where_slow":
        count = COUNTS[behaviour] = COUNTS.get(behaviour, 0) + 1
        return await _stream(request, tokens, 0.3 if (count - 1) // 10 == 3 else 0.01)
    if behaviour == "selective":
        count = COUNTS[behaviour] = COUNTS.get(behaviour, 0) + 1
        block, position = divmod(count - 1, 8)
        if block % 2 == 0:
            return await _stream(request, tokens, 0.01)
        if position == 3:
            raise web.HTTPInternalServerError(text="failing where slow, on purpose")
        return await _stream(request, tokens, 0.2)
    if behaviour == "error_forever":
        resp = web.StreamResponse(status=500, headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        while True:
            await resp.write(b"x" * 1024)
            await asyncio.sleep(0.05)
    raise web.HTTPNotFound()


async def models(request: web.Request) -> web.Response:
    """``GET /B/v1/models``: always ready."""
    return web.json_response({"data": [{"id": request.match_info["behaviour"]}]})


async def _serve() -> None:
    app = web.Application()
    app.router.add_post("/{behaviour}/v1/chat/completions", completions)
    app.router.add_get("/{behaviour}/v1/models", models)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"PORT {port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_serve())
