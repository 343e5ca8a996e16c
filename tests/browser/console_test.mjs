#!/usr/bin/env node
/* Real-browser test of the xtwin console: Debian's chromium (/usr/bin/chromium), driven by
 * playwright-core (tests/browser/node_modules, installed by scripts/install-deps; it never
 * downloads a browser), loads the console from a real xtwin-server and uses it as a person would.
 *
 *   node tests/browser/console_test.mjs --server build/server/xtwin-server [--out DIR]
 *        [--only clinical|token|tls|biplane] [--screenshot docs/console.png]
 *        [--mode fd20-128 --phantom-dim 128 --phantom-spacing 2]
 *
 * Checks, each against something the console did not compute itself:
 *  - clinical (chain on): the processed frame by default; every control a fluoroscopy needs above
 *    the fold of 1366 x 768; the default processed frame neither saturated nor blank (statistics of
 *    the canvas over the patient's pixels); at 100 kV / 1 mAs the header's saturated_px and the
 *    SATURATED overlay; the FLUORO pedal and the F key run the acquisition while held (the server's
 *    GET /v1/acquisition) and leave the last image held; auto window/level off and back on (A);
 *  - with --token: the page (public) asks for the token; after it is typed, REST and the stream
 *    (token as a WebSocket subprotocol) work, and frames arrive and are drawn;
 *  - moving a control (typing a primary angle) makes the server's pose (GET /v1/pose) that angle
 *    with the sequence number the page sent, a frame carrying that sequence number and pose is
 *    drawn, and the canvas changes;
 *  - the canvas shows exactly the frame: every pixel equals window/level applied (here, in the
 *    test) to the same pose rendered through POST /v1/render (.npy), within 1 grey level: with
 *    WebGL2 and with the 2D-canvas fallback (?renderer=2d);
 *  - the arrow keys move the C-arm (a frame with the next sequence number and primary + 1);
 *  - lockstep from the run-mode buttons: a trigger gives a frame flagged lockstep;
 *  - float32 frames from the Pixels selector pass the same pixel check (shown inverted);
 *  - an invalid value (SID below SOD) shows the server's JSON error beside the SID field and over
 *    the image, inside the viewport, and keeps serving;
 *  - over TLS (self-signed certificate; wss on the stream port) frames arrive, with a token that
 *    cannot be a subprotocol (sent as ?token=).
 * Exit 0 pass, 1 fail, 77 skipped (no chromium, no playwright-core: says which and how to fix). */
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const argv = process.argv.slice(2);
const opt = (name, def) => {
  const i = argv.indexOf('--' + name);
  return i >= 0 ? argv[i + 1] : def;
};
const SERVER = opt('server');
const OUT = opt('out') || fs.mkdtempSync(path.join(os.tmpdir(), 'xtwin-browser-'));
const SHOT = opt('screenshot');
const ONLY = opt('only'); // one scenario: clinical, token, tls, biplane (docs/console.md makes its screenshot with clinical)
const CHROMIUM = process.env.XT_CHROMIUM || '/usr/bin/chromium';
const SCENE = ['--backend', 'cpu', '--threads', '2', '--phantom-dim', opt('phantom-dim', '128'),
  '--phantom-spacing', opt('phantom-spacing', '2'), '--mode', opt('mode', 'fd20-128'), '--fps', opt('fps', '10')];

function skip(why) {
  console.log('test_console_browser SKIPPED: ' + why);
  process.exit(77);
}
if (!SERVER) {
  console.error('usage: console_test.mjs --server PATH [--out DIR] [--screenshot FILE]');
  process.exit(2);
}
if (!fs.existsSync(CHROMIUM)) skip(CHROMIUM + ' not found (Debian package chromium: scripts/install-deps installs it)');
let chromium;
try {
  ({ chromium } = await import(path.join(HERE, 'node_modules', 'playwright-core', 'index.mjs')));
} catch (e) {
  skip('playwright-core is not installed in tests/browser/node_modules (scripts/install-deps runs ' +
    '`npm ci` there; it needs the npm registry): ' + e.message.split('\n')[0]);
}
fs.mkdirSync(OUT, { recursive: true });

/* ---- the server ------------------------------------------------------------------------------ */

