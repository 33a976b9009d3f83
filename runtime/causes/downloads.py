"""Telling "a download failed" apart from a failure of the migration.

A run that stops because it could not fetch something (no network, a firewall, a
moved file: ``URLError``, a refused connection, a failed name lookup, an HTTP error
status, ``requests``' ``ConnectionError``...) shows nothing about the migration:
the original would stop there too. It is reported as "needs data: URL", with the
URL (or host) taken from the exception or from the frames of its traceback.

Used in every run, with or without ``--synthetic-data``.
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import ssl
import types
import urllib.error
import urllib.request

from .needsdata import exception_chain

# Libraries whose own exception classes are network failures when their names say so.
_HTTP_LIBRARIES = ("requests", "urllib3", "httpx", "aiohttp")
_NETWORK_NAME = re.compile(r"Connect|Timeout|Resolution|MaxRetry|SSL|Proxy|HTTP|Network")
# A library's own error raised after its fetch failed, outside the except block (torchvision's
# "Error downloading train-images-idx3-ubyte.gz", Hugging Face's "We couldn't connect to ...").
_FETCH_WORDS = re.compile(r"(?i)\b(?:error|fail(?:ed|ure)?|unable|could ?n[o']t|cannot|can't)\b[^.\n]{0,40}?"
                          r"\b(?:download|connect|reach|resolve|fetch)")
_URL = re.compile(r"\b(?:https?|ftp)://[^\s'\"<>()]+")
_URL_LOCALS = re.compile(r"(?i)url|uri|origin|mirror")
_URL_NAMES = {"url", "fullurl", "full_url", "uri"}


def _kind(e: BaseException) -> str | None:
    """"network" for a fetch's failure; "maybe" for an OS-level one (a refused connection, a timeout)
    that counts only where a fetch target is found; None otherwise."""
    if isinstance(e, (urllib.error.URLError, http.client.HTTPException, socket.gaierror, socket.herror)):
        return "network"
    cls = type(e)
    if cls.__module__.partition(".")[0] in _HTTP_LIBRARIES and _NETWORK_NAME.search(cls.__name__):
        return "network"
    if isinstance(e, (ConnectionError, TimeoutError, ssl.SSLError)):
        return "maybe"
    return None


def _url_of(value) -> str | None:
    if isinstance(value, urllib.request.Request):
        return value.full_url
    if isinstance(value, str) and _URL.fullmatch(value.strip()):
        return value.strip()
    return None


def _frames(e: BaseException) -> list[types.FrameType]:
    """The frames of the exception's traceback, innermost first."""
    out = []
    tb = e.__traceback__
    while tb is not None:
        out.append(tb.tb_frame)
        tb = tb.tb_next
    return out[::-1]


def _from_frame(frame: types.FrameType) -> str | None:
    """What this frame was fetching: a Request, a URL-named string, an HTTP connection's host,
    the address of ``socket.create_connection``."""
    local = frame.f_locals
    for value in local.values():
        if type(value).__name__ == "Request":
            url = _url_of(value)
            if url:
                return url
    # `url` itself before the names that hold a part of it (torchvision's `mirror` + file name)
    named = sorted((n for n in local if _URL_LOCALS.search(n)), key=lambda n: n.lower() not in _URL_NAMES)
    for name in named:
        url = _url_of(local[name])
        if url:
            return url
    conn = local.get("self")
    if isinstance(conn, http.client.HTTPConnection) and isinstance(getattr(conn, "host", None), str):
        return f"{conn.host}:{conn.port}" if conn.port else conn.host
    address = local.get("address")
    if frame.f_code.co_name == "create_connection" and isinstance(address, tuple) and len(address) == 2:
        return f"{address[0]}:{address[1]}"
    return None


def _target(e: BaseException) -> str | None:
    """The URL or host the exception was raised fetching, from the exception or its frames."""
    for attr in ("url", "filename"):  # urllib's HTTPError
        url = _url_of(getattr(e, attr, None))
        if url:
            return url
    request = getattr(e, "request", None)  # requests, httpx
    url = _url_of(str(getattr(request, "url", "") or ""))
    if url:
        return url
    for frame in _frames(e):
        found = _from_frame(frame)
        if found:
            return found
    m = _URL.search(str(e))
    return m.group(0).rstrip(".,;:") if m else None


def _reason(e: BaseException) -> str:
    reason = getattr(e, "reason", None)  # URLError's own cause; HTTPError's reason is the status text
    text = str(e) if reason is None or hasattr(e, "code") else str(reason)
    return text.splitlines()[0][:200] if text else type(e).__name__


def _refused_save(chain: list[BaseException]) -> dict | None:
    """A download refused its place in a cache outside the run's folder (``~/.cache/torch/hub``:
    the isolation lets the run write only in its own copy), raised while a frame was fetching a URL.
    Offline it would have failed anyway; either way it shows nothing about the migration."""
    for e in chain:
        if isinstance(e, PermissionError):
            target = next((found for found in map(_from_frame, _frames(e)) if found), None)
            if target is not None:
                where = getattr(e, "filename", None)
                # the folder, not a partial file's random name
                where = "its cache" if not where else where if os.path.isdir(where) else os.path.dirname(where)
                return {"path": target, "is_path": False, "download": True,
                        "what": f"the download could not be saved: {where} is outside the run's copy "
                                f"(fetch it once before verify)"}
    return None


def find(exc: BaseException) -> dict | None:
    """What the failed run tried to fetch: {"path", "what", "is_path", "download"}, or None when it
    failed for another reason."""
    chain = exception_chain(exc)
    outer = chain[0]
    refused = _refused_save(chain)
    if refused is not None:
        return refused
    kinds = [(e, _kind(e)) for e in chain]
    net = next(((e, k) for e, k in kinds if k), None)
    if net is None:
        if not _FETCH_WORDS.search(str(outer)):
            return None
        failed, target = outer, _target(outer)  # the message says a fetch failed: its URL must be found
        if target is None:
            return None
    else:
        failed, kind = net
        # Raised while handling the failed fetch, for a reason of its own (a bug in the fallback that
        # runs in the except block), is that reason's failure: only a wrapper of the fetch counts.
        if failed is not outer and not isinstance(outer, (SystemExit, OSError)) \
                and not _FETCH_WORDS.search(str(outer)):
            return None
        target = next(filter(None, (_target(e) for e in chain)), None)
        if target is None and kind == "maybe":
            return None  # a refused pipe or a timeout that no fetch shows: not taken for a download
    return {"path": target or "an address it could not reach", "what": f"the download failed: {_reason(failed)}",
            "is_path": False, "download": True}
