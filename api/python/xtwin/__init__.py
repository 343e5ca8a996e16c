"""xtwin: a Python client for xtwin-server (REST control, the binary frame stream as numpy).

    import xtwin
    c = xtwin.Client("http://127.0.0.1:8710", token=None)
    c.set_pose(primary_deg=30, secondary_deg=15)
    r = c.render(mode="fd20-256")            # r.image: numpy (256, 256) uint16, r.P: 3x4
    with c.stream() as s:
        for f in s.frames(count=10):
            print(f.counter, f.pose_seq, f.image.mean(), f.P[2])

Needs Debian's python3-numpy and python3-websockets (the stream) only. docs/python-client.md is
the manual; api/stream.md and api/openapi.yaml the protocol.
"""
from .client import Client, Rendered
from .errors import (AuthError, Busy, ConnectionFailed, FormatError, InvalidRequest, NotFound, OutOfRange,
                     ServerError, TooLarge, Unsupported, XtwinError)
from .frame import FIELDS, Frame, parse_frame, parse_header
from .stream import Stream

__all__ = ["Client", "Rendered", "Stream", "Frame", "parse_frame", "parse_header", "FIELDS", "XtwinError",
           "InvalidRequest", "FormatError", "OutOfRange", "AuthError", "NotFound", "TooLarge", "Busy",
           "Unsupported", "ServerError", "ConnectionFailed"]
__version__ = "0.1.0"
