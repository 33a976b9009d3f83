"""`cpu2gpu server` keeps answering: broken frames, wrong params, requests after shutdown, exit codes,
a big file that must not hold up the others, and stdin closed in the middle of an analysis.

The client here is written by hand on purpose (a framed JSON-RPC client over the server's stdin and
stdout), so that it can send what a well-behaved client library never would. Waits are for
messages, with a generous timeout; nothing asserts on seconds.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Optional
from unittest.mock import ANY

import pytest

pytest.importorskip("pygls")

WAIT_S = float(os.environ.get("CPU2GPU_TEST_LSP_WAIT_S", "120"))  # a bound for a busy machine, not a measurement
EXIT_WAIT_S = 30.0  # stdin closed: the server must be gone by then (it takes well under a second)

PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602

SMALL = "import torch\nmodel = torch.nn.Linear(4, 2)\nprint(model(torch.randn(3, 4)).detach().numpy())\n"

BLOCK = """
def step_{n}(model, optimizer, loader):
    total = 0.0
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total / len(loader)
"""


def big_script(kilobytes: int) -> str:
    """A training script of about this size: the analysis of 600 KB takes seconds."""
    parts = ["import torch\nimport torch.nn as nn\n"]
    size, n = 0, 0
    while size < kilobytes * 1024:
        parts.append(BLOCK.format(n=n))
        size += len(parts[-1])
        n += 1
    parts.append("\nmodel = nn.Linear(16, 4)\nprint(model(torch.randn(2, 16)).numpy())\n")
    return "".join(parts)


def frame(message: Any) -> bytes:
    body = json.dumps(message).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class Server:
    """``cpu2gpu server`` as a subprocess, and a framed JSON-RPC client of it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.log = open(folder / "server.log", "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cpu2gpu", "server", "--debounce", "0"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, cwd=folder)
        self.inbox: "queue.Queue[Optional[dict]]" = queue.Queue()
        self.received: list[dict] = []
        self.ids = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        while True:
            length = None
            while True:
                line = stdout.readline()
                if not line:
                    self.inbox.put(None)
                    return
                if not line.strip():
                    break
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            assert length is not None, "the server sent a frame without Content-Length"
            self.inbox.put(json.loads(stdout.read(length)))

    # -- sending --

    def send_bytes(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def request(self, method: str, params: Any = None) -> int:
        self.ids += 1
        self.send_bytes(frame({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}))
        return self.ids

    def notify(self, method: str, params: Any = None) -> None:
        self.send_bytes(frame({"jsonrpc": "2.0", "method": method, "params": params}))

    def initialize(self) -> None:
        self.answer(self.request("initialize", {"processId": None, "rootUri": self.folder.as_uri(),
                                                "capabilities": {}}))
        self.notify("initialized", {})

    def open(self, name: str, text: str) -> str:
        uri = (self.folder / name).as_uri()
        self.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": text}})
        return uri

    def close_stdin(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()

    # -- receiving --

    def wait_for(self, wanted: Callable[[dict], bool], what: str) -> dict:
        """The first message received that is ``wanted`` (every message is kept in ``received``)."""
        for message in self.received:
            if wanted(message):
                return message
        while True:
            try:
                message = self.inbox.get(timeout=WAIT_S)
            except queue.Empty:
                raise AssertionError(f"no {what} from the server in {WAIT_S} s; it sent {self.received}") from None
            if message is None:
                raise AssertionError(f"the server closed its stdout before {what}; it sent {self.received}")
            self.received.append(message)
            if wanted(message):
                return message

    def answer(self, id: Any) -> dict:
        return self.wait_for(lambda m: "method" not in m and m.get("id") == id, f"an answer to request {id}")

    def diagnostics(self, uri: str) -> dict:
        return self.wait_for(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                             and m["params"]["uri"] == uri, f"diagnostics for {uri}")

    def exited(self) -> Optional[int]:
        """The exit status, once the server has exited by itself within EXIT_WAIT_S (else None: killed)."""
        try:
            return self.process.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:  # (stdin closed before, or the pipe broken)
                    pass
        self.log.close()


@pytest.fixture
def server(tmp_path):
    started = Server(tmp_path)
    try:
        started.initialize()
        yield started
    finally:
        started.stop()


def errors(server: Server) -> list[dict]:
    return [m["error"] for m in server.received if "error" in m]


# -- broken frames: answered with a parse error, and the next request is answered -------------

def _body() -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 99, "method": "textDocument/hover", "params": {}}).encode()


BROKEN = {
    "not-a-number": b"Content-Length: abc\r\n\r\n" + _body(),
    "negative": b"Content-Length: -5\r\n\r\n" + _body(),
    "shorter-than-the-body": b"Content-Length: %d\r\n\r\n" % (len(_body()) - 7) + _body(),
    "no-length": b"Content-Type: application/vscode-jsonrpc\r\n\r\n" + _body(),
    "not-json": b"Content-Length: 9\r\n\r\n{not json",
}


def code_action(server: Server, uri: Optional[str] = None) -> int:
    """A request the server answers at once (None: no such document)."""
    return server.request("textDocument/codeAction", {
        "textDocument": {"uri": uri or (server.folder / "nowhere.py").as_uri()},
        "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
        "context": {"diagnostics": []}})


