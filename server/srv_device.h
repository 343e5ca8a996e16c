/* The plane's device state machine on the server (device.c; the machine itself is acq/xt_device.h,
 * docs/device.md): its JSON, its events onto the stream (through the ring's texts and notifier)
 * and into the session log, and the acquisition's run kept in step with it. Everything here is
 * called with st_mu held, and takes the device clock's time (xt_dev_now_ns) from the caller. */
#ifndef XT_SRV_DEVICE_H
#define XT_SRV_DEVICE_H

#include <stdint.h>

#include <jansson.h>

#include "xt_device.h"

typedef struct xt_server xt_server; /* xt_server.h */

/* Before any thread: the device powered on at now (ready), and exposing through the API's switch
 * when the acquisition starts running (--no-autostart: ready). Nothing is published yet. */
void xt_srv_device_setup(xt_server *s, uint64_t now);
/* Caller holds st_mu: plane's (0 A, 1 B) time first, then cmd (xt_dev_command). Its events are published (stream,
 * session log), a run begins with every exposure and run.running follows the API's switch.
 * Returns the command's result; *events gets the number published: the caller then calls
 * xt_ring_notify once st_mu is released. */
int xt_srv_device_locked(xt_server *s, int plane, xt_dev_cmd cmd, const xt_dev_args *a, uint64_t now, int *events, xt_msg *msg);
/* Caller holds st_mu: every plane's deadlines up to now (the pacer). Returns the events published. */
int xt_srv_device_advance_locked(xt_server *s, uint64_t now);
/* GET /v1/device's body (caller holds st_mu). */
json_t *xt_srv_device_json_locked(const xt_server *s, int plane, uint64_t now);

#endif /* XT_SRV_DEVICE_H */
