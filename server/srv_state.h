/* Pose and acquisition state (state.c): their JSON forms and the checks on partial updates,
 * the parsed stream command, the JSON error body, and the server-level operations REST and the
 * stream share (update the pose or the acquisition, start/stop, state, info, models). */
#ifndef XT_SRV_STATE_H
#define XT_SRV_STATE_H

#include <stdint.h>

#include <jansson.h>

#include "xt_chain.h"
#include "xt_err.h"
#include "xt_geom.h"
#include "xt_stream.h"

typedef struct xt_server xt_server; /* xt_server.h */

/* The acquisition settings as the API states them (GET/PUT /v1/acquisition, the stream's
 * "acquisition" message): a view, parsed and checked whole, of what the server keeps in two
 * places: the plane's setting (mode, pixel format, the chain: acq/xt_acq.h's xt_acq_setup) and
 * the run's timing (xt_srv_run). xt_srv_acq_get_plane and xt_srv_acq_put_plane move it between them. */
typedef struct xt_acq {
  const xt_detector_mode *mode;
  double fps;
  int lockstep;     /* run mode: 0 free, 1 lockstep */
  int pixel_format; /* XT_STREAM_PIX_* */
  int running;
  int chain;                 /* the imaging chain on: frames are raw + processed uint16 */
  xt_chain_params chain_prm; /* its parameters (imaging/xt_chain.h's table) */
  /* biplane (the system's, as fps and the run mode are): the planes the API's switch exposes (bit p:
   * plane p) and their pulses' timing (XT_STREAM_TIMING_INTERLEAVED or _SIMULTANEOUS) */
  unsigned plane_sel;
  int timing;
} xt_acq;

/* The run's timing and state: the server's, shared by its planes. */
typedef struct xt_srv_run {
  double fps;
  int lockstep; /* run mode: 0 free, 1 lockstep */
  int running;
} xt_srv_run;

/* Merges the members of obj into *pose (partial update), rejecting unknown keys, wrong types
 * and invalid poses; msg names the field. *seq_out gets "seq" when present (else untouched). */
int xt_pose_from_json(const json_t *obj, xt_pose *pose, int allow_seq, uint64_t *seq_out, int *has_seq,
                      xt_msg *msg);
json_t *xt_pose_to_json(const xt_pose *p);
int xt_acq_from_json(const json_t *obj, xt_acq *acq, xt_msg *msg);
json_t *xt_acq_to_json(const xt_acq *a);
/* {"enabled": ..., every chain parameter by name} */
json_t *xt_chain_to_json(int enabled, const xt_chain_params *p);
const char *xt_pixfmt_name(int f);
int xt_pixfmt_parse(const char *s, int *out);
/* Parses a JSON text with a size limit; returns XT_EFORMAT naming line/column on error. */
int xt_json_parse(const char *text, size_t len, json_t **out, xt_msg *msg);
/* A REST request body as a JSON object (what every handler with a body parses first); an empty
 * body gives {} when allow_empty, else XT_EINVAL. */
int xt_body_json(const char *body, size_t len, int allow_empty, json_t **out, xt_msg *msg);
/* The body of POST /v1/render ({"pose", "mode", "pixel_format"}, all optional) applied over
 * *pose and *acq (the current state); both may be partly updated on error. */
int xt_render_from_json(const json_t *obj, xt_pose *pose, xt_acq *acq, xt_msg *msg);

/* A WebSocket text message parsed and checked (ws.c then acts on it). On error, cmd is kept when
 * the text was a JSON object, for the "id" and "seq" a nack echoes; free with xt_ws_cmd_free
 * either way. The pose/acquisition update itself is validated when applied, against the state
 * of the moment (xt_srv_update_pose, xt_srv_update_acq). */
enum { XT_CMD_POSE = 1, XT_CMD_ACQ, XT_CMD_START, XT_CMD_STOP, XT_CMD_TRIGGER, XT_CMD_STATE, XT_CMD_FRAMES, XT_CMD_DEVICE,
       XT_CMD_SHAPE };
typedef struct xt_ws_cmd {
  int type;       /* XT_CMD_* */
  json_t *cmd;    /* the whole message (owned), NULL when it did not parse */
  json_t *update; /* pose: a copy of "pose" with the message's "seq" merged in; acquisition:
                     "acquisition" (owned either way); else NULL */
  int processed;  /* frames: 1 for "processed", 0 for "raw" */
  int device;     /* device: the command (acq/xt_device.h's xt_dev_cmd); update: its other fields */
} xt_ws_cmd;
int xt_ws_cmd_parse(const char *text, size_t len, xt_ws_cmd *out, xt_msg *msg);
void xt_ws_cmd_free(xt_ws_cmd *c);
/* {"error": {"name", "status", "message"}} */
json_t *xt_error_json(int err, int status, const char *message);

