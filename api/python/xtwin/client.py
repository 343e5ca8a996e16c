"""REST side of the xtwin client: pose, acquisition, one-shot renders as numpy arrays, models.

Only the standard library (urllib, ssl, json) and numpy; api/openapi.yaml is the reference of
every route. Bodies go out as application/json; errors come back as the typed exceptions of
xtwin.errors, carrying the server's JSON error.
"""
import io
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request

import numpy as np

from .errors import ConnectionFailed, error_from

POSE_FIELDS = ("primary_deg", "secondary_deg", "detector_rot_deg", "sod_mm", "sid_mm", "table_mm")


def ssl_context(verify=True, cafile=None):
    """A client TLS context: the system's CAs (or cafile); verify=False accepts any certificate
    (a self-signed test server; never across a network you do not trust)."""
    ctx = ssl.create_default_context(cafile=cafile)
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def pose_update(pose=None, **fields):
    """A partial pose from a dict and/or keyword arguments, None values left out."""
    out = dict(pose or {})
    for k, v in fields.items():
        if k not in POSE_FIELDS:
            raise TypeError("unknown pose field %r (one of %s)" % (k, ", ".join(POSE_FIELDS)))
        if v is not None:
            out[k] = list(v) if k == "table_mm" else v
    return out


class Rendered:
    """A frame rendered by POST /v1/render: .image (numpy rows x cols, uint16 or float32), .P (3x4
    projection matrix), .geometry (the server's geometry JSON: mode, pose, pitch, source and
    detector centre), .render_ms. np.asarray(rendered) is the image."""

    def __init__(self, image, geometry, render_ms):
        self.image = image
        self.geometry = geometry
        self.P = np.array(geometry["P"], dtype=np.float64)
        self.pose = geometry.get("pose")
        self.render_ms = render_ms

    def __array__(self, dtype=None, copy=None):
        return self.image if dtype is None else self.image.astype(dtype)

    def __repr__(self):
        return "<Rendered %s %s>" % (self.geometry.get("mode"), self.image.shape)


