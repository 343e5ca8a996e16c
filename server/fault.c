/* Fault injection (srv_fault.h; docs/device.md "Faults"). One entry point, xt_srv_fault, checks a
 * fault's fields and applies it under st_mu: a counter or a timer here that the exposures latch
 * (xt_srv_fault_latch_locked) and the render worker honours (xt_srv_fault_deliver), the panel's
 * faults that the imaging chain's readout applies, or a device fault through the device machine
 * (acq/xt_device.h), whose state events follow. Every injection is counted in /metrics, logged in
 * the session log, and announced to the stream as {"type": "event", "event": "fault", ...}, through
 * the same ring of texts as the device's events. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "srv_clock.h"
#include "srv_device.h"
#include "srv_engine.h"
#include "srv_fault.h"
#include "srv_ring.h"
#include "srv_session.h"
#include "xt_server.h"
#include "xt_stream.h"

_Static_assert(XT_SRV_NFAULTS <= XT_SRV_METRIC_FAULTS, "metrics keep a counter per fault");

static const char *const fault_names[XT_SRV_NFAULTS] = {
#define XT_SRV_FAULT_NAME(e, name) name,
    XT_SRV_FAULTS(XT_SRV_FAULT_NAME)
#undef XT_SRV_FAULT_NAME
};

const char *xt_srv_fault_name(int kind) { return kind >= 0 && kind < XT_SRV_NFAULTS ? fault_names[kind] : "?"; }

/* The bits that only a chain frame (a detector) can carry. */
#define PANEL_BITS                                                                                               \
  (XT_STREAM_FAULT_DEAD_LINE | XT_STREAM_FAULT_PIXEL_CLUSTER | XT_STREAM_FAULT_GAIN_DRIFT |                     \
   XT_STREAM_FAULT_STALE_CAL | XT_STREAM_FAULT_GENERATOR)

/* ---- the fields ---------------------------------------------------------------------------- */

/* A body's fields: each one known to the fault, numbers in range; msg names the field. */
typedef struct field {
  const char *name;
  double lo, hi, def;
  int integer, required;
} field;

static int fields_parse(const json_t *body, const char *fault, const field *f, int n, double *out, int *given,
                        xt_msg *msg) {
  if (body && !json_is_object(body)) return xt_fail(msg, XT_EINVAL, "%s: expected a JSON object", fault);
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)body, key, v) {
    int k = 0;
    while (k < n && strcmp(f[k].name, key)) k++;
    if (k == n) {
      char known[160] = "";
      for (int i = 0; i < n; i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", f[i].name);
      return xt_fail(msg, XT_EINVAL, "%s: unknown field '%s' (fields: %s)", fault, key, n ? known : "none");
    }
  }
  for (int k = 0; k < n; k++) {
    v = body ? json_object_get(body, f[k].name) : NULL;
    given[k] = v != NULL;
    out[k] = f[k].def;
    if (!v) {
      if (f[k].required) return xt_fail(msg, XT_EINVAL, "%s: %s is required", fault, f[k].name);
      continue;
    }
    if (f[k].integer ? !json_is_integer(v) : !json_is_number(v))
      return xt_fail(msg, XT_EINVAL, "%s: %s: expected %s", fault, f[k].name, f[k].integer ? "an integer" : "a number");
    const double x = json_number_value(v);
    if (!(x >= f[k].lo && x <= f[k].hi))
      return xt_fail(msg, XT_EINVAL, "%s: %s: %g outside [%g, %g]", fault, f[k].name, x, f[k].lo, f[k].hi);
    out[k] = x;
  }
  return 0;
}

/* ---- events -------------------------------------------------------------------------------- */

/* {"type": "event", "event": "fault", "fault": name, "t_ns", fields...} to every stream client and
 * the session log (server/device.c's path). Returns 1 when pushed to the stream. Takes args. */
static int event_locked(xt_server *s, const char *name, json_t *args, uint64_t now) {
  json_t *j = json_pack("{s:s,s:s,s:s,s:I}", "type", "event", "event", "fault", "fault", name, "t_ns", (json_int_t)now);
  if (!j) {
    json_decref(args);
    return 0;
  }
  if (args) json_object_set_new(j, "args", args);
  int n = 0;
  if (s->ring.next_text) { /* the engine has started: the ring is there */
    xt_ring_push_text(&s->ring, json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17)));
    n = 1;
  }
  json_object_set(j, "t_event_ns", json_object_get(j, "t_ns")); /* the log stamps its own t_ns */
  xt_session_event(s, j);
  return n;
}

