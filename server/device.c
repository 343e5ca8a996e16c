/* The plane's device state machine on the server (srv_device.h). The machine (acq/xt_device.c)
 * only reports what happened; here each report becomes the server's: an event text for every
 * stream client (pushed into the ring beside the frames, so that the stream's service thread sends
 * it, and nobody calls into ws.c), a session-log line, a new run of the plane for each exposure,
 * and the acquisition's running flag, which is the API's latched switch: POST
 * /v1/acquisition/start is the command "start" (no latencies), /stop is "stop". */
#include <stdlib.h>
#include <string.h>

#include "srv_device.h"
#include "srv_ring.h"
#include "srv_session.h"
#include "xt_exposure.h"
#include "xt_server.h"

static json_t *latency_json(const xt_dev_latency *l) {
  return json_pack("{s:f,s:f,s:f}", "prepare_ms", l->prepare_ms, "first_frame_ms", l->first_frame_ms, "readout_ms",
                   l->readout_ms);
}

static json_t *fault_json(const xt_device *d) {
  if (d->state != XT_DEV_FAULT) return json_null();
  return json_pack("{s:i,s:s}", "code", d->fault_code, "text", d->fault_text);
}

static json_t *event_json(const xt_device *d, const xt_dev_event *e) {
  json_t *j = NULL;
  switch (e->kind) {
  case XT_DEV_EV_STATE:
    j = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "type", "event", "event", "state", "state", xt_dev_state_name(e->to),
                  "from", xt_dev_state_name(e->from), "cause",
                  e->cause < 0 ? "time" : xt_dev_cmd_name((xt_dev_cmd)e->cause), "switch", xt_dev_switch_name(e->sw));
    if (j && e->to == XT_DEV_FAULT) json_object_set_new(j, "fault", fault_json(d));
    break;
  case XT_DEV_EV_LIH:
    j = json_pack("{s:s,s:s,s:I}", "type", "event", "event", "lih", "frame", (json_int_t)e->frame);
    break;
  case XT_DEV_EV_PHASE:
    j = json_pack("{s:s,s:s,s:i,s:f,s:f}", "type", "event", "event", "phase", "phase", e->phase, "duration_s",
                  d->phases[e->phase].duration_s, "fps", d->phases[e->phase].fps);
    break;
  case XT_DEV_EV_RADIATION:
    j = json_pack("{s:s,s:s,s:b}", "type", "event", "event", "radiation", "disabled", e->disabled);
    break;
  default: break;
  }
  if (j) json_object_set_new(j, "t_ns", json_integer((json_int_t)e->t_ns));
  return j;
}

/* The latencies from the tables: the readout after X-ray is the detector mode's
 * (scene/detector_modes.tsv); the prepare and first-frame times are the protocol's
 * (imaging/protocols.tsv): a fluoroscopy flavour's for the pedal, an exposure's or DSA's for the hand
 * switch; with no protocol (custom) or one of the other kind, the switch keeps the defaults. */
static void latencies_locked(xt_server *s, int pl) {
  xt_device *d = &s->devs[pl];
  const xt_acq_setup *set = &s->planes[pl].set;
  d->lat[XT_DEV_SW_FLUORO] = xt_dev_latency_default(XT_DEV_SW_FLUORO);
  d->lat[XT_DEV_SW_EXPOSE] = xt_dev_latency_default(XT_DEV_SW_EXPOSE);
  const double r = set->mode ? set->mode->readout_ms : XT_DEV_DEFAULT_READOUT_MS;
  d->lat[XT_DEV_SW_FLUORO].readout_ms = r;
  d->lat[XT_DEV_SW_EXPOSE].readout_ms = r;
  const xt_protocol *p = xt_protocol_at(set->chain_prm.protocol);
  if (p && p->kind != XT_PROTOCOL_KIND_CUSTOM) {
    xt_dev_latency *l = &d->lat[p->kind == XT_PROTOCOL_KIND_FLUORO ? XT_DEV_SW_FLUORO : XT_DEV_SW_EXPOSE];
    l->prepare_ms = p->prepare_ms;
    l->first_frame_ms = p->first_frame_ms;
  }
}

/* The API's switch is pressed while any plane exposes through it. */
static void running_locked(xt_server *s) {
  s->run.running = 0;
  for (int p = 0; p < s->nplanes; p++)
    if (s->devs[p].state == XT_DEV_EXPOSING && s->devs[p].sw == XT_DEV_SW_API) s->run.running = 1;
}

