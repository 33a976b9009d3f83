"""JSON-RPC as the LSP asks for it where pygls stays silent: every request gets an answer.

pygls logs and drops a body that is not JSON, a message whose params do not fit their types, and
any request after ``shutdown``; a client waiting for those answers waits forever. Here they get
the errors the protocol names: ParseError (id null: no id can be read), InvalidRequest,
InvalidParams, and InvalidRequest after shutdown.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, Optional

from cattrs import transform_error
from cattrs.errors import ClassValidationError
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest, JsonRpcParseError
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import RPCRequest

from .framing import AsyncReader, BadFrame, read_frames

logger = logging.getLogger(__name__)


class Cpu2gpuProtocol(LanguageServerProtocol):
    @property
    def shut_down(self) -> bool:
        return self._shutdown

    def receive(self, body: bytes) -> None:
        """Handle one frame's body, or answer the error that keeps it from being handled."""
        try:
            data = json.loads(body)
        except ValueError as error:  # (UnicodeDecodeError is one)
            self.reject(None, JsonRpcParseError(f"the body is not JSON: {error}"))
            return
        if not isinstance(data, dict) or data.get("jsonrpc") != self.VERSION:
            self.reject(_id_of(data), JsonRpcInvalidRequest("not a JSON-RPC 2.0 message"))
            return
        try:
            message = self.structure_message(data)  # (pygls logs why it does not fit)
        except JsonRpcException as error:
            if "method" in data and "id" in data:  # a request: its params do not fit their types
                self.reject(_id_of(data), JsonRpcInvalidParams(_why(error)))
            elif "method" not in data:
                logger.warning("dropped a response that does not fit its request: %s", _why(error))
            # a notification cannot be answered: pygls has logged it
            return
        self.handle_message(message)

    def handle_message(self, message: Any) -> None:
        if self._shutdown and isinstance(message, RPCRequest) and message.method != lsp.EXIT:
            self.reject(message.id, JsonRpcInvalidRequest(f"{message.method}: the server is shut down"))
            return
        super().handle_message(message)

    def reject(self, id: Optional[Any], error: JsonRpcException) -> None:
        logger.warning("answered %s: %s", type(error).__name__, error.message)
        if id is None:  # pygls's response type would leave the id out; JSON-RPC wants it null
            self._send_data({"jsonrpc": self.VERSION, "id": None,
                             "error": {"code": error.code, "message": error.message}})
        else:
            self._send_response(id, error=error.to_response_error())


def _why(error: JsonRpcException) -> str:
    """Where the message does not fit its type, in cattrs's words ("expected int @ $.params.x")."""
    cause = error.__cause__
    if isinstance(cause, ClassValidationError):
        return "invalid params: " + "; ".join(transform_error(cause, path="$"))
    return f"invalid params: {cause or error}"


def _id_of(data: Any) -> Optional[Any]:
    """The message's id where it is one JSON-RPC allows (a string or a number), else None."""
    id = data.get("id") if isinstance(data, dict) else None
    return id if isinstance(id, (str, int)) and not isinstance(id, bool) else None


async def serve(reader: AsyncReader, protocol: Cpu2gpuProtocol, stop: threading.Event) -> None:
    """Read frames and handle their messages until the end of the stream (or ``exit``, which raises
    SystemExit with its status)."""
    async for frame in read_frames(reader):
        if stop.is_set():
            return
        if isinstance(frame, BadFrame):
            protocol.reject(None, JsonRpcParseError(frame.reason))
            continue
        try:
            protocol.receive(frame)
        except Exception:  # a bug in one message's handling must not end the server
            logger.exception("could not handle a message")


__all__ = ["Cpu2gpuProtocol", "serve"]
