/* The device state machine of one plane (xt_device.h; docs/device.md has the transitions table).
 * Every transition goes through enter(), which stamps it and reports it; the passage of time
 * through advance_(), which takes the deadlines one at a time at their own instants, so the
 * result does not depend on how often the owner calls (a pacer woken late sees exactly the events
 * of one woken on time). */
#include "xt_device.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const state_names[XT_DEV_NSTATES] = {"standby", "ready", "prepare", "exposing", "readout", "fault"};
static const char *const cmd_names[XT_DEV_NCMDS] = {
#define XT_DEV_CMD_NAME(e, name) name,
    XT_DEV_COMMANDS(XT_DEV_CMD_NAME)
#undef XT_DEV_CMD_NAME
};
static const char *const switch_names[XT_DEV_NSW] = {"none", "fluoro", "expose", "api"};

const char *xt_dev_state_name(xt_dev_state s) { return s >= 0 && s < XT_DEV_NSTATES ? state_names[s] : "?"; }
const char *xt_dev_cmd_name(xt_dev_cmd c) { return c >= 0 && c < XT_DEV_NCMDS ? cmd_names[c] : "?"; }
const char *xt_dev_switch_name(int sw) { return sw >= 0 && sw < XT_DEV_NSW ? switch_names[sw] : "?"; }

int xt_dev_cmd_parse(const char *name) {
  for (int i = 0; name && i < XT_DEV_NCMDS; i++)
    if (!strcmp(name, cmd_names[i])) return i;
  return -1;
}

const char *xt_dev_fault_name(int code) {
  switch (code) {
#define XT_DEV_FAULT_CASE(c, text) \
  case c: return text;
    XT_DEV_FAULTS(XT_DEV_FAULT_CASE)
#undef XT_DEV_FAULT_CASE
  default: return NULL;
  }
}

uint64_t xt_dev_ms_ns(double ms) { return ms > 0 && isfinite(ms) ? (uint64_t)llround(ms * 1e6) : 0; }

static uint64_t phase_ns(const xt_dev_phase *p) { return (uint64_t)llround(p->duration_s * 1e9); }

xt_dev_latency xt_dev_latency_default(int sw) {
  xt_dev_latency l = {0, 0, 0};
  if (sw == XT_DEV_SW_FLUORO || sw == XT_DEV_SW_EXPOSE) {
    l.prepare_ms = sw == XT_DEV_SW_FLUORO ? XT_DEV_DEFAULT_FLUORO_PREPARE_MS : XT_DEV_DEFAULT_EXPOSE_PREPARE_MS;
    l.first_frame_ms = XT_DEV_DEFAULT_FIRST_FRAME_MS;
    l.readout_ms = XT_DEV_DEFAULT_READOUT_MS;
  }
  return l; /* the API's switch: none, so that POST /v1/acquisition/start runs as it always did */
}

void xt_dev_init(xt_device *d, uint64_t t_ns) {
  memset(d, 0, sizeof *d);
  d->state = XT_DEV_STANDBY;
  d->t_state_ns = t_ns;
  for (int sw = 0; sw < XT_DEV_NSW; sw++) d->lat[sw] = xt_dev_latency_default(sw);
}

/* ---- transitions ---------------------------------------------------------------------------- */

static void emit(xt_dev_out *o, const xt_dev_event *e) {
  if (o->nev < XT_DEV_MAX_EVENTS) o->ev[o->nev++] = *e;
}

static void enter(xt_device *d, xt_dev_state to, uint64_t t, int cause, xt_dev_out *o) {
  const xt_dev_event e = {.kind = XT_DEV_EV_STATE, .t_ns = t, .from = d->state, .to = to, .cause = cause, .sw = d->sw};
  d->state = to;
  d->t_state_ns = t;
  d->t_deadline_ns = 0;
  emit(o, &e);
}

/* X-ray on: a new exposure, whose first frame replaces the held image. */
static void begin_exposing(xt_device *d, uint64_t t, int cause, xt_dev_out *o) {
  enter(d, XT_DEV_EXPOSING, t, cause, o);
  d->frames = 0;
  d->lih = 0;
  d->phase = 0;
  d->t_phase_ns = t;
  if (d->nphases) d->t_deadline_ns = t + phase_ns(&d->phases[0]);
}

