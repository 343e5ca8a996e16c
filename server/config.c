/* Configuration as one table: each entry (name, type, default, range, help) drives the JSON
 * config file, the command-line flags (--rest-port for "rest_port") and the "config" object of
 * GET /v1/info. Precedence: defaults, then --config FILE, then the other flags. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv_config.h"
#include "srv_send.h"

typedef enum { CT_INT, CT_DOUBLE, CT_BOOL, CT_STRING, CT_LIST } cfg_type;

typedef struct cfg_entry {
  const char *name;
  cfg_type type;
  size_t off, size; /* offset in xt_srv_config; size for strings */
  const char *def;
  double lo, hi; /* numbers: accepted range */
  const char *choices; /* strings: "a|b|c", or NULL for free text */
  int secret;          /* masked in GET /v1/info */
  const char *help;
} cfg_entry;
/* Lists (CT_LIST): strings of `size` bytes each at off, their count an int at offset `lo`, at most
 * `hi` of them. */
#define COUNT_OFF(e) ((size_t)(e)->lo)

#define S(f) offsetof(xt_srv_config, f), sizeof(((xt_srv_config *)0)->f)
#define N(f) offsetof(xt_srv_config, f), 0
#define L(f) offsetof(xt_srv_config, f), sizeof(((xt_srv_config *)0)->f[0])

