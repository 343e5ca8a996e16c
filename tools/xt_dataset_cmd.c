/* `xtwin dataset SPEC.json`: generates a labelled dataset of frames from a spec (docs/dataset.md).
 *
 * Order of work: options, the spec (validated whole, one-line errors naming the field), the task's
 * shards (--shard I/N, or Slurm's or Kubernetes' own variables), the backend and devices, the
 * output directory, the models; then either the dry run (counts, bytes and an expected time from
 * a short calibration) or the run, which skips complete shards (a resume) and ends with the task's
 * manifest and a summary naming the bottleneck. Exit 0 success, 1 runtime failure, 2 usage.
 *
 * Only the front end: options, messages and exit codes; the work (the estimate of the dry run
 * included) is dataset/'s (xt_dataset.h). */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "xt_cli.h"
#include "xt_dataset.h"
#include "xt_opt.h"
#ifdef XT_HAVE_CUDA
#include "xt_proj_cuda.h"
#endif

typedef struct ds_opts {
  const char *out;
  int dry_run;
  const char *shard;
  int shard_count;
  const char *devices;
  int per_device;
  int backend; /* 0 spec's, 1 cpu, 2 cuda */
  int threads, writers, batch;
  int verify, render_only;
  int io;
  int progress;
  int help;
} ds_opts;

#define OFF(f) offsetof(ds_opts, f)
static const xt_opt ds_tab[] = {
    {"out", XT_OPT_STRING, "DIR", NULL, "required (not for --dry-run)", 0, 0, NULL, OFF(out),
     "the dataset's directory: spec.json, dataset.json, shards/, manifest-*.jsonl; created if missing"},
    {"dry-run", XT_OPT_FLAG, NULL, NULL, NULL, 0, 0, NULL, OFF(dry_run),
     "validate, then print the frame count, the bytes and the expected time (a short calibration); writes nothing"},
    {"shard", XT_OPT_STRING, "I/N", NULL, "SLURM_ARRAY_TASK_ID/COUNT, JOB_COMPLETION_INDEX, else 0/1", 0, 0, NULL,
     OFF(shard), "this task is I of N: it makes the shards s with s % N == I"},
    {"shard-count", XT_OPT_INT, "N", "0", NULL, 0, 1000000, NULL, OFF(shard_count),
     "N for Kubernetes Indexed Jobs (JOB_COMPLETION_INDEX gives I); also XTWIN_SHARD_COUNT"},
    {"devices", XT_OPT_STRING, "LIST", "0", NULL, 0, 0, NULL, OFF(devices),
     "CUDA devices, one worker each: \"0,1\", or \"all\""},
    {"per-device", XT_OPT_INT, "N", "2", NULL, 1, 16, NULL, OFF(per_device),
     "workers per listed device: with 2, one batch's copy-out overlaps the next one's render"},
    {"backend", XT_OPT_CHOICE, NULL, "spec", NULL, 0, 0, "spec|cpu|cuda", OFF(backend),
     "the projector, overriding the spec's \"backend\""},
    {"threads", XT_OPT_INT, "N", "0", NULL, 0, 1024, NULL, OFF(threads), "CPU backend threads per frame, 0 = all cores"},
    {"writers", XT_OPT_INT, "N", "0", NULL, 0, 1024, NULL, OFF(writers),
     "encode/write threads in all, 0 = the cores less one per worker"},
    {"batch", XT_OPT_INT, "N", "0", NULL, 0, 1024, NULL, OFF(batch), "frames per render batch, 0 = ~32 MB of frames"},
    {"verify", XT_OPT_FLAG, NULL, NULL, NULL, 0, 0, NULL, OFF(verify),
     "re-hash complete shards against their manifest lines before skipping them; remake any that differ"},
    {"render-only", XT_OPT_FLAG, NULL, NULL, NULL, 0, 0, NULL, OFF(render_only),
     "render this task's frames and write nothing (no --out needed): the render rate of the spec (benchmarks)"},
    {"io", XT_OPT_CHOICE, NULL, "buffered", NULL, 0, 0, "buffered|direct", OFF(io),
     "shard writes through the page cache (fsync per shard), or O_DIRECT in 8 MiB blocks where the file system "
     "takes it"},
    {"progress", XT_OPT_CHOICE, NULL, "auto", NULL, 0, 0, "auto|bar|lines|none", OFF(progress),
     "a bar on a terminal, a line every 10 s otherwise"},
    {"help", XT_OPT_FLAG, NULL, NULL, NULL, 0, 0, NULL, OFF(help), "print this help and exit"},
};
#define NOPT ((int)(sizeof ds_tab / sizeof ds_tab[0]))

