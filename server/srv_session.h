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
/* An exposure queued: the latched request. */
void xt_session_frame(xt_server *s, const xt_acq_request *q, int lockstep);
/* A model added at run time (POST /v1/models): what the replay loads at this point. */
void xt_session_model(xt_server *s, const char *path, const char *name, const char *convert);

#endif /* XT_SRV_SESSION_H */