static const cfg_entry cfg_table[] = {
    {"bind", CT_STRING, S(bind), "127.0.0.1", 0, 0, NULL, 0,
     "address both ports listen on (0.0.0.0 for all interfaces)"},
    {"rest_port", CT_INT, N(rest_port), "8710", 0, 65535, NULL, 0, "REST port (0: pick a free one)"},
    {"ws_port", CT_INT, N(ws_port), "8711", 0, 65535, NULL, 0, "WebSocket stream port (0: pick a free one)"},
    {"backend", CT_STRING, S(backend), "auto", 0, 0, "auto|cpu|cuda", 0,
     "projector backend; auto takes cuda when a GPU is usable, else cpu"},
    {"threads", CT_INT, N(threads), "0", 0, 1024, NULL, 0, "CPU projector threads (0: all cores)"},
    {"devices", CT_INT, N(devices), "0", 0, XT_SRV_MAX_WORKERS, NULL, 0,
     "CUDA devices to render on, one worker each (0: all); CPU: N render workers sharing the cores (for testing "
     "the multi-device path); chain frames all render on the first worker, in order (their states are sequential)"},
    {"tls_cert", CT_STRING, S(tls_cert), "", 0, 0, NULL, 0, "PEM certificate: serve HTTPS and WSS"},
    {"tls_key", CT_STRING, S(tls_key), "", 0, 0, NULL, 0, "PEM private key for --tls-cert"},
    {"token", CT_STRING, S(token), "", 0, 0, NULL, 1,
     "require 'Authorization: Bearer TOKEN' on REST and the WebSocket upgrade"},
    {"mode", CT_STRING, S(mode), "auto", 0, 0, NULL, 0,
     "detector mode at start (auto: fd20-1024 on cuda, fd20-256 on cpu)"},
    {"fps", CT_DOUBLE, N(fps), "0", 0, XT_FPS_MAX, NULL, 0,
     "frame rate at start; 0 (the default): 15 on a GPU, on the CPU the highest usual rate whose frame takes at most 40 % "
     "of the period here (measured at start)"},
    {"planes", CT_INT, N(planes), "1", 1, XT_SRV_PLANES, NULL, 0,
     "1: a single-plane system; 2: biplane, plane A (frontal) and plane B (lateral) on one isocentre "
     "(docs/biplane.md)"},
    {"mode_b", CT_STRING, S(mode_b), "auto", 0, 0, NULL, 0,
     "plane B's detector mode at start (auto: plane A's mode's FD15 counterpart: fd15-1024 on cuda, fd15-256 on cpu)"},
    {"timing", CT_STRING, S(timing), "interleaved", 0, 0, "interleaved|simultaneous", 0,
     "biplane pulses: interleaved (B half a period after A) or simultaneous"},
    {"run_mode", CT_STRING, S(run_mode), "free", 0, 0, "free|lockstep", 0,
     "free: paced like the hardware; lockstep: one frame per trigger"},
    {"pixel_format", CT_STRING, S(pixel_format), "uint16", 0, 0, "uint16|float32", 0,
     "uint16 intensity or float32 line integral"},
    {"autostart", CT_BOOL, N(autostart), "true", 0, 1, NULL, 0, "start the acquisition at launch"},
    {"chain", CT_BOOL, N(chain), "false", 0, 1, NULL, 0,
     "imaging chain on at launch: raw and processed detector frames (docs/imaging.md); settable per run"},
    {"phantom", CT_STRING, S(phantom), "auto", 0, 0, "auto|head|thorax|none", 0,
     "built-in phantom: auto loads one when no model is configured - the thorax with a guidewire in its aorta, or "
     "the Shepp-Logan head when phantom_dim or phantom_spacing is given"},
    {"phantom_dim", CT_INT, N(phantom_dim), "0", 0, 1024, NULL, 0, "head phantom voxels per axis (0: 256; 16 at least)"},
    {"phantom_spacing", CT_DOUBLE, N(phantom_spacing), "0", 0, 20, NULL, 0,
     "head phantom voxel size, mm (0: 1; 0.05 at least)"},
    {"max_body", CT_INT, N(max_body), "65536", 1024, 16777216, NULL, 0, "largest REST request body, bytes"},
    {"max_ws_message", CT_INT, N(max_ws_message), "16384", 512, 1048576, NULL, 0,
     "largest WebSocket text message from a client, bytes"},
    {"rest_threads", CT_INT, N(rest_threads), "4", 1, 64, NULL, 0, "REST worker threads"},
    {"max_clients", CT_INT, N(max_clients), "32", 1, XT_SRV_MAX_CLIENT_STATS, NULL, 0,
     "stream clients at once"},
    {"stream_senders", CT_INT, N(stream_senders), "-1", -1, XT_SEND_MAX_THREADS, NULL, 0,
     "threads writing frames to stream clients in parallel, each frame's pixels straight from the shared ring "
     "frame (-1: auto, one per client up to 4; 0: the stream's service thread writes every frame, as with TLS)"},
    {"stream_spin_us", CT_INT, N(stream_spin_us), "0", 0, 20000, NULL, 0,
     "microseconds the stream's service thread polls its sockets without sleeping from a render's start until the "
     "frame is published, so that it hands the frame on at once instead of being woken (a core busy meanwhile; "
     "0: it sleeps until woken)"},
    {"pacer_spin_us", CT_INT, N(pacer_spin_us), "0", 0, 5000, NULL, 0,
     "microseconds before each exposure's deadline the pacer stops sleeping and polls the clock, so that an exposure "
     "starts on time however late the host wakes a sleeping thread (a core busy that long per exposure; 0: it sleeps "
     "until the deadline)"},
    {"scenario", CT_STRING, S(scenario), "", 0, 0, NULL, 0,
     "a scenario file (JSON timeline of commands and faults at frame numbers or times) played from the start "
     "(docs/device.md, Scenarios)"},
    {"clock", CT_STRING, S(clock), "real", 0, 0, "real|virtual", 0,
     "the device's clock: real time, or virtual (exposures as fast as the backend renders and the stream "
     "sends them, with the deadlines and frames of real time; docs/server.md, Virtual time)"},
    {"session_log", CT_STRING, S(session_log), "", 0, 0, NULL, 0,
     "write every command, event and exposure to this file as JSON lines, for `xtwin replay` (docs/session-log.md)"},
    {"study_dir", CT_STRING, S(study_dir), "", 0, 0, NULL, 0,
     "write every chain run as DICOM here (Enhanced XA, classic XA, the study's dose SR) by a writer thread off the "
     "frame path (docs/dicom.md)"},
    {"identity", CT_STRING, S(identity), "", 0, 0, NULL, 0,
     "the study folder's patient, study and institution: a JSON file of identity keys, as xtwin render "
     "--dicom-identity takes (docs/dicom.md); without it the objects say they are synthetic"},
    {"study_store", CT_STRING, S(study_store), "", 0, 0, NULL, 0,
     "HOST:PORT of a PACS: the writer thread sends each run it writes by C-STORE, and the dose report when the "
     "server stops (docs/dicom.md)"},
    {"study_called", CT_STRING, S(study_called), "ANY-SCP", 0, 0, NULL, 0, "the PACS's AE title for study_store"},
    {"study_store_timeout", CT_INT, N(study_store_timeout), "10", 1, 600, NULL, 0,
     "seconds study_store waits for the PACS (connect, association, each answer) before a send fails"},
    {"ports_file", CT_STRING, S(ports_file), "", 0, 0, NULL, 0,
     "write {\"rest\": port, \"ws\": port} here once listening"},
    {"verbose", CT_INT, N(verbose), "0", 0, 3, NULL, 0, "log level (libwebsockets and requests)"},
    {"convert_threads", CT_INT, N(convert_threads), "0", 0, XT_SRV_MAX_HELPERS + 1, NULL, 0,
     "threads per render worker for the uint16 conversion of a frame (0: auto, half the cores up to 8)"},
    {"hu_model", CT_STRING, S(hu_model), "bilinear", 0, 0, "bilinear|linear", 0,
     "HU -> mu for models loaded with convert hu (docs/loaders.md)"},
    {"ct_energy", CT_DOUBLE, N(ct_energy), "70", 20, 150, NULL, 0,
     "bilinear HU -> mu: effective energy (keV) of the CT that measured the HU"},
    {"nifti_transform", CT_STRING, S(nifti_transform), "sform", 0, 0, "sform|qform", 0,
     "NIfTI voxel-to-world map to use when a file has both"},
    {"nan_value", CT_STRING, S(nan_value), "none", 0, 0, NULL, 0,
     "NaN voxels of loaded volumes: none refuses the file, a number replaces them (e.g. -1000 for HU)"},
    {"synthetic", CT_BOOL, N(synthetic), "false", 0, 1, NULL, 0,
     "benchmarks only: stream a constant frame instead of rendering (measures the transport)"},
    {"model_root", CT_LIST, L(model_roots), "", offsetof(xt_srv_config, nmodel_roots), XT_SRV_MAX_LIST, NULL, 0,
     "folder POST /v1/models may load from, symlinks resolved (repeatable; none: the route is refused)"},
    {"allow_origin", CT_LIST, L(allow_origins), "", offsetof(xt_srv_config, nallow_origins), XT_SRV_MAX_LIST, NULL, 0,
     "browser Origin allowed on REST and the stream, e.g. https://console.example:443 (repeatable; the server's own "
     "REST origin always is)"},
    {"allow_host", CT_LIST, L(allow_hosts), "", offsetof(xt_srv_config, nallow_hosts), XT_SRV_MAX_LIST, NULL, 0,
     "Host name accepted besides IP addresses and localhost, e.g. the name a proxy forwards (repeatable)"},
    {"max_per_addr", CT_INT, N(max_per_addr), "32", 1, 256, NULL, 0, "REST connections at once from one client address"},
    {"contrast_max_rate", CT_DOUBLE, N(contrast_max_rate), "30", 0.1, 100, NULL, 0,
     "largest injection rate a client may ask for, mL/s (contrast agent: POST /v1/contrast/inject)"},
    {"contrast_max_volume", CT_DOUBLE, N(contrast_max_volume), "150", 0.1, 500, NULL, 0,
     "largest volume of one injection a client may ask for, mL"},
    {"head_timeout", CT_DOUBLE, N(head_timeout), "10", 0.1, 300, NULL, 0,
     "seconds a REST client has to send its whole request head (408 after)"},
    {"request_timeout", CT_DOUBLE, N(request_timeout), "30", 0.5, 3600, NULL, 0,
     "seconds a REST client has to send its whole request, head and body together (408 after)"},
    {"min_body_rate", CT_INT, N(min_body_rate), "1024", 0, 1073741824, NULL, 0,
     "bytes per second a REST request body must average once its head is in, after a first second of grace "
     "(408 below; 0: no minimum)"},
    {"peer_timeout", CT_DOUBLE, N(peer_timeout), "60", 1, 3600, NULL, 0,
     "seconds a stream client may leave sent frames unacknowledged (vanished, or not reading at all) before it is "
     "dropped"},
    {"gmm_tile_budget", CT_INT, N(gmm_tile_budget), "0", 0, 1 << 30, NULL, 0,
     "work budget: Gaussians whose footprint may reach one 16x16-pixel tile; a mixture over it is refused at load "
     "(413), a frame over it is a render error (0: auto, 32768 on cpu, 131072 on cuda; docs/server.md)"},
    {"gmm_pair_budget", CT_INT, N(gmm_pair_budget), "0", 0, 2000000000, NULL, 0,
     "work budget: Gaussian-tile pairs of one frame (0: auto, 4000000 on cpu, 200000000 on cuda)"},
    {"render_pixel_budget", CT_INT, N(render_pixel_budget), "0", 0, 1 << 30, NULL, 0,
     "work budget: pixels of one POST /v1/render, 413 beyond (0: auto, 1048576 on cpu, 16777216 on cuda)"},
    {"render_threads", CT_INT, N(render_threads), "0", 0, 256, NULL, 0,
     "CPU threads of the POST /v1/render worker, beside the stream's (0: auto, half the cores)"},
};
#define CFG_COUNT ((int)(sizeof cfg_table / sizeof cfg_table[0]))

