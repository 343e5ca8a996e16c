/* The frame stream, WebSocket /v1/stream (ws.c): one service thread owns every connection; other
 * threads only wake it. */
#ifndef XT_SRV_WS_H
#define XT_SRV_WS_H

#include "xt_err.h"

typedef struct xt_server xt_server; /* xt_server.h */

int xt_ws_start(xt_server *s, xt_msg *msg);
/* Serves until s->quit; then sends close frames and returns within about a second. */
void xt_ws_run(xt_server *s);
void xt_ws_destroy(xt_server *s);
/* Wakes the service loop from another thread (the signal thread at shutdown; the ring's notifier,
 * registered by xt_ws_run, after each frame). */
void xt_ws_wake(xt_server *s);

#endif /* XT_SRV_WS_H */