/* X-ray off: the last frame is read out. */
static void end_exposing(xt_device *d, uint64_t t, int cause, xt_dev_out *o) {
  enter(d, XT_DEV_READOUT, t, cause, o);
  d->t_deadline_ns = t + xt_dev_ms_ns(d->lat[d->sw].readout_ms);
}

/* Read out: ready, the last frame held. */
static void end_readout(xt_device *d, uint64_t t, xt_dev_out *o) {
  enter(d, XT_DEV_READY, t, -1, o);
  if (d->frames) {
    d->lih = 1;
    d->lih_frame = d->last_frame;
    const xt_dev_event e = {.kind = XT_DEV_EV_LIH, .t_ns = t, .sw = d->sw, .frame = d->lih_frame};
    emit(o, &e);
  }
  d->sw = XT_DEV_SW_NONE;
}

/* An exposure cut short (release, stop, radiation disable): prepare gives up, exposing reads out. */
static void stop_exposure(xt_device *d, uint64_t t, int cause, xt_dev_out *o) {
  if (d->state == XT_DEV_PREPARE) {
    enter(d, XT_DEV_READY, t, cause, o);
    d->sw = XT_DEV_SW_NONE;
  } else if (d->state == XT_DEV_EXPOSING) {
    end_exposing(d, t, cause, o);
  }
}

static void advance_(xt_device *d, uint64_t now, xt_dev_out *o) {
  while (d->t_deadline_ns && d->t_deadline_ns <= now) {
    const uint64_t t = d->t_deadline_ns;
    if (d->state == XT_DEV_PREPARE) {
      begin_exposing(d, t, -1, o);
    } else if (d->state == XT_DEV_EXPOSING && d->phase + 1 < d->nphases) {
      d->phase++;
      d->t_phase_ns = t;
      d->t_deadline_ns = t + phase_ns(&d->phases[d->phase]);
      const xt_dev_event e = {.kind = XT_DEV_EV_PHASE, .t_ns = t, .sw = d->sw, .phase = d->phase};
      emit(o, &e);
    } else if (d->state == XT_DEV_EXPOSING) {
      end_exposing(d, t, -1, o); /* the series is over: it ends on its own, the switch still held */
    } else if (d->state == XT_DEV_READOUT) {
      end_readout(d, t, o);
    } else if (d->state == XT_DEV_FAULT) {
      enter(d, XT_DEV_READY, t, -1, o); /* a timed fault's condition passed (recover_s): no reset needed */
      d->fault_code = 0;
      d->fault_text[0] = 0;
    } else {
      d->t_deadline_ns = 0; /* no other state has a deadline */
    }
  }
}

static void finish(const xt_device *d, xt_dev_out *o) {
  o->may_expose = d->state == XT_DEV_EXPOSING;
  o->t_next_ns = d->t_deadline_ns;
}

void xt_dev_advance(xt_device *d, uint64_t now, xt_dev_out *out) {
  out->nev = 0;
  advance_(d, now, out);
  finish(d, out);
}

/* ---- commands ------------------------------------------------------------------------------- */

/* NULL: cmd is allowed now; else why not ("" when the state alone says it). */
static const char *refusal(const xt_device *d, xt_dev_cmd cmd) {
  const xt_dev_state s = d->state;
  switch (cmd) {
  case XT_DEV_CMD_POWER_ON: return s == XT_DEV_STANDBY ? NULL : "";
  case XT_DEV_CMD_STANDBY: return s == XT_DEV_READY || s == XT_DEV_FAULT ? NULL : "";
  case XT_DEV_CMD_START:
  case XT_DEV_CMD_FLUORO:
  case XT_DEV_CMD_EXPOSE:
    /* started already: ok, as the API always answered a second start */
    if (cmd == XT_DEV_CMD_START && s == XT_DEV_EXPOSING && d->sw == XT_DEV_SW_API) return NULL;
    if (s != XT_DEV_READY) return "";
    if (d->rad_disabled) return " (radiation disabled)";
    if (d->held == XT_DEV_SW_FLUORO) return " (the fluoro pedal is still held: release it first)";
    if (d->held == XT_DEV_SW_EXPOSE) return " (the exposure switch is still held: release it first)";
    return NULL;
  case XT_DEV_CMD_RELEASE: return d->held != XT_DEV_SW_NONE ? NULL : " (no switch is held)";
  case XT_DEV_CMD_STOP:
  case XT_DEV_CMD_RADIATION_DISABLE:
  case XT_DEV_CMD_RADIATION_ENABLE:
  case XT_DEV_CMD_FAULT: return NULL;
  case XT_DEV_CMD_RESET: return s == XT_DEV_FAULT ? NULL : "";
  default: return "";
  }
}