static int set_value(xt_srv_config *c, const cfg_entry *e, const char *v, xt_msg *msg) {
  char *p = (char *)c + e->off;
  char *end = NULL;
  switch (e->type) {
  case CT_INT: {
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end) return xt_fail(msg, XT_EINVAL, "%s: '%s' is not an integer", e->name, v);
    if (x < e->lo || x > e->hi)
      return xt_fail(msg, XT_ERANGE, "%s: %ld outside [%g, %g]", e->name, x, e->lo, e->hi);
    *(int *)p = (int)x;
    return 0;
  }
  case CT_DOUBLE: {
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end) return xt_fail(msg, XT_EINVAL, "%s: '%s' is not a number", e->name, v);
    if (!(x >= e->lo && x <= e->hi)) return xt_fail(msg, XT_ERANGE, "%s: %g outside [%g, %g]", e->name, x, e->lo, e->hi);
    *(double *)p = x;
    return 0;
  }
  case CT_BOOL:
    if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes")) *(int *)p = 1;
    else if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no")) *(int *)p = 0;
    else return xt_fail(msg, XT_EINVAL, "%s: '%s' is not a boolean", e->name, v);
    return 0;
  case CT_LIST: {
    int *n = (int *)(void *)((char *)c + COUNT_OFF(e));
    if (!*v) return 0; /* the default: an empty list */
    if (*n >= (int)e->hi) return xt_fail(msg, XT_ETOOLARGE, "%s: more than %g entries", e->name, e->hi);
    if (strlen(v) >= e->size) return xt_fail(msg, XT_ETOOLARGE, "%s: longer than %zu bytes", e->name, e->size - 1);
    memcpy(p + (size_t)*n * e->size, v, strlen(v) + 1);
    (*n)++;
    return 0;
  }
  case CT_STRING:
    if (strlen(v) >= e->size) return xt_fail(msg, XT_ETOOLARGE, "%s: longer than %zu bytes", e->name, e->size - 1);
    if (e->choices) {
      size_t n = strlen(v);
      const char *q = e->choices;
      int ok = 0;
      while (*q) {
        const char *bar = strchr(q, '|');
        size_t len = bar ? (size_t)(bar - q) : strlen(q);
        if (len == n && !strncmp(q, v, n)) ok = 1;
        q += len + (bar ? 1 : 0);
      }
      if (!ok) return xt_fail(msg, XT_EINVAL, "%s: '%s' is not one of %s", e->name, v, e->choices);
    }
    memcpy(p, v, strlen(v) + 1);
    return 0;
  }
  return XT_EINTERNAL;
}

