/* Counters and histograms of the server (metrics.c) and their Prometheus text. Every module
 * that counts takes metrics.mu; the lock order puts it last (engine.c). */
#ifndef XT_SRV_METRICS_H
#define XT_SRV_METRICS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "srv_config.h"
#include "xt_acq.h"

#define XT_HIST_MAX_BUCKETS 20
#define XT_SRV_METRIC_FAULTS 16 /* >= srv_fault.h's XT_SRV_NFAULTS */
typedef struct xt_hist {
  const char *name, *help;
  int nb;
  double le[XT_HIST_MAX_BUCKETS];
  uint64_t count[XT_HIST_MAX_BUCKETS + 1];
  uint64_t n;
  double sum;
} xt_hist;

typedef struct xt_client_stats {
  unsigned id;
  char peer[64];
  uint64_t sent, dropped;
  int used;
} xt_client_stats;

typedef struct xt_metrics {
  pthread_mutex_t mu; /* guards everything below */
  uint64_t frames_rendered, frames_skipped, frames_published, render_errors, deadlines_missed;
  uint64_t pose_updates, rest_requests, rest_errors, ws_connections;
  uint64_t shape_updates, shape_overruns; /* instruments (instr.c) */
  uint64_t rest_refused;   /* REST connections refused (per-address limit) or cut (head deadline) */
  uint64_t ws_refused;     /* stream upgrades refused (client limit, token, origin, host) */
  uint64_t sent_total, dropped_total; /* over all clients ever connected */
  /* fault injection (fault.c): each fault's injections, by srv_fault.h's order; frames dropped and
   * held back by drop_frame and late_frame; frames no client got while the link was down */
  uint64_t faults_injected[XT_SRV_METRIC_FAULTS];
  uint64_t frames_fault_dropped, frames_late, frames_link_lost;
  xt_hist render, convert, period, jitter, latency, pose_latency, send, handoff, publish, wake;
  xt_client_stats clients[XT_SRV_MAX_CLIENT_STATS];
} xt_metrics;

void xt_metrics_init(xt_metrics *m);
void xt_metrics_destroy(xt_metrics *m);
void xt_hist_add(xt_hist *h, double v); /* caller holds m->mu */
/* The study folder's counters (srv_study.h), read when /metrics is asked for. */
typedef struct xt_metrics_study {
  uint64_t objects, bytes, runs; /* DICOM files written (a run written again counts again), their bytes, run writes */
  uint64_t dropped, errors;      /* frames left out of the study; write or encode errors */
  uint64_t queue_frames, queue_bytes; /* waiting for the writer now */
  int storing;                   /* study_store set: the C-STORE counters below mean something */
  uint64_t stored, store_failures; /* objects the PACS accepted; sends that failed (one association each) */
} xt_metrics_study;

/* Appends the Prometheus text exposition to a malloc'd string; plane: the run's dose and loop
 * (a snapshot of xt_server.plane); study: the study folder's counters, NULL without one. */
char *xt_metrics_text(xt_metrics *m, const xt_acq_plane_state *plane, const xt_metrics_study *study, size_t *len);

#endif /* XT_SRV_METRICS_H */