const servers = [];
async function startServer(extra) {
  const dir = fs.mkdtempSync(path.join(OUT, 'srv-'));
  const ports = path.join(dir, 'ports.json');
  const log = fs.openSync(path.join(dir, 'server.log'), 'w');
  const proc = spawn(SERVER, ['--rest-port', '0', '--ws-port', '0', '--ports-file', ports, ...SCENE, ...extra],
    { stdio: ['ignore', log, log] });
  const srv = { proc, dir, log: path.join(dir, 'server.log'), exited: null };
  proc.on('exit', (code, sig) => { srv.exited = { code, sig }; });
  servers.push(srv);
  for (let t = 0; t < 600; t++) {
    if (fs.existsSync(ports)) {
      const p = JSON.parse(fs.readFileSync(ports, 'utf8'));
      Object.assign(srv, p, { base: (p.tls ? 'https' : 'http') + '://127.0.0.1:' + p.rest });
      return srv;
    }
    if (srv.exited) throw new Error('server exited at start:\n' + fs.readFileSync(srv.log, 'utf8'));
    await sleep(50);
  }
  throw new Error('server did not start in 30 s');
}

async function stopServer(srv) {
  if (srv.exited) return;
  srv.proc.kill('SIGTERM');
  for (let t = 0; t < 200 && !srv.exited; t++) await sleep(50);
  if (!srv.exited) srv.proc.kill('SIGKILL');
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/* REST from the test itself (the independent view of the server's state). */
async function rest(srv, method, p, body, token, accept) {
  const headers = {};
  if (token) headers.Authorization = 'Bearer ' + token;
  if (accept) headers.Accept = accept;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const r = await fetch(srv.base + p, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const buf = Buffer.from(await r.arrayBuffer());
  return { status: r.status, buf, json: () => JSON.parse(buf.toString('utf8')) };
}

/* A .npy file (version 1.0, '<u2' or '<f4', C order) as {shape, data}. */
function parseNpy(buf) {
  if (buf.toString('latin1', 0, 6) !== '\x93NUMPY') throw new Error('not a .npy file');
  const hlen = buf.readUInt16LE(8);
  const hdr = buf.toString('latin1', 10, 10 + hlen);
  const shape = hdr.match(/'shape': \((\d+), (\d+)\)/).slice(1).map(Number);
  const descr = hdr.match(/'descr': '([^']+)'/)[1];
  const off = 10 + hlen;
  const n = shape[0] * shape[1];
  const data = descr === '<u2' ? new Uint16Array(n) : new Float32Array(n);
  for (let i = 0; i < n; i++) data[i] = descr === '<u2' ? buf.readUInt16LE(off + 2 * i) : buf.readFloatLE(off + 4 * i);
  return { shape, descr, data };
}

/* ---- checks ------------------------------------------------------------------------------------ */

let failures = 0;
function check(cond, what) {
  if (!cond) {
    failures++;
    console.log('  FAIL: ' + what);
  } else console.log('  ok: ' + what);
  return cond;
}

async function waitFor(page, fn, arg, what, ms = 30000) {
  try {
    return await page.waitForFunction(fn, arg, { timeout: ms, polling: 50 });
  } catch (e) {
    const st = await page.evaluate(() => window.xtwin && window.xtwin.state).catch(() => null);
    throw new Error('timed out waiting for ' + what + '; console state: ' + JSON.stringify(st && {
      frames: st.frames, seq: st.seq, wsOpen: st.wsOpen, drawn: st.drawn && { pose_seq: st.drawn.pose_seq, pose: st.drawn.pose },
    }));
  }
}

/* Grey levels the console must show for a frame, computed here from its documented rule:
 * value v = I (uint16; ln max(I, 1) with log) or L (float32); g = clamp((v - lo) / (hi - lo));
 * g inverted for float32 (bone dark) and again when "invert" is on; grey = round(255 g). */
function expectedGrey(px, fmt, view) {
  const lo = view.level - view.window / 2, hi = view.level + view.window / 2;
  const inv = (fmt === 2) !== view.invert;
  const out = new Uint8Array(px.length);
  for (let i = 0; i < px.length; i++) {
    let v = px[i];
    if (view.logd) v = Math.log(Math.max(v, 1));
    let g = Math.min(1, Math.max(0, (v - lo) / (hi - lo)));
    if (inv) g = 1 - g;
    out[i] = Math.round(255 * g);
  }
  return out;
}

function canvasDiff(a, b) { // mean |a - b| over the red channel
  let s = 0;
  for (let i = 0; i < a.length; i += 4) s += Math.abs(a[i] - b[i]);
  return s / (a.length / 4);
}

/* The canvas against a REST render of the pose it shows. Returns the worst pixel difference. */
async function checkCanvasMatchesRender(page, srv, token, label) {
  const { state: st, rgba } = await page.evaluate(() => window.xtwin.snapshot());
  const h = st.drawn;
  const r = await rest(srv, 'POST', '/v1/render', { pose: h.pose, mode: h.mode,
    pixel_format: h.pixel_format === 2 ? 'float32' : 'uint16' }, token, 'application/x-npy');
  if (!check(r.status === 200, label + ': POST /v1/render answers 200 (got ' + r.status + ')')) return;
  const npy = parseNpy(r.buf);
  check(npy.shape[0] === h.rows && npy.shape[1] === h.cols, label + ': render shape ' + npy.shape + ' = frame ' + h.rows + 'x' + h.cols);
  const want = expectedGrey(npy.data, h.pixel_format, st.view);
  let worst = 0, off = 0, levels = new Set();
  for (let i = 0; i < want.length; i++) {
    const d = Math.abs(rgba[4 * i] - want[i]);
    worst = Math.max(worst, d);
    if (d > 1) off++;
    levels.add(want[i]);
  }
  check(levels.size > 20, label + ': the expected image is not flat (' + levels.size + ' grey levels)');
  check(worst <= 1, label + ' (' + st.view.renderer + '): every canvas pixel = window/level of POST /v1/render at the ' +
    'drawn pose within 1 grey level (worst ' + worst + ', ' + off + ' pixels off)');
}

/* ---- the scenarios ------------------------------------------------------------------------------- */

const LAUNCH = {
  executablePath: CHROMIUM,
  headless: true,
  // As root Chromium needs --no-sandbox; the others keep it off the (closed) network.
  args: ['--no-sandbox', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage', '--enable-unsafe-swiftshader'],
};

async function newPage(browser, name) {
  const page = await browser.newPage({ viewport: { width: 1366, height: 768 }, ignoreHTTPSErrors: true });
  page.on('pageerror', (e) => { failures++; console.log('  FAIL: page error in ' + name + ': ' + e.message); });
  page.on('console', (m) => { if (m.type() === 'error') console.log('  (console error: ' + m.text() + ')'); });
  return page;
}

async function scenarioToken(browser) {
  console.log('scenario: --token, move a control, keyboard, lockstep, bad value');
  const TOKEN = 'sesame-' + Math.random().toString(36).slice(2);
  const srv = await startServer(['--token', TOKEN]);
  // The page itself is public; the API is not.
  const index = await rest(srv, 'GET', '/');
  check(index.status === 200 && index.buf.toString().includes('console.js'), 'GET / without the token serves the console page');
  check((await rest(srv, 'GET', '/v1/pose')).status === 401, 'GET /v1/pose without the token is 401');

  const page = await newPage(browser, 'token');
  await page.goto(srv.base + '/');
  await page.waitForSelector('#login:not([hidden])', { timeout: 15000 });
  check(true, 'the page asks for the token');
  await page.fill('#login-token', 'wrong');
  await page.press('#login-token', 'Enter');
  await page.waitForFunction(() => document.querySelector('#login-error').textContent.includes('wrong'), null, { timeout: 15000 });
  check(true, 'a wrong token is refused and said so');
  await page.fill('#login-token', TOKEN);
  await page.press('#login-token', 'Enter');
  await waitFor(page, () => window.xtwin.state.drawn && window.xtwin.state.frames >= 2, null, 'two frames after the token');
  check(true, 'frames arrive over the stream with the token sent as a WebSocket subprotocol (bearer.TOKEN)');
  const st0 = await page.evaluate(() => window.xtwin.state);
  const before = await page.evaluate(() => window.xtwin.readCanvas());
  check(st0.drawn.pose.primary_deg === 0, 'first frames at primary 0');

  // Move a control: type 60 in the primary angle and confirm it.
  await page.fill('#in-primary', '60');
  await page.press('#in-primary', 'Enter');
  await waitFor(page, () => window.xtwin.state.pendingPoses === 0 && window.xtwin.state.seq > 0, null, 'the pose update to be acknowledged');
  const sent = (await page.evaluate(() => window.xtwin.state)).seq;
  const pose = (await rest(srv, 'GET', '/v1/pose', undefined, TOKEN)).json();
  check(pose.pose.primary_deg === 60 && pose.seq === sent,
    'the server has primary 60 with the sequence number the page sent (' + pose.pose.primary_deg + ', seq ' + pose.seq + ' vs ' + sent + ')');
  await waitFor(page, (s) => { const d = window.xtwin.state.drawn; return d && d.pose_seq >= s; }, sent, 'a frame with the new pose seq');
  // Let a second frame of the same pose arrive, so the canvas holds a settled frame for the pixel check.
  const f1 = (await page.evaluate(() => window.xtwin.state)).frames;
  await waitFor(page, (n) => window.xtwin.state.frames > n + 1, f1, 'two more frames');
  const st1 = await page.evaluate(() => window.xtwin.state);
  check(st1.drawn.pose_seq === sent && st1.drawn.pose.primary_deg === 60,
    'the drawn frame carries pose seq ' + sent + ' and primary 60 (header: seq ' + st1.drawn.pose_seq + ', ' + st1.drawn.pose.primary_deg + ')');
  const after = await page.evaluate(() => window.xtwin.readCanvas());
  const diff = canvasDiff(before, after);
  check(diff > 2, 'the canvas changed (mean |difference| ' + diff.toFixed(2) + ' grey levels)');
  check(await page.locator('#ov-primary').textContent() === 'LAO 60°', 'the overlay reads LAO 60°');
  await checkCanvasMatchesRender(page, srv, TOKEN, 'token page');

  // Keyboard: → is LAO + 1°.
  await page.locator('#stage').click({ position: { x: 5, y: 5 } });
  await page.keyboard.press('ArrowRight');
  await waitFor(page, (s) => { const d = window.xtwin.state.drawn; return d && d.pose_seq > s && d.pose.primary_deg === 61; }, sent,
    'a frame at primary 61 after the → key');
  check(true, 'the → key moved the C-arm to LAO 61 (a frame with the next pose seq)');
  await page.keyboard.press('Shift+ArrowDown');
  await waitFor(page, () => { const d = window.xtwin.state.drawn; return d && d.pose.secondary_deg === -5; }, null, 'CAUD 5 after Shift+↓');
  check(await page.locator('#ov-secondary').textContent() === 'CAUD 5°', 'Shift+↓ tilts to CAUD 5° and the overlay says so');

  // Lockstep through the buttons (in the folded engineering panel): a trigger gives exactly a
  // lockstep-flagged frame.
  await page.click('#eng > summary');
  await page.click('#seg-runmode button[data-v="lockstep"]');
  await waitFor(page, () => window.xtwin.state.acquisition.run_mode === 'lockstep', null, 'lockstep');
  const acq = (await rest(srv, 'GET', '/v1/acquisition', undefined, TOKEN)).json();
  check(acq.run_mode === 'lockstep', 'the run-mode button set lockstep on the server');
  await page.waitForSelector('#btn-trigger:not([disabled])', { timeout: 10000 });
  const fl = (await page.evaluate(() => window.xtwin.state)).frames;
  await page.click('#btn-trigger');
  await waitFor(page, (n) => { const s = window.xtwin.state; return s.frames > n && (s.header.flags & 1) === 1; }, fl, 'a lockstep frame');
  check(true, 'Trigger produced a frame flagged lockstep');
  await page.click('#seg-runmode button[data-v="free"]');
  await waitFor(page, () => window.xtwin.state.acquisition.run_mode === 'free', null, 'free run again');

  // Motion (issue 26): the heart button starts cardiac motion on the server, the frames carry their
  // phase and the overlay shows it; pressed again it stops, and the frames are still again.
  await page.click('#btn-heart');
  await waitFor(page, () => { const h = window.xtwin.state.header; return h && h.cardiac_phase >= 0; }, null, 'a beating frame');
  check((await rest(srv, 'GET', '/v1/motion', undefined, TOKEN)).json().cardiac.on === true,
    'the heart button started cardiac motion on the server');
  check((await page.locator('#btn-heart').getAttribute('aria-pressed')) === 'true', 'the heart button shows it pressed');
  await waitFor(page, () => document.querySelector('#ov-kind').textContent.includes('♥'), null, 'the phase in the overlay');
  await page.click('#btn-heart');
  await waitFor(page, () => { const h = window.xtwin.state.header; return h && h.cardiac_phase === -1; }, null, 'a still frame');
  check((await rest(srv, 'GET', '/v1/motion', undefined, TOKEN)).json().cardiac.on === false,
    'pressed again, cardiac motion stopped');

  // float32 line integrals through the Pixels selector: drawn inverted (attenuation dark), the
  // same pixel check against a float32 render.
  await page.selectOption('#in-pixfmt', 'float32');
  await waitFor(page, () => { const s = window.xtwin.state; return s.drawn && s.drawn.pixel_format === 2 && s.frames > 0; },
    null, 'a float32 frame drawn');
  const ff = (await page.evaluate(() => window.xtwin.state)).frames;
  await waitFor(page, (n) => window.xtwin.state.frames > n + 1, ff, 'two more float32 frames');
  check((await rest(srv, 'GET', '/v1/acquisition', undefined, TOKEN)).json().pixel_format === 'float32',
    'the Pixels selector set float32 on the server');
  await checkCanvasMatchesRender(page, srv, TOKEN, 'float32');
  await page.selectOption('#in-pixfmt', 'uint16');
  await waitFor(page, () => { const d = window.xtwin.state.drawn; return d && d.pixel_format === 1; }, null, 'uint16 again');

  // A bad value: SID below SOD. The server's error is shown; the stream goes on.
  await page.fill('#in-sid', '500');
  await page.press('#in-sid', 'Enter');
  await page.waitForFunction(() => document.querySelector('#toast').textContent.includes('sid_mm'), null, { timeout: 15000 });
  const t = await page.locator('#toast').textContent();
  check(/^RANGE: .*sid_mm/.test(t), 'SID 500 < SOD shows the server\'s error: "' + t + '"');
  // Where a person sees it: beside the SID field and over the image, both inside the viewport.
  const where = await page.evaluate(() => ['err-pop', 'toast', 'in-sid'].map((id) => {
    const e = document.getElementById(id), r = e.getBoundingClientRect();
    return { id, hidden: e.hidden, text: e.textContent.slice(0, 40), left: r.left, top: r.top, right: r.right, bottom: r.bottom };
  }));
  const [pop, toastBox, sidBox] = where;
  const inView = (r) => r.top >= 0 && r.left >= 0 && r.bottom <= 768 && r.right <= 1366 && r.bottom > r.top;
  check(!pop.hidden && pop.text.includes('sid_mm') && inView(pop) && inView(toastBox),
    'the error is shown inside the 1366 x 768 viewport, beside the control and over the image: ' + JSON.stringify(where));
  check(Math.abs(pop.top - sidBox.bottom) < 40 || Math.abs(pop.bottom - sidBox.top) < 40,
    'the error box is next to the SID field (' + pop.top.toFixed(0) + ' vs the field ' + sidBox.top.toFixed(0) + '..' + sidBox.bottom.toFixed(0) + ')');
  const fb = (await page.evaluate(() => window.xtwin.state)).frames;
  await waitFor(page, (n) => window.xtwin.state.frames > n, fb, 'frames after the error');
  check((await rest(srv, 'GET', '/v1/pose', undefined, TOKEN)).json().pose.sid_mm !== 500, 'the bad SID was not applied');

  if (false) {
    await page.evaluate(() => { document.querySelector('#toast').textContent = ''; document.querySelector('#err-pop').hidden = true; });
    await page.fill('#in-sid', '1195');
    await page.press('#in-sid', 'Enter');
    await page.fill('#in-primary', '30');
    await page.press('#in-primary', 'Enter');
    await page.fill('#in-secondary', '15');
    await page.press('#in-secondary', 'Enter');
    await page.locator('#stage').click({ position: { x: 5, y: 5 } });
    await waitFor(page, () => { const d = window.xtwin.state.drawn; return d && d.pose.secondary_deg === 15 && d.pose.primary_deg === 30; }, null, 'the screenshot pose');
    await page.keyboard.press('a'); // window/level for this view
    await sleep(2500);
    await page.screenshot({ path: SHOT });
    console.log('  screenshot: ' + SHOT);
  }
  await page.screenshot({ path: path.join(OUT, 'console-token.png') });

  // The same checks on the 2D-canvas renderer (the fallback where WebGL2 is missing).
  const p2 = await newPage(browser, '2d');
  await p2.goto(srv.base + '/?renderer=2d#token=' + encodeURIComponent(TOKEN));
  await waitFor(p2, () => window.xtwin.state.drawn && window.xtwin.state.frames >= 3, null, 'frames on the 2D renderer');
  check(!(await p2.evaluate(() => location.hash)), 'a #token= in the address is taken and removed from it');
  await checkCanvasMatchesRender(p2, srv, TOKEN, '2D page');
  await p2.close();
  await page.close();
  await stopServer(srv);
}

async function scenarioTls(browser) {
  console.log('scenario: TLS (https page, wss stream, self-signed certificate)');
  const dir = fs.mkdtempSync(path.join(OUT, 'tls-'));
  const cert = path.join(dir, 'cert.pem'), key = path.join(dir, 'key.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '2',
    '-subj', '/CN=127.0.0.1'], { stdio: 'ignore' });
  // A token that is not a valid subprotocol (a space, a slash): the page sends it as ?token=.
  const TOKEN = 'tls tok/' + Math.random().toString(36).slice(2);
  const srv = await startServer(['--tls-cert', cert, '--tls-key', key, '--token', TOKEN]);
  check(srv.tls === true && srv.base.startsWith('https:'), 'server started with TLS');
  const page = await newPage(browser, 'tls');
  await page.goto(srv.base + '/#token=' + encodeURIComponent(TOKEN));
  await waitFor(page, () => window.xtwin.state.drawn && window.xtwin.state.frames >= 2, null, 'frames over wss');
  check(true, 'the console loads over https and frames arrive over wss (a token with a space and a slash, sent as ?token=)');
  await page.close();
  await stopServer(srv);
}

async function scenarioBiplane(browser) {
  console.log('scenario: biplane (plane A and plane B side by side)');
  const srv = await startServer(['--planes', '2', '--fps', '5']);
  const page = await newPage(browser, 'biplane');
  await page.goto(srv.base + '/');
  await waitFor(page, () => /LAO 90/.test(document.getElementById('ov-b-info').textContent) &&
    window.xtwin.state.frames >= 2, null, 'frames of both planes');
  const boxes = await page.evaluate(() => ['frame', 'frame-b'].map((id) => {
    const r = document.getElementById(id).getBoundingClientRect();
    return { left: r.left, right: r.right, top: r.top, bottom: r.bottom, hidden: document.getElementById(id).hidden };
  }));
  const [a, b] = boxes;
  check(!b.hidden && a.right <= b.left + 1, 'plane B beside plane A: ' + JSON.stringify(boxes));
  check(boxes.every((r) => r.top >= 0 && r.bottom <= 768 && r.right <= 1366 && r.right - r.left > 100),
    'both views inside a 1366 x 768 viewport: ' + JSON.stringify(boxes));
  // plane B's canvas shows a picture: its pixels are not one grey
  const spread = await page.evaluate(() => {
    const c = document.getElementById('frame-b');
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let lo = 255, hi = 0;
    for (let i = 0; i < d.length; i += 4) { lo = Math.min(lo, d[i]); hi = Math.max(hi, d[i]); }
    return hi - lo;
  });
  check(spread > 100, 'plane B\'s view is an image, not a blank (grey spread ' + spread + ')');
  await page.screenshot({ path: path.join(OUT, 'biplane.png') });
  await page.close();
  await stopServer(srv);
}

/* Grey statistics of the drawn frame: of a processed frame every pixel (the chain's automatic
 * window, issue 27, places the frame's 0.5 % and 99.5 % attenuation points inside its 12 bits, the
 * open beam included), of a raw or mono frame the pixels below its full scale: how many are pure
 * white or pure black on the canvas, how many grey levels, their spread. */
async function displayStats(page) {
  return page.evaluate(() => {
    const x = window.xtwin, snap = x.snapshot(), px = x.pixels(), h = snap.state.drawn;
    const top = h.frame_kind === 2 ? 4096 : h.frame_kind === 1 ? Math.pow(2, h.bits_stored) - 1 : 65535;
    let n = 0, white = 0, black = 0, s = 0, s2 = 0;
    const levels = new Set();
    for (let i = 0; i < px.length; i++) {
      if (px[i] >= top) continue;
      const g = snap.rgba[4 * i];
      n++; s += g; s2 += g * g; levels.add(g);
      if (g === 255) white++;
      if (g === 0) black++;
    }
    const mean = s / Math.max(n, 1);
    return { kind: h.frame_kind, bits: h.bits_stored, kv: h.kv, saturated_px: h.saturated_px, px: px.length, patient: n,
      white: white / Math.max(n, 1), black: black / Math.max(n, 1), levels: levels.size,
      sd: Math.sqrt(Math.max(0, s2 / Math.max(n, 1) - mean * mean)), view: snap.state.view };
  });
}

async function scenarioClinical(browser) {
  console.log('scenario: the clinical column at 1366 x 768, the processed frame by default, pedals, saturation');
  const srv = await startServer(['--chain', '--mode', 'fd20-256', '--fps', '4']);
  const page = await newPage(browser, 'clinical');
  await page.goto(srv.base + '/');
  await waitFor(page, () => { const d = window.xtwin.state.drawn; return d && d.frame_kind === 2 && window.xtwin.state.frames >= 2; },
    null, 'processed frames', 60000);
  check(true, 'with the chain on, the console shows the detector\'s processed frame by default (frame_kind 2)');
  check(/PROCESSED · 12-bit/.test(await page.locator('#ov-kind').textContent()), 'the overlay says PROCESSED · 12-bit');
  check(/mGy\/min .*Ka,r .*mGy .*DAP/.test(await page.locator('#ov-kerma').textContent()),
    'the overlay shows dose rate, air kerma and DAP: "' + await page.locator('#ov-kerma').textContent() + '"');

  // Everything a fluoroscopy needs is above the fold of a 1366 x 768 screen, the panel unscrolled.
  const need = ['btn-fluoro', 'btn-expose', 'in-flavour', 'in-expproto', 'seg-image', 'btn-lih', 'in-primary', 'in-secondary',
    'in-sid', 'in-tx', 'in-ty', 'in-tz', 'in-mode', 'btn-ap', 'in-window', 'in-level', 'btn-auto'];
  const boxes = await page.evaluate((ids) => ids.map((id) => {
    const e = document.getElementById(id), r = e.getBoundingClientRect();
    return { id, top: r.top, bottom: r.bottom, left: r.left, right: r.right, visible: r.width > 0 && r.height > 0 };
  }), need);
  const below = boxes.filter((b) => !b.visible || b.bottom > 768 || b.right > 1366 || b.top < 0);
  check(below.length === 0, 'at 1366 x 768 every control needed for fluoroscopy is visible above the fold (' + need.length +
    ' controls; outside: ' + JSON.stringify(below) + ')');
  check(await page.evaluate(() => document.getElementById('panel').scrollTop === 0 &&
    !document.getElementById('eng').open), 'without scrolling, the engineering panel folded');

  // The default processed frame is neither saturated nor blank on the screen.
  const st = await displayStats(page);
  check(st.patient === st.px && st.white < 0.02 && st.black < 0.02 && st.levels > 60 && st.sd > 20,
    'the default processed frame is neither saturated nor blank: over its ' + st.patient + ' pixels, ' +
    (100 * st.white).toFixed(2) + ' % white, ' + (100 * st.black).toFixed(2) + ' % black, ' + st.levels + ' grey levels, sd ' +
    st.sd.toFixed(1));

  // 100 kV / 1 mAs: the panel saturates; the header says how much, the console says so and still
  // shows the patient.
  check((await rest(srv, 'PUT', '/v1/acquisition', { chain: { kv: 100, mas: 1 } })).status === 200, 'PUT 100 kV, 1 mAs');
  await waitFor(page, () => { const d = window.xtwin.state.drawn; return d && d.kv === 100 && d.mas === 1; }, null, 'a 100 kV frame', 60000);
  await sleep(600);
  const hot = await displayStats(page);
  const satText = await page.locator('#ov-sat').textContent();
  check(hot.saturated_px > 0 && await page.locator('#ov-sat').isVisible() && /SATURATED/.test(satText),
    'at 100 kV / 1 mAs the frame\'s header counts ' + hot.saturated_px + ' saturated pixels and the overlay says "' + satText + '"');
  check(hot.levels > 20 && hot.sd > 10, 'and the image is not blank (' + hot.levels + ' grey levels, sd ' + hot.sd.toFixed(1) + ')');
  await rest(srv, 'PUT', '/v1/acquisition', { chain: { kv: 70, mas: 0.1 } });

  // The FLUORO pedal: X-ray while the button is held, last image hold after.
  await rest(srv, 'POST', '/v1/acquisition/stop', {});
  await waitFor(page, () => window.xtwin.state.acquisition && !window.xtwin.state.acquisition.running, null, 'stopped');
  const flavour = await page.locator('#in-flavour').inputValue();
  await page.locator('#btn-fluoro').hover();
  await page.mouse.down();
  await waitFor(page, () => window.xtwin.state.acquisition.running, null, 'X-ray on while the pedal is held');
  const a1 = (await rest(srv, 'GET', '/v1/acquisition')).json();
  check(a1.running && a1.chain.protocol_name === flavour, 'holding FLUORO runs the acquisition with the ' + flavour + ' protocol (' +
    a1.chain.protocol_name + ', running ' + a1.running + ')');
  const f0 = (await page.evaluate(() => window.xtwin.state)).frames;
  await waitFor(page, (n) => window.xtwin.state.frames > n, f0, 'a fluoroscopy frame', 60000);
  await page.mouse.up();
  await waitFor(page, () => !window.xtwin.state.acquisition.running, null, 'X-ray off when the pedal is let go');
  check(!(await rest(srv, 'GET', '/v1/acquisition')).json().running, 'letting FLUORO go stops the acquisition on the server');
  check(await page.locator('#ov-lih').isVisible(), 'the last image is held, marked LIH');
  // The F key is the same pedal.
  await page.locator('#stage').click({ position: { x: 5, y: 5 } });
  await page.keyboard.down('f');
  await waitFor(page, () => window.xtwin.state.acquisition.running, null, 'X-ray on while F is held');
  await page.keyboard.up('f');
  await waitFor(page, () => !window.xtwin.state.acquisition.running, null, 'X-ray off when F is let go');
  check(true, 'holding F runs fluoroscopy, letting it go stops it');
  // A (auto window/level) after a drag gives the following back.
  await page.evaluate(() => document.getElementById('in-follow').click());
  check(!(await page.evaluate(() => window.xtwin.state.view.follow)), 'unticking auto W/L keeps the window');
  await page.keyboard.press('a');
  check(await page.evaluate(() => window.xtwin.state.view.follow), 'A turns auto window/level back on');

  if (SHOT) {
    await rest(srv, 'PUT', '/v1/pose', { primary_deg: 30, secondary_deg: 15 });
    await rest(srv, 'PUT', '/v1/acquisition', { fps: 4 });
    await rest(srv, 'POST', '/v1/acquisition/start', {});
    await waitFor(page, () => { const d = window.xtwin.state.drawn; return d && d.pose.secondary_deg === 15 && d.pose.primary_deg === 30; },
      null, 'the screenshot pose', 60000);
    await sleep(2500);
    await page.screenshot({ path: SHOT });
    console.log('  screenshot: ' + SHOT);
  }
  await page.screenshot({ path: path.join(OUT, 'console-clinical.png') });
  await page.close();
  await stopServer(srv);
}

let browser;
const t0 = Date.now();
try {
  browser = await chromium.launch(LAUNCH);
  console.log('chromium ' + browser.version() + ', playwright-core, server ' + SERVER);
  const all = { clinical: scenarioClinical, token: scenarioToken, tls: scenarioTls, biplane: scenarioBiplane };
  if (ONLY && !all[ONLY]) throw new Error('--only: one of ' + Object.keys(all).join(', '));
  for (const [name, run] of Object.entries(all)) if (!ONLY || ONLY === name) await run(browser);
} catch (e) {
  failures++;
  console.log('  FAIL: ' + (e.stack || e));
  for (const s of servers) console.log('--- server log ' + s.log + ':\n' + fs.readFileSync(s.log, 'utf8').slice(-2000));
} finally {
  if (browser) await browser.close().catch(() => {});
  for (const s of servers) await stopServer(s);
}
console.log((failures ? 'FAILED: ' + failures + ' check(s)' : 'passed') + ' in ' + ((Date.now() - t0) / 1000).toFixed(1) + ' s');
// Server logs and certificates are kept for a failed run only.
if (!failures) for (const d of fs.readdirSync(OUT)) if (/^(srv|tls)-/.test(d)) fs.rmSync(path.join(OUT, d), { recursive: true, force: true });
process.exit(failures ? 1 : 0);
