/* The session log (issue 24, point 7; docs/session-log.md): one JSON line for the session (the
 * build, the configuration, the models as loaded), then one per command (its body and outcome),
 * event and exposure (the request the plane latched: xt_session_frame_json), in the order the
 * server took them, each stamped with the server's clock. `xtwin replay LOG` renders the frames
 * again from it, bit for bit on the same backend. Written under its own lock, flushed per line, so
 * a crash loses at most the line being written. */
#ifndef XT_SRV_SESSION_H
#define XT_SRV_SESSION_H

#include <jansson.h>

#include "xt_acq.h"

typedef struct xt_server xt_server;

/* Opens cfg.session_log (when set) and writes the session line; after the models are loaded. */
int xt_session_open(xt_server *s, xt_msg *msg);
void xt_session_close(xt_server *s);
/* A command: its name ("pose", "acquisition", "start", ...), where it came from ("rest", "ws"),
 * its body (borrowed; NULL: none) and its outcome (rc 0, or the error and its message). */
void xt_session_command(xt_server *s, const char *name, const char *via, const json_t *body, int rc,
                        const char *message);
/* An event (stolen): "type": "event" and the time are added. */
void xt_session_event(xt_server *s, json_t *event);
/* An exposure as it is rendered: the latched request, and the contrast state's number it latched
 * (0: none; written as "contrast_seq" otherwise). */
void xt_session_frame(xt_server *s, const xt_acq_request *q, int lockstep, uint32_t contrast_seq);
/* The contrast state after an accepted injection, stop or reset (action "inject", "stop", "reset";
 * body: the injection's request, borrowed, or NULL), whole: every region with its bolus model and
 * every injection with its times, and the state's seq. Caller holds st_mu, so that the line of a
 * seq precedes every frame that latched it. */
void xt_session_contrast_locked(xt_server *s, const char *action, const json_t *body);
/* A model added at run time (POST /v1/models): what the replay loads at this point. */
void xt_session_model(xt_server *s, const char *path, const char *name, const char *convert);

#endif /* XT_SRV_SESSION_H */