void xt_cmd_dataset_help(FILE *out) {
  fprintf(out,
          "usage: xtwin dataset SPEC.json --out DIR [options]\n"
          "\n"
          "Generates labelled frames from a spec (models, pose sampling, detector modes, label channels,\n"
          "landmarks, what to write, a seed; docs/dataset.md) into WebDataset-style tar shards (or a\n"
          "folder per shard) with per-frame geometry, a manifest line per shard with its SHA-256, and\n"
          "byte-identical output for the same spec on the same backend. A rerun makes only the missing\n"
          "shards; tasks of --shard I/N (or a Slurm array, or a Kubernetes Indexed Job) split the\n"
          "shards, and their manifests concatenate.\n"
          "\n"
          "options:\n");
  xt_opt_print_help(ds_tab, NOPT, out);
  fprintf(out, "\n"
               "examples:\n"
               "  xtwin dataset spec.json --dry-run\n"
               "  xtwin dataset spec.json --out /data/ds --devices all\n"
               "  sbatch --array=0-15 docs/dataset-sbatch.sh   # 16 tasks, SLURM_ARRAY_TASK_* pick the shards\n");
}

#define say(code, ...) xt_cli_say("dataset", (code), __VA_ARGS__)

/* ------------------------------------------------------------------------------------------ */
/* Task and devices                                                                            */
/* ------------------------------------------------------------------------------------------ */

