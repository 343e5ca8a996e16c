/* xtwin console: the browser side of the twin. It talks to the server it was loaded from:
 *   REST   GET /v1/info, /v1/acquisition, /v1/pose; PUT/POST with application/json bodies
 *   stream WebSocket /v1/stream on the server's stream port (GET /v1/info: ws_port), binary
 *          frames (api/stream.md header, decoded by its documented offsets and header_size so
 *          that fields appended later do not break it) and JSON commands with acks.
 * With --token the token goes in "Authorization: Bearer" on REST and, since browsers cannot set
 * headers on a WebSocket, as the subprotocol "bearer.TOKEN" beside "xtwin-stream" (or ?token=).
 * Frames are drawn with WebGL2 (uint16 as an integer texture, float32 as a float texture, window
 * and level in the fragment shader), or with a 2D canvas where WebGL2 is missing.
 * Acquisition settings the console does not know (added by later server versions) are shown as
 * generic controls built from GET /v1/acquisition, with hints from GET /v1/info
 * "acquisition_fields" when the server gives them. docs/console.md is the manual. */
(function () {
  'use strict';

  /* ---- small helpers ------------------------------------------------------------------------ */

  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  const fmtNum = (v, d) => (Number.isFinite(v) ? v.toFixed(d) : '—');
  const clamp = (v, lo, hi) => Math.min(hi, Math.max(lo, v));

  /* An error the server answered with: {"error": {"name", "status", "message"}}. */
  class XtError extends Error {
    constructor(name, status, message) {
      super(message);
      this.name = name;
      this.status = status;
    }
    toString() { return this.name + ': ' + this.message; }
  }

  /* A message over the image (bottom centre, inside the viewport); errors stay 8 s. */
  function toast(text, kind) {
    const t = $('toast');
    t.textContent = text;
    t.className = kind || '';
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { t.textContent = ''; }, kind === 'err' ? 8000 : 4000);
  }

  /* An error beside the control that caused it: below it (above when there is no room), inside the
   * viewport; the control is scrolled into view and outlined. Also shown over the image. */
  function errorAt(el, text) {
    toast(text, 'err');
    if (!el) return;
    const d = el.closest && el.closest('details');
    if (d && !d.open) d.open = true;
    el.scrollIntoView({ block: 'nearest' });
    el.classList.add('bad');
    const pop = $('err-pop');
    pop.textContent = text;
    pop.hidden = false;
    const r = el.getBoundingClientRect(), w = Math.min(340, innerWidth - 8);
    pop.style.maxWidth = w + 'px';
    const ph = pop.offsetHeight, pw = pop.offsetWidth;
    let top = r.bottom + 4;
    if (top + ph > innerHeight - 4) top = Math.max(4, r.top - ph - 4);
    pop.style.top = top + 'px';
    pop.style.left = clamp(r.right - pw, 4, innerWidth - pw - 4) + 'px';
    clearTimeout(errorAt.timer);
    errorAt.timer = setTimeout(() => { pop.hidden = true; el.classList.remove('bad'); }, 8000);
  }
  $('err-pop').addEventListener('click', () => { $('err-pop').hidden = true; });

  /* ---- connection state --------------------------------------------------------------------- */

  const S = {
    token: '',
    info: null,
    acq: null,            // last acquisition object from the server
    fields: {},           // GET /v1/info acquisition_fields (optional hints)
    ws: null,
    wsOpen: false,
    nextId: 1,
    pending: new Map(),   // command id -> {resolve, reject}
    seq: 0,               // last pose seq this console sent (or saw)
    sentAt: new Map(),    // pose seq -> performance.now() when sent
    editing: 0,           // performance.now() until which the controls ignore server state
    frames: 0,
    lastCounter: -1,
    gaps: 0,
    arrivals: [],         // performance.now() of recent frames (fps)
    latencies: [],        // client pose -> frame (ms), recent
    srvLatencies: [],     // server pose received -> frame sent (ms), recent
    header: null,         // header of the newest frame received
    drawn: null,          // header of the frame on the canvas
    newFrame: null,       // {header, pixels} waiting for the next animation frame
    retry: 0,
    framesEver: false,    // a frame arrived since the page loaded
    frames_kind: 'processed', // which chain frames this console asks for (the stream's "frames")
    pedal: null,          // 'fluoro' or 'exposure' while a pedal is held
    lih: null,            // {counter, time} of the last frame before the X-ray stopped
  };

  /* Which token to use: #token=... in the address (then removed from it), else this tab's. */
  (function loadToken() {
    const h = new URLSearchParams(location.hash.slice(1));
    if (h.get('token')) {
      S.token = h.get('token');
      sessionStorage.setItem('xtwin-token', S.token);
      history.replaceState(null, '', location.pathname + location.search);
    } else {
      S.token = sessionStorage.getItem('xtwin-token') || '';
    }
  })();

  async function api(method, path, body) {
    const headers = {};
    if (S.token) headers.Authorization = 'Bearer ' + S.token;
    const init = { method, headers, cache: 'no-store' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let r;
    try {
      r = await fetch(path, init);
    } catch (e) {
      throw new XtError('NETWORK', 0, method + ' ' + path + ': ' + e.message);
    }
    const text = await r.text();
    let j = null;
    try { j = text ? JSON.parse(text) : null; } catch (e) { /* not JSON */ }
    if (!r.ok) {
      const e = j && j.error;
      throw new XtError(e ? e.name : 'HTTP', r.status, e ? e.message : method + ' ' + path + ': HTTP ' + r.status);
    }
    return j;
  }

  function setConn(cls, text) {
    $('conn').className = 'conn ' + cls;
    $('conn-text').textContent = text;
  }

  function banner(text) {
    const b = $('banner');
    b.hidden = !text;
    b.textContent = text || '';
  }

  /* ---- start-up ----------------------------------------------------------------------------- */

  async function start() {
    setConn('wait', 'connecting');
    let info;
    try {
      info = await api('GET', '/v1/info');
    } catch (e) {
      if (e.status === 401) return askToken(S.token ? 'wrong token' : '');
      setConn('err', 'no server');
      banner('Cannot reach the server: ' + e.message + ' — retrying');
      setTimeout(start, 2000);
      return;
    }
    $('login').hidden = true;
    S.info = info;
    fitCanvas(); // one view or two (a biplane system)
    S.fields = info.acquisition_fields || {};
    $('server-name').textContent = info.name + ' ' + info.version + ' · ' + info.backend +
      (info.gpus && info.gpus.length ? ' · ' + info.gpus.map((g) => g.name).join(', ') : '') +
      (info.models && info.models.length ? ' · ' + info.models.map((m) => m.name).join(', ') : '');
    const sel = $('in-mode');
    sel.textContent = '';
    // zoom fields first, by their nominal size as the IFU names them; the other modes after
    const modes = info.detector_modes.slice().sort((a, b) => (b.field_cm > 0) - (a.field_cm > 0));
    for (const m of modes) {
      const o = document.createElement('option');
      o.value = m.name;
      o.textContent = (m.field_cm > 0 ? m.field_cm + ' cm · ' : '') + m.name + ' (' + m.cols + '×' + m.rows + ')';
      o.title = m.description;
      sel.appendChild(o);
    }
    const names = (S.fields['chain.protocol'] && S.fields['chain.protocol'].names) ||
      ['custom', 'fluoro_low', 'fluoro_normal', 'fluoro_high', 'cine_15', 'cine_30', 'dsa'];
    for (const [id, pick, def] of [['in-flavour', (n) => /^fluoro/.test(n), 'fluoro_normal'],
      ['in-expproto', (n) => !/^fluoro|^custom$/.test(n), 'cine_15']]) {
      const ps = $(id);
      const keep = ps.value;
      ps.textContent = '';
      for (const n of names.filter(pick)) {
        const o = document.createElement('option');
        o.value = n;
        o.textContent = n.replace(/_/g, ' ');
        ps.appendChild(o);
      }
      ps.value = keep || def;
      if (!ps.value && ps.options.length) ps.selectedIndex = 0;
    }
    try {
      const [acq, pose] = await Promise.all([api('GET', '/v1/acquisition'), api('GET', '/v1/pose')]);
      showAcq(acq);
      showPose(pose.pose);
      S.seq = pose.seq;
      loadContrast();
    } catch (e) {
      toast(String(e), 'err');
    }
    connect();
  }

  function askToken(why) {
    setConn('err', 'token required');
    banner('');
    $('login').hidden = false;
    $('login-error').textContent = why || '';
    $('login-token').focus();
  }

  $('login').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = $('login-token').value.trim();
    // fetch() refuses other characters in a header, so such a token cannot work from a browser.
    if (!/^[\x20-\x7e]+$/.test(t)) {
      $('login-error').textContent = 'a browser can send only printable ASCII tokens';
      return;
    }
    S.token = t;
    sessionStorage.setItem('xtwin-token', S.token);
    start();
  });

  /* ---- the stream --------------------------------------------------------------------------- */

  function streamUrl() {
    if (params.get('ws')) return params.get('ws');
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const path = (S.info.stream && S.info.stream.path) || '/v1/stream';
    return proto + '//' + location.hostname + ':' + S.info.ws_port + path;
  }

  /* Browsers cannot set Authorization on a WebSocket: the token goes as a subprotocol entry
   * "bearer.TOKEN" beside "xtwin-stream" when it is made of HTTP token characters (what a
   * subprotocol may hold), else as ?token= (api/stream.md). */
  const TCHARS = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
  function connect() {
    let url = streamUrl();
    const protocols = ['xtwin-stream'];
    // a biplane system: both planes (plane A alone is the stream's default)
    if (biplane()) url += (url.includes('?') ? '&' : '?') + 'planes=a,b';
    if (S.token && TCHARS.test(S.token)) protocols.push('bearer.' + S.token);
    else if (S.token) url += (url.includes('?') ? '&' : '?') + 'token=' + encodeURIComponent(S.token);
    let ws;
    try {
      ws = new WebSocket(url, protocols);
    } catch (e) {
      banner('Cannot open the stream ' + url + ': ' + e.message);
      return;
    }
    ws.binaryType = 'arraybuffer';
    S.ws = ws;
    setConn('wait', 'connecting stream');
    ws.onopen = () => {
      S.wsOpen = true;
      S.retry = 0;
      setConn('on', 'streaming');
      banner('');
      // the detector's processed frame by default ("for presentation"); raw when asked for
      send({ type: 'frames', frames: S.frames_kind }).catch((e) => toast(String(e), 'err'));
    };
    ws.onmessage = (ev) => {
      if (typeof ev.data === 'string') onText(ev.data);
      else onFrame(ev.data);
    };
    ws.onclose = (ev) => {
      S.wsOpen = false;
      for (const p of S.pending.values()) p.reject(new XtError('CLOSED', 0, 'stream closed'));
      S.pending.clear();
      if (S.ws !== ws) return;
      S.retry = Math.min(S.retry + 1, 5);
      const wait = 500 * S.retry;
      setConn('err', 'stream closed');
      let hint = 'Stream closed (' + (ev.code || 'no code') + (ev.reason ? ': ' + ev.reason : '') + ').';
      if (!S.framesEver && location.protocol === 'https:')
        hint += ' With a self-signed certificate, open https://' + location.hostname + ':' + S.info.ws_port +
          '/ once and accept it for the stream port too.';
      banner(hint + ' Reconnecting…');
      setTimeout(() => { if (S.ws === ws) start(); }, wait);
    };
  }

  function send(cmd) {
    if (!S.wsOpen) return Promise.reject(new XtError('CLOSED', 0, 'stream not connected'));
    const id = S.nextId++;
    cmd.id = id;
    return new Promise((resolve, reject) => {
      S.pending.set(id, { resolve, reject });
      S.ws.send(JSON.stringify(cmd));
    });
  }

  function onText(text) {
    let j;
    try { j = JSON.parse(text); } catch (e) { return; }
    if (j.type === 'hello') {
      if (j.state) {
        S.seq = Math.max(S.seq, j.state.pose_seq || 0);
        showAcq(j.state.acquisition);
      }
      return;
    }
    if (j.type !== 'ack') return;
    const p = S.pending.get(j.id);
    if (p) S.pending.delete(j.id);
    if (j.ok) {
      if (j.state && j.state.acquisition) showAcq(j.state.acquisition);
      if (j.state && j.state.pose && performance.now() > S.editing && !S.header) showPose(j.state.pose);
      if (p) p.resolve(j);
    } else {
      const e = j.error || {};
      const err = new XtError(e.name || 'ERROR', e.status || 0, e.message || 'command failed');
      if (j.command === 'pose' && j.seq !== undefined) S.sentAt.delete(j.seq);
      if (p) p.reject(err);
      else toast(String(err), 'err');
    }
  }

  /* The frame header: api/stream.md, little-endian, pixels at header_size. */
  const MAGIC = 0x46575458;
  function parseHeader(buf) {
    const v = new DataView(buf);
    if (buf.byteLength < 304 || v.getUint32(0, true) !== MAGIC) throw new Error('not an xtwin frame');
    const u64 = (o) => Number(v.getBigUint64(o, true));
    const f64 = (o) => v.getFloat64(o, true);
    const h = {
      version: v.getUint16(4, true), header_size: v.getUint16(6, true),
      frame_counter: u64(8), pose_seq: u64(16), t_pose_ns: u64(24), t_exposure_sched_ns: u64(32),
      t_exposure_ns: u64(40), t_render_done_ns: u64(48), t_sent_ns: u64(56), frames_dropped: u64(64),
      rows: v.getUint32(72, true), cols: v.getUint32(76, true), pixel_format: v.getUint32(80, true),
      flags: v.getUint32(84, true), payload_bytes: u64(88),
      pose: {
        primary_deg: f64(96), secondary_deg: f64(104), detector_rot_deg: f64(112), sod_mm: f64(120),
        sid_mm: f64(128), table_mm: [f64(136), f64(144), f64(152)],
      },
      P: Array.from({ length: 12 }, (_, i) => f64(160 + 8 * i)),
      pitch_mm: [f64(256), f64(264)],
      period_ns: u64(296),
    };
    // Version 2/3: what the pixels are, and the exposure and dose of the frame (chain frames).
    if (h.version >= 2 && h.header_size >= 400) {
      h.frame_kind = v.getUint32(304, true);
      h.bits_stored = v.getUint32(308, true);
      h.kv = f64(328);
      h.mas = f64(336);
    } else {
      h.frame_kind = 0;
      h.bits_stored = h.pixel_format === 2 ? 32 : 16;
    }
    if (h.version >= 3 && h.header_size >= 576) {
      h.ma = f64(400);
      h.pulse_ms = f64(408);
      h.protocol = v.getUint32(488, true);
      h.k_irp_mgy = f64(496);
      h.kap_gycm2 = f64(504);
      h.k_irp_total_mgy = f64(512);
      h.kap_total_gycm2 = f64(520);
    }
    h.saturated_px = h.version >= 5 && h.header_size >= 800 ? v.getUint32(780, true) : 0;
    const mode = new Uint8Array(buf, 272, 24);
    const end = mode.indexOf(0);
    h.mode = new TextDecoder().decode(mode.subarray(0, end < 0 ? 24 : end));
    // Version 5: the plane, and how the pixels came. The console never asks for a codec, so it
    // always gets codec 0 (pixels as they are); a server that sent another is not drawn.
    if (h.version >= 5 && h.header_size >= 800) {
      h.plane = v.getUint32(752, true);
      h.codec = v.getUint32(776, true);
      h.wire_bytes = u64(784);
    } else {
      h.plane = 0;
      h.codec = 0;
    }
    // Version 6: the motion the frame's models were moved by (-1: that motion is off).
    const moving = h.version >= 6 && h.header_size >= 864;
    h.cardiac_phase = moving ? f64(808) : -1;
    h.resp_phase = moving ? f64(816) : -1;
    h.resp_mm = moving ? f64(832) : 0;
    return h;
  }

  function onFrame(buf) {
    let h;
    try { h = parseHeader(buf); } catch (e) { return; }
    if (h.codec !== 0) return;
    const bpp = h.pixel_format === 2 ? 4 : 2;
    const n = h.rows * h.cols;
    if (h.header_size + n * bpp > buf.byteLength) return;
    if (h.plane === 1) return drawPlaneB(buf, h, bpp, n);
    // Typed arrays need aligned offsets; a header_size that is not (a future version) gets a copy.
    const Arr = bpp === 4 ? Float32Array : Uint16Array;
    const pixels = h.header_size % bpp === 0 ? new Arr(buf, h.header_size, n)
      : new Arr(buf.slice(h.header_size, h.header_size + n * bpp));
    const now = performance.now();
    S.frames++;
    S.framesEver = true;
    if (S.lastCounter >= 0 && h.frame_counter > S.lastCounter + 1) S.gaps += h.frame_counter - S.lastCounter - 1;
    S.lastCounter = h.frame_counter;
    S.arrivals.push(now);
    while (S.arrivals.length && now - S.arrivals[0] > 2000) S.arrivals.shift();
    // Pose -> frame: the first frame carrying (at least) a seq this console sent.
    for (const [seq, t] of S.sentAt) {
      if (seq <= h.pose_seq) {
        if (seq === h.pose_seq) pushRecent(S.latencies, now - t);
        S.sentAt.delete(seq);
      } else if (now - t > 10000) S.sentAt.delete(seq); // never shown (acquisition stopped, say)
    }
    if (S.header && h.pose_seq !== S.header.pose_seq && h.t_sent_ns >= h.t_pose_ns)
      pushRecent(S.srvLatencies, (h.t_sent_ns - h.t_pose_ns) / 1e6);
    if (h.pose_seq > S.seq) S.seq = h.pose_seq;
    S.header = h;
    S.newFrame = { header: h, pixels };
    // The controls follow the pose of the frames (moved by another client, say) unless the user
    // is moving them or an update of ours is still on its way.
    if (performance.now() > S.editing && S.sentAt.size === 0) showPose(h.pose);
    scheduleDraw();
  }

  function pushRecent(a, v) {
    a.push(v);
    if (a.length > 60) a.shift();
  }

  function median(a) {
    if (!a.length) return NaN;
    const s = a.slice().sort((x, y) => x - y);
    return s[s.length >> 1];
  }

  /* ---- drawing: WebGL2, or 2D canvas ------------------------------------------------------------ */

  const canvas = $('frame');
  const view = {
    window: 0, level: 0, invert: false, log: true,
    follow: true,   // window/level from every new frame's statistics (off once the user sets them)
    autoPending: true, fmt: 0, kind: 0, // display parameters; format and kind of the last auto W/L
    renderer: null,
  };

  /* ln of the pixel: raw ADC codes and ideal intensities (with "log"); never the processed frame,
   * which the chain has already taken to attenuation and windowed, nor float32 line integrals. */
  function logDisplay(h) { return view.log && h.pixel_format === 1 && h.frame_kind !== 2; }

  /* The value no attenuation gives, left out of the statistics so that the direct beam does not
   * take the window: the ideal frame's 65535, the raw frame's ADC full scale (saturated), L = 0. */
  function directValue(h) {
    if (h.pixel_format === 2) return 0;
    if (h.frame_kind === 1) return Math.pow(2, h.bits_stored) - 1;
    if (h.frame_kind === 2) return 4095; // beyond the chain's (automatic) window: clipped white
    return 65535;
  }

  /* Display value of a pixel, the unit window and level are in: uint16 intensity I (or ln I with
   * "log"), float32 line integral L. Bright means much signal: high I, or low L (so by default a
   * float32 frame is shown inverted: bone dark, as fluoroscopy shows it). */
  function polarityInverted(fmt) { return (fmt === 2) !== view.invert; }

  const VS = `#version 300 es
    in vec2 p; void main() { gl_Position = vec4(p, 0.0, 1.0); }`;
  const FS = (integer) => `#version 300 es
    precision highp float; precision highp int;
    ${integer ? 'precision highp usampler2D; uniform usampler2D tex;' : 'uniform highp sampler2D tex;'}
    uniform float lo, hi; uniform int inv, logd; uniform int rows;
    out vec4 color;
    void main() {
      ivec2 q = ivec2(gl_FragCoord.xy);
      q.y = rows - 1 - q.y;  // row 0 of the frame at the top
      float v = float(texelFetch(tex, q, 0).r);
      if (logd == 1) v = log(max(v, 1.0));
      float g = clamp((v - lo) / max(hi - lo, 1e-30), 0.0, 1.0);
      if (inv == 1) g = 1.0 - g;
      color = vec4(g, g, g, 1.0);
    }`;

  function makeGL() {
    if (params.get('renderer') === '2d') return null;
    const gl = canvas.getContext('webgl2', { preserveDrawingBuffer: true, antialias: false, alpha: false });
    if (!gl) return null;
    const prog = (fs) => {
      const mk = (type, src) => {
        const s = gl.createShader(type);
        gl.shaderSource(s, src);
        gl.compileShader(s);
        if (!gl.getShaderParameter(s, gl.COMPILE_STATUS)) throw new Error(gl.getShaderInfoLog(s));
        return s;
      };
      const p = gl.createProgram();
      gl.attachShader(p, mk(gl.VERTEX_SHADER, VS));
      gl.attachShader(p, mk(gl.FRAGMENT_SHADER, fs));
      gl.linkProgram(p);
      if (!gl.getProgramParameter(p, gl.LINK_STATUS)) throw new Error(gl.getProgramInfoLog(p));
      return p;
    };
    let progs;
    try {
      progs = { 1: prog(FS(true)), 2: prog(FS(false)) };
    } catch (e) {
      console.warn('xtwin: WebGL2 shaders failed, using 2D canvas:', e);
      return null;
    }
    const buf = gl.createBuffer();
    gl.bindBuffer(gl.ARRAY_BUFFER, buf);
    gl.bufferData(gl.ARRAY_BUFFER, new Float32Array([-1, -1, 1, -1, -1, 1, 1, 1]), gl.STATIC_DRAW);
    const tex = gl.createTexture();
    gl.bindTexture(gl.TEXTURE_2D, tex);
    for (const k of [gl.TEXTURE_MIN_FILTER, gl.TEXTURE_MAG_FILTER]) gl.texParameteri(gl.TEXTURE_2D, k, gl.NEAREST);
    gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_WRAP_S, gl.CLAMP_TO_EDGE);
    gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_WRAP_T, gl.CLAMP_TO_EDGE);
    gl.pixelStorei(gl.UNPACK_ALIGNMENT, 1);
    let fmt = 0, shape = '';
    return {
      name: 'WebGL2',
      upload(h, px) {
        fmt = h.pixel_format;
        const f = fmt === 2 ? [gl.R32F, gl.RED, gl.FLOAT] : [gl.R16UI, gl.RED_INTEGER, gl.UNSIGNED_SHORT];
        const sh = fmt + ':' + h.cols + 'x' + h.rows;
        if (sh === shape) gl.texSubImage2D(gl.TEXTURE_2D, 0, 0, 0, h.cols, h.rows, f[1], f[2], px); // same storage
        else gl.texImage2D(gl.TEXTURE_2D, 0, f[0], h.cols, h.rows, 0, f[1], f[2], px);
        shape = sh;
      },
      draw(h, lo, hi, inv, logd) {
        const p = progs[fmt === 2 ? 2 : 1];
        gl.viewport(0, 0, h.cols, h.rows);
        gl.useProgram(p);
        const loc = gl.getAttribLocation(p, 'p');
        gl.bindBuffer(gl.ARRAY_BUFFER, buf);
        gl.enableVertexAttribArray(loc);
        gl.vertexAttribPointer(loc, 2, gl.FLOAT, false, 0, 0);
        gl.uniform1f(gl.getUniformLocation(p, 'lo'), lo);
        gl.uniform1f(gl.getUniformLocation(p, 'hi'), hi);
        gl.uniform1i(gl.getUniformLocation(p, 'inv'), inv ? 1 : 0);
        gl.uniform1i(gl.getUniformLocation(p, 'logd'), logd ? 1 : 0);
        gl.uniform1i(gl.getUniformLocation(p, 'rows'), h.rows);
        gl.uniform1i(gl.getUniformLocation(p, 'tex'), 0);
        gl.drawArrays(gl.TRIANGLE_STRIP, 0, 4);
      },
    };
  }

  function make2D() {
    const ctx = canvas.getContext('2d');
    let img = null, src = null, fmt = 0;
    return {
      name: '2D canvas',
      upload(h, px) { src = px; fmt = h.pixel_format; },
      draw(h, lo, hi, inv, logd) {
        if (!img || img.width !== h.cols || img.height !== h.rows) img = ctx.createImageData(h.cols, h.rows);
        const d = img.data, n = h.rows * h.cols, scale = 1 / Math.max(hi - lo, 1e-30);
        for (let i = 0; i < n; i++) {
          let v = src[i];
          if (logd) v = Math.log(Math.max(v, 1));
          let g = (v - lo) * scale;
          g = g < 0 ? 0 : g > 1 ? 1 : g;
          if (inv) g = 1 - g;
          const c = Math.round(g * 255);
          d[4 * i] = d[4 * i + 1] = d[4 * i + 2] = c;
          d[4 * i + 3] = 255;
        }
        ctx.putImageData(img, 0, 0);
      },
    };
  }

  view.renderer = makeGL() || make2D();
  $('renderer').textContent = view.renderer.name;

  let drawQueued = false;
  function scheduleDraw() {
    if (drawQueued) return;
    drawQueued = true;
    requestAnimationFrame(drawNow);
  }

  let current = null; // {header, pixels} on the canvas
  function drawNow() {
    drawQueued = false;
    if (S.newFrame) {
      current = S.newFrame;
      S.newFrame = null;
      const h = current.header;
      if (canvas.width !== h.cols || canvas.height !== h.rows) {
        canvas.width = h.cols;
        canvas.height = h.rows;
        fitCanvas();
      }
      view.renderer.upload(h, current.pixels);
      if (view.autoPending || view.follow || view.fmt !== h.pixel_format || view.kind !== h.frame_kind) autoWL(true);
    }
    if (!current) return;
    const h = current.header;
    const logd = logDisplay(h);
    view.renderer.draw(h, view.level - view.window / 2, view.level + view.window / 2, polarityInverted(h.pixel_format), logd);
    S.drawn = h;
    overlays();
  }

  /* Window and level from the 0.5% and 99.5% points of (a sample of) the frame, leaving out the
   * unattenuated pixels (intensity 65535, line integral 0: rays that missed the patient), whose
   * peak would otherwise take most of the window as the direct beam does on a real detector. */
  function autoWL(fromFrame) {
    if (fromFrame !== true) view.follow = $('in-follow').checked = true; // the button, A, double-click
    if (!current) { view.autoPending = true; return; }
    const h = current.header, px = current.pixels, n = px.length;
    const step = Math.max(1, Math.floor(n / 65536));
    const logd = logDisplay(h);
    const direct = directValue(h);
    let s = [];
    for (let i = 0; i < n; i += step) if (px[i] !== direct) s.push(logd ? Math.log(Math.max(px[i], 1)) : px[i]);
    if (s.length < 16) for (let i = 0; i < n; i += step) s.push(logd ? Math.log(Math.max(px[i], 1)) : px[i]);
    s.sort((a, b) => a - b);
    let lo = s[Math.floor(0.005 * (s.length - 1))], hi = s[Math.ceil(0.995 * (s.length - 1))];
    if (!(hi > lo)) { lo = s[0]; hi = s[s.length - 1]; }
    if (!(hi > lo)) hi = lo + (h.pixel_format === 1 && !logd ? 1 : 1e-3);
    view.window = hi - lo;
    view.level = (hi + lo) / 2;
    view.autoPending = false;
    view.fmt = h.pixel_format;
    view.kind = h.frame_kind;
    showWL();
    scheduleDraw();
  }

  /* The W/L sliders span the data's range: uint16 [0, 65535] (ln: [0, 11.1]); float32 [0, max L]. */
  function wlRange() {
    const h = current && current.header;
    if (!h) return [0, 65535];
    if (h.pixel_format === 1) {
      const top = h.frame_kind === 2 ? 4095 : h.frame_kind === 1 ? Math.pow(2, h.bits_stored) - 1 : 65535;
      return logDisplay(h) ? [0, Math.log(top)] : [0, top];
    }
    return [0, Math.max(1, view.level + view.window, 10)];
  }

  function showWL() {
    const [lo, hi] = wlRange();
    const dig = hi - lo > 100 ? 0 : 3;
    if (document.activeElement !== $('in-window')) $('in-window').value = view.window.toFixed(dig);
    if (document.activeElement !== $('in-level')) $('in-level').value = view.level.toFixed(dig);
    $('in-window-r').value = String(Math.round(1000 * clamp(view.window / (hi - lo), 0, 1)));
    $('in-level-r').value = String(Math.round(1000 * clamp((view.level - lo) / (hi - lo), 0, 1)));
    $('ov-wl').textContent = 'W ' + view.window.toFixed(dig) + '  L ' + view.level.toFixed(dig);
  }

  function setWL(w, l) {
    view.follow = $('in-follow').checked = false; // the user's window/level stays
    if (Number.isFinite(w) && w > 0) view.window = w;
    if (Number.isFinite(l)) view.level = l;
    showWL();
    scheduleDraw();
  }

  $('in-window').addEventListener('change', () => setWL(parseFloat($('in-window').value), NaN));
  $('in-level').addEventListener('change', () => setWL(NaN, parseFloat($('in-level').value)));
  $('in-window-r').addEventListener('input', () => {
    const [lo, hi] = wlRange();
    setWL(Math.max((hi - lo) * $('in-window-r').value / 1000, (hi - lo) * 1e-4), NaN);
  });
  $('in-level-r').addEventListener('input', () => {
    const [lo, hi] = wlRange();
    setWL(NaN, lo + (hi - lo) * $('in-level-r').value / 1000);
  });
  $('btn-auto').addEventListener('click', autoWL);
  $('in-log').addEventListener('change', () => { view.log = $('in-log').checked; autoWL(); });
  $('in-follow').addEventListener('change', () => { if ($('in-follow').checked) autoWL(); else view.follow = false; });
  $('in-invert').addEventListener('change', () => { view.invert = $('in-invert').checked; scheduleDraw(); });

  /* Dragging on the image: right = wider window, down = higher level (as in DICOM viewers). */
  (function dragWL() {
    let drag = null;
    canvas.addEventListener('pointerdown', (ev) => {
      drag = { x: ev.clientX, y: ev.clientY, w: view.window, l: view.level };
      canvas.setPointerCapture(ev.pointerId);
    });
    canvas.addEventListener('pointermove', (ev) => {
      if (!drag) return;
      const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      setWL(drag.w * Math.exp(dx * 0.006), drag.l + dy * drag.w * 0.003);
    });
    const end = () => { drag = null; };
    canvas.addEventListener('pointerup', end);
    canvas.addEventListener('pointercancel', end);
    canvas.addEventListener('dblclick', autoWL);
  })();

  /* The canvas keeps the frame's pixel grid (one canvas pixel per detector pixel); CSS scales it
   * to the largest size that fits the stage with the frame's aspect ratio (half the stage each on
   * a biplane system). */
  function fitCanvas() {
    const st = $('stage');
    const two = biplane();
    st.classList.toggle('biplane', two);
    $('frame-b').hidden = !two;
    $('ov-b').hidden = !two;
    const W = st.clientWidth / (two ? 2 : 1), H = st.clientHeight;
    for (const c of two ? [canvas, $('frame-b')] : [canvas]) {
      const s = Math.min(W / c.width, H / c.height);
      c.style.width = Math.floor(c.width * s) + 'px';
      c.style.height = Math.floor(c.height * s) + 'px';
    }
  }

  function biplane() { return !!(S.info && S.info.planes && S.info.planes.length > 1); }

  /* Plane B's frame on its own 2D canvas, windowed from its own range (a sample of its pixels):
   * the view beside plane A's; the controls stay plane A's. */
  function drawPlaneB(buf, h, bpp, n) {
    const c = $('frame-b');
    const px = bpp === 4 ? new Float32Array(buf.slice(h.header_size, h.header_size + n * 4))
      : new Uint16Array(buf.slice(h.header_size, h.header_size + n * 2));
    let lo = Infinity, hi = -Infinity;
    const step = Math.max(1, Math.floor(n / 65536));
    for (let i = 0; i < n; i += step) {
      const v = px[i];
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    const scale = hi > lo ? 255 / (hi - lo) : 0;
    if (c.width !== h.cols || c.height !== h.rows) {
      c.width = h.cols;
      c.height = h.rows;
      fitCanvas();
    }
    const ctx = c.getContext('2d');
    const img = ctx.createImageData(h.cols, h.rows);
    for (let i = 0; i < n; i++) {
      const g = (px[i] - lo) * scale;
      img.data[4 * i] = img.data[4 * i + 1] = img.data[4 * i + 2] = g;
      img.data[4 * i + 3] = 255;
    }
    ctx.putImageData(img, 0, 0);
    $('ov-b-info').textContent = angleText(h.pose.primary_deg, 'LAO', 'RAO') + ' ' +
      angleText(h.pose.secondary_deg, 'CRAN', 'CAUD') + ' · ' + h.mode + ' · frame ' + h.frame_counter;
  }
  new ResizeObserver(fitCanvas).observe($('stage'));

  /* ---- overlays and statistics -------------------------------------------------------------- */

  function angleText(v, pos, neg) {
    if (!Number.isFinite(v)) return '—';
    const a = Math.abs(v);
    return (v < 0 ? neg : pos) + ' ' + (Math.round(a * 10) / 10).toFixed(a % 1 ? 1 : 0) + '°';
  }

  function overlays() {
    const h = S.drawn;
    if (h) {
      $('ov-primary').textContent = angleText(h.pose.primary_deg, 'LAO', 'RAO');
      $('ov-secondary').textContent = angleText(h.pose.secondary_deg, 'CRAN', 'CAUD');
      $('ov-rot').textContent = h.pose.detector_rot_deg ? 'rot ' + fmtNum(h.pose.detector_rot_deg, 1) + '°' : '';
      $('ov-counter').textContent = 'frame ' + h.frame_counter;
      $('ov-kind').textContent = kindText(h) + motionText(h);
      $('ov-mode').textContent = h.mode + '  ' + h.cols + '×' + h.rows;
      // The header counts every pixel at the ADC's full scale, a panel's few hot pixels too: the
      // warning is for more than 0.1 % of the panel (hot pixels are ~0.01 % by default).
      const sat = h.saturated_px / Math.max(1, h.rows * h.cols);
      $('ov-sat').hidden = !(sat > 0.001);
      $('ov-sat').textContent = 'SATURATED ' + (100 * sat < 0.1 ? '<0.1' : (100 * sat).toFixed(1)) + ' % of the panel';
      $('ov-kerma').textContent = kermaText(h);
      $('ov-geom').textContent = 'SID ' + fmtNum(h.pose.sid_mm, 0) + ' mm  SOD ' + fmtNum(h.pose.sod_mm, 0) + ' mm';
      $('ov-dropped').textContent = 'dropped ' + h.frames_dropped + (S.gaps ? '  gaps ' + S.gaps : '');
    }
    const fps = S.arrivals.length > 1 ? 1000 * (S.arrivals.length - 1) / (S.arrivals[S.arrivals.length - 1] - S.arrivals[0]) : NaN;
    const stale = S.arrivals.length && performance.now() - S.arrivals[S.arrivals.length - 1] > 2500;
    $('ov-fps').textContent = (stale ? '0.0' : fmtNum(fps, 1)) + ' fps';
    const lat = median(S.latencies), slat = median(S.srvLatencies);
    $('ov-latency').textContent = Number.isFinite(lat) ? 'pose→frame ' + lat.toFixed(0) + ' ms'
      : Number.isFinite(slat) ? 'pose→sent ' + slat.toFixed(0) + ' ms' : 'pose→frame —';
    const a = S.acq;
    const x = $('ov-xray');
    if (a) {
      const lock = a.run_mode === 'lockstep';
      x.textContent = !a.running ? 'STOPPED' : lock ? 'LOCKSTEP · ARMED' : 'FLUORO · ' + fmtNum(a.fps, a.fps % 1 ? 1 : 0) + ' fps';
      x.className = 'xray' + (a.running ? (lock ? ' armed' : ' live') : '');
      $('ov-dose').textContent = h && h.frame_kind ? exposureText(h) : doseText(a);
      // Last image hold: the X-ray is off and the last frame stays on the screen.
      const lih = !a.running && !!h;
      $('ov-lih').hidden = !lih;
      $('lih-text').textContent = lih ? 'frame ' + h.frame_counter + ' held' : a.running ? 'X-ray on' : '—';
    }
    for (const b of $('seg-image').children) b.classList.toggle('on', b.dataset.v === imageChoice());
    statsTable(fps, lat, slat);
  }
  setInterval(overlays, 500);

  /* What the frame is: the detector's processed frame, its raw codes, or the ideal frame. */
  function kindText(h) {
    if (h.pixel_format === 2) return 'IDEAL · float32 line integral';
    if (h.frame_kind === 2) return 'PROCESSED · ' + h.bits_stored + '-bit';
    if (h.frame_kind === 1) return 'RAW · ' + h.bits_stored + '-bit ADC';
    return 'IDEAL · uint16 (chain off)';
  }

  /* The frame's cardiac phase and breathing displacement, when they move it. */
  function motionText(h) {
    let t = '';
    if (h.cardiac_phase >= 0) t += '  ♥ ' + h.cardiac_phase.toFixed(2);
    if (h.resp_phase >= 0) t += '  resp ' + fmtNum(h.resp_mm, 1) + ' mm';
    return t;
  }

  /* The frame's exposure, from its header: kV, mA, pulse width. */
  function exposureText(h) {
    return fmtNum(h.kv, 0) + ' kV  ' + fmtNum(h.ma, 1) + ' mA  ' + fmtNum(h.pulse_ms, 1) + ' ms';
  }

  /* Dose rate at the reference point (this frame's air kerma times the frame rate), the run's
   * cumulative air kerma and DAP, from the frame's header (chain frames). */
  function kermaText(h) {
    if (!h.frame_kind || !Number.isFinite(h.k_irp_mgy)) return '';
    const fps = h.period_ns ? 1e9 / h.period_ns : (S.acq ? S.acq.fps : NaN);
    const rate = h.k_irp_mgy * fps * 60;
    return fmtNum(rate, rate < 10 ? 2 : 1) + ' mGy/min  Ka,r ' + fmtNum(h.k_irp_total_mgy, 2) + ' mGy  DAP ' +
      fmtNum(h.kap_total_gycm2 * 100, 2) + ' µGy·m²';
  }

  /* Exposure and dose fields, whatever the server calls them (kV, mA, mAs, dose, kerma, DAP...). */
  function doseText(a) {
    const DOSE = /(^|_)(kv|kvp|ma|mas|dose|kerma|dap|mgy|ugy|filter|cu|focal)(_|$)/i;
    const out = [];
    const walk = (o, pre, inDose) => {
      for (const [k, v] of Object.entries(o)) {
        if (v && typeof v === 'object' && !Array.isArray(v)) {
          walk(v, pre + k + '.', inDose || DOSE.test(k));
        } else if ((inDose || DOSE.test(k)) && (typeof v === 'number' || typeof v === 'string')) {
          const nu = nameUnit(pre + k), val = typeof v === 'number' ? String(+v.toPrecision(4)) : v;
          // "70 kV" for a bare unit name, else "Air kerma 0.52 mGy"
          out.push(nu.name === UNITS[k.toLowerCase()] ? val + ' ' + nu.name : nu.name + ' ' + val + (nu.unit ? ' ' + nu.unit : ''));
        }
      }
    };
    walk(a, '', false);
    return out.slice(0, 5).join('  ');
  }

  function statsTable(fps, lat, slat) {
    if (!$('stats-box').open) return;
    const h = S.header;
    const rows = [
      ['frames received', S.frames],
      ['measured rate', fmtNum(fps, 2) + ' fps'],
      ['dropped (server, this client)', h ? h.frames_dropped : '—'],
      ['counter gaps', S.gaps],
      ['pose → frame here (median)', fmtNum(lat, 1) + ' ms'],
      ['pose received → sent (server)', fmtNum(slat, 1) + ' ms'],
      ['exposure → sent (server)', h ? fmtNum((h.t_sent_ns - h.t_exposure_ns) / 1e6, 1) + ' ms' : '—'],
      ['render (server)', h ? fmtNum((h.t_render_done_ns - h.t_exposure_ns) / 1e6, 1) + ' ms' : '—'],
      ['pose seq', h ? h.pose_seq : '—'],
      ['frame size', h ? (h.payload_bytes / 1048576).toFixed(2) + ' MiB' : '—'],
      ['renderer', view.renderer.name],
    ];
    const t = $('stats');
    t.textContent = '';
    for (const [k, v] of rows) {
      const tr = t.insertRow();
      tr.insertCell().textContent = k;
      tr.insertCell().textContent = String(v);
    }
  }

  /* ---- pose controls ------------------------------------------------------------------------ */

  const POSE = [
    { key: 'primary_deg', id: 'primary', d: 1 },
    { key: 'secondary_deg', id: 'secondary', d: 1 },
    { key: 'detector_rot_deg', id: 'rot', d: 1 },
    { key: 'sid_mm', id: 'sid', d: 0 },
    { key: 'sod_mm', id: 'sod', d: 0 },
  ];
  const pose = {}; // the pose the controls show

  function showPose(p, force) {
    if (!p) return;
    for (const f of POSE) {
      if (typeof p[f.key] !== 'number') continue;
      pose[f.key] = p[f.key];
      const num = $('in-' + f.id), rng = $('in-' + f.id + '-r');
      if (force || document.activeElement !== num) num.value = +p[f.key].toFixed(2);
      rng.value = p[f.key];
    }
    if (Array.isArray(p.table_mm)) {
      pose.table_mm = p.table_mm.slice();
      ['tx', 'ty', 'tz'].forEach((id, i) => { if (document.activeElement !== $('in-' + id)) $('in-' + id).value = +p.table_mm[i].toFixed(1); });
    }
    $('lbl-primary').textContent = pose.primary_deg < 0 ? 'RAO' : 'LAO';
    $('lbl-secondary').textContent = pose.secondary_deg < 0 ? 'CAUD' : 'CRAN';
  }

  let poseTimer = null;
  const dirty = {};
  /* Queues a pose change (a number, or [x, y, z] for table_mm); changes within one animation
   * frame go out as one update. */
  function changePose(key, value) {
    const ok = Array.isArray(value) ? value.every(Number.isFinite) : Number.isFinite(value);
    if (!ok) return;
    pose[key] = value;
    dirty[key] = value;
    S.editing = performance.now() + 600;
    showPose(pose);
    if (!poseTimer) poseTimer = requestAnimationFrame(flushPose);
  }

  async function flushPose() {
    poseTimer = null;
    const upd = Object.assign({}, dirty);
    for (const k of Object.keys(dirty)) delete dirty[k];
    if (!Object.keys(upd).length) return;
    const seq = ++S.seq;
    S.sentAt.set(seq, performance.now());
    try {
      if (S.wsOpen) await send({ type: 'pose', seq, pose: upd });
      else await api('PUT', '/v1/pose', Object.assign({ seq }, upd));
      for (const f of POSE) $('in-' + f.id).classList.remove('bad');
    } catch (e) {
      S.sentAt.delete(seq);
      errorAt(badControl(e.message, upd), String(e));
      S.editing = 0;
      try { showPose((await api('GET', '/v1/pose')).pose, true); } catch (e2) { /* shown above */ }
    }
  }

  /* The control an error message names ("pose.sid_mm: ..."), else the one just changed. */
  function badControl(message, upd) {
    const m = /^(?:pose\.)?([a-z_]+)/.exec(message);
    const keys = [m && m[1]].concat(Object.keys(upd || {}));
    for (const k of keys) {
      for (const f of POSE) if (k === f.key) return $('in-' + f.id);
      if (k === 'table_mm') return $('in-tx');
    }
    return null;
  }

  for (const f of POSE) {
    const num = $('in-' + f.id), rng = $('in-' + f.id + '-r');
    rng.addEventListener('input', () => { num.value = rng.value; changePose(f.key, parseFloat(rng.value)); });
    num.addEventListener('change', () => changePose(f.key, parseFloat(num.value)));
  }
  ['tx', 'ty', 'tz'].forEach((id, i) => {
    $('in-' + id).addEventListener('change', () => {
      const t = (pose.table_mm || [0, 0, 0]).slice();
      t[i] = parseFloat($('in-' + id).value);
      changePose('table_mm', t);
    });
  });
  $('btn-ap').addEventListener('click', () => { changePose('primary_deg', 0); changePose('secondary_deg', 0); });

  /* ---- acquisition controls ----------------------------------------------------------------- */

  const KNOWN = new Set(['mode', 'fps', 'run_mode', 'pixel_format', 'running', 'rows', 'cols', 'period_ms', 'next_frame', 'dose']);
  // shown by the clinical controls (the Image buttons, the protocol menus)
  const SHOWN = new Set(['chain.enabled', 'chain.protocol']);

  function showAcq(a) {
    if (!a) return;
    S.acq = a;
    const busy = (el) => document.activeElement === el;
    if (!busy($('in-mode'))) $('in-mode').value = a.mode;
    if (!busy($('in-fps'))) $('in-fps').value = a.fps;
    if (!busy($('in-fps-r'))) $('in-fps-r').value = a.fps;
    if (!busy($('in-pixfmt'))) $('in-pixfmt').value = a.pixel_format;
    for (const b of $('seg-runmode').children) b.classList.toggle('on', b.dataset.v === a.run_mode);
    const lock = a.run_mode === 'lockstep';
    $('btn-run').classList.toggle('active', !!a.running);
    $('btn-trigger').disabled = !(lock && a.running);
    extraFields(a);
    overlays();
  }

  async function setAcq(update, src) {
    try {
      if (S.wsOpen) {
        const r = await send({ type: 'acquisition', acquisition: update });
        if (r.state) showAcq(r.state.acquisition);
      } else showAcq(await api('PUT', '/v1/acquisition', update));
      if (update.pixel_format || update.mode || update.chain) view.autoPending = true;
      return true;
    } catch (e) {
      errorAt(src, String(e));
      try { showAcq(await api('GET', '/v1/acquisition')); } catch (e2) { /* shown above */ }
      return false;
    }
  }

  async function runStop(run, src) {
    try {
      showAcq(await api('POST', run ? '/v1/acquisition/start' : '/v1/acquisition/stop', {}));
      return true;
    } catch (e) { errorAt(src, String(e)); return false; }
  }

  async function trigger() {
    try {
      const r = await api('POST', '/v1/acquisition/trigger', {});
      toast('triggered frame ' + r.frame, 'ok');
    } catch (e) { toast(String(e), 'err'); }
  }

  /* Contrast (issue 26, docs/contrast.md): a region, a rate and a volume; the box shows when the
   * scene has regions, and the frames' iodine_mg_ml_max is what they were rendered with. */
  async function loadContrast() {
    try {
      const c = await api('GET', '/v1/contrast');
      const sel = $('in-region'), keep = sel.value;
      sel.textContent = '';
      for (const r of c.regions) {
        const o = document.createElement('option');
        o.value = o.textContent = r.name;
        sel.appendChild(o);
      }
      if (keep) sel.value = keep;
      $('box-contrast').hidden = !c.regions.length;
      $('in-inj-rate').max = c.limits.max_rate_ml_s;
      $('in-inj-vol').max = c.limits.max_volume_ml;
      const top = c.regions.reduce((a, r) => (r.iodine_mg_ml > a.iodine_mg_ml ? r : a), { iodine_mg_ml: 0 });
      $('contrast-text').textContent = top.name ? top.name + ' ' + top.iodine_mg_ml.toFixed(1) + ' mg I/mL' : 'no iodine';
    } catch (e) { /* a server without the route: no box */ }
  }
  async function inject() {
    try {
      const r = await api('POST', '/v1/contrast/inject', { region: $('in-region').value,
        rate_ml_s: parseFloat($('in-inj-rate').value), volume_ml: parseFloat($('in-inj-vol').value) });
      toast('injecting ' + r.volume_ml + ' mL into the ' + r.region + ' over ' + r.duration_s.toFixed(1) + ' s', 'ok');
      for (let i = 1; i <= 16; i++) setTimeout(loadContrast, 500 * i);
    } catch (e) { errorAt($('btn-inject'), String(e)); }
  }
  $('btn-inject').addEventListener('click', inject);
  $('btn-inj-stop').addEventListener('click', async () => {
    try { await api('DELETE', '/v1/contrast'); loadContrast(); } catch (e) { toast(String(e), 'err'); }
  });
  loadContrast();

  $('btn-run').addEventListener('click', () => runStop(true));
  $('btn-stop').addEventListener('click', () => runStop(false));
  $('btn-trigger').addEventListener('click', trigger);

  // Motion (issue 26): each button turns its motion on or off, as GET /v1/motion says it is now.
  function showMotion(m) {
    $('btn-heart').setAttribute('aria-pressed', String(!!m.cardiac.on));
    $('btn-breath').setAttribute('aria-pressed', String(!!m.respiratory.on));
  }
  async function toggleMotion(which, btn) {
    try {
      const cur = await api('GET', '/v1/motion');
      showMotion(await api('PUT', '/v1/motion', { [which]: { on: !cur[which].on } }));
    } catch (e) { errorAt(btn, String(e)); }
  }
  $('btn-heart').addEventListener('click', () => toggleMotion('cardiac', $('btn-heart')));
  $('btn-breath').addEventListener('click', () => toggleMotion('respiratory', $('btn-breath')));
  for (const b of $('seg-runmode').children) b.addEventListener('click', () => setAcq({ run_mode: b.dataset.v }, b));
  $('in-mode').addEventListener('change', () => setAcq({ mode: $('in-mode').value }, $('in-mode')));
  $('in-pixfmt').addEventListener('change', () => setAcq({ pixel_format: $('in-pixfmt').value }, $('in-pixfmt')));
  $('in-fps').addEventListener('change', () => setAcq({ fps: parseFloat($('in-fps').value) }, $('in-fps')));
  $('in-fps-r').addEventListener('change', () => setAcq({ fps: parseFloat($('in-fps-r').value) }, $('in-fps')));
  $('in-fps-r').addEventListener('input', () => { $('in-fps').value = $('in-fps-r').value; });

  /* A field's name and unit for people: a hint's label and unit when the server gives them, else
   * from the name itself ("air_kerma_mgy" -> "Air kerma", "mGy"; "kv" -> "kV"). */
  const UNITS = { kv: 'kV', kvp: 'kVp', ma: 'mA', mas: 'mAs', ms: 'ms', s: 's', mm: 'mm', deg: '°', mgy: 'mGy',
    ugy: 'µGy', ngy: 'nGy', ugym2: 'µGy·m²', mgycm2: 'mGy·cm²', gycm2: 'Gy·cm²', fps: 'fps', percent: '%', kev: 'keV' };
  function nameUnit(key) {
    const hint = S.fields[key] || {};
    const leaf = key.split('.').pop();
    const parts = leaf.split('_');
    let unit = hint.unit || '';
    if (parts.length > 1 && UNITS[parts[parts.length - 1].toLowerCase()]) {
      const u = UNITS[parts.pop().toLowerCase()];
      if (!unit) unit = u;
    }
    let name = hint.label;
    if (!name) {
      if (parts.length === 1 && UNITS[parts[0].toLowerCase()]) return { name: UNITS[parts[0].toLowerCase()], unit: '' };
      name = parts.join(' ');
      name = name.charAt(0).toUpperCase() + name.slice(1);
    }
    return { name, unit };
  }
  function label(key) { return nameUnit(key).name; }

  /* Settings beyond the ones above: one generic control per leaf of the acquisition object
   * (nested objects give dotted names and nested partial updates). Hints from GET /v1/info
   * "acquisition_fields": {"name": {"label", "unit", "min", "max", "step", "enum", "readonly"}}. */
  function extraFields(a) {
    const box = $('acq-extra');
    const leaves = [];
    const walk = (o, path) => {
      for (const [k, v] of Object.entries(o)) {
        const p = path.concat(k);
        if ((path.length === 0 && KNOWN.has(k)) || SHOWN.has(p.join('.'))) continue;
        if (v && typeof v === 'object' && !Array.isArray(v)) walk(v, p);
        else leaves.push([p, v]);
      }
    };
    walk(a, []);
    const sig = leaves.map(([p, v]) => p.join('.') + ':' + typeof v).join('|');
    if (box.dataset.sig !== sig) {
      box.dataset.sig = sig;
      box.textContent = '';
      for (const [p, v] of leaves) box.appendChild(extraControl(p, v));
    }
    for (const [p, v] of leaves) {
      const el = box.querySelector('[data-key="' + CSS.escape(p.join('.')) + '"]');
      if (!el || document.activeElement === el) continue;
      if (el.type === 'checkbox') el.checked = !!v;
      else if (el.type === 'number' && typeof v === 'number') el.value = +v.toPrecision(6);
      else el.value = Array.isArray(v) ? JSON.stringify(v) : v;
    }
  }

  function extraControl(path, v) {
    const key = path.join('.');
    const hint = S.fields[key] || S.fields[path[path.length - 1]] || {};
    const row = document.createElement('div');
    row.className = 'row';
    const lab = document.createElement('label');
    const nu = nameUnit(key);
    lab.textContent = nu.name;
    lab.title = key + (hint.description ? ': ' + hint.description : '') +
      (Number.isFinite(hint.min) && Number.isFinite(hint.max) ? ' [' + hint.min + ', ' + hint.max + ']' + (nu.unit ? ' ' + nu.unit : '') : '');
    row.appendChild(lab);
    let el;
    if (typeof v === 'boolean' || hint.boolean) {
      el = document.createElement('input');
      el.type = 'checkbox';
    } else if (Array.isArray(hint.enum)) {
      el = document.createElement('select');
      for (const c of hint.enum) {
        const o = document.createElement('option');
        o.value = o.textContent = c;
        el.appendChild(o);
      }
    } else if (typeof v === 'number') {
      if (Number.isFinite(hint.min) && Number.isFinite(hint.max)) {
        const r = document.createElement('input');
        r.type = 'range';
        r.min = hint.min; r.max = hint.max; r.step = hint.step || 'any';
        r.value = v;
        row.appendChild(r);
        r.addEventListener('input', () => { el.value = r.value; });
        r.addEventListener('change', () => { el.value = r.value; el.dispatchEvent(new Event('change')); });
      }
      el = document.createElement('input');
      el.type = 'number';
      el.step = hint.step || 'any';
      if (Number.isFinite(hint.min)) el.min = hint.min;
      if (Number.isFinite(hint.max)) el.max = hint.max;
    } else {
      el = document.createElement('input');
      el.type = 'text';
    }
    el.dataset.key = key;
    el.setAttribute('aria-label', label(key));
    if (hint.readonly) el.disabled = true;
    row.appendChild(el);
    const unit = document.createElement('span');
    unit.className = 'unit';
    unit.textContent = nu.unit;
    row.appendChild(unit);
    el.addEventListener('change', () => {
      let val;
      if (el.type === 'checkbox') val = typeof v === 'boolean' ? el.checked : el.checked ? 1 : 0;
      else if (el.type === 'number') val = parseFloat(el.value);
      else if (Array.isArray(v)) { try { val = JSON.parse(el.value); } catch (e) { errorAt(el, key + ': not JSON'); return; } }
      else val = el.value;
      // {"a": {"b": val}} for the path a.b
      const upd = {};
      let o = upd;
      path.forEach((k, i) => { o[k] = i === path.length - 1 ? val : {}; o = o[k]; });
      setAcq(upd, el);
    });
    return row;
  }

  /* Keeps the acquisition and pose controls in step with changes made elsewhere (other clients). */
  setInterval(() => { if (S.wsOpen) send({ type: 'state' }).catch(() => {}); }, 1500);

  /* ---- X-ray: pedals, image kind, last image hold ------------------------------------------- */

  function imageChoice() {
    const a = S.acq;
    if (!a || !a.chain || !a.chain.enabled) return 'ideal';
    return S.frames_kind;
  }

  async function setImage(v, src) {
    if (v === 'ideal') return setAcq({ chain: { enabled: false } }, src);
    S.frames_kind = v;
    view.autoPending = true;
    try {
      if (S.wsOpen) await send({ type: 'frames', frames: v });
    } catch (e) { errorAt(src, String(e)); return false; }
    return setAcq({ chain: { enabled: true } }, src);
  }
  for (const b of $('seg-image').children) b.addEventListener('click', () => setImage(b.dataset.v, b));

  /* A pedal: fluoroscopy (or an exposure run) while it is held. Pressing applies the chosen
   * protocol when it is not the one in use (its frame rate too), in free run, and starts; letting
   * go stops, and the last frame stays on the screen (last image hold). */
  async function pedal(which, down) {
    const btn = $(which === 'fluoro' ? 'btn-fluoro' : 'btn-expose');
    if (down) {
      if (S.pedal) return;
      S.pedal = which;
      btn.classList.add('held');
      const proto = $(which === 'fluoro' ? 'in-flavour' : 'in-expproto').value;
      const a = S.acq || {};
      const upd = {};
      if (a.run_mode !== 'free') upd.run_mode = 'free';
      if (proto && (!a.chain || a.chain.protocol_name !== proto)) upd.chain = { protocol: proto };
      if (Object.keys(upd).length && !(await setAcq(upd, btn))) { S.pedal = null; btn.classList.remove('held'); return; }
      if (S.pedal !== which) return runStop(false); // let go while the protocol was being set
      await runStop(true, btn);
      if (S.pedal !== which) runStop(false);
    } else {
      if (S.pedal !== which) return;
      S.pedal = null;
      btn.classList.remove('held');
      await runStop(false, btn);
    }
  }
  for (const which of ['fluoro', 'exposure']) {
    const btn = $(which === 'fluoro' ? 'btn-fluoro' : 'btn-expose');
    btn.addEventListener('pointerdown', (ev) => { btn.setPointerCapture(ev.pointerId); pedal(which, true); });
    for (const e of ['pointerup', 'pointercancel', 'lostpointercapture']) btn.addEventListener(e, () => pedal(which, false));
    btn.addEventListener('keydown', (ev) => { if ((ev.key === ' ' || ev.key === 'Enter') && !ev.repeat) { ev.preventDefault(); pedal(which, true); } });
    btn.addEventListener('keyup', (ev) => { if (ev.key === ' ' || ev.key === 'Enter') pedal(which, false); });
  }
  window.addEventListener('blur', () => { if (S.pedal) pedal(S.pedal, false); }); // a pedal never sticks

  $('btn-lih').addEventListener('click', () => {
    const h = S.drawn;
    canvas.toBlob((b) => {
      if (!b) return;
      const a = document.createElement('a');
      a.href = URL.createObjectURL(b);
      a.download = 'xtwin-' + (h ? h.mode + '-frame' + h.frame_counter : 'frame') + '.png';
      a.click();
      setTimeout(() => URL.revokeObjectURL(a.href), 1000);
    });
  });

  /* ---- keyboard ------------------------------------------------------------------------------ */

  document.addEventListener('keydown', (ev) => {
    const t = ev.target;
    if (t && (t.tagName === 'INPUT' || t.tagName === 'SELECT' || t.tagName === 'TEXTAREA') && t.type !== 'checkbox') return;
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (t && (t.tagName === 'BUTTON' || t.tagName === 'SUMMARY') && (ev.key === ' ' || ev.key === 'Enter')) return; // its own click
    if ((ev.key === 'f' || ev.key === 'F' || ev.key === 'e' || ev.key === 'E')) {
      if (!ev.repeat) pedal(ev.key.toLowerCase() === 'f' ? 'fluoro' : 'exposure', true);
      ev.preventDefault();
      return;
    }
    const step = ev.shiftKey ? 5 : 1;
    const bump = (key, d, lo, hi) => changePose(key, clamp(Math.round(((pose[key] || 0) + d) * 10) / 10, lo, hi));
    switch (ev.key) {
      case 'ArrowRight': bump('primary_deg', step, -180, 180); break;
      case 'ArrowLeft': bump('primary_deg', -step, -180, 180); break;
      case 'ArrowUp': bump('secondary_deg', step, -90, 90); break;
      case 'ArrowDown': bump('secondary_deg', -step, -90, 90); break;
      case ']': case '}': bump('detector_rot_deg', step, -180, 180); break;
      case '[': case '{': bump('detector_rot_deg', -step, -180, 180); break;
      case 'PageUp': bump('sid_mm', 10, 1, 5000); break;
      case 'PageDown': bump('sid_mm', -10, 1, 5000); break;
      case '0': changePose('primary_deg', 0); changePose('secondary_deg', 0); break;
      case ' ': runStop(!(S.acq && S.acq.running)); break;
      case 't': case 'T': trigger(); break;
      case 'a': case 'A': autoWL(); break;
      case 'i': case 'I': $('in-invert').checked = !$('in-invert').checked; $('in-invert').dispatchEvent(new Event('change')); break;
      case 'l': case 'L': $('in-log').checked = !$('in-log').checked; $('in-log').dispatchEvent(new Event('change')); break;
      default: return;
    }
    ev.preventDefault();
  });

  document.addEventListener('keyup', (ev) => {
    if (ev.key === 'f' || ev.key === 'F') pedal('fluoro', false);
    if (ev.key === 'e' || ev.key === 'E') pedal('exposure', false);
  });

  /* ---- for tests and scripting: read-only views of the state -------------------------------- */

  window.xtwin = {
    get state() {
      return {
        frames: S.frames, seq: S.seq, header: S.header, drawn: S.drawn, wsOpen: S.wsOpen,
        acquisition: S.acq, pendingPoses: S.sentAt.size, latencies: S.latencies.slice(),
        view: { window: view.window, level: view.level, invert: view.invert, log: view.log,
          logd: current ? logDisplay(current.header) : false, follow: view.follow, renderer: view.renderer.name },
        pedal: S.pedal, framesKind: S.frames_kind,
      };
    },
    /* The drawn frame's pixels (for tests: statistics against the canvas). */
    pixels() { return current ? Array.from(current.pixels) : []; },
    /* The state and the canvas of one moment (no frame drawn between the two). */
    snapshot() { return { state: this.state, rgba: this.readCanvas() }; },
    /* The canvas as RGBA rows, top row first (the same for both renderers). */
    readCanvas() {
      const c = document.createElement('canvas');
      c.width = canvas.width;
      c.height = canvas.height;
      const x = c.getContext('2d');
      x.drawImage(canvas, 0, 0);
      return Array.from(x.getImageData(0, 0, c.width, c.height).data);
    },
  };

  start();
})();
