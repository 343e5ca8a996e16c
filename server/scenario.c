/* Scenarios (srv_scenario.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "srv_scenario.h"

static const char *const commands[] = {"pose", "acquisition", "start", "stop", "trigger", "device"};

void xt_scenario_free(xt_scenario *sc) {
  if (!sc) return;
  json_decref(sc->doc);
  free(sc->ev);
  memset(sc, 0, sizeof *sc);
}

static int parse_event(json_t *e, int i, xt_scn_event *ev, xt_msg *msg) {
  if (!json_is_object(e)) return xt_fail(msg, XT_EINVAL, "scenario.events[%d]: expected an object", i);
  const char *key;
  json_t *v;
  json_object_foreach(e, key, v) {
    if (strcmp(key, "at_frame") && strcmp(key, "at_ms") && strcmp(key, "command") && strcmp(key, "fault") &&
        strcmp(key, "body") && strcmp(key, "note"))
      return xt_fail(msg, XT_EINVAL, "scenario.events[%d]: unknown key '%s'", i, key);
  }
  const json_t *fr = json_object_get(e, "at_frame"), *ms = json_object_get(e, "at_ms");
  if (!!fr == !!ms) return xt_fail(msg, XT_EINVAL, "scenario.events[%d]: give at_frame or at_ms, one of them", i);
  ev->index = i;
  ev->at_frame = -1;
  if (fr) {
    if (!json_is_integer(fr) || json_integer_value(fr) < 0)
      return xt_fail(msg, XT_EINVAL, "scenario.events[%d].at_frame: a frame number >= 0 expected", i);
    ev->at_frame = json_integer_value(fr);
  } else {
    const double t = json_is_number(ms) ? json_number_value(ms) : -1;
    if (!(t >= 0 && t <= 1e9)) /* about 11.6 days */
      return xt_fail(msg, XT_EINVAL, "scenario.events[%d].at_ms: milliseconds in [0, 1e9] expected", i);
    ev->at_ns = (uint64_t)llround(t * 1e6);
  }
  const json_t *c = json_object_get(e, "command"), *f = json_object_get(e, "fault");
  if (!!c == !!f) return xt_fail(msg, XT_EINVAL, "scenario.events[%d]: give command or fault, one of them", i);
  const json_t *name = c ? c : f;
  if (!json_is_string(name))
    return xt_fail(msg, XT_EINVAL, "scenario.events[%d].%s: a name expected", i, c ? "command" : "fault");
  ev->what = c ? "command" : "fault";
  ev->name = json_string_value(name);
  if (c) {
    int known = 0;
    for (size_t k = 0; k < sizeof commands / sizeof commands[0]; k++) known |= !strcmp(ev->name, commands[k]);
    if (!known)
      return xt_fail(msg, XT_EINVAL,
                     "scenario.events[%d].command: '%s' is not pose, acquisition, start, stop, trigger or device", i,
                     ev->name);
  }
  ev->body = json_object_get(e, "body");
  if (ev->body && !json_is_object(ev->body))
    return xt_fail(msg, XT_EINVAL, "scenario.events[%d].body: expected an object", i);
  return 0;
}

int xt_scenario_parse(const json_t *doc, xt_scenario *sc, xt_msg *msg) {
  memset(sc, 0, sizeof *sc);
  if (!json_is_object(doc)) return xt_fail(msg, XT_EINVAL, "scenario: expected a JSON object");
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)doc, key, v) {
    if (strcmp(key, "name") && strcmp(key, "seed") && strcmp(key, "events") && strcmp(key, "note"))
      return xt_fail(msg, XT_EINVAL, "scenario: unknown key '%s'", key);
  }
  const json_t *ev = json_object_get(doc, "events"), *seed = json_object_get(doc, "seed"),
               *name = json_object_get(doc, "name");
  if (!json_is_array(ev)) return xt_fail(msg, XT_EINVAL, "scenario.events: expected an array");
  if (json_array_size(ev) > XT_SCN_MAX_EVENTS)
    return xt_fail(msg, XT_ETOOLARGE, "scenario.events: at most %d", XT_SCN_MAX_EVENTS);
  if (seed && (!json_is_integer(seed) || json_integer_value(seed) < 0))
    return xt_fail(msg, XT_EINVAL, "scenario.seed: a whole number >= 0 expected");
  if (name && !json_is_string(name)) return xt_fail(msg, XT_EINVAL, "scenario.name: a string expected");
  sc->doc = json_deep_copy(doc);
  sc->n = (int)json_array_size(ev);
  sc->ev = calloc(sc->n ? (size_t)sc->n : 1, sizeof *sc->ev);
  if (!sc->doc || !sc->ev) {
    xt_scenario_free(sc);
    return xt_fail(msg, XT_ENOMEM, "scenario: out of memory");
  }
  snprintf(sc->name, sizeof sc->name, "%s", name ? json_string_value(name) : "scenario");
  if (seed) {
    sc->has_seed = 1;
    sc->seed = (uint64_t)json_integer_value(seed);
  }
  const json_t *mine = json_object_get(sc->doc, "events");
  for (int i = 0; i < sc->n; i++) {
    int rc = parse_event(json_array_get(mine, (size_t)i), i, &sc->ev[i], msg);
    if (rc) {
      xt_scenario_free(sc);
      return rc;
    }
  }
  return 0;
}

int xt_scenario_load(const char *path, xt_scenario *sc, xt_msg *msg) {
  json_error_t je;
  json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
  if (!doc) return xt_fail(msg, XT_EFORMAT, "%s:%d:%d: %s", path, je.line, je.column, je.text);
  xt_msg m;
  int rc = xt_scenario_parse(doc, sc, &m);
  json_decref(doc);
  if (rc) return xt_fail(msg, rc, "%s: %s", path, m.text);
  return 0;
}

xt_scn_event *xt_scenario_due(xt_scenario *sc, uint64_t next_counter, uint64_t t_ns) {
  for (int i = 0; sc && i < sc->n; i++) {
    xt_scn_event *e = &sc->ev[i];
    if (e->done) continue;
    if (e->at_frame >= 0 ? (uint64_t)e->at_frame <= next_counter : sc->t_start_ns + e->at_ns <= t_ns) return e;
  }
  return NULL;
}

uint64_t xt_scenario_next_time(const xt_scenario *sc) {
  uint64_t t = 0;
  for (int i = 0; sc && i < sc->n; i++) {
    const xt_scn_event *e = &sc->ev[i];
    if (!e->done && e->at_frame < 0 && (!t || sc->t_start_ns + e->at_ns < t)) t = sc->t_start_ns + e->at_ns;
  }
  return t;
}

json_t *xt_scenario_json(const xt_scenario *sc) {
  if (!sc || !sc->doc) return json_null();
  return json_pack("{s:s,s:i,s:i,s:i,s:I}", "name", sc->name, "events", sc->n, "applied", sc->applied, "pending",
                   sc->n - sc->applied, "started_ns", (json_int_t)sc->t_start_ns);
}