/* ---- the faults ---------------------------------------------------------------------------- */

static int dev_fault_locked(xt_server *s, int code, const char *text, double recover_s, uint64_t now, int *events,
                            xt_msg *msg) {
  xt_dev_args a;
  memset(&a, 0, sizeof a);
  a.fault_code = code;
  a.fault_text = text;
  a.recover_s = recover_s;
  int rc = xt_srv_device_locked(s, 0, XT_DEV_CMD_FAULT, &a, now, events, msg);
  if (!rc) {
    s->acq_gen++; /* the pacer looks again: X-ray has ended */
    xt_engine_kick(s);
  }
  return rc;
}

static uint64_t ns_of_s(double sec) { return (uint64_t)llround(sec * 1e9); }

/* Applies fault k with its parsed fields v (given: which were in the body). */
static int apply_locked(xt_server *s, int k, const double *v, const int *given, uint64_t now, int *events,
                        xt_msg *msg) {
  xt_srv_faults *F = &s->faults;
  switch (k) {
  case XT_FAULT_DROP_FRAME: F->drop_left += (int)v[0]; return 0;
  case XT_FAULT_LATE_FRAME:
    F->late_ns = xt_dev_ms_ns(v[0]);
    F->late_left = (int)v[1];
    return 0;
  case XT_FAULT_DEAD_LINE:
    if (given[0] == given[1]) return xt_fail(msg, XT_EINVAL, "dead_line: give col or row (one of them)");
    if (given[0]) {
      F->panel.col0 = (int)v[0];
      F->panel.ncols = (int)v[2];
    } else {
      F->panel.row0 = (int)v[1];
      F->panel.nrows = (int)v[2];
    }
    F->dead_line = 1;
    return 0;
  case XT_FAULT_PIXEL_CLUSTER:
    F->panel.cl_col = (int)v[0];
    F->panel.cl_row = (int)v[1];
    F->panel.cl_r = (float)v[2];
    F->cluster = 1;
    return 0;
  case XT_FAULT_GAIN_DRIFT:
    if (!given[0] && !given[1]) return xt_fail(msg, XT_EINVAL, "gain_drift: give percent or percent_per_min");
    F->gain_pct = v[0];
    F->gain_pct_min = v[1];
    F->t_gain_ns = now;
    F->gain_on = 1;
    return 0;
  case XT_FAULT_OVER_TEMPERATURE:
    return dev_fault_locked(s, 310, NULL, v[0], now, events, msg);
  case XT_FAULT_ABORT_EXPOSURE:
    if (s->devs[0].state != XT_DEV_PREPARE && s->devs[0].state != XT_DEV_EXPOSING)
      return xt_fail(msg, XT_ESTATE, "abort_exposure: no exposure is running (device %s)",
                     xt_dev_state_name(s->devs[0].state));
    return dev_fault_locked(s, 250, NULL, 0, now, events, msg);
  case XT_FAULT_GENERATOR_FAULT:
    if (v[0] == 0) return xt_fail(msg, XT_EINVAL, "generator_fault: kv_error_percent: 0 is no fault");
    if (fabs(v[0]) > XT_FAULT_KV_TOLERANCE_PERCENT) {
      char t[128];
      snprintf(t, sizeof t, "generator: kV out of tolerance (%+.1f %%, tolerance %g %%)", v[0],
               XT_FAULT_KV_TOLERANCE_PERCENT);
      F->kv_scale = 0; /* the generator trips: no frame is exposed at the wrong kV */
      return dev_fault_locked(s, 210, t, 0, now, events, msg);
    }
    F->kv_scale = 1.0 + v[0] / 100.0;
    return 0;
  case XT_FAULT_LINK_LOSS: atomic_store(&F->link_until_ns, now + ns_of_s(v[0])); return 0;
  case XT_FAULT_STALE_CALIBRATION:
    F->panel.stale_offset_adu = (float)v[0];
    F->panel.stale_gain = (float)(v[1] / 100.0);
    F->panel.stale_seed = 0x5374616c65ull ^ now; /* a pattern of its own, fixed while it lasts */
    F->stale = 1;
    return 0;
  case XT_FAULT_TUBE_HEAT: F->tube_until_ns = now + ns_of_s(v[0]); return 0;
  default: return xt_fail(msg, XT_EINTERNAL, "fault %d", k);
  }
}