class Client:
    """xtwin-server over REST.

        c = Client("http://127.0.0.1:8710", token=None)
        c.set_pose(primary_deg=30, secondary_deg=-10)
        c.acquisition(fps=30, mode="fd20-512")       # any settings the server has; none: just read
        img = c.render(primary_deg=45).image          # numpy array
        with c.stream() as s:                         # the WebSocket frame stream
            for f in s.frames(count=10): ...

    url: the REST base (http:// or https://); token: the server's --token; verify=False accepts a
    self-signed certificate; stream_url: the stream's ws(s):// URL when it is not the REST host
    on GET /v1/info's ws_port (behind a proxy or a container port mapping).
    """

    def __init__(self, url="http://127.0.0.1:8710", token=None, verify=True, cafile=None, timeout=30.0,
                 stream_url=None):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.stream_url = stream_url
        self._ctx = ssl_context(verify, cafile) if self.url.startswith("https:") else None
        self._verify, self._cafile = verify, cafile

    # ---- transport ----------------------------------------------------------------------------

    def request(self, method, path, body=None, accept="application/json"):
        """(status, headers, body bytes) of one request; raises the typed error of a 4xx/5xx."""
        data = None
        headers = {"Accept": accept}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self._ctx) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                j = json.loads(raw.decode("utf-8"))
            except ValueError:
                j = {"error": {"name": "", "status": e.code, "message": raw.decode("utf-8", "replace")[:200]
                               or e.reason}}
            raise error_from(j, e.code) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ConnectionFailed("", 0, "%s %s%s: %s" % (method, self.url, path, reason)) from None

    def _json(self, method, path, body=None):
        status, headers, raw = self.request(method, path, body)
        return json.loads(raw.decode("utf-8")) if raw else None

    # ---- routes -------------------------------------------------------------------------------

    def health(self):
        return self._json("GET", "/v1/health")

    def info(self):
        """Version, backends, GPUs, detector modes, models, limits, configuration, ports."""
        return self._json("GET", "/v1/info")

    @staticmethod
    def _plane_path(plane, path):
        """/v1/<path> (plane A, as a single-plane system's routes always meant) or, with plane "A" or
        "B", /v1/planes/<plane>/<path> (a biplane system: docs/biplane.md)."""
        if plane is None:
            return "/v1/" + path
        p = str(plane).upper()
        if p not in ("A", "B"):
            raise ValueError("plane: %r is neither A nor B" % (plane,))
        return "/v1/planes/%s/%s" % (p.lower(), path)

    def plane(self, plane):
        """One plane of a biplane system: {"plane", "pose", "acquisition", "stand", "dose", "device"}."""
        return self._json("GET", self._plane_path(plane, "")[:-1])

    def pose(self, plane=None):
        """{"pose": {...}, "seq": n}: the current pose (of plane "A" or "B") and its sequence number."""
        return self._json("GET", self._plane_path(plane, "pose"))

    def set_pose(self, pose=None, seq=None, plane=None, **fields):
        """Updates any subset of the pose (keyword arguments or a dict); returns {"pose", "seq"}.
        seq (optional) is the sequence number frames will carry; default the previous + 1. plane:
        "B" moves a biplane system's lateral C-arm (within its stand's ranges)."""
        body = pose_update(pose, **fields)
        if seq is not None:
            body["seq"] = int(seq)
        return self._json("PUT", self._plane_path(plane, "pose"), body)

    def acquisition(self, settings=None, plane=None, **fields):
        """Reads the acquisition (no arguments) or changes any subset of it and returns it after
        the change. Fields are passed through as given, so settings a newer server adds (kV, dose,
        raw/processed...) work without a client update. plane: "B" for plane B's detector mode and
        chain; the frame rate, run mode and biplane={"planes": [...], "timing": ...} are the
        system's."""
        body = dict(settings or {}, **fields)
        path = self._plane_path(plane, "acquisition")
        if not body:
            return self._json("GET", path)
        return self._json("PUT", path, body)

    def device(self, command=None, plane=None, **fields):
        """The device state machine (no command), or a command to it ("fluoro", "expose",
        "release", "power_on", "standby", "radiation_disable", "radiation_enable", "fault", "reset";
        fields as docs/device.md gives them, e.g. phases=[...]); returns the device after it.
        plane: "B" for plane B's device (its own pedal and hand switch)."""
        if command is None:
            return self._json("GET", self._plane_path(plane, "device"))
        return self._json("POST", self._plane_path(plane, "device/" + command), dict(fields))

    def start(self):
        return self._json("POST", "/v1/acquisition/start", {})

    def stop(self):
        return self._json("POST", "/v1/acquisition/stop", {})

    def trigger(self):
        """Lockstep: exposes one frame (of every plane the acquisition exposes); returns plane A's
        frame counter (or the first plane's)."""
        return self._json("POST", "/v1/acquisition/trigger", {})["frame"]

    def render(self, pose=None, mode=None, pixel_format=None, **pose_fields):
        """Renders one frame at a pose (the current one, updated by pose/pose_fields) without
        touching the stream; returns a Rendered (.image numpy array, .P, .geometry)."""
        body = {}
        p = pose_update(pose, **pose_fields)
        if p:
            body["pose"] = p
        if mode is not None:
            body["mode"] = mode
        if pixel_format is not None:
            body["pixel_format"] = pixel_format
        status, headers, raw = self.request("POST", "/v1/render", body, accept="application/x-npy")
        image = np.load(io.BytesIO(raw), allow_pickle=False)
        geometry = json.loads(headers.get("X-Xtwin-Geometry", "{}"))
        ms = headers.get("X-Xtwin-Render-Ms")
        return Rendered(image, geometry, float(ms) if ms else None)

    def models(self):
        return self._json("GET", "/v1/models")["models"]

    def load_model(self, path, name=None, convert="mu"):
        """Loads a volume from a path on the server (see docs/server.md for what it may read)."""
        body = {"path": path, "convert": convert}
        if name:
            body["name"] = name
        return self._json("POST", "/v1/models", body)["models"]

    def set_transform(self, model, translation_mm=(0, 0, 0), rotation_deg=(0, 0, 0), centre_mm=(0, 0, 0)):
        """A model's rigid transform (a table pan, a patient shift; docs/geometry.md "Model motion"):
        {"model", "version", "t_ns"}; every exposure after t_ns renders it (frame.motion["xform_version"])."""
        body = {"translation_mm": list(translation_mm), "rotation_deg": list(rotation_deg), "centre_mm": list(centre_mm)}
        return self._json("PUT", "/v1/models/%s/transform" % urllib.parse.quote(model, safe=""), body)

    def motion(self, cardiac=None, respiratory=None, blur_samples=None):
        """GET /v1/motion with no arguments; else PUT /v1/motion: cardiac={"bpm": 70, ...} or False
        (stop), respiratory={"period_s": 4, "amplitude_mm": 10, ...} or False, blur_samples=N."""
        body = {}
        for key, v in (("cardiac", cardiac), ("respiratory", respiratory)):
            if v is False:
                body[key] = {"on": False}
            elif v is True:
                body[key] = {"on": True}
            elif v is not None:
                body[key] = dict(v)
        if blur_samples is not None:
            body["blur_samples"] = int(blur_samples)
        return self._json("PUT", "/v1/motion", body) if body else self._json("GET", "/v1/motion")

    def contrast(self, t_ns=None):
        """GET /v1/contrast (docs/contrast.md): the regions with their bolus models and their iodine
        now, or at device-clock time t_ns (a frame's t_exposure_ns gives what it was rendered with),
        the injections, the operator's limits and the state's seq (a frame's contrast["seq"])."""
        return self._json("GET", "/v1/contrast" + ("?t_ns=%d" % int(t_ns) if t_ns is not None else ""))

    def inject(self, region, rate_ml_s=None, volume_ml=None, duration_s=None, delay_s=None, agent_mg_ml=None):
        """POST /v1/contrast/inject: two of rate_ml_s, volume_ml and duration_s (delay_s 0-60,
        agent_mg_ml 50-400): {"id", "seq", "t_ns", "t_start_ns", ...}. An unknown region raises
        NotFound, a value over the operator's limits OutOfRange."""
        body = {"region": region}
        for key, v in (("rate_ml_s", rate_ml_s), ("volume_ml", volume_ml), ("duration_s", duration_s),
                       ("delay_s", delay_s), ("agent_mg_ml", agent_mg_ml)):
            if v is not None:
                body[key] = v
        return self._json("POST", "/v1/contrast/inject", body)

    def stop_contrast(self, reset=False):
        """DELETE /v1/contrast: every running injection stops now (what is in washes out); reset=True
        forgets them all, the regions clear from the next exposure on."""
        return self._json("DELETE", "/v1/contrast" + ("?reset=1" if reset else ""))

    def metrics(self):
        """The Prometheus text of GET /metrics."""
        return self.request("GET", "/metrics", accept="text/plain")[2].decode("utf-8")

    # ---- the stream ---------------------------------------------------------------------------

    def stream_address(self):
        """The stream's URL: stream_url if given, else this host on GET /v1/info's ws_port."""
        if self.stream_url:
            return self.stream_url
        info = self.info()
        u = urllib.parse.urlsplit(self.url)
        host = u.hostname if ":" not in (u.hostname or "") else "[%s]" % u.hostname
        path = (info.get("stream") or {}).get("path", "/v1/stream")
        return "%s://%s:%d%s" % ("wss" if u.scheme == "https" else "ws", host, info["ws_port"], path)

    def stream(self, **kw):
        """A Stream (the frame iterator and the stream's commands) with this client's token and TLS."""
        from .stream import Stream
        kw.setdefault("token", self.token)
        kw.setdefault("verify", self._verify)
        kw.setdefault("cafile", self._cafile)
        return Stream(self.stream_address(), **kw)
