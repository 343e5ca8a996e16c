"""Typed errors of the xtwin client.

Every error the server answers carries a JSON body {"error": {"name", "status", "message"}}
(REST) or the same object in a WebSocket "ack" with "ok": false. The client raises the subclass
of XtwinError named by "name" (the stable names of scene/xt_err.h), keeping the whole body in
`.body`; transport failures (refused connection, TLS, a closed stream) raise ConnectionFailed.
"""


class XtwinError(Exception):
    """An error answered by xtwin-server (or, for ConnectionFailed, on the way to it)."""

    #: the server's error name (INVAL, RANGE, AUTH, ...), "" for transport errors
    name = ""

    def __init__(self, name, status, message, body=None):
        super().__init__("%s (%s): %s" % (name, status, message) if name else message)
        self.name = name
        self.status = status
        self.message = message
        self.body = body


class InvalidRequest(XtwinError):
    """INVAL: a wrong type, an unknown field, a missing member."""


class FormatError(XtwinError):
    """FORMAT: malformed JSON or file."""


class OutOfRange(XtwinError):
    """RANGE (also NANDATA): a value outside what the C-arm or the server accepts."""


class AuthError(XtwinError):
    """AUTH: a missing or wrong bearer token (HTTP 401)."""


class NotFound(XtwinError):
    """NOTFOUND: an unknown route, detector mode or file (HTTP 404)."""


class TooLarge(XtwinError):
    """TOOLARGE: a body or message over the server's limit (HTTP 413)."""


class Busy(XtwinError):
    """BUSY, EXISTS, NODEV, STATE: the server cannot do it now (not in lockstep, too many triggers, the device's state)."""


class Unsupported(XtwinError):
    """UNSUPPORTED: not available in this server, method or encoding."""


class ServerError(XtwinError):
    """IO, NOMEM, DEVICE, INTERNAL or any other 5xx."""


class ConnectionFailed(XtwinError):
    """The server could not be reached, TLS failed, or the stream closed."""


_BY_NAME = {
    "INVAL": InvalidRequest, "FORMAT": FormatError, "TRUNCATED": FormatError,
    "RANGE": OutOfRange, "NANDATA": OutOfRange, "AUTH": AuthError, "NOTFOUND": NotFound,
    "TOOLARGE": TooLarge, "BUSY": Busy, "EXISTS": Busy, "STATE": Busy, "NODEV": Busy, "UNSUPPORTED": Unsupported,
    "IO": ServerError, "NOMEM": ServerError, "DEVICE": ServerError, "INTERNAL": ServerError,
}


def error_from(body, status=0, fallback=""):
    """The XtwinError subclass for a server error body ({"error": {...}}, or the inner object)."""
    err = body.get("error", body) if isinstance(body, dict) else {}
    if not isinstance(err, dict):
        err = {}
    name = str(err.get("name", "")) or fallback
    status = err.get("status", status)
    message = str(err.get("message", "")) or "HTTP %s" % status
    cls = _BY_NAME.get(name)
    if cls is None:
        cls = {401: AuthError, 404: NotFound, 413: TooLarge, 409: Busy}.get(status)
    if cls is None:
        cls = ServerError if isinstance(status, int) and status >= 500 else XtwinError
    return cls(name, status, message, body)