/* Each fault's fields (at most 3). */
static const field FIELDS[XT_SRV_NFAULTS][3] = {
    [XT_FAULT_DROP_FRAME] = {{"count", 1, 1000, 1, 1, 0}},
    [XT_FAULT_LATE_FRAME] = {{"ms", 0.001, XT_FAULT_MAX_LATE_MS, 0, 0, 1}, {"count", 1, 1000, 1, 1, 0}},
    [XT_FAULT_DEAD_LINE] = {{"col", 0, 65535, 0, 1, 0}, {"row", 0, 65535, 0, 1, 0}, {"count", 1, 64, 1, 1, 0}},
    [XT_FAULT_PIXEL_CLUSTER] = {{"col", 0, 65535, 0, 1, 1}, {"row", 0, 65535, 0, 1, 1}, {"radius", 0, 256, 3, 0, 0}},
    [XT_FAULT_GAIN_DRIFT] = {{"percent", -90, 900, 0, 0, 0}, {"percent_per_min", -100, 100, 0, 0, 0}},
    [XT_FAULT_OVER_TEMPERATURE] = {{"seconds", 0.001, XT_FAULT_MAX_SECONDS, 0, 0, 1}},
    [XT_FAULT_ABORT_EXPOSURE] = {{NULL, 0, 0, 0, 0, 0}},
    [XT_FAULT_GENERATOR_FAULT] = {{"kv_error_percent", -50, 50, 0, 0, 1}},
    [XT_FAULT_LINK_LOSS] = {{"seconds", 0.001, XT_FAULT_MAX_SECONDS, 0, 0, 1}},
    [XT_FAULT_STALE_CALIBRATION] = {{"offset_adu", 0, 1000, XT_FAULT_STALE_OFFSET_ADU, 0, 0},
                                    {"gain_percent", 0, 50, XT_FAULT_STALE_GAIN_PERCENT, 0, 0}},
    [XT_FAULT_TUBE_HEAT] = {{"seconds", 0.001, XT_FAULT_MAX_SECONDS, 0, 0, 1}},
};

static int nfields(int k) {
  int n = 0;
  while (n < 3 && FIELDS[k][n].name) n++;
  return n;
}

int xt_srv_fault(xt_server *s, const char *name, const json_t *body, xt_msg *msg) {
  int k = 0;
  while (k < XT_SRV_NFAULTS && (!name || strcmp(name, fault_names[k]))) k++;
  if (k == XT_SRV_NFAULTS) {
    char known[256] = "";
    for (int i = 0; i < XT_SRV_NFAULTS; i++)
      snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", fault_names[i]);
    return xt_fail(msg, XT_EINVAL, "faults: no fault '%.64s' (known: %s)", name ? name : "", known);
  }
  double v[3] = {0, 0, 0};
  int given[3] = {0, 0, 0};
  int rc = fields_parse(body, fault_names[k], FIELDS[k], nfields(k), v, given, msg), events = 0, pushed = 0;
  if (rc) return rc;
  pthread_mutex_lock(&s->st_mu);
  const uint64_t now = xt_dev_now_ns();
  int dev_events = 0;
  events = xt_srv_device_advance_locked(s, now); /* time first, as a device command */
  rc = apply_locked(s, k, v, given, now, &dev_events, msg);
  events += dev_events;
  if (!rc) {
    xt_srv_faults *F = &s->faults;
    json_t *args = body ? json_deep_copy(body) : json_object();
    json_decref(F->args[k]);
    F->args[k] = json_deep_copy(args);
    if (F->args[k]) json_object_set_new(F->args[k], "t_ns", json_integer((json_int_t)now));
    pushed = event_locked(s, fault_names[k], args, now);
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.faults_injected[k]++;
    pthread_mutex_unlock(&s->metrics.mu);
  }
  json_t *logged = json_pack("{s:s,s:O*}", "fault", fault_names[k], "args", (json_t *)body);
  xt_session_command(s, "fault", "api", logged, rc, rc && msg ? msg->text : NULL);
  json_decref(logged);
  pthread_mutex_unlock(&s->st_mu);
  if (events || pushed) xt_ring_notify(&s->ring);
  return rc;
}

