/* The dry run's estimate of `xtwin dataset` (xt_ds_estimate, xt_dataset.h): what the run would
 * write and how long it would take, from a short calibration (one batch rendered, its JSONs
 * encoded, the hash rate of this core, the disk's write rate inside --out), and which stage would
 * limit it. The front end (tools/xt_dataset_cmd.c) prints it. */
#define _GNU_SOURCE /* O_TMPFILE */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xt_dataset_internal.h"

/* The disk's write rate, measured inside --out (dirfd) and nowhere else: nothing outside --out is
 * ever written, and a dry run into a directory that does not exist yet creates none. An unnamed
 * O_TMPFILE leaves nothing behind even if the run is killed; else a fresh name, made with O_EXCL. */
static int probe_disk(int dirfd, double bytes, double *rate) {
  if (dirfd < 0) return -1;
  size_t total = bytes > (64 << 20) ? (64 << 20) : (size_t)bytes;
  if (total < (1 << 20)) total = 1 << 20;
  enum { CH = 1 << 20 };
  char *buf = calloc(1, CH), name[64] = "";
  int fd = -1;
#ifdef O_TMPFILE
  if (buf) fd = openat(dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
#endif
  for (int i = 0; buf && fd < 0 && i < 100; i++) {
    snprintf(name, sizeof name, ".xtwin-dry-run-probe-%ld-%d", (long)getpid(), i);
    fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    free(buf);
    return -1;
  }
  if (*name) unlinkat(dirfd, name, 0); /* the open descriptor keeps the blocks until close */
  double t0 = xt__ds_now_s();
  int bad = 0;
  for (size_t d = 0; d < total && !bad; d += CH) bad = write(fd, buf, CH) != CH;
  bad |= fsync(fd) != 0 && errno != EINVAL;
  double t = xt__ds_now_s() - t0;
  close(fd);
  free(buf);
  if (bad || t <= 0) return -1;
  *rate = total / t;
  return 0;
}

int xt_ds_estimate(const xt_ds_spec *s, const xt_ds_scene *sc, const xt_ds_run_opts *ro, long long nshards_task,
                   long long done_shards, long long frames_task, int out_fd, xt_ds_plan *e, xt_msg *msg) {
  xt_msg m;
  int rc = 0;
  memset(e, 0, sizeof *e);
  /* Calibration: one batch rendered, its JSONs encoded, a hash rate measured. */
  const int cal = s->backend == XT_BACKEND_CUDA ? (int)(s->frames < 64 ? s->frames : 64) : 1;
  size_t px = 0;
  for (int k = 0; k < s->nmodes_all; k++) {
    size_t q = (size_t)s->modes[k]->rows * s->modes[k]->cols;
    if (q > px) px = q;
  }
  xt_ds_frame *f = calloc((size_t)cal, sizeof *f), *fb = calloc((size_t)cal, sizeof *fb); /* fb: plane B */
  float *img = malloc(sizeof *img * px * (size_t)cal);
  float **chan = calloc((size_t)(s->nchannels ? s->nchannels : 1), sizeof *chan);
  uint16_t *u16 = s->chain.present ? malloc(sizeof *u16 * 2 * px * (size_t)cal) : NULL;
  xt_ds_renderer *rd = NULL;
  xt_ds_encoder *enc = NULL;
  if (!f || !fb || !img || !chan || (s->chain.present && !u16)) {
    rc = xt_fail(msg, XT_ENOMEM, "out of memory");
    goto done;
  }
  for (int k = 0; k < s->nchannels; k++)
    if (!(chan[k] = malloc(sizeof **chan * px * (size_t)cal))) {
      rc = xt_fail(msg, XT_ENOMEM, "out of memory");
      goto done;
    }
  int n = 0;
  for (long long i = 0; i < s->frames && n < cal; i++) {
    if ((rc = xt_ds_sample_frame(s, sc->placement, (const double(*)[3])sc->center, i, &f[n], &m)) ||
        (s->plane_b.present && (rc = xt_ds_sample_plane_b(s, &f[n], &fb[n], &m)))) {
      e->bad_spec = 1;
      rc = xt_fail(msg, rc, "frame %lld: %s", i, m.text);
      goto done;
    }
    if (f[n].mode == f[0].mode) n++;
  }
  if ((rc = xt_ds_renderer_create(sc, s->backend, ro->ndevices ? ro->devices[0] : 0, ro->threads, &rd, msg)) ||
      (rc = xt_ds_encoder_create(sc, &enc, msg)))
    goto done;
  /* Once to warm up (uploads, scratch), once timed. */
  double t_render = 0;
  for (int pass = 0; pass < 2; pass++) {
    double t0 = xt__ds_now_s();
    /* What the run renders: the image, the chain's frames, the label channels. */
    if (((s->write.lineint || s->write.intensity) && (rc = xt_ds_render_image(rd, f, n, img, &m))) ||
        (s->chain.present && (rc = xt_ds_render_chain(rd, f, n, u16, u16 + px * (size_t)n, &m))) ||
        (s->nchannels && (rc = xt_ds_render_labels(rd, f, n, chan, &m)))) {
      rc = xt_fail(msg, rc, "render: %s", m.text);
      goto done;
    }
    /* Plane B's views one by one (their modes may differ from frame to frame). */
    for (int i = 0; s->plane_b.present && i < n; i++)
      if (((s->write.lineint || s->write.intensity) && (rc = xt_ds_render_image(rd, &fb[i], 1, img, &m))) ||
          (s->chain.present && (rc = xt_ds_render_chain(rd, &fb[i], 1, u16, u16 + px, &m))) ||
          (s->nchannels && (rc = xt_ds_render_labels(rd, &fb[i], 1, chan, &m)))) {
        rc = xt_fail(msg, rc, "render: %s", m.text);
        goto done;
      }
    t_render = (xt__ds_now_s() - t0) / n;
    if (s->backend == XT_BACKEND_CPU) break;
  }
  size_t json_total = 0;
  double t0 = xt__ds_now_s();
  for (int i = 0; i < n; i++) {
    const char *text;
    size_t len;
    if ((rc = xt_ds_frame_json(enc, &f[i], s->plane_b.present ? &fb[i] : NULL, &text, &len, msg))) goto done;
    json_total += len;
  }
  double t_json = (xt__ds_now_s() - t0) / n;
  e->calib_frames = n;
  e->json_bytes = json_total / (size_t)n;
  double bpf = 0;
  for (int k = 0; k < s->nmodes; k++) bpf += (double)xt_ds_frame_bytes(s, k, e->json_bytes) / s->nmodes;
  e->frame_bytes = bpf;
  const double t_hash = xt_ds_hash_seconds(64 << 20) / (double)(64 << 20) * bpf;
  e->todo_frames = (double)frames_task * (nshards_task - done_shards) / (nshards_task ? nshards_task : 1);
  e->total_bytes = e->todo_frames * bpf + (nshards_task - done_shards) * 1024.0;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  e->workers = ro->ndevices ? ro->ndevices : 1;
  e->writers = ro->writers ? ro->writers : (int)cores - e->workers;
  if (e->writers < 1) e->writers = 1;
  e->render_fps = e->workers / t_render;
  e->encode_fps = (e->writers < cores ? e->writers : cores) / (t_json + t_hash);
  e->have_disk = probe_disk(out_fd, e->total_bytes, &e->disk_rate) == 0;
  e->disk_fps = e->have_disk ? e->disk_rate / bpf : INFINITY;
  e->fps = e->render_fps;
  e->limit = "render";
  if (e->encode_fps < e->fps) e->fps = e->encode_fps, e->limit = "encoding";
  if (e->disk_fps < e->fps) e->fps = e->disk_fps, e->limit = "disk";
done:
  xt_ds_renderer_free(rd);
  xt_ds_encoder_free(enc);
  if (chan)
    for (int k = 0; k < s->nchannels; k++) free(chan[k]);
  free(chan);
  free(img);
  free(u16);
  free(f);
  free(fb);
  return rc;
}
