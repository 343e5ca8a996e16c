/* Metrics: counters and fixed-bucket histograms under one mutex, written out in the Prometheus
 * text exposition format (version 0.0.4) for GET /metrics. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv_fault.h"
#include "srv_metrics.h"

static void hist_init(xt_hist *h, const char *name, const char *help, const double *le, int nb) {
  memset(h, 0, sizeof *h);
  h->name = name;
  h->help = help;
  h->nb = nb;
  memcpy(h->le, le, (size_t)nb * sizeof *le);
}

void xt_hist_add(xt_hist *h, double v) {
  int i = 0;
  while (i < h->nb && v > h->le[i]) i++;
  h->count[i]++;
  h->n++;
  h->sum += v;
}

void xt_metrics_init(xt_metrics *m) {
  memset(m, 0, sizeof *m);
  pthread_mutex_init(&m->mu, NULL);
  static const double render[] = {0.001, 0.002, 0.004, 0.008, 0.016, 0.025, 0.033, 0.05, 0.1, 0.2, 0.5, 1, 2};
  static const double period[] = {0.005, 0.01, 0.0165, 0.017, 0.025, 0.033, 0.034, 0.05, 0.066, 0.067,
                                  0.1, 0.134, 0.2, 0.267, 0.5, 1, 2, 2.01};
  static const double jitter[] = {0.00001, 0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05};
  static const double lat[] = {0.001, 0.002, 0.005, 0.01, 0.02, 0.033, 0.05, 0.067, 0.1, 0.15, 0.2, 0.3, 0.5, 1};
  hist_init(&m->render, "xtwin_render_seconds", "Time to render one frame (projector and pixel conversion).", render,
            (int)(sizeof render / sizeof *render));
  static const double conv[] = {0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016};
  hist_init(&m->convert, "xtwin_convert_seconds",
            "Of the render time: the line integral to uint16 conversion (0 for float32 frames).", conv,
            (int)(sizeof conv / sizeof *conv));
  hist_init(&m->period, "xtwin_frame_period_seconds", "Interval between successive free-run exposures.", period,
            (int)(sizeof period / sizeof *period));
  hist_init(&m->jitter, "xtwin_exposure_jitter_seconds", "Actual minus scheduled exposure time (free run).", jitter,
            (int)(sizeof jitter / sizeof *jitter));
  hist_init(&m->latency, "xtwin_frame_latency_seconds", "Exposure to frame handed to a client's socket.", lat,
            (int)(sizeof lat / sizeof *lat));
  hist_init(&m->pose_latency, "xtwin_pose_latency_seconds",
            "Pose update received to the first frame carrying it handed to a client's socket.", lat,
            (int)(sizeof lat / sizeof *lat));
  static const double snd[] = {0.0005, 0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.033, 0.05, 0.1, 0.2};
  hist_init(&m->send, "xtwin_frame_send_seconds",
            "Frame rendered to its last byte handed to a client's socket (render done to sent, per client).", snd,
            (int)(sizeof snd / sizeof *snd));
  static const double hand[] = {0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.01, 0.033};
  hist_init(&m->handoff, "xtwin_frame_handoff_seconds",
            "Frame rendered to the stream's service thread starting a client's send of it (per client): of render "
            "done to sent, the part before any byte is written.", hand, (int)(sizeof hand / sizeof *hand));
  /* handoff's two parts: the render worker's (frame made -> published, with the stream told) and the
   * stream's service thread waking up for it (published -> on the service thread) */
  hist_init(&m->publish, "xtwin_frame_publish_seconds",
            "Frame rendered to its publication to the stream (the render worker's part of the handoff).", hand,
            (int)(sizeof hand / sizeof *hand));
  hist_init(&m->wake, "xtwin_stream_wake_seconds",
            "A frame's publication to the stream's service thread running for it (its wake-up; one per wake-up "
            "that found a new frame).", hand, (int)(sizeof hand / sizeof *hand));
}

void xt_metrics_destroy(xt_metrics *m) { pthread_mutex_destroy(&m->mu); }

