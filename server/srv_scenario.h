/* Scenarios (issue 24, point 6; docs/device.md "Scenarios"): a timeline of commands (and faults)
 * at frame numbers or at times, from a JSON file at start (--scenario FILE) or over REST
 * (PUT /v1/scenario), played by the pacer on the device clock, so that a run is the same on the
 * real and the virtual clock and from one run to the next:
 *
 *   {"name": "...", "seed": 42,
 *    "events": [{"at_ms": 0, "command": "start"},
 *               {"at_frame": 5, "command": "pose", "body": {"primary_deg": 30}},
 *               {"at_ms": 1500, "command": "acquisition", "body": {"chain": {"protocol": "fluoro_low"}}}]}
 *
 * "at_frame": N is applied before the exposure numbered N is latched (frame N is the first to show
 * it); "at_ms": T once the device clock reaches the scenario's start + T (before any exposure due at
 * or after it). Events due together are applied in the file's order. "seed" sets the chain's seed
 * when the scenario starts. This module parses and schedules; the server applies (state.c). */
#ifndef XT_SRV_SCENARIO_H
#define XT_SRV_SCENARIO_H

#include <stdint.h>

#include <jansson.h>

#include "xt_err.h"

#define XT_SCN_MAX_EVENTS 4096

typedef struct xt_scn_event {
  int64_t at_frame; /* -1: a timed event */
  uint64_t at_ns;   /* after the start (timed events) */
  const char *what; /* "command" or "fault" */
  const char *name; /* the command's (pose, acquisition, start, stop, trigger, device) or fault's */
  json_t *body;     /* borrowed from the scenario's document; may be NULL */
  int index;        /* its place in the file, for messages */
  int done;
} xt_scn_event;

typedef struct xt_scenario {
  json_t *doc; /* owned */
  char name[128];
  int has_seed;
  uint64_t seed;
  xt_scn_event *ev;
  int n, applied;
  uint64_t t_start_ns; /* the device clock when it started */
} xt_scenario;

/* Parses and checks a scenario (steals nothing: doc is copied); msg names the event and field. */
int xt_scenario_parse(const json_t *doc, xt_scenario *sc, xt_msg *msg);
int xt_scenario_load(const char *path, xt_scenario *sc, xt_msg *msg);
void xt_scenario_free(xt_scenario *sc);
/* The next event due before the exposure numbered next_counter at device time t_ns (in file
 * order), or NULL; the caller applies it and marks it done. */
xt_scn_event *xt_scenario_due(xt_scenario *sc, uint64_t next_counter, uint64_t t_ns);
/* The device time of the earliest timed event not done, or 0 when none is left. */
uint64_t xt_scenario_next_time(const xt_scenario *sc);
/* {"name", "events", "applied", "pending", "started_ns"} */
json_t *xt_scenario_json(const xt_scenario *sc);

#endif /* XT_SRV_SCENARIO_H */
