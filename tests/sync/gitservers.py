"""Real git servers on 127.0.0.1 for the sync tests and ``bench/sync_bench.py``: the git daemon
(``git://``, receive-pack enabled) and smart HTTP through ``git http-backend`` behind a small
threaded WSGI server. Each picks a free port, waits until it accepts connections, and is stopped
(terminated, then killed) by its context manager."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[bytes] | None, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.02)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout_s} s")


@contextlib.contextmanager
def git_daemon(base_path: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """Run ``git daemon --export-all --enable=receive-pack`` serving ``base_path`` on a free
    loopback port; yields the URL prefix ``git://127.0.0.1:PORT`` (append ``/<repo dir>``)."""
    for _ in range(5):
        port = free_port()
        proc = subprocess.Popen(
            [
                "git", "daemon", "--export-all", "--enable=receive-pack", "--reuseaddr",
                f"--base-path={base_path}", "--listen=127.0.0.1", f"--port={port}",
                "--informative-errors", base_path,
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            _wait_listening(port, proc, 10.0)
        except RuntimeError:
            _stop(proc)
            continue
        try:
            yield f"git://127.0.0.1:{port}"
        finally:
            _stop(proc)
        return
    raise RuntimeError("could not start git daemon")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def http_backend_app(project_root: str, env: dict[str, str] | None = None) -> Any:
    """A WSGI app that runs ``git http-backend`` (CGI) for each request, receive-pack enabled
    (``REMOTE_USER`` is set)."""
    base_env = dict(env or os.environ)

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        cgi_env = {
            **base_env,
            "GIT_PROJECT_ROOT": project_root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": "tester",
            "REMOTE_ADDR": "127.0.0.1",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REQUEST_METHOD": environ["REQUEST_METHOD"],
            "PATH_INFO": environ.get("PATH_INFO", ""),
            "QUERY_STRING": environ.get("QUERY_STRING", ""),
            "CONTENT_TYPE": environ.get("CONTENT_TYPE", ""),
            "CONTENT_LENGTH": str(len(body)),
        }
        if environ.get("HTTP_GIT_PROTOCOL"):
            cgi_env["GIT_PROTOCOL"] = environ["HTTP_GIT_PROTOCOL"]
        if environ.get("HTTP_CONTENT_ENCODING"):
            cgi_env["HTTP_CONTENT_ENCODING"] = environ["HTTP_CONTENT_ENCODING"]
        proc = subprocess.run(
            ["git", "http-backend"], input=body, env=cgi_env, capture_output=True, check=False
        )
        head, _, payload = proc.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = proc.stdout.partition(b"\n\n")
        status = "200 OK"
        headers: list[tuple[str, str]] = []
        for line in head.decode("latin-1").splitlines():
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = value.strip()
            elif key:
                headers.append((key.strip(), value.strip()))
        start_response(status, headers)
        return [payload]

    return app


@contextlib.contextmanager
def http_server(project_root: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """Serve ``project_root``'s repositories over smart HTTP on a free loopback port; yields the
    URL prefix ``http://127.0.0.1:PORT`` (append ``/<repo dir>``)."""
    server = make_server(
        "127.0.0.1",
        0,
        http_backend_app(project_root, env),
        server_class=_ThreadingWSGIServer,
        handler_class=_QuietHandler,
    )
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        _wait_listening(port, None, 10.0)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