void xt_srv_config_defaults(xt_srv_config *c) {
  memset(c, 0, sizeof *c);
  for (int i = 0; i < CFG_COUNT; i++) {
    int rc = set_value(c, &cfg_table[i], cfg_table[i].def, NULL);
    (void)rc;
  }
}

static const cfg_entry *find_entry(const char *name, int dashes) {
  for (int i = 0; i < CFG_COUNT; i++) {
    const char *a = cfg_table[i].name, *b = name;
    while (*a && *b && (*a == *b || (dashes && *a == '_' && *b == '-'))) a++, b++;
    if (!*a && !*b) return &cfg_table[i];
  }
  return NULL;
}

static int model_from_json(xt_srv_model_cfg *m, const json_t *j, xt_msg *msg) {
  memset(m, 0, sizeof *m);
  snprintf(m->convert, sizeof m->convert, "mu");
  if (json_is_string(j)) j = json_pack("{s:O}", "path", j);
  else json_incref((json_t *)j);
  int rc = 0;
  const char *key;
  json_t *v;
  if (!json_is_object(j)) {
    rc = xt_fail(msg, XT_EINVAL, "models: each entry must be a path or an object");
    goto done;
  }
  json_object_foreach((json_t *)j, key, v) {
    char *dst = NULL;
    size_t cap = 0;
    if (!strcmp(key, "path")) dst = m->path, cap = sizeof m->path;
    else if (!strcmp(key, "name")) dst = m->name, cap = sizeof m->name;
    else if (!strcmp(key, "convert")) dst = m->convert, cap = sizeof m->convert;
    else if (!strcmp(key, "series")) continue; /* below, once the path is known */
    else {
      rc = xt_fail(msg, XT_EINVAL, "models: unknown key '%s'", key);
      goto done;
    }
    if (!json_is_string(v) || strlen(json_string_value(v)) >= cap) {
      rc = xt_fail(msg, XT_EINVAL, "models.%s: must be a string shorter than %zu", key, cap);
      goto done;
    }
    memcpy(dst, json_string_value(v), strlen(json_string_value(v)) + 1);
  }
  if (!m->path[0]) rc = xt_fail(msg, XT_EINVAL, "models: entry without a path");
  /* DICOM: "series" picks one series of a folder; the loader reads it as PATH#SERIES */
  json_t *ser = json_object_get(j, "series");
  if (!rc && ser) {
    size_t n = strlen(m->path);
    if (!json_is_string(ser) || !json_string_length(ser) || n + 1 + json_string_length(ser) >= sizeof m->path)
      rc = xt_fail(msg, XT_EINVAL, "models.series: must be a non-empty string (path + series shorter than %zu)", sizeof m->path);
    else
      snprintf(m->path + n, sizeof m->path - n, "#%s", json_string_value(ser));
  }
done:
  json_decref((json_t *)j);
  return rc;
}

