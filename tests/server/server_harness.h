/* Test harness for xtwin-server: starts the real binary on ephemeral ports (--rest-port 0
 * --ws-port 0 --ports-file), waits until it has written its ports, and talks to it over loopback
 * with libcurl. Header-only, for the server's C tests. */
#ifndef XT_SERVER_HARNESS_H
#define XT_SERVER_HARNESS_H

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef XT_SERVER_BIN
#error "XT_SERVER_BIN: path of the xtwin-server binary"
#endif

typedef struct xt_srv_proc {
  pid_t pid;
  int rest, ws;
  char dir[128];
  char scheme[8]; /* http or https */
} xt_srv_proc;

static double xt_h_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void xt_h_sleep(double s) {
  struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&t, NULL);
}

/* Starts the server with the small test scene plus extra (NULL-terminated) arguments. */
static int xt_srv_spawn(xt_srv_proc *p, const char *const *extra) {
  memset(p, 0, sizeof *p);
  snprintf(p->dir, sizeof p->dir, "/tmp/xtwin-srv-test-XXXXXX");
  if (!mkdtemp(p->dir)) return -1;
  char ports[192], log[192];
  snprintf(ports, sizeof ports, "%s/ports.json", p->dir);
  snprintf(log, sizeof log, "%s/server.log", p->dir);
  const char *argv[64];
  int n = 0;
  static const char *const base[] = {XT_SERVER_BIN, "--rest-port", "0", "--ws-port", "0", "--backend", "cpu",
                                     "--threads", "2", "--phantom-dim", "128", "--phantom-spacing", "2",
                                     "--mode", "fd20-128", "--fps", "30", NULL};
  for (int i = 0; base[i]; i++) argv[n++] = base[i];
  argv[n++] = "--ports-file";
  argv[n++] = ports;
  for (int i = 0; extra && extra[i] && n < 62; i++) argv[n++] = extra[i];
  argv[n] = NULL;
  int is_tls = 0;
  for (int i = 0; argv[i]; i++)
    if (!strcmp(argv[i], "--tls-cert")) is_tls = 1;
  snprintf(p->scheme, sizeof p->scheme, "%s", is_tls ? "https" : "http");
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a test that dies or fails early leaves no server behind */
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  p->pid = pid;
  double until = xt_h_now() + 60.0;
  while (xt_h_now() < until) {
    FILE *f = fopen(ports, "r");
    if (f) {
      int ok = fscanf(f, "{\"rest\": %d, \"ws\": %d", &p->rest, &p->ws) == 2;
      fclose(f);
      if (ok) return 0;
    }
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      p->pid = 0;
      fprintf(stderr, "  server exited at start (see %s)\n", log);
      return -1;
    }
    xt_h_sleep(0.02);
  }
  return -1;
}

/* Removes the test's temporary folder (kept when the server failed, for its log). */
static void xt_srv_cleanup(xt_srv_proc *p) {
  char f[192];
  snprintf(f, sizeof f, "%s/ports.json", p->dir);
  unlink(f);
  snprintf(f, sizeof f, "%s/server.log", p->dir);
  unlink(f);
  rmdir(p->dir);
}

/* SIGTERM, then waits up to `timeout` s; returns the exit status (or -1: had to be killed). */
static int xt_srv_stop(xt_srv_proc *p, double timeout) {
  if (!p->pid) return -1;
  kill(p->pid, SIGTERM);
  double until = xt_h_now() + timeout;
  int st = 0;
  while (xt_h_now() < until) {
    pid_t r = waitpid(p->pid, &st, WNOHANG);
    if (r == p->pid) {
      p->pid = 0;
      if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "tail -n 30 %s/server.log >&2", p->dir);
        if (system(cmd)) {
        }
      }
      int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      if (code == 0) xt_srv_cleanup(p);
      return code;
    }
    xt_h_sleep(0.02);
  }
  kill(p->pid, SIGKILL);
  waitpid(p->pid, &st, 0);
  p->pid = 0;
  return -1;
}

typedef struct xt_buf {
  char *p;
  size_t n;
} xt_buf;

static size_t xt_h_write(char *d, size_t sz, size_t nm, void *u) {
  xt_buf *b = u;
  size_t k = sz * nm;
  char *q = realloc(b->p, b->n + k + 1);
  if (!q) return 0;
  b->p = q;
  memcpy(b->p + b->n, d, k);
  b->n += k;
  b->p[b->n] = 0;
  return k;
}

typedef struct xt_resp {
  long status;
  xt_buf body, headers;
} xt_resp;

static void xt_resp_free(xt_resp *r) {
  free(r->body.p);
  free(r->headers.p);
  memset(r, 0, sizeof *r);
}

/* One request; headers is a NULL-terminated list of "Name: value" lines (or NULL). Returns the
 * curl code (0 ok). body_len < 0: strlen(body). */
static int xt_http(const xt_srv_proc *p, const char *method, const char *path, const char *body, long body_len,
                   const char *const *headers, xt_resp *r) {
  memset(r, 0, sizeof *r);
  CURL *c = curl_easy_init();
  if (!c) return -1;
  char url[512];
  snprintf(url, sizeof url, "%s://127.0.0.1:%d%s", p->scheme, p->rest, path);
  struct curl_slist *hl = NULL;
  for (int i = 0; headers && headers[i]; i++) hl = curl_slist_append(hl, headers[i]);
  if (body) hl = curl_slist_append(hl, "Content-Type: application/json");
  else hl = curl_slist_append(hl, "Content-Type:"); /* curl's form type on an empty POST: a body-less request has none */
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, xt_h_write);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &r->body);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, xt_h_write);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &r->headers);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  if (!strcmp(p->scheme, "https")) {
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L); /* self-signed test certificate */
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (body) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, body_len < 0 ? (long)strlen(body) : body_len);
  } else if (!strcmp(method, "POST") || !strcmp(method, "PUT")) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
  }
  int rc = (int)curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
  curl_slist_free_all(hl);
  curl_easy_cleanup(c);
  return rc;
}

#endif /* XT_SERVER_HARNESS_H */