/* Caller holds st_mu: is fault k acting now? */
static int active_locked(const xt_server *s, int k, uint64_t now) {
  const xt_srv_faults *F = &s->faults;
  switch (k) {
  case XT_FAULT_DROP_FRAME: return F->drop_left > 0;
  case XT_FAULT_LATE_FRAME: return F->late_left > 0;
  case XT_FAULT_DEAD_LINE: return F->dead_line;
  case XT_FAULT_PIXEL_CLUSTER: return F->cluster;
  case XT_FAULT_GAIN_DRIFT: return F->gain_on;
  case XT_FAULT_OVER_TEMPERATURE: return s->devs[0].state == XT_DEV_FAULT && s->devs[0].fault_code == 310;
  case XT_FAULT_ABORT_EXPOSURE: return s->devs[0].state == XT_DEV_FAULT && s->devs[0].fault_code == 250;
  case XT_FAULT_GENERATOR_FAULT:
    return F->kv_scale > 0 || (s->devs[0].state == XT_DEV_FAULT && s->devs[0].fault_code == 210);
  case XT_FAULT_LINK_LOSS: return now < atomic_load(&((xt_srv_faults *)F)->link_until_ns);
  case XT_FAULT_STALE_CALIBRATION: return F->stale;
  case XT_FAULT_TUBE_HEAT: return now < F->tube_until_ns;
  default: return 0;
  }
}

static double gain_percent_locked(const xt_srv_faults *F, uint64_t t) {
  const double min = t > F->t_gain_ns ? (double)(t - F->t_gain_ns) / 60e9 : 0;
  return F->gain_pct + F->gain_pct_min * min;
}

json_t *xt_srv_faults_json(xt_server *s) {
  json_t *act = json_array(), *known = json_array();
  for (int k = 0; k < XT_SRV_NFAULTS; k++) json_array_append_new(known, json_string(fault_names[k]));
  pthread_mutex_lock(&s->st_mu);
  const uint64_t now = xt_dev_now_ns();
  const xt_srv_faults *F = &s->faults;
  for (int k = 0; k < XT_SRV_NFAULTS; k++) {
    if (!active_locked(s, k, now)) continue;
    json_t *j = F->args[k] ? json_deep_copy(F->args[k]) : json_object();
    json_object_set_new(j, "name", json_string(fault_names[k]));
    if (k == XT_FAULT_DROP_FRAME) json_object_set_new(j, "left", json_integer(F->drop_left));
    if (k == XT_FAULT_LATE_FRAME) json_object_set_new(j, "left", json_integer(F->late_left));
    if (k == XT_FAULT_GAIN_DRIFT) json_object_set_new(j, "percent_now", json_real(gain_percent_locked(F, now)));
    if (k == XT_FAULT_GENERATOR_FAULT) json_object_set_new(j, "tripped", json_boolean(F->kv_scale == 0));
    if (k == XT_FAULT_LINK_LOSS)
      json_object_set_new(j, "until_ns", json_integer((json_int_t)atomic_load(&s->faults.link_until_ns)));
    if (k == XT_FAULT_TUBE_HEAT) json_object_set_new(j, "until_ns", json_integer((json_int_t)F->tube_until_ns));
    if (k == XT_FAULT_OVER_TEMPERATURE)
      json_object_set_new(j, "until_ns", json_integer((json_int_t)s->devs[0].t_deadline_ns));
    json_array_append_new(act, j);
  }
  pthread_mutex_unlock(&s->st_mu);
  return json_pack("{s:o,s:o,s:I}", "active", act, "known", known, "t_ns", (json_int_t)now);
}

void xt_srv_faults_clear(xt_server *s) {
  pthread_mutex_lock(&s->st_mu);
  const uint64_t now = xt_dev_now_ns();
  xt_srv_faults *F = &s->faults;
  for (int k = 0; k < XT_SRV_NFAULTS; k++) {
    json_decref(F->args[k]);
    F->args[k] = NULL;
  }
  F->drop_left = F->late_left = F->dropped = 0;
  F->late_ns = 0;
  memset(&F->panel, 0, sizeof F->panel);
  F->dead_line = F->cluster = F->stale = F->gain_on = 0;
  F->kv_scale = 0;
  F->tube_until_ns = 0;
  atomic_store(&F->link_until_ns, 0);
  const int pushed = event_locked(s, "clear", NULL, now);
  xt_session_command(s, "faults_clear", "api", NULL, 0, NULL);
  pthread_mutex_unlock(&s->st_mu);
  if (pushed) xt_ring_notify(&s->ring);
}

void xt_srv_faults_free(xt_server *s) {
  for (int k = 0; k < XT_SRV_NFAULTS; k++) {
    json_decref(s->faults.args[k]);
    s->faults.args[k] = NULL;
  }
}

/* ---- where they act -------------------------------------------------------------------------- */

