"""The frames of the base protocol (``Content-Length`` headers, a blank line, a body), read so that
one broken frame costs that frame only.

pygls's reader matches ``Content-Length: N\\r\\n`` exactly and, on anything else, reads the rest of
the stream out of step: every later message is lost. Here headers may end in LF alone, a frame with
no usable length is reported (``BadFrame``) and skipped, and after one the reader finds its step
again at the next ``Content-Length:`` header, even when it follows a broken body on the same line.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, Protocol, Union

logger = logging.getLogger(__name__)

_LENGTH = b"content-length:"
MAX_BODY = 1 << 30  # a larger length is a broken header, not a document: do not try to allocate it


class AsyncReader(Protocol):
    """pygls's ``StdinAsyncReader``: a line, and up to ``n`` bytes (fewer only at the end)."""

    def readline(self) -> Awaitable[bytes]: ...

    def readexactly(self, n: int) -> Awaitable[bytes]: ...


@dataclass
class BadFrame:
    reason: str


async def read_frames(reader: AsyncReader) -> AsyncIterator[Union[bytes, BadFrame]]:
    """The body of each frame, or a ``BadFrame``, until the end of the stream."""
    while True:
        headers: dict[bytes, bytes] = {}
        while True:  # the header lines, up to the blank line
            line = await reader.readline()
            if not line:
                return
            start = line.lower().find(_LENGTH)
            if start > 0:  # a header after the rest of a broken body: a new frame begins there
                if headers:
                    yield BadFrame("a frame without the blank line after its headers")
                    headers = {}
                else:
                    logger.warning("skipped %d bytes that are not in a frame", start)
                line = line[start:]
            text = line.strip()
            if not text:
                if headers:
                    break
                continue  # (blank lines between frames)
            name, _, value = text.partition(b":")
            headers[name.strip().lower()] = value.strip()
        length = headers.get(b"content-length")
        if length is None:
            yield BadFrame("a frame without Content-Length")
            continue
        if not length.isdigit() or int(length) > MAX_BODY:
            yield BadFrame(f"a frame with Content-Length {length.decode('ascii', 'replace')!r}")
            continue
        body = await reader.readexactly(int(length))
        if len(body) < int(length):
            return  # the stream ended inside the body
        yield body