/* Applies a parsed config (takes the reference); path names it in messages. */
static int config_apply(xt_srv_config *c, json_t *root, const char *path, xt_msg *msg) {
  int rc = 0;
  const char *key;
  json_t *v;
  if (!json_is_object(root)) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: the config must be a JSON object", path);
    goto done;
  }
  json_object_foreach(root, key, v) {
    if (!strcmp(key, "models")) {
      if (!json_is_array(v) || json_array_size(v) > XT_SRV_MAX_MODELS) {
        rc = xt_fail(msg, XT_EINVAL, "%s: models: an array of at most %d entries", path, XT_SRV_MAX_MODELS);
        goto done;
      }
      size_t i;
      json_t *m;
      c->nmodels = 0;
      json_array_foreach(v, i, m) {
        if ((rc = model_from_json(&c->models[c->nmodels], m, msg))) goto done;
        c->nmodels++;
      }
      continue;
    }
    const cfg_entry *e = find_entry(key, 0);
    if (!e) {
      rc = xt_fail(msg, XT_EINVAL, "%s: unknown key '%s'", path, key);
      goto done;
    }
    if (e->type == CT_LIST) {
      /* A string or an array of strings; replaces what the defaults gave. */
      *(int *)(void *)((char *)c + COUNT_OFF(e)) = 0;
      json_t *arr = json_is_array(v) ? json_incref(v) : json_pack("[O]", v);
      size_t i;
      json_t *x;
      json_array_foreach(arr, i, x) {
        xt_msg m2;
        if (!json_is_string(x)) rc = xt_fail(msg, XT_EINVAL, "%s: %s: a string or an array of strings", path, key);
        else if ((rc = set_value(c, e, json_string_value(x), &m2))) xt_fail(msg, rc, "%s: %s", path, m2.text);
        if (rc) break;
      }
      json_decref(arr);
      if (rc) goto done;
      continue;
    }
    char buf[64];
    const char *s = NULL;
    if (json_is_string(v) && e->type == CT_STRING) s = json_string_value(v);
    else if (json_is_integer(v) && (e->type == CT_INT || e->type == CT_DOUBLE))
      snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v)), s = buf;
    else if (json_is_real(v) && e->type == CT_DOUBLE) snprintf(buf, sizeof buf, "%.17g", json_real_value(v)), s = buf;
    else if (json_is_boolean(v) && e->type == CT_BOOL) s = json_is_true(v) ? "true" : "false";
    if (!s) {
      rc = xt_fail(msg, XT_EINVAL, "%s: %s: wrong type", path, key);
      goto done;
    }
    xt_msg m2;
    if ((rc = set_value(c, e, s, &m2))) {
      xt_fail(msg, rc, "%s: %s", path, m2.text);
      goto done;
    }
  }