void xt_srv_fault_latch_locked(xt_server *s, xt_job *j, uint64_t t) {
  xt_srv_faults *F = &s->faults;
  uint32_t flags = 0;
  /* injected faults are plane A's (its tube, panel, generator and link: docs/biplane.md); plane B's
   * exposures go on untouched, as a second chain would */
  if (j->req.plane != 0) {
    j->fault_flags = 0;
    return;
  }
  if (F->drop_left > 0) {
    F->drop_left--;
    j->fault_drop = 1;
  }
  if (F->late_left > 0) {
    F->late_left--;
    j->fault_late_ns = F->late_ns;
    flags |= XT_STREAM_FAULT_LATE;
  }
  xt_panel_fault p = F->panel;
  p.on = F->dead_line || F->cluster || F->stale || F->gain_on;
  if (!F->cluster) p.cl_r = -1.f;
  p.gain_scale = 1.f;
  if (F->gain_on) {
    const double g = 1.0 + gain_percent_locked(F, t) / 100.0;
    p.gain_scale = (float)(g < 0.1 ? 0.1 : (g > 10.0 ? 10.0 : g));
  }
  if (p.on) j->req.panel_fault = p;
  if (F->dead_line) flags |= XT_STREAM_FAULT_DEAD_LINE;
  if (F->cluster) flags |= XT_STREAM_FAULT_PIXEL_CLUSTER;
  if (F->gain_on) flags |= XT_STREAM_FAULT_GAIN_DRIFT;
  if (F->stale) flags |= XT_STREAM_FAULT_STALE_CAL;
  if (F->kv_scale > 0) {
    j->req.kv_scale = F->kv_scale;
    flags |= XT_STREAM_FAULT_GENERATOR;
  }
  if (t < F->tube_until_ns) flags |= XT_STREAM_FAULT_TUBE_HEAT;
  j->fault_flags = flags;
}

/* Sleeps until the device clock reaches t (a late frame); on the virtual clock, moves it there: the
 * frame is late by the clock the frames are stamped with, and the pacer, which waits for it, sees
 * the deadlines passed meanwhile as any late wake-up's (skipped, never bunched). */
static void wait_device_clock(xt_server *s, uint64_t t) {
  if (xt_dev_clock_is_virtual()) {
    xt_dev_clock_advance(t);
    return;
  }
  for (uint64_t now; !atomic_load(&s->quit) && (now = xt_dev_now_ns()) < t;) {
    uint64_t d = t - now;
    if (d > 20000000ull) d = 20000000ull; /* slices: a shutdown is not held up */
    const struct timespec ts = {0, (long)d};
    nanosleep(&ts, NULL);
  }
}

int xt_srv_fault_deliver(xt_server *s, const xt_job *j, int chain, uint64_t *t_done, uint32_t *flags) {
  uint32_t f = j->fault_flags & (chain ? ~0u : ~(uint32_t)PANEL_BITS);
  if (j->fault_drop) {
    pthread_mutex_lock(&s->st_mu);
    s->faults.dropped = 1;
    pthread_mutex_unlock(&s->st_mu);
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.frames_fault_dropped++;
    pthread_mutex_unlock(&s->metrics.mu);
    return 1;
  }
  if (j->fault_late_ns) {
    const uint64_t t_pub = xt_dev_now_ns() + j->fault_late_ns; /* ready now, by the device clock */
    wait_device_clock(s, t_pub);
    *t_done = t_pub;
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.frames_late++;
    pthread_mutex_unlock(&s->metrics.mu);
  }
  pthread_mutex_lock(&s->st_mu);
  if (s->faults.dropped) f |= XT_STREAM_FAULT_AFTER_DROP;
  s->faults.dropped = 0;
  pthread_mutex_unlock(&s->st_mu);
  *flags = f;
  return 0;
}

int xt_srv_fault_refuse_locked(xt_server *s, int plane, int cmd, uint64_t now, xt_msg *msg) {
  /* injected faults are plane A's (its tube, its panel, its generator: docs/biplane.md) */
  if (plane == 0 && cmd == XT_DEV_CMD_EXPOSE && now < s->faults.tube_until_ns)
    return xt_fail(msg, XT_ESTATE, "device: 'expose' refused: the tube is at its heat limit, fluoroscopy only for %.1f s",
                   (double)(s->faults.tube_until_ns - now) * 1e-9);
  return 0;
}

int xt_srv_fault_link_down(xt_server *s, uint64_t now) { return now < atomic_load(&s->faults.link_until_ns); }