typedef struct sbuf {
  char *p;
  size_t n, cap;
  int oom;
} sbuf;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void sb_printf(sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (k < 0) {
      b->oom = 1;
      return;
    }
    if ((size_t)k < b->cap - b->n) {
      b->n += (size_t)k;
      return;
    }
    size_t cap = b->cap * 2 + (size_t)k + 1;
    char *q = realloc(b->p, cap);
    if (!q) {
      b->oom = 1;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
}

static void counter(sbuf *b, const char *name, const char *help, uint64_t v) {
  sb_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

static void hist(sbuf *b, const xt_hist *h) {
  sb_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", h->name, h->help, h->name);
  uint64_t cum = 0;
  for (int i = 0; i < h->nb; i++) {
    cum += h->count[i];
    sb_printf(b, "%s_bucket{le=\"%g\"} %llu\n", h->name, h->le[i], (unsigned long long)cum);
  }
  sb_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", h->name, (unsigned long long)h->n, h->name,
            h->sum, h->name, (unsigned long long)h->n);
}

static void gauge(sbuf *b, const char *name, const char *help, uint64_t v) {
  sb_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

char *xt_metrics_text(xt_metrics *m, const xt_acq_plane_state *plane, const xt_metrics_study *study, size_t *len) {
  sbuf b = {malloc(8192), 0, 8192, 0};
  if (!b.p) return NULL;
  b.p[0] = 0;
  pthread_mutex_lock(&m->mu);
  counter(&b, "xtwin_frames_rendered_total", "Frames rendered and published to the stream.", m->frames_rendered);
  counter(&b, "xtwin_frames_skipped_total", "Exposures replaced before rendering because the worker was busy.",
          m->frames_skipped);
  counter(&b, "xtwin_deadlines_missed_total", "Free-run deadlines skipped because the pacer woke a period late.",
          m->deadlines_missed);
  counter(&b, "xtwin_render_errors_total", "Frames that failed to render.", m->render_errors);
  counter(&b, "xtwin_pose_updates_total", "Pose updates applied (REST and WebSocket).", m->pose_updates);
  counter(&b, "xtwin_shape_updates_total", "Instrument shapes accepted (REST and WebSocket).", m->shape_updates);
  counter(&b, "xtwin_shape_overruns_total",
          "Exposures rendered with a newer shape than latched: theirs was overwritten in the ring first.",
          m->shape_overruns);
  counter(&b, "xtwin_rest_requests_total", "REST requests answered.", m->rest_requests);
  counter(&b, "xtwin_rest_errors_total", "REST requests answered with a 4xx or 5xx status.", m->rest_errors);
  counter(&b, "xtwin_ws_connections_total", "Stream clients accepted.", m->ws_connections);
  counter(&b, "xtwin_rest_refused_total",
          "REST connections refused at the per-address limit or cut at the request-head deadline.", m->rest_refused);
  counter(&b, "xtwin_ws_refused_total", "Stream upgrades refused (client limit, token, Origin, Host).", m->ws_refused);
  counter(&b, "xtwin_frames_sent_total", "Frames sent to stream clients, all clients.", m->sent_total);
  counter(&b, "xtwin_frames_dropped_total", "Frames stream clients did not get (latest-wins), all clients.",
          m->dropped_total);
  sb_printf(&b, "# HELP xtwin_faults_injected_total Faults injected (POST /v1/faults/<name>, scenarios), by name.\n"
                "# TYPE xtwin_faults_injected_total counter\n");
  for (int k = 0; k < XT_SRV_NFAULTS; k++)
    sb_printf(&b, "xtwin_faults_injected_total{name=\"%s\"} %llu\n", xt_srv_fault_name(k),
              (unsigned long long)m->faults_injected[k]);
  counter(&b, "xtwin_frames_fault_dropped_total", "Frames exposed and not published (fault drop_frame).",
          m->frames_fault_dropped);
  counter(&b, "xtwin_frames_late_total", "Frames published late (fault late_frame).", m->frames_late);
  counter(&b, "xtwin_frames_link_lost_total", "Frames no stream client got while the link was down (fault link_loss), all clients.",
          m->frames_link_lost);
  int nclients = 0;
  for (int i = 0; i < XT_SRV_MAX_CLIENT_STATS; i++) nclients += m->clients[i].used;
  sb_printf(&b, "# HELP xtwin_stream_clients Stream clients connected.\n# TYPE xtwin_stream_clients gauge\n"
                "xtwin_stream_clients %d\n", nclients);
  sb_printf(&b, "# HELP xtwin_client_frames_sent_total Frames sent to this client.\n"
                "# TYPE xtwin_client_frames_sent_total counter\n");
  for (int i = 0; i < XT_SRV_MAX_CLIENT_STATS; i++)
    if (m->clients[i].used)
      sb_printf(&b, "xtwin_client_frames_sent_total{client=\"%u\",peer=\"%s\"} %llu\n", m->clients[i].id,
                m->clients[i].peer, (unsigned long long)m->clients[i].sent);
  sb_printf(&b, "# HELP xtwin_client_frames_dropped_total Frames this client did not get (latest-wins).\n"
                "# TYPE xtwin_client_frames_dropped_total counter\n");
  for (int i = 0; i < XT_SRV_MAX_CLIENT_STATS; i++)
    if (m->clients[i].used)
      sb_printf(&b, "xtwin_client_frames_dropped_total{client=\"%u\",peer=\"%s\"} %llu\n", m->clients[i].id,
                m->clients[i].peer, (unsigned long long)m->clients[i].dropped);
  /* dose of the current run (issue 11): gauges, as they restart with each run */
  sb_printf(&b, "# HELP xtwin_run_frames Frames exposed in the current run (imaging chain on).\n"
                "# TYPE xtwin_run_frames gauge\nxtwin_run_frames %llu\n", (unsigned long long)plane->dose.frames);
  sb_printf(&b, "# HELP xtwin_run_air_kerma_mgy Air kerma at the interventional reference point, run total.\n"
                "# TYPE xtwin_run_air_kerma_mgy gauge\nxtwin_run_air_kerma_mgy %.9g\n", plane->dose.k_irp_mgy);
  sb_printf(&b, "# HELP xtwin_run_kap_gycm2 Kerma-area product, run total.\n"
                "# TYPE xtwin_run_kap_gycm2 gauge\nxtwin_run_kap_gycm2 %.9g\n", plane->dose.kap_gycm2);
  sb_printf(&b, "# HELP xtwin_drc_measured_ngy Dose-rate control: detector dose measured in the last frame.\n"
                "# TYPE xtwin_drc_measured_ngy gauge\nxtwin_drc_measured_ngy %.9g\n", plane->drc.measured_ngy);
  if (study) { /* --study-dir only (docs/server.md, Metrics) */
    counter(&b, "xtwin_study_objects_written_total", "DICOM objects written to the study folder (a run written again counts again).",
            study->objects);
    counter(&b, "xtwin_study_bytes_written_total", "Bytes of the DICOM objects written to the study folder.", study->bytes);
    counter(&b, "xtwin_study_runs_written_total", "Runs written to the study folder (a run written again counts again).",
            study->runs);
    counter(&b, "xtwin_study_frames_dropped_total",
            "Chain frames left out of the study folder (its queue or the run full, out of memory).", study->dropped);
    counter(&b, "xtwin_study_write_errors_total", "Study folder writes that failed (encoding or the disk).", study->errors);
    if (study->storing) {
      counter(&b, "xtwin_study_stored_total", "DICOM objects the PACS (study_store) accepted by C-STORE.", study->stored);
      counter(&b, "xtwin_study_store_failures_total",
              "C-STORE sends to the PACS that failed (no association, a refused context or a failure status).",
              study->store_failures);
    }
    gauge(&b, "xtwin_study_queue_frames", "Frames waiting for the study folder's writer.", study->queue_frames);
    gauge(&b, "xtwin_study_queue_bytes", "Bytes waiting for the study folder's writer (its budget: 512 MiB).",
          study->queue_bytes);
  }
  hist(&b, &m->render);
  hist(&b, &m->convert);
  hist(&b, &m->period);
  hist(&b, &m->jitter);
  hist(&b, &m->latency);
  hist(&b, &m->pose_latency);
  hist(&b, &m->send);
  hist(&b, &m->handoff);
  hist(&b, &m->publish);
  hist(&b, &m->wake);
  pthread_mutex_unlock(&m->mu);
  if (b.oom) {
    free(b.p);
    return NULL;
  }
  *len = b.n;
  return b.p;
}