def test_a_broken_frame_gets_a_parse_error_and_the_next_request_an_answer(server: Server):
    for name, broken in BROKEN.items():  # one server: each broken frame, then a good one
        server.send_bytes(broken)
        answer = server.answer(code_action(server))
        assert "error" not in answer and answer["result"] is None, name
        assert [m for m in server.received if "error" in m][-1] == {
            "jsonrpc": "2.0", "id": None, "error": {"code": PARSE_ERROR, "message": ANY}}, name
    assert [e["code"] for e in errors(server)] == [PARSE_ERROR] * len(BROKEN)


def test_a_body_that_is_not_a_message_is_an_invalid_request(server: Server):
    server.send_bytes(frame([1, 2, 3]))
    assert server.answer(code_action(server))["result"] is None
    assert [e["code"] for e in errors(server)] == [INVALID_REQUEST]


def test_a_frame_with_lf_line_ends_is_read(server: Server):
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "shutdown"}).encode()
    server.send_bytes(b"Content-Length: %d\n\n" % len(body) + body)
    assert server.answer(7) == {"jsonrpc": "2.0", "id": 7, "result": None}


class _Bytes:
    """``framing.read_frames``'s reader over bytes in memory."""

    def __init__(self, data: bytes) -> None:
        self.stream = io.BytesIO(data)

    async def readline(self) -> bytes:
        return self.stream.readline()

    async def readexactly(self, n: int) -> bytes:
        return self.stream.read(n)


def _frames(data: bytes) -> list:
    from cpu2gpu.lsp.framing import read_frames

    async def read() -> list:
        return [frame async for frame in read_frames(_Bytes(data))]

    return asyncio.run(read())


def test_the_reader_finds_its_step_again_after_each_kind_of_broken_frame():
    from cpu2gpu.lsp.framing import BadFrame

    good = frame({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    body = good.split(b"\r\n\r\n", 1)[1]
    data = b"".join([*(broken + good for broken in BROKEN.values()),
                     b"Content-Length: 5\r\n" + body + good,  # no blank line after the header
                     b"\r\n\r\n" + good,  # blank lines between frames
                     b"content-length: %d\n\n" % len(body) + body,  # another case, LF only
                     b"Content-Length: 500\r\n\r\n{\"cut"])  # the stream ends inside a body
    kinds = ["bad" if isinstance(f, BadFrame) else "good" if f == body else "not json" for f in _frames(data)]
    assert kinds == ["bad", "good",  # not-a-number
                     "bad", "good",  # negative
                     "not json", "good",  # shorter-than-the-body: a body (not JSON: the protocol says so)
                     "bad", "good",  # no-length
                     "not json", "good",  # not-json
                     "bad", "good",  # no blank line
                     "good", "good"]  # blank lines between, LF only; the cut body: nothing


# -- requests the server cannot serve: answered with the error the protocol names ------------

def test_params_of_the_wrong_types_are_invalid_params(server: Server):
    answer = server.answer(server.request("textDocument/codeAction", {"textDocument": 5, "range": "everywhere"}))
    assert answer["error"]["code"] == INVALID_PARAMS
    uri = server.open("train.py", SMALL)  # and the server goes on
    assert server.diagnostics(uri)["params"]["diagnostics"]


def test_a_request_after_shutdown_is_an_invalid_request_and_exit_then_exits_0(server: Server):
    assert server.answer(server.request("shutdown"))["result"] is None
    assert server.answer(code_action(server))["error"]["code"] == INVALID_REQUEST
    server.notify("exit")
    assert server.exited() == 0


def test_exit_without_shutdown_exits_1(server: Server):
    server.notify("exit")
    assert server.exited() == 1


# -- a big file: off the protocol's loop, one document at a time -----------------------------

@pytest.mark.slow
def test_another_documents_diagnostics_do_not_wait_for_a_big_file(server: Server):
    big = server.open("big.py", big_script(600))
    small = server.open("small.py", SMALL)
    server.diagnostics(small)
    published = [m["params"]["uri"] for m in server.received if m.get("method") == "textDocument/publishDiagnostics"]
    assert big not in published, "the small document's diagnostics came after the big one's"


@pytest.mark.slow
def test_stdin_closed_during_an_analysis_ends_the_server(server: Server):
    big = server.open("big.py", big_script(2048))
    server.answer(code_action(server))  # answered after the didOpen before it: big.py's analysis is under way
    children = _descendants(server.process.pid)
    server.close_stdin()
    assert server.exited() is not None, f"the server was still running {EXIT_WAIT_S} s after its stdin closed"
    assert not any(m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == big
                   for m in server.received), "the analysis had ended before stdin closed: the test proves nothing"
    assert not [pid for pid in children if _running(pid)], "the analysis lives on after the server"


def _descendants(pid: int) -> list[int]:
    """The processes under ``pid`` (Linux's /proc; elsewhere none are known)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").glob("[0-9]*/stat") if Path("/proc").is_dir() else []:
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.parent.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, its in parents.items() if its == parent]
        found += children
        frontier += children
    return found


def _running(pid: int) -> bool:
    """Whether ``pid`` is still running (a zombie waiting to be reaped has ended), within EXIT_WAIT_S."""
    import time

    deadline = time.monotonic() + EXIT_WAIT_S
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.1)
    return True