done:
  json_decref(root);
  return rc;
}

int xt_srv_config_file(xt_srv_config *c, const char *path, xt_msg *msg) {
  json_error_t err;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
  if (!root) return xt_fail(msg, XT_EFORMAT, "%s:%d:%d: %s", path, err.line, err.column, err.text);
  return config_apply(c, root, path, msg);
}

int xt_srv_config_parse(xt_srv_config *c, const char *text, size_t len, const char *name, xt_msg *msg) {
  json_error_t err;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  if (!root) return xt_fail(msg, XT_EFORMAT, "%s:%d:%d: %s", name, err.line, err.column, err.text);
  return config_apply(c, root, name, msg);
}

int xt_srv_config_args(xt_srv_config *c, int argc, char **argv, int *action, xt_msg *msg) {
  *action = 0;
  /* --config first, so flags override the file wherever they appear. */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--config") || !strncmp(argv[i], "--config=", 9)) {
      const char *path = argv[i][8] == '=' ? argv[i] + 9 : (i + 1 < argc ? argv[++i] : NULL);
      if (!path) return xt_fail(msg, XT_EINVAL, "--config needs a file");
      int rc = xt_srv_config_file(c, path, msg);
      if (rc) return rc;
    }
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      *action = 1;
      return 0;
    }
    if (!strcmp(a, "--version")) {
      *action = 2;
      return 0;
    }
    if (!strcmp(a, "--routes")) {
      *action = 3;
      return 0;
    }
    if (!strcmp(a, "--config")) {
      i++;
      continue;
    }
    if (!strncmp(a, "--config=", 9)) continue;
    if (!strcmp(a, "--model")) {
      if (i + 1 >= argc) return xt_fail(msg, XT_EINVAL, "--model needs a path");
      if (c->nmodels >= XT_SRV_MAX_MODELS) return xt_fail(msg, XT_ETOOLARGE, "more than %d models", XT_SRV_MAX_MODELS);
      xt_srv_model_cfg *m = &c->models[c->nmodels];
      memset(m, 0, sizeof *m);
      snprintf(m->convert, sizeof m->convert, "mu");
      if (strlen(argv[i + 1]) >= sizeof m->path) return xt_fail(msg, XT_ETOOLARGE, "--model: path too long");
      snprintf(m->path, sizeof m->path, "%s", argv[++i]);
      c->nmodels++;
      continue;
    }
    if (strncmp(a, "--", 2) != 0) return xt_fail(msg, XT_EINVAL, "unexpected argument '%s' (see --help)", a);
    char name[64];
    const char *eq = strchr(a + 2, '=');
    size_t n = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    if (n >= sizeof name) return xt_fail(msg, XT_EINVAL, "unknown option '%s'", a);
    memcpy(name, a + 2, n);
    name[n] = 0;
    int negate = 0;
    const cfg_entry *e = find_entry(name, 1);
    if (!e && !strncmp(name, "no-", 3) && (e = find_entry(name + 3, 1)) && e->type == CT_BOOL) negate = 1;
    if (!e) return xt_fail(msg, XT_EINVAL, "unknown option '%s' (see --help)", a);
    const char *v;
    if (e->type == CT_BOOL && !eq) v = negate ? "false" : "true";
    else if (eq) v = eq + 1;
    else if (i + 1 < argc) v = argv[++i];
    else return xt_fail(msg, XT_EINVAL, "%s needs a value", a);
    int rc = set_value(c, e, v, msg);
    if (rc) return rc;
  }
  if (!c->tls_cert[0] != !c->tls_key[0]) return xt_fail(msg, XT_EINVAL, "--tls-cert and --tls-key go together");
  return 0;
}