/* Planes (docs/biplane.md): 0 A (frontal), 1 B (lateral, --planes 2). "A"/"a" or "B"/"b" to a plane
 * of this system (XT_EINVAL naming the value; XT_ENOTFOUND for B on a single-plane system). */
int xt_srv_plane_parse(const xt_server *s, const char *name, int *plane, xt_msg *msg);
/* The chain's seed of plane p from the system's (plane A's is the seed itself). */
uint64_t xt_srv_plane_seed(uint64_t seed, int plane);

/* The acquisition view of a plane and the run (caller holds st_mu), and back; without _plane:
 * plane A's. */
xt_acq xt_srv_acq_get(const xt_server *s);
xt_acq xt_srv_acq_get_plane(const xt_server *s, int plane);
void xt_srv_acq_put_plane(xt_server *s, int plane, const xt_acq *a);
/* Shared by REST and WS: apply updates under st_mu, returning the applied pose seq. Without _plane
 * the body may name its plane ({"plane": "B", ...}; default A), as the stream's messages and the
 * scenarios' events do; the per-plane REST routes call the _plane forms. */
int xt_srv_update_pose(xt_server *s, const json_t *obj, int allow_seq, uint64_t *seq, xt_msg *msg);
int xt_srv_update_pose_plane(xt_server *s, int plane, const json_t *obj, int allow_seq, uint64_t *seq, xt_msg *msg);
/* {"run_frames", "k_irp_total_mgy", "kap_total_gycm2", the last frame's, the loop's state}: plane A's,
 * and on a biplane system "planes" {A, B} and their "total"; takes each plane's mu */
json_t *xt_dose_json(xt_server *s);
json_t *xt_dose_json_plane(xt_server *s, int plane);
int xt_srv_update_acq(xt_server *s, const json_t *obj, xt_msg *msg);
int xt_srv_update_acq_plane(xt_server *s, int plane, const json_t *obj, xt_msg *msg);
/* Acquisition start/stop: the device's API switch (docs/device.md); start is refused (XT_ESTATE)
 * where the device allows no exposure. */
int xt_srv_start(xt_server *s, int run, xt_msg *msg);
/* A device command (xt_dev_cmd) with its fields ({"phases"}, {"code", "text"}; NULL: none), shared
 * by POST /v1/device/<command> and the stream's "device" message; *device_out (may be NULL) gets
 * GET /v1/device's body after it. Refused: XT_ESTATE naming the command and the state. */
int xt_srv_device(xt_server *s, int cmd, const json_t *args, json_t **device_out, xt_msg *msg);
int xt_srv_device_plane(xt_server *s, int plane, int cmd, const json_t *args, json_t **device_out, xt_msg *msg);
json_t *xt_srv_device_json_plane(xt_server *s, int plane);
/* GET /v1/planes/{a,b}: the plane's pose, acquisition (with the system's biplane settings), next
 * frame and stand. xt_srv_state_json is plane A's, with "plane_b" on a biplane system. */
json_t *xt_srv_plane_state_json(xt_server *s, int plane);
/* Scenarios (srv_scenario.h): one event applied through the API's own operation (the pacer calls
 * it through s->scenario_hook, with st_mu let go); a scenario set (PUT /v1/scenario, --scenario),
 * started at the device clock's now, its seed the chain's; its progress. */
int xt_srv_scenario_apply(xt_server *s, const char *what, const char *name, const json_t *body, xt_msg *msg);
int xt_srv_scenario_set(xt_server *s, const json_t *doc, xt_msg *msg);
json_t *xt_srv_scenario_json(xt_server *s);
/* GET /v1/device: the device as of now. */
json_t *xt_srv_device_json(xt_server *s);
json_t *xt_srv_state_json(xt_server *s);
/* Loads a model by path (through xt_loaders when built) and adds it to every worker. from_client:
 * the path came over the network, so it (and every data file its header names) must resolve
 * into one of the --model-root folders (XT_EPERM otherwise, and always when there are none). */
int xt_srv_add_model_path(xt_server *s, const char *path, const char *name, const char *convert, int from_client,
                          xt_msg *msg);
json_t *xt_srv_models_json(xt_server *s);
json_t *xt_srv_info_json(xt_server *s);

#endif /* XT_SRV_STATE_H */