static int publish_locked(xt_server *s, int pl, const xt_dev_out *o) {
  int n = 0;
  for (int i = 0; i < o->nev; i++) {
    const xt_dev_event *e = &o->ev[i];
    /* each exposure is a run: its dose totals, the loop and the chain's states start afresh */
    if (e->kind == XT_DEV_EV_STATE && e->to == XT_DEV_EXPOSING) xt_acq_plane_new_run(&s->planes[pl]);
    json_t *j = event_json(&s->devs[pl], e);
    if (!j) continue;
    /* a biplane system's events say whose; a single plane's stay as they always were */
    if (s->nplanes > 1) json_object_set_new(j, "plane", json_string(pl ? "B" : "A"));
    if (s->ring.next_text) { /* the engine has started: the ring is there */
      xt_ring_push_text(&s->ring, json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17)));
      n++;
    }
    json_object_set(j, "t_event_ns", json_object_get(j, "t_ns")); /* the log stamps its own t_ns */
    xt_session_event(s, j);
  }
  running_locked(s);
  return n;
}

void xt_srv_device_setup(xt_server *s, uint64_t now) {
  xt_dev_out o;
  for (int p = 0; p < s->nplanes; p++) {
    xt_dev_init(&s->devs[p], now);
    latencies_locked(s, p);
    xt_dev_command(&s->devs[p], XT_DEV_CMD_POWER_ON, NULL, now, &o, NULL);
    if (s->run.running && (s->plane_sel & (1u << p))) xt_dev_command(&s->devs[p], XT_DEV_CMD_START, NULL, now, &o, NULL);
  }
}

int xt_srv_device_locked(xt_server *s, int pl, xt_dev_cmd cmd, const xt_dev_args *a, uint64_t now, int *events,
                         xt_msg *msg) {
  xt_dev_out o;
  latencies_locked(s, pl);
  /* a fault injected outside the machine refuses it (fault.c: the tube at its heat limit refuses the
   * exposure hand switch); time still goes first */
  int rc;
  if (xt_srv_fault_refuse_locked(s, pl, cmd, now, NULL)) {
    xt_dev_advance(&s->devs[pl], now, &o);
    rc = xt_srv_fault_refuse_locked(s, pl, cmd, now, msg);
  } else
    rc = xt_dev_command(&s->devs[pl], cmd, a, now, &o, msg);
  const int n = publish_locked(s, pl, &o);
  if (events) *events = n;
  return rc;
}

int xt_srv_device_advance_locked(xt_server *s, uint64_t now) {
  int n = 0;
  for (int p = 0; p < s->nplanes; p++) {
    if (!s->devs[p].t_deadline_ns || s->devs[p].t_deadline_ns > now) continue;
    xt_dev_out o;
    latencies_locked(s, p);
    xt_dev_advance(&s->devs[p], now, &o);
    n += publish_locked(s, p, &o);
  }
  return n;
}

json_t *xt_srv_device_json_locked(const xt_server *s, int pl, uint64_t now) {
  const xt_device *d = &s->devs[pl];
  json_t *cmds = json_array();
  for (int c = 0; c < XT_DEV_NCMDS; c++)
    if (xt_dev_allowed(d, (xt_dev_cmd)c)) json_array_append_new(cmds, json_string(xt_dev_cmd_name((xt_dev_cmd)c)));
  json_t *series = json_null();
  if (d->nphases && d->sw == XT_DEV_SW_EXPOSE) {
    json_t *ph = json_array();
    for (int i = 0; i < d->nphases; i++)
      json_array_append_new(ph, json_pack("{s:f,s:f}", "duration_s", d->phases[i].duration_s, "fps", d->phases[i].fps));
    series = json_pack("{s:o,s:i,s:I}", "phases", ph, "phase", d->phase, "t_phase_ns", (json_int_t)d->t_phase_ns);
  }
  json_t *lat = json_pack("{s:o,s:o,s:s}", "fluoro", latency_json(&d->lat[XT_DEV_SW_FLUORO]), "expose",
                          latency_json(&d->lat[XT_DEV_SW_EXPOSE]), "note",
                          "prepare and first-frame times assumed [U]; readout: the detector mode's (docs/device.md)");
  return json_pack("{s:s,s:b,s:s,s:s,s:o,s:o,s:o,s:o,s:I,s:I,s:I,s:o,s:I,s:o,s:o,s:o}", "state",
                   xt_dev_state_name(d->state), "radiation_disabled", d->rad_disabled, "switch_held",
                   xt_dev_switch_name(d->held), "switch", xt_dev_switch_name(d->sw), "fault", fault_json(d), "latency",
                   lat, "series", series, "commands", cmds, "t_ns", (json_int_t)now, "t_state_ns",
                   (json_int_t)d->t_state_ns, "t_press_ns", (json_int_t)d->t_press_ns, "t_next_ns",
                   d->t_deadline_ns ? json_integer((json_int_t)d->t_deadline_ns) : json_null(), "frames",
                   (json_int_t)d->frames, "last_frame",
                   d->frames ? json_integer((json_int_t)d->last_frame) : json_null(), "lih",
                   d->lih ? json_pack("{s:I}", "frame", (json_int_t)d->lih_frame) : json_null(), "exposing",
                   json_boolean(d->state == XT_DEV_EXPOSING));
}