static int parse_ll(const char *s, long long lo, long long hi, long long *out) {
  char *end = NULL;
  errno = 0;
  if (!s || !*s) return -1;
  long long v = strtoll(s, &end, 10);
  if (*end || errno || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

/* This task's index and count: --shard, else Slurm's array, else a Kubernetes Indexed Job. */
static int task_of(const ds_opts *o, int *task, int *ntasks, char *why, size_t n) {
  long long i = 0, c = 1;
  const char *sid = getenv("SLURM_ARRAY_TASK_ID"), *kid = getenv("JOB_COMPLETION_INDEX");
  if (o->shard) {
    const char *slash = strchr(o->shard, '/');
    char a[32];
    if (!slash || (size_t)(slash - o->shard) >= sizeof a) {
      snprintf(why, n, "--shard: \"%s\" is not I/N", o->shard);
      return -1;
    }
    memcpy(a, o->shard, (size_t)(slash - o->shard));
    a[slash - o->shard] = 0;
    if (parse_ll(slash + 1, 1, 1000000, &c) || parse_ll(a, 0, c - 1, &i)) {
      snprintf(why, n, "--shard: \"%s\" is not I/N with 0 <= I < N <= 1000000", o->shard);
      return -1;
    }
  } else if (sid) {
    long long min = 0, step = 1, id;
    const char *cnt = getenv("SLURM_ARRAY_TASK_COUNT"), *mn = getenv("SLURM_ARRAY_TASK_MIN"),
               *st = getenv("SLURM_ARRAY_TASK_STEP");
    if (parse_ll(sid, 0, LLONG_MAX / 2, &id) || parse_ll(cnt, 1, 1000000, &c) || (mn && parse_ll(mn, 0, id, &min)) ||
        (st && parse_ll(st, 1, 1000000, &step)) || (id - min) % step || (i = (id - min) / step) >= c) {
      snprintf(why, n, "SLURM_ARRAY_TASK_ID=%s with SLURM_ARRAY_TASK_COUNT=%s, _MIN=%s, _STEP=%s: not a task index",
               sid, cnt ? cnt : "(unset)", mn ? mn : "(unset)", st ? st : "(unset)");
      return -1;
    }
  } else if (kid) {
    const char *env = getenv("XTWIN_SHARD_COUNT");
    c = o->shard_count;
    if (!c && (!env || parse_ll(env, 1, 1000000, &c))) {
      snprintf(why, n, "JOB_COMPLETION_INDEX=%s: give the task count with --shard-count N (the Job's completions) "
                       "or XTWIN_SHARD_COUNT", kid);
      return -1;
    }
    if (parse_ll(kid, 0, c - 1, &i)) {
      snprintf(why, n, "JOB_COMPLETION_INDEX=%s: not an index below the task count %lld", kid, c);
      return -1;
    }
  }
  *task = (int)i;
  *ntasks = (int)c;
  return 0;
}

static int device_count(void) {
#ifdef XT_HAVE_CUDA
  int n = 0;
  xt_cuda_info info;
  while (n < 64 && xt_cuda_device_info(n, &info, NULL) == 0) n++;
  return n;
#else
  return 0;
#endif
}

static int parse_devices(const char *s, xt_ds_run_opts *ro, char *why, size_t n) {
  ro->ndevices = 0;
  if (strcmp(s, "all") == 0) {
    int c = device_count();
    if (c < 1) {
      snprintf(why, n, "--devices all: no CUDA device found");
      return -1;
    }
    for (int i = 0; i < c; i++) ro->devices[ro->ndevices++] = i;
    return 0;
  }
  const char *p = s;
  for (;;) {
    char *end = NULL;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || errno || v < 0 || v > 1023 || (*end && *end != ',')) {
      snprintf(why, n, "--devices: \"%s\" is not a list of device numbers or \"all\"", s);
      return -1;
    }
    if (ro->ndevices == 64) {
      snprintf(why, n, "--devices: more than 64 workers");
      return -1;
    }
    ro->devices[ro->ndevices++] = (int)v;
    if (!*end) break;
    p = end + 1;
  }
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Dry run                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static void human(double b, char *out, size_t n) {
  const char *u[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  int i = 0;
  while (b >= 1000 && i < 5) b /= 1000, i++;
  snprintf(out, n, i ? "%.2f %s" : "%.0f %s", b, u[i]);
}

static int dry_run(const xt_ds_spec *s, const xt_ds_scene *sc, const xt_ds_run_opts *ro, int task, int ntasks,
                   long long nshards_task, long long done_shards, long long frames_task, const char *out, int out_fd) {
  xt_msg msg;
  xt_ds_plan p;
  if (xt_ds_estimate(s, sc, ro, nshards_task, done_shards, frames_task, out_fd, &p, &msg))
    return say(p.bad_spec ? XT_EXIT_USAGE : XT_EXIT_RUNTIME, "%s", msg.text);
  char b1[32], b2[32], b3[32];
  human(p.frame_bytes, b1, sizeof b1);
  human(p.total_bytes, b2, sizeof b2);
  printf("spec %s: ok (sha256 %.16s...)\n", s->path, s->sha256);
  printf("frames: %lld in %lld shards of %lld (%s); this task %d/%d: %lld shards, %lld frames", s->frames,
         xt_ds_spec_shards(s), s->shard_frames, xt_ds_format_name(s->format), task, ntasks, nshards_task, frames_task);
  if (done_shards) printf(" (%lld shards already complete)", done_shards);
  printf("\nper frame: %s (", b1);
  xt_ds_member_info mi[16];
  int nm = xt_ds_members(s, mi, 16);
  for (int i = 0; i < nm; i++) printf("%s%s", i ? ", " : "", mi[i].ext);
  printf("; JSON ~%zu B)\n", p.json_bytes);
  printf("to write: %s\n", b2);
  human(p.disk_rate, b3, sizeof b3);
  /* %.3g: a CPU's 0.2 frames/s is not "0 frames/s" */
  printf("rates: render %.3g frames/s (%s, %d worker%s, %d-frame calibration), encoding %.3g frames/s (%d writers), "
         "disk %s\n",
         p.render_fps, xt_backend_name(s->backend), p.workers, p.workers > 1 ? "s" : "", p.calib_frames, p.encode_fps,
         p.writers, p.have_disk ? b3 : !out ? "not measured (no --out)" : "not measured (--out does not exist yet)");
  if (p.have_disk) printf("       (disk: %s/s from a %s fsync'd probe = %.0f frames/s)\n", b3, "64 MB", p.disk_fps);
  printf("expected time: %.1f s at %.3g frames/s (limited by %s)\n", p.todo_frames / p.fps, p.fps, p.limit);
  return XT_EXIT_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* The command                                                                                */
/* ------------------------------------------------------------------------------------------ */

int xt_cmd_dataset(int argc, char **argv) {
  ds_opts o;
  int seen[XT_OPT_MAX];
  xt_msg msg = {{0}};
  xt_ds_spec spec;
  xt_ds_scene scene;
  int have_spec = 0, have_scene = 0, have_out = 0, code = XT_EXIT_OK, rc;
  xt_ds_out out;
  long long *mine = NULL, *todo = NULL;
  memset(&o, 0, sizeof o);
  memset(&scene, 0, sizeof scene);

  const char *spec_path = NULL;
  int first = 1;
  if (argc > 1 && strncmp(argv[1], "--", 2) != 0) {
    spec_path = argv[1];
    first = 2;
  }
  if (xt_opt_parse(ds_tab, NOPT, argc - first, argv + first, &o, seen, &msg)) {
    int hint = strncmp(msg.text, "unknown option", 14) == 0 || strncmp(msg.text, "unexpected", 10) == 0;
    return say(XT_EXIT_USAGE, "%s%s", msg.text, hint ? " (see xtwin dataset --help)" : "");
  }
  if (o.help) {
    xt_cmd_dataset_help(stdout);
    return XT_EXIT_OK;
  }
  if (!spec_path) return say(XT_EXIT_USAGE, "no spec given: xtwin dataset SPEC.json --out DIR (see --help)");
  if (!o.out && !o.dry_run && !o.render_only) return say(XT_EXIT_USAGE, "--out: required (the dataset's directory)");
  if (o.render_only && o.dry_run) return say(XT_EXIT_USAGE, "--render-only and --dry-run exclude each other");

  if ((rc = xt_ds_spec_load(spec_path, &spec, &msg)))
    return say(rc == XT_EIO ? XT_EXIT_RUNTIME : XT_EXIT_USAGE, "%s", msg.text);
  have_spec = 1;
  if (o.backend) spec.backend = o.backend == 1 ? XT_BACKEND_CPU : XT_BACKEND_CUDA;

  int task = 0, ntasks = 1;
  char why[512];
  if (task_of(&o, &task, &ntasks, why, sizeof why)) {
    code = say(XT_EXIT_USAGE, "%s", why);
    goto done;
  }
  xt_ds_run_opts ro;
  memset(&ro, 0, sizeof ro);
  ro.threads = o.threads;
  ro.writers = o.writers;
  ro.batch = o.batch;
  ro.render_only = o.render_only;
  static const int prog[] = {XT_DS_PROGRESS_AUTO, XT_DS_PROGRESS_BAR, XT_DS_PROGRESS_LINES, XT_DS_PROGRESS_NONE};
  ro.progress = prog[o.progress];
  ro.log = stderr;
  if (spec.backend == XT_BACKEND_CUDA) {
    if (parse_devices(o.devices, &ro, why, sizeof why)) {
      code = say(XT_EXIT_USAGE, "%s", why);
      goto done;
    }
    if (ro.ndevices * o.per_device > 64) {
      code = say(XT_EXIT_USAGE, "--per-device: %d devices x %d workers exceed 64 workers", ro.ndevices, o.per_device);
      goto done;
    }
    const int n0 = ro.ndevices; /* the list repeated: d0, d1, d0, d1, ... */
    for (int k = 1; k < o.per_device; k++)
      for (int i = 0; i < n0; i++) ro.devices[k * n0 + i] = ro.devices[i];
    ro.ndevices = n0 * o.per_device;
  } else if (seen[xt_opt_find(ds_tab, NOPT, "devices")] || seen[xt_opt_find(ds_tab, NOPT, "per-device")]) {
    code = say(XT_EXIT_USAGE, "--%s: applies to the cuda backend (this run uses cpu)",
               seen[xt_opt_find(ds_tab, NOPT, "devices")] ? "devices" : "per-device");
    goto done;
  }
  if ((rc = xt_proj_available(spec.backend, &msg))) {
    code = say(XT_EXIT_RUNTIME, "%s", msg.text); /* it names the backend itself: "backend cuda: ..." */
    goto done;
  }

  /* The task's shards. */
  const long long nshards = xt_ds_spec_shards(&spec);
  long long nmine = nshards > task ? (nshards - task + ntasks - 1) / ntasks : 0, ntodo = 0, frames_task = 0;
  mine = malloc(sizeof *mine * (size_t)(nmine ? nmine : 1));
  todo = malloc(sizeof *todo * (size_t)(nmine ? nmine : 1));
  if (!mine || !todo) {
    code = say(XT_EXIT_RUNTIME, "out of memory");
    goto done;
  }
  for (long long i = 0; i < nmine; i++) {
    mine[i] = task + i * ntasks;
    long long f0 = mine[i] * spec.shard_frames;
    frames_task += spec.frames - f0 < spec.shard_frames ? spec.frames - f0 : spec.shard_frames;
  }

  if (o.dry_run) {
    long long done_shards = 0;
    if (o.out && xt_ds_out_open(o.out, &out, &msg) == 0) {
      for (long long i = 0; i < nmine; i++) done_shards += xt_ds_shard_done(&spec, &out, mine[i], 0, 0);
      have_out = 1;
    }
    if ((rc = xt_ds_scene_load(&spec, &scene, &msg))) {
      code = say(XT_EXIT_RUNTIME, "%s", msg.text);
      goto done;
    }
    have_scene = 1;
    code = dry_run(&spec, &scene, &ro, task, ntasks, nmine, done_shards, frames_task, o.out, have_out ? out.dirfd : -1);
    goto done;
  }

  memset(&out, 0, sizeof out); /* --render-only: no directory */
  out.dirfd = out.shardsfd = -1;
  if (!o.render_only && (rc = xt_ds_out_prepare(&spec, o.out, &out, &msg))) {
    code = say(XT_EXIT_RUNTIME, "%s", msg.text);
    goto done;
  }
  have_out = !o.render_only;
  out.direct = o.io == 1;
  if (!o.render_only) {
    for (long long i = 0; i < nmine; i++)
      if (!xt_ds_shard_done(&spec, &out, mine[i], o.verify, 1)) todo[ntodo++] = mine[i];
  } else {
    memcpy(todo, mine, sizeof *todo * (size_t)nmine);
    ntodo = nmine;
  }
  if (ntodo == 0) {
    fprintf(stderr, "xtwin dataset: task %d/%d: all %lld shards are complete; nothing to do\n", task, ntasks, nmine);
  } else {
    if ((rc = xt_ds_scene_load(&spec, &scene, &msg))) {
      code = say(XT_EXIT_RUNTIME, "%s", msg.text);
      goto done;
    }
    have_scene = 1;
    if (ntodo < nmine)
      fprintf(stderr, "xtwin dataset: task %d/%d: %lld of %lld shards already complete; making the other %lld\n", task,
              ntasks, nmine - ntodo, nmine, ntodo);
    xt_ds_summary sum;
    if ((rc = xt_ds_run(&spec, &scene, &out, todo, ntodo, &ro, &sum, &msg))) {
      code = say(XT_EXIT_RUNTIME, "%s", msg.text);
      goto done;
    }
    xt_ds_print_summary(stderr, &sum, o.render_only);
  }
  if (!o.render_only && (rc = xt_ds_write_task_manifest(&out, mine, nmine, task, ntasks, &msg))) {
    code = say(XT_EXIT_RUNTIME, "%s", msg.text);
    goto done;
  }
done:
  if (have_out) xt_ds_out_close(&out);
  if (have_scene) xt_ds_scene_free(&scene);
  if (have_spec) xt_ds_spec_free(&spec);
  free(mine);
  free(todo);
  return code;
}