int xt_dev_allowed(const xt_device *d, xt_dev_cmd cmd) { return refusal(d, cmd) == NULL; }

static int check_phases(const xt_dev_args *a, xt_msg *msg) {
  if (a->nphases < 0 || a->nphases > XT_DEV_MAX_PHASES)
    return xt_fail(msg, XT_ERANGE, "device: a series has 1 to %d phases, not %d", XT_DEV_MAX_PHASES, a->nphases);
  if (a->nphases && !a->phases) return xt_fail(msg, XT_EINVAL, "device: phases missing");
  for (int i = 0; i < a->nphases; i++) {
    const xt_dev_phase *p = &a->phases[i];
    if (!(p->duration_s >= 0.001 && p->duration_s <= XT_DEV_MAX_PHASE_S))
      return xt_fail(msg, XT_ERANGE, "device: phase %d: duration_s %g outside [0.001, %g]", i, p->duration_s,
                     XT_DEV_MAX_PHASE_S);
    if (!(p->fps > 0 && p->fps <= XT_DEV_MAX_FPS))
      return xt_fail(msg, XT_ERANGE, "device: phase %d: fps %g outside (0, %g]", i, p->fps, XT_DEV_MAX_FPS);
  }
  return 0;
}

/* A switch pressed in ready: prepare, for its prepare time (0: exposing at once, by the advance
 * that follows every command). */
static void press(xt_device *d, int sw, const xt_dev_args *a, uint64_t now, int cause, xt_dev_out *o) {
  d->held = sw;
  d->sw = sw;
  d->nphases = sw == XT_DEV_SW_EXPOSE && a ? a->nphases : 0;
  if (d->nphases) memcpy(d->phases, a->phases, (size_t)d->nphases * sizeof *d->phases);
  d->t_press_ns = now;
  enter(d, XT_DEV_PREPARE, now, cause, o);
  d->t_deadline_ns = now + xt_dev_ms_ns(d->lat[sw].prepare_ms);
}

/* The switch let go: what it started stops. */
static void release(xt_device *d, uint64_t now, int cause, xt_dev_out *o) {
  if ((d->state == XT_DEV_PREPARE || d->state == XT_DEV_EXPOSING) && d->sw == d->held) stop_exposure(d, now, cause, o);
  d->held = XT_DEV_SW_NONE;
}

/* The API's latched switch ends with its exposure (the run is over); a physical switch stays held
 * until it is let go, and must be pressed again for X-ray (the IFU's recovery). */
static void drop_api(xt_device *d) {
  if (d->held == XT_DEV_SW_API) d->held = XT_DEV_SW_NONE;
}