void xt_srv_config_usage(FILE *f) {
  fprintf(f,
          "usage: xtwin-server [--config FILE] [--model PATH]... [--OPTION VALUE]...\n"
          "Serves the C-arm digital twin: REST control and a WebSocket frame stream.\n"
          "With no arguments: the built-in thorax with a guidewire in its aorta, default mode, 127.0.0.1:8710 (REST) and :8711 (stream).\n\n"
          "  --config FILE        JSON object with any of the keys below, plus \"models\": [\"path\" | {path, name, convert, series}]\n"
          "  --model PATH         load a model at start (repeatable): a volume, or a Gaussian mixture (.xgmm, .gmm, .gmm.json); DICOM: a folder, .dcm or @LIST, PATH#SERIES picks a series\n"
          "  --routes             print the REST route table and exit\n"
          "  --version            print the version and exit\n\n");
  for (int i = 0; i < CFG_COUNT; i++) {
    const cfg_entry *e = &cfg_table[i];
    char flag[64];
    snprintf(flag, sizeof flag, "--%s", e->name);
    for (char *p = flag; *p; p++)
      if (*p == '_') *p = '-';
    fprintf(f, "  %-20s %s (default %s%s%s)\n", flag, e->help, e->def[0] ? e->def : "none",
            e->choices ? "; one of " : "", e->choices ? e->choices : "");
  }
}

json_t *xt_srv_config_json(const xt_srv_config *c) {
  json_t *o = json_object();
  for (int i = 0; i < CFG_COUNT; i++) {
    const cfg_entry *e = &cfg_table[i];
    const char *p = (const char *)c + e->off;
    json_t *v = NULL;
    switch (e->type) {
    case CT_INT: v = json_integer(*(const int *)p); break;
    case CT_DOUBLE: v = json_real(*(const double *)p); break;
    case CT_BOOL: v = json_boolean(*(const int *)p); break;
    case CT_STRING: v = e->secret ? json_boolean(p[0] != 0) : json_string(p); break;
    case CT_LIST:
      v = json_array();
      for (int k = 0; k < *(const int *)(const void *)((const char *)c + COUNT_OFF(e)); k++)
        json_array_append_new(v, json_string(p + (size_t)k * e->size));
      break;
    }
    json_object_set_new(o, e->name, v);
  }
  return o;
}
