/* Fault injection (fault.c; issue 24, point 5; docs/device.md "Faults"): the faults a test or a
 * scenario injects, over REST (POST /v1/faults/<name>, GET and DELETE /v1/faults) or from a scenario
 * file through the one entry point xt_srv_fault. Each acts where a real system's would and shows
 * where a real system shows it: in the frames' fault_flags (api/xt_stream.h), the stream's events
 * ({"event": "fault"} and the device's state events), GET /v1/device and /metrics.
 *
 * Where each acts: the exposure latches the faults of its moment (xt_srv_fault_latch_locked, under
 * st_mu as the pacer or a trigger queues it); the render worker then drops or holds the frame back
 * (xt_srv_fault_deliver); the panel's faults and the generator's kV act in the imaging chain's
 * readout and exposure (xt_acq_request.panel_fault, kv_scale); the device's (over-temperature, an
 * aborted exposure, a generator trip) are the device machine's faults (acq/xt_device.h); a tube at
 * its heat limit refuses the exposure hand switch (xt_srv_fault_refuse_locked); a lost link withholds
 * frames from the stream (xt_srv_fault_link_down). */
#ifndef XT_SRV_FAULT_H
#define XT_SRV_FAULT_H

#include <stdatomic.h>
#include <stdint.h>

#include <jansson.h>

#include "xt_chain.h"
#include "xt_err.h"

typedef struct xt_server xt_server; /* xt_server.h */
typedef struct xt_job xt_job;       /* srv_engine.h */

/* The faults, in API order: X(enum suffix, name). */
#define XT_SRV_FAULTS(X)                     \
  X(DROP_FRAME, "drop_frame")               \
  X(LATE_FRAME, "late_frame")               \
  X(DEAD_LINE, "dead_line")                 \
  X(PIXEL_CLUSTER, "pixel_cluster")         \
  X(GAIN_DRIFT, "gain_drift")               \
  X(OVER_TEMPERATURE, "over_temperature")   \
  X(ABORT_EXPOSURE, "abort_exposure")       \
  X(GENERATOR_FAULT, "generator_fault")     \
  X(LINK_LOSS, "link_loss")                 \
  X(STALE_CALIBRATION, "stale_calibration") \
  X(TUBE_HEAT, "tube_heat")

typedef enum xt_srv_fault_kind {
#define XT_SRV_FAULT_ENUM(e, name) XT_FAULT_##e,
  XT_SRV_FAULTS(XT_SRV_FAULT_ENUM)
#undef XT_SRV_FAULT_ENUM
  XT_SRV_NFAULTS
} xt_srv_fault_kind;

/* Assumed [U] (docs/device.md "Faults"): the generator's kV tolerance (beyond it the generator trips,
 * device fault 210); a stale calibration's default drift since the maps were made. */
#define XT_FAULT_KV_TOLERANCE_PERCENT 5.0
#define XT_FAULT_STALE_OFFSET_ADU 20.0
#define XT_FAULT_STALE_GAIN_PERCENT 2.0
#define XT_FAULT_MAX_LATE_MS 10000.0
#define XT_FAULT_MAX_SECONDS 3600.0

/* The injected faults' state, in xt_server. Guarded by st_mu, but link_until_ns (atomic: the
 * stream's thread reads it without st_mu). */
typedef struct xt_srv_faults {
  json_t *args[XT_SRV_NFAULTS]; /* each fault's last injection: its fields and "t_ns" (NULL: never) */
  int drop_left;                /* exposures still to drop */
  int dropped;                  /* frames were dropped: the next published frame says so (AFTER_DROP) */
  int late_left;                /* exposures still to hold back, by late_ns */
  uint64_t late_ns;
  xt_panel_fault panel;         /* dead lines, the cluster, the stale calibration (gain_scale per exposure) */
  int dead_line, cluster, stale;
  int gain_on;                  /* gain drift: percent + percent_per_min x minutes since t_gain_ns */
  double gain_pct, gain_pct_min;
  uint64_t t_gain_ns;
  double kv_scale;              /* generator within tolerance: actual kV / nominal; 0 none */
  uint64_t tube_until_ns;       /* tube at its heat limit until then */
  atomic_ullong link_until_ns;  /* the stream's link down until then */
} xt_srv_faults;

/* The entry point (REST, the scenario player): injects fault `name` with its fields (body: a JSON
 * object or NULL). Takes st_mu. XT_EINVAL for an unknown name (the known ones listed) or a bad field
 * (named); XT_ESTATE when the device cannot take it (abort_exposure with no exposure running). */
int xt_srv_fault(xt_server *s, const char *name, const json_t *body, xt_msg *msg);
/* GET /v1/faults: {"active": [{"name", "t_ns", fields..., state}], "known": [...], "t_ns"}. Takes st_mu. */
json_t *xt_srv_faults_json(xt_server *s);
/* DELETE /v1/faults: every server-side fault cleared (a device fault stays: reset it, or wait for an
 * over-temperature to pass). Takes st_mu; an event {"event": "fault", "fault": "clear"}. */
void xt_srv_faults_clear(xt_server *s);
/* Frees what the faults hold (the server's end). */
void xt_srv_faults_free(xt_server *s);
const char *xt_srv_fault_name(int kind);

/* Caller holds st_mu: the faults of the exposure queued now into its job (flags, drop, hold, the
 * panel's faults and the generator's kV). */
void xt_srv_fault_latch_locked(xt_server *s, xt_job *j, uint64_t t_exposure_ns);
/* The render worker, the frame made (caller holds no lock): 1 when the job's frame is to be dropped
 * (counted); else *t_done moves to when it is published (a late frame is held back until then, on
 * the device clock) and *flags gets its fault_flags. chain: a chain frame (0: mono, no detector: the
 * panel's and the generator's bits never apply). */
int xt_srv_fault_deliver(xt_server *s, const xt_job *j, int chain, uint64_t *t_done, uint32_t *flags);
/* Caller holds st_mu: a device command the faults refuse now (the exposure hand switch while the
 * tube is at its heat limit): XT_ESTATE with the reason; 0 when not. */
int xt_srv_fault_refuse_locked(xt_server *s, int plane, int cmd, uint64_t now, xt_msg *msg);
/* The stream's link is down at now (any thread). */
int xt_srv_fault_link_down(xt_server *s, uint64_t now);

#endif /* XT_SRV_FAULT_H */