int xt_dev_command(xt_device *d, xt_dev_cmd cmd, const xt_dev_args *a, uint64_t now, xt_dev_out *out, xt_msg *msg) {
  static const xt_dev_args none = {NULL, 0, 0, NULL, 0};
  if (!a) a = &none;
  out->nev = 0;
  advance_(d, now, out);
  int rc = 0;
  const char *why = cmd >= 0 && cmd < XT_DEV_NCMDS ? refusal(d, cmd) : "";
  if (why) {
    rc = xt_fail(msg, XT_ESTATE, "device: '%s' not allowed in state %s%s", xt_dev_cmd_name(cmd),
                 xt_dev_state_name(d->state), why);
    goto done;
  }
  if (a->nphases && cmd != XT_DEV_CMD_EXPOSE) {
    rc = xt_fail(msg, XT_EINVAL, "device: only 'expose' takes phases");
    goto done;
  }
  if (cmd == XT_DEV_CMD_EXPOSE && (rc = check_phases(a, msg))) goto done;
  if (cmd == XT_DEV_CMD_FAULT && a->fault_code <= 0) {
    rc = xt_fail(msg, XT_EINVAL, "device: a fault needs a code > 0");
    goto done;
  }
  if (a->recover_s != 0 && (cmd != XT_DEV_CMD_FAULT || !(a->recover_s > 0 && a->recover_s <= XT_DEV_MAX_RECOVER_S))) {
    rc = xt_fail(msg, XT_EINVAL, "device: recover_s: a fault's only, in (0, %g] s", XT_DEV_MAX_RECOVER_S);
    goto done;
  }
  switch (cmd) {
  case XT_DEV_CMD_POWER_ON: enter(d, XT_DEV_READY, now, cmd, out); break;
  case XT_DEV_CMD_STANDBY:
    enter(d, XT_DEV_STANDBY, now, cmd, out);
    d->fault_code = 0; /* powering down clears a fault */
    d->fault_text[0] = 0;
    break;
  case XT_DEV_CMD_FLUORO: press(d, XT_DEV_SW_FLUORO, a, now, cmd, out); break;
  case XT_DEV_CMD_EXPOSE: press(d, XT_DEV_SW_EXPOSE, a, now, cmd, out); break;
  case XT_DEV_CMD_START:
    if (d->state == XT_DEV_READY) press(d, XT_DEV_SW_API, a, now, cmd, out);
    break;
  case XT_DEV_CMD_RELEASE:
  case XT_DEV_CMD_STOP:
    if (d->held != XT_DEV_SW_NONE) release(d, now, cmd, out);
    break;
  case XT_DEV_CMD_RADIATION_DISABLE:
    if (!d->rad_disabled) {
      d->rad_disabled = 1;
      const xt_dev_event e = {.kind = XT_DEV_EV_RADIATION, .t_ns = now, .sw = d->sw, .disabled = 1};
      emit(out, &e);
    }
    stop_exposure(d, now, cmd, out);
    drop_api(d);
    break;
  case XT_DEV_CMD_RADIATION_ENABLE:
    if (d->rad_disabled) {
      d->rad_disabled = 0;
      const xt_dev_event e = {.kind = XT_DEV_EV_RADIATION, .t_ns = now, .sw = d->sw, .disabled = 0};
      emit(out, &e);
    }
    break;
  case XT_DEV_CMD_FAULT: {
    d->fault_code = a->fault_code;
    const char *t = a->fault_text && *a->fault_text ? a->fault_text : xt_dev_fault_name(a->fault_code);
    snprintf(d->fault_text, sizeof d->fault_text, "%s", t ? t : "fault");
    enter(d, XT_DEV_FAULT, now, cmd, out); /* aborts any exposure: no readout, nothing held */
    if (a->recover_s > 0) d->t_deadline_ns = now + xt_dev_ms_ns(a->recover_s * 1e3);
    d->sw = XT_DEV_SW_NONE;
    drop_api(d);
    break;
  }
  case XT_DEV_CMD_RESET:
    enter(d, XT_DEV_READY, now, cmd, out);
    d->fault_code = 0;
    d->fault_text[0] = 0;
    break;
  default: break;
  }
  advance_(d, now, out); /* zero latencies pass at once: the API's start is exposing on return */
done:
  finish(d, out);
  return rc;
}

void xt_dev_frame(xt_device *d, uint64_t counter) {
  if (d->state != XT_DEV_EXPOSING) return;
  d->frames++;
  d->last_frame = counter;
}

void xt_dev_pacing(const xt_device *d, xt_dev_pace *p) {
  memset(p, 0, sizeof *p);
  p->sw = d->sw;
  p->t_next_ns = d->t_deadline_ns;
  if (d->state != XT_DEV_EXPOSING) return;
  p->expose = 1;
  const uint64_t first = xt_dev_ms_ns(d->lat[d->sw].first_frame_ms);
  p->t0_ns = d->t_phase_ns + (d->phase == 0 ? first : 0);
  if (d->nphases) {
    p->fps = d->phases[d->phase].fps;
    p->until_ns = d->t_deadline_ns;
  }
}
