/* xtwin-server REST tests with a real client (libcurl) over loopback: each test starts its own
 * server on ephemeral ports with the small test scene (128^3 head at 2 mm, fd20-128), so tests
 * are independent and can run in parallel with anything else. Also: the route table against
 * api/openapi.yaml and the stream header layout (the encoders: tests/test_output.c). */
#include <ctype.h>
#include <stdint.h>

#include "server_harness.h"
#include "srv_rest.h"
#include "xt_stream.h"
#include "xt_test.h"

#ifndef XT_API_DIR
#error "XT_API_DIR: the api/ directory"
#endif

static const char *const no_args[] = {NULL};

static int has(const xt_resp *r, const char *needle) { return r->body.p && strstr(r->body.p, needle) != NULL; }

/* A 4xx with a JSON error body naming `name`. */
static void check_error(const xt_resp *r, long status, const char *name) {
  char want[64];
  snprintf(want, sizeof want, "\"name\": \"%s\"", name);
  XT_CHECK_MSG(r->status == status, "status %ld, want %ld (%s)", r->status, status, r->body.p ? r->body.p : "");
  XT_CHECK_MSG(has(r, "\"error\"") && has(r, want), "body %s lacks %s", r->body.p ? r->body.p : "(none)", want);
  XT_CHECK(r->headers.p && strstr(r->headers.p, "application/json"));
}

XT_TEST(test_health_info) {
  xt_srv_proc p;
  XT_REQUIRE(xt_srv_spawn(&p, no_args) == 0);
  xt_resp r;
  XT_CHECK(xt_http(&p, "GET", "/v1/health", NULL, 0, NULL, &r) == 0);
  XT_CHECK(r.status == 200 && has(&r, "\"ok\""));
  xt_resp_free(&r);
  XT_CHECK(xt_http(&p, "GET", "/v1/info", NULL, 0, NULL, &r) == 0);
  XT_CHECK(r.status == 200);
  XT_CHECK(has(&r, "\"version\"") && has(&r, "\"backends\"") && has(&r, "\"gpus\"") && has(&r, "\"detector_modes\""));
  XT_CHECK(has(&r, "\"fd20-128\"") && has(&r, "\"head\"") && has(&r, "\"max_body_bytes\""));
  xt_resp_free(&r);
  XT_CHECK(xt_http(&p, "GET", "/v1/models", NULL, 0, NULL, &r) == 0);
  XT_CHECK(r.status == 200 && has(&r, "\"head\""));
  xt_resp_free(&r);
  XT_CHECK(xt_srv_stop(&p, 15) == 0);
}

XT_TEST(test_pose_partial_updates) {
  xt_srv_proc p;
  XT_REQUIRE(xt_srv_spawn(&p, no_args) == 0);
  xt_resp r;
  XT_CHECK(xt_http(&p, "PUT", "/v1/pose", "{\"primary_deg\": 30}", -1, NULL, &r) == 0);
  XT_CHECK_MSG(r.status == 200 && has(&r, "\"primary_deg\": 30.0") && has(&r, "\"seq\": 1"), "%s", r.body.p);
  xt_resp_free(&r);
  XT_CHECK(xt_http(&p, "PUT", "/v1/pose", "{\"secondary_deg\": -20, \"table_mm\": [1, 2, 3], \"seq\": 41}", -1, NULL, &r) == 0);
  XT_CHECK(r.status == 200);
  xt_resp_free(&r);
  XT_CHECK(xt_http(&p, "GET", "/v1/pose", NULL, 0, NULL, &r) == 0);
  /* The earlier field is kept, the new ones applied, the given seq taken. */
  XT_CHECK_MSG(has(&r, "\"primary_deg\": 30.0") && has(&r, "\"secondary_deg\": -20.0") && has(&r, "\"seq\": 41"), "%s",
               r.body.p);
  XT_CHECK(has(&r, "1.0") && has(&r, "3.0"));
  xt_resp_free(&r);
  XT_CHECK(xt_http(&p, "PUT", "/v1/pose", "{\"primary_deg\": 31}", -1, NULL, &r) == 0);
  XT_CHECK_MSG(has(&r, "\"seq\": 42"), "%s", r.body.p);
  xt_resp_free(&r);
  XT_CHECK(xt_srv_stop(&p, 15) == 0);
}

XT_TEST(test_acquisition) {
  xt_srv_proc p;
  XT_REQUIRE(xt_srv_spawn(&p, no_args) == 0);
  xt_resp r;
  XT_CHECK(xt_http(&p, "PUT", "/v1/acquisition", "{\"fps\": 12.5, \"pixel_format\": \"float32\", \"mode\": \"fd20-256\"}", -1,
                   NULL, &r) == 0);
  XT_CHECK_MSG(r.status == 200 && has(&r, "\"fps\": 12.5") && has(&r, "\"float32\"") && has(&r, "\"fd20-256\""), "%s",
               r.body.p);
  xt_resp_free(&r);
  XT_CHECK(xt_http(&p, "POST", "/v1/acquisition/stop", NULL, 0, NULL, &r) == 0);
  XT_CHECK(r.status == 200 && has(&r, "\"running\": false"));
  xt_resp_free(&r);
  /* Trigger outside lockstep: 409 BUSY. */
  XT_CHECK(xt_http(&p, "POST", "/v1/acquisition/trigger", NULL, 0, NULL, &r) == 0);
  check_error(&r, 409, "BUSY");
  xt_resp_free(&r);
  XT_CHECK(xt_http(&p, "PUT", "/v1/acquisition", "{\"run_mode\": \"lockstep\"}", -1, NULL, &r) == 0);
  XT_CHECK(r.status == 200 && has(&r, "\"lockstep\""));
  xt_resp_free(&r);
  XT_CHECK(xt_http(&p, "POST", "/v1/acquisition/start", NULL, 0, NULL, &r) == 0);
  XT_CHECK(r.status == 200 && has(&r, "\"running\": true"));
  xt_resp_free(&r);
  XT_CHECK(xt_http(&p, "POST", "/v1/acquisition/trigger", NULL, 0, NULL, &r) == 0);
  XT_CHECK_MSG(r.status == 200 && has(&r, "\"frame\""), "%s", r.body.p);
  xt_resp_free(&r);
  XT_CHECK(xt_srv_stop(&p, 15) == 0);
}

XT_TEST(test_bad_requests_keep_serving) {
  xt_srv_proc p;
  XT_REQUIRE(xt_srv_spawn(&p, no_args) == 0);
  xt_resp r;
  struct {
    const char *method, *path, *body;
    long status;
    const char *name;
  } cases[] = {
      {"PUT", "/v1/pose", "{\"primary_deg\": 30", 400, "FORMAT"},          /* malformed JSON */
      {"PUT", "/v1/pose", "[1, 2]", 400, "FORMAT"},                        /* not an object */
      {"PUT", "/v1/pose", "{\"primary_deg\": \"thirty\"}", 400, "INVAL"},  /* wrong type */
      {"PUT", "/v1/pose", "{\"table_mm\": [1, 2]}", 400, "INVAL"},         /* wrong shape */
      {"PUT", "/v1/pose", "{\"primary\": 3}", 400, "INVAL"},               /* unknown field */
      {"PUT", "/v1/pose", "{\"primary_deg\": 181}", 400, "RANGE"},         /* out-of-range angles */
      {"PUT", "/v1/pose", "{\"secondary_deg\": -95}", 400, "RANGE"},
      {"PUT", "/v1/pose", "", 400, "INVAL"},                               /* no body */
      {"PUT", "/v1/acquisition", "{\"fps\": 61}", 400, "RANGE"},           /* out-of-range rates */
      {"PUT", "/v1/acquisition", "{\"fps\": 0.25}", 400, "RANGE"},
      {"PUT", "/v1/acquisition", "{\"fps\": \"fast\"}", 400, "INVAL"},
      {"PUT", "/v1/acquisition", "{\"run_mode\": \"turbo\"}", 400, "INVAL"},
      {"PUT", "/v1/acquisition", "{\"pixel_format\": 16}", 400, "INVAL"},
      {"PUT", "/v1/acquisition", "{\"mode\": \"fd99\"}", 404, "NOTFOUND"},
      {"POST", "/v1/render", "{\"pose\": {\"primary_deg\": 500}}", 400, "RANGE"},
      {"POST", "/v1/render", "{\"colour\": 1}", 400, "INVAL"},
      {"POST", "/v1/models", "{\"path\": 3}", 400, "INVAL"},
      {"GET", "/v1/nothing", NULL, 404, "NOTFOUND"},                        /* unknown routes */
      {"GET", "/index.html", NULL, 404, "NOTFOUND"},                       /* the console is at / only */
      {"POST", "/", "{}", 405, "UNSUPPORTED"},
      {"DELETE", "/v1/pose", NULL, 405, "UNSUPPORTED"},                     /* wrong method */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    XT_CHECK(xt_http(&p, cases[i].method, cases[i].path, cases[i].body, -1, NULL, &r) == 0);
    if (r.status != cases[i].status) fprintf(stderr, "  case %zu: %s %s %s\n", i, cases[i].method, cases[i].path,
                                             cases[i].body ? cases[i].body : "");
    check_error(&r, cases[i].status, cases[i].name);
    xt_resp_free(&r);
  }
  /* Oversized bodies: with Content-Length (rejected before reading) and a valid-looking one. */
  size_t big = 70000;
  char *b = malloc(big + 1);
  XT_REQUIRE(b);
  memset(b, ' ', big);
  b[0] = '{', b[big - 1] = '}', b[big] = 0;
  XT_CHECK(xt_http(&p, "PUT", "/v1/pose", b, (long)big, NULL, &r) == 0);
  check_error(&r, 413, "TOOLARGE");
  xt_resp_free(&r);
  const char *const chunked[] = {"Transfer-Encoding: chunked", NULL};
  XT_CHECK(xt_http(&p, "PUT", "/v1/pose", b, (long)big, chunked, &r) == 0);
  check_error(&r, 413, "TOOLARGE");
  xt_resp_free(&r);
  free(b);
  /* Still serving, and the pose untouched by all of the above. */
  XT_CHECK(xt_http(&p, "GET", "/v1/pose", NULL, 0, NULL, &r) == 0);
  XT_CHECK(r.status == 200 && has(&r, "\"primary_deg\": 0.0") && has(&r, "\"seq\": 0"));
  xt_resp_free(&r);
  XT_CHECK(xt_http(&p, "GET", "/metrics", NULL, 0, NULL, &r) == 0);
  XT_CHECK(r.status == 200 && has(&r, "xtwin_rest_errors_total"));
  xt_resp_free(&r);
  XT_CHECK(xt_srv_stop(&p, 15) == 0);
}

static int contains(const unsigned char *h, size_t n, const char *needle) {
  size_t k = strlen(needle);
  for (size_t i = 0; i + k <= n; i++)
    if (!memcmp(h + i, needle, k)) return 1;
  return 0;
}

static uint32_t be32(const unsigned char *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

XT_TEST(test_render_png_npy) {
  xt_srv_proc p;
  XT_REQUIRE(xt_srv_spawn(&p, no_args) == 0);
  xt_resp r;
  const char *const png[] = {"Accept: image/png", NULL};
  XT_CHECK(xt_http(&p, "POST", "/v1/render", "{\"pose\": {\"primary_deg\": 20}}", -1, png, &r) == 0);
  XT_CHECK(r.status == 200);
  const unsigned char *b = (const unsigned char *)r.body.p;
  XT_REQUIRE(r.body.n > 33 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8));
  XT_CHECK(!memcmp(b + 12, "IHDR", 4) && be32(b + 16) == 128 && be32(b + 20) == 128 && b[24] == 16 && b[25] == 0);
  XT_CHECK(contains(b, r.body.n, "xtwin-geometry"));
  XT_CHECK(strstr(r.headers.p, "image/png") && strstr(r.headers.p, "X-Xtwin-Geometry:"));
  XT_CHECK(strstr(r.headers.p, "\"primary_deg\":20.0") && strstr(r.headers.p, "\"P\":[["));
  xt_resp_free(&r);

  const char *const npy[] = {"Accept: application/x-npy", NULL};
  XT_CHECK(xt_http(&p, "POST", "/v1/render", NULL, 0, npy, &r) == 0);
  XT_CHECK(r.status == 200);
  b = (const unsigned char *)r.body.p;
  XT_REQUIRE(r.body.n > 10 && !memcmp(b, "\x93NUMPY\x01\x00", 8));
  size_t hl = (size_t)b[8] | (size_t)b[9] << 8;
  XT_CHECK((10 + hl) % 64 == 0);
  XT_CHECK(strstr(r.body.p + 10, "'descr': '<u2'") && strstr(r.body.p + 10, "'shape': (128, 128)"));
  XT_REQUIRE(r.body.n == 10 + hl + 128 * 128 * 2);
  const uint16_t *px = (const uint16_t *)(const void *)(b + 10 + hl);
  /* The head's shadow: the centre is attenuated, the corner is open beam. */
  XT_CHECK_MSG(px[64 * 128 + 64] < 20000 && px[0] == 65535, "centre %u corner %u", px[64 * 128 + 64], px[0]);
  xt_resp_free(&r);

  XT_CHECK(xt_http(&p, "POST", "/v1/render?format=npy", "{\"pixel_format\": \"float32\", \"mode\": \"fd20-256\"}", -1, NULL,
                   &r) == 0);
  XT_CHECK(r.status == 200 && strstr(r.body.p + 10, "'<f4'") && strstr(r.body.p + 10, "(256, 256)"));
  xt_resp_free(&r);
  const char *const html[] = {"Accept: text/html", NULL};
  XT_CHECK(xt_http(&p, "POST", "/v1/render", NULL, 0, html, &r) == 0);
  check_error(&r, 406, "UNSUPPORTED");
  xt_resp_free(&r);
  XT_CHECK(xt_srv_stop(&p, 15) == 0);
}

XT_TEST(test_metrics_text) {
  xt_srv_proc p;
  XT_REQUIRE(xt_srv_spawn(&p, no_args) == 0);
  xt_resp r;
  /* Until the first frame is rendered (a loaded machine under ASan may take a while), not a fixed sleep. */
  for (double until = xt_h_now() + 60; xt_h_now() < until; xt_h_sleep(0.1)) {
    XT_REQUIRE(xt_http(&p, "GET", "/metrics", NULL, 0, NULL, &r) == 0);
    if (!has(&r, "xtwin_frames_rendered_total 0\n")) break;
    xt_resp_free(&r);
  }
  XT_CHECK(r.status == 200 && strstr(r.headers.p, "text/plain"));
  const char *want[] = {"# TYPE xtwin_frames_rendered_total counter", "# TYPE xtwin_render_seconds histogram",
                        "xtwin_render_seconds_bucket{le=\"+Inf\"}", "xtwin_frame_period_seconds_count",
                        "xtwin_exposure_jitter_seconds_sum", "xtwin_frame_latency_seconds_bucket",
                        "xtwin_pose_latency_seconds_count", "# TYPE xtwin_client_frames_dropped_total counter"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) XT_CHECK_MSG(has(&r, want[i]), "missing %s", want[i]);
  XT_CHECK(!has(&r, "xtwin_frames_rendered_total 0\n"));
  xt_resp_free(&r);
  XT_CHECK(xt_srv_stop(&p, 15) == 0);
}

XT_TEST(test_token_auth) {
  const char *const args[] = {"--token", "s3cret-token", NULL};
  xt_srv_proc p;
  XT_REQUIRE(xt_srv_spawn(&p, args) == 0);
  xt_resp r;
  XT_CHECK(xt_http(&p, "GET", "/v1/info", NULL, 0, NULL, &r) == 0);
  check_error(&r, 401, "AUTH");
  XT_CHECK(strstr(r.headers.p, "WWW-Authenticate: Bearer"));
  xt_resp_free(&r);
  const char *const wrong[] = {"Authorization: Bearer s3cret-tokeN", NULL};
  XT_CHECK(xt_http(&p, "PUT", "/v1/pose", "{\"primary_deg\": 5}", -1, wrong, &r) == 0);
  check_error(&r, 401, "AUTH");
  xt_resp_free(&r);
  const char *const prefix[] = {"Authorization: Bearer s3cret", NULL};
  XT_CHECK(xt_http(&p, "GET", "/metrics", NULL, 0, prefix, &r) == 0);
  check_error(&r, 401, "AUTH");
  xt_resp_free(&r);
  const char *const basic[] = {"Authorization: Basic czNjcmV0LXRva2Vu", NULL};
  XT_CHECK(xt_http(&p, "GET", "/v1/pose", NULL, 0, basic, &r) == 0);
  check_error(&r, 401, "AUTH");
  xt_resp_free(&r);
  const char *const good[] = {"Authorization: Bearer s3cret-token", NULL};
  XT_CHECK(xt_http(&p, "PUT", "/v1/pose", "{\"primary_deg\": 5}", -1, good, &r) == 0);
  XT_CHECK(r.status == 200);
  xt_resp_free(&r);
  XT_CHECK(xt_http(&p, "GET", "/v1/health", NULL, 0, NULL, &r) == 0); /* every route needs it */
  check_error(&r, 401, "AUTH");
  xt_resp_free(&r);
  XT_CHECK(xt_http(&p, "GET", "/v1/health", NULL, 0, good, &r) == 0);
  XT_CHECK(r.status == 200);
  xt_resp_free(&r);
  XT_CHECK(xt_srv_stop(&p, 15) == 0);
}

XT_TEST(test_tls_self_signed) {
  char dir[] = "/tmp/xtwin-tls-XXXXXX";
  XT_REQUIRE(mkdtemp(dir));
  char cmd[512], cert[96], key[96];
  snprintf(cert, sizeof cert, "%s/cert.pem", dir);
  snprintf(key, sizeof key, "%s/key.pem", dir);
  snprintf(cmd, sizeof cmd,
           "openssl req -x509 -newkey rsa:2048 -nodes -keyout %s -out %s -days 2 -subj /CN=127.0.0.1 "
           ">/dev/null 2>&1", key, cert);
  XT_REQUIRE(system(cmd) == 0);
  const char *const args[] = {"--tls-cert", cert, "--tls-key", key, "--token", "t", NULL};
  xt_srv_proc p;
  XT_REQUIRE(xt_srv_spawn(&p, args) == 0);
  xt_resp r;
  const char *const good[] = {"Authorization: Bearer t", NULL};
  XT_CHECK(xt_http(&p, "GET", "/v1/info", NULL, 0, good, &r) == 0);
  XT_CHECK(r.status == 200 && has(&r, "\"tls\": true"));
  xt_resp_free(&r);
  XT_CHECK(xt_http(&p, "GET", "/v1/info", NULL, 0, NULL, &r) == 0);
  XT_CHECK(r.status == 401);
  xt_resp_free(&r);
  /* Plain HTTP on the TLS port gets no answer. */
  snprintf(p.scheme, sizeof p.scheme, "http");
  XT_CHECK(xt_http(&p, "GET", "/v1/health", NULL, 0, NULL, &r) != 0 || r.status != 200);
  xt_resp_free(&r);
  XT_CHECK(xt_srv_stop(&p, 15) == 0);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  XT_CHECK(system(cmd) == 0);
}

XT_TEST(test_bad_config_fails_cleanly) {
  const char *const args[] = {"--fps", "100", NULL};
  xt_srv_proc p;
  XT_CHECK(xt_srv_spawn(&p, args) != 0);
  const char *const args2[] = {"--mode", "nope", NULL};
  XT_CHECK(xt_srv_spawn(&p, args2) != 0);
}

/* ---- no server needed --------------------------------------------------------------------- */

/* Every route in the table is in api/openapi.yaml and every operation there is in the table. */
XT_TEST(test_openapi_in_step) {
  FILE *f = fopen(XT_API_DIR "/openapi.yaml", "r");
  XT_REQUIRE(f);
  char line[512], path[256] = "";
  int in_paths = 0, nops = 0;
  char ops[128][2][256];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = 0;
    if (line[0] && line[0] != ' ' && line[0] != '#') {
      in_paths = !strcmp(line, "paths:");
      continue;
    }
    if (!in_paths) continue;
    if (!strncmp(line, "  /", 3) && line[strlen(line) - 1] == ':') {
      snprintf(path, sizeof path, "%.*s", (int)strlen(line) - 3, line + 2);
      continue;
    }
    static const char *methods[] = {"get", "put", "post", "delete", "patch", "head", "options"};
    for (int m = 0; m < 7; m++) {
      char want[32];
      snprintf(want, sizeof want, "    %s:", methods[m]);
      if (!strcmp(line, want) && nops < 128) {
        for (int i = 0; methods[m][i]; i++) ops[nops][0][i] = (char)toupper((unsigned char)methods[m][i]);
        ops[nops][0][strlen(methods[m])] = 0;
        snprintf(ops[nops][1], sizeof ops[nops][1], "%s", path);
        nops++;
      }
    }
  }
  fclose(f);
  XT_CHECK(nops == xt_rest_route_count());
  for (int i = 0; i < xt_rest_route_count(); i++) {
    const xt_route *rt = xt_rest_route_at(i);
    int found = 0;
    for (int k = 0; k < nops; k++) found |= !strcmp(ops[k][0], rt->method) && !strcmp(ops[k][1], rt->path);
    XT_CHECK_MSG(found, "route %s %s is not in api/openapi.yaml", rt->method, rt->path);
  }
  for (int k = 0; k < nops; k++) {
    int found = 0;
    for (int i = 0; i < xt_rest_route_count(); i++)
      found |= !strcmp(ops[k][0], xt_rest_route_at(i)->method) && !strcmp(ops[k][1], xt_rest_route_at(i)->path);
    XT_CHECK_MSG(found, "api/openapi.yaml has %s %s, the server does not", ops[k][0], ops[k][1]);
  }
}

/* api/stream.md's offset table agrees with the C header (whose _Static_asserts pin the struct). */
XT_TEST(test_stream_doc_offsets) {
  FILE *f = fopen(XT_API_DIR "/stream.md", "r");
  XT_REQUIRE(f);
  struct {
    const char *name;
    size_t off;
  } fields[] = {
      {"magic", offsetof(xt_stream_header, magic)},
      {"version", offsetof(xt_stream_header, version)},
      {"header_size", offsetof(xt_stream_header, header_size)},
      {"frame_counter", offsetof(xt_stream_header, frame_counter)},
      {"pose_seq", offsetof(xt_stream_header, pose_seq)},
      {"t_pose_ns", offsetof(xt_stream_header, t_pose_ns)},
      {"t_exposure_sched_ns", offsetof(xt_stream_header, t_exposure_sched_ns)},
      {"t_exposure_ns", offsetof(xt_stream_header, t_exposure_ns)},
      {"t_render_done_ns", offsetof(xt_stream_header, t_render_done_ns)},
      {"t_sent_ns", offsetof(xt_stream_header, t_sent_ns)},
      {"frames_dropped", offsetof(xt_stream_header, frames_dropped)},
      {"rows", offsetof(xt_stream_header, rows)},
      {"cols", offsetof(xt_stream_header, cols)},
      {"pixel_format", offsetof(xt_stream_header, pixel_format)},
      {"flags", offsetof(xt_stream_header, flags)},
      {"payload_bytes", offsetof(xt_stream_header, payload_bytes)},
      {"pose", offsetof(xt_stream_header, pose)},
      {"P", offsetof(xt_stream_header, P)},
      {"pitch_mm", offsetof(xt_stream_header, pitch_mm)},
      {"mode", offsetof(xt_stream_header, mode)},
      {"period_ns", offsetof(xt_stream_header, period_ns)},
      /* version 3 (issue 11) */
      {"ma", offsetof(xt_stream_header, ma)},
      {"pulse_ms", offsetof(xt_stream_header, pulse_ms)},
      {"focal_spot_mm", offsetof(xt_stream_header, focal_spot_mm)},
      {"shutter", offsetof(xt_stream_header, shutter)},
      {"wedge", offsetof(xt_stream_header, wedge)},
      {"wedge_t", offsetof(xt_stream_header, wedge_t)},
      {"grid_tp", offsetof(xt_stream_header, grid_tp)},
      {"protocol", offsetof(xt_stream_header, protocol)},
      {"exposure_flags", offsetof(xt_stream_header, exposure_flags)},
      {"k_irp_mgy", offsetof(xt_stream_header, k_irp_mgy)},
      {"kap_gycm2", offsetof(xt_stream_header, kap_gycm2)},
      {"k_irp_total_mgy", offsetof(xt_stream_header, k_irp_total_mgy)},
      {"kap_total_gycm2", offsetof(xt_stream_header, kap_total_gycm2)},
      {"dose_frames", offsetof(xt_stream_header, dose_frames)},
      {"d_irp_mm", offsetof(xt_stream_header, d_irp_mm)},
      {"drc_measured_ngy", offsetof(xt_stream_header, drc_measured_ngy)},
      {"drc_target_ngy", offsetof(xt_stream_header, drc_target_ngy)},
      {"drc_curve_s", offsetof(xt_stream_header, drc_curve_s)},
      {"drc_flags", offsetof(xt_stream_header, drc_flags)},
      {"fault_flags", offsetof(xt_stream_header, fault_flags)},
      /* the contrast agent (issue 26), in version 5's reserved6 */
      {"contrast_seq", offsetof(xt_stream_header, contrast_seq)},
      {"iodine_mg_ml_max", offsetof(xt_stream_header, iodine_mg_ml_max)},
  };
  int seen[64] = {0};
  char line[512];
  while (fgets(line, sizeof line, f)) {
    unsigned off;
    char name[64];
    /* rows like: | 8 | u64 | `frame_counter` | ... */
    if (sscanf(line, "| %u | %*s | `%63[^`]`", &off, name) != 2) continue;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
      if (!strcmp(fields[i].name, name)) {
        XT_CHECK_MSG(fields[i].off == off, "stream.md says %s at %u, the header has %zu", name, off, fields[i].off);
        seen[i] = 1;
      }
  }
  fclose(f);
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) XT_CHECK_MSG(seen[i], "stream.md lacks %s", fields[i].name);
  XT_CHECK(sizeof(xt_stream_header) == XT_STREAM_HEADER_SIZE);
}

/* Gaussian mixtures through the server (issue 8): --model with a .gmm.json at start, POST
 * /v1/models with another, both listed with their kind and count, rendered with the head; a bad
 * mixture file answers 400 naming the field and the server keeps serving. */
XT_TEST(test_gmm_models) {
  char dir[] = "/tmp/xt_srv_gmm_XXXXXX", a[96], b[96], bad[96], body[160];
  XT_REQUIRE(mkdtemp(dir));
  snprintf(a, sizeof a, "%s/pair.gmm.json", dir);
  snprintf(b, sizeof b, "%s/one.gmm.json", dir);
  snprintf(bad, sizeof bad, "%s/bad.gmm.json", dir);
  FILE *f = fopen(a, "w");
  XT_REQUIRE(f);
  fputs("{\"gaussians\": [{\"center\": [0,0,0], \"scale\": 10, \"rho\": 0.02},"
        " {\"center\": [20,0,0], \"scale\": [5,8,12], \"rho\": 0.01}]}",
        f);
  fclose(f);
  XT_REQUIRE((f = fopen(b, "w")));
  fputs("{\"gaussians\": [{\"center\": [0,10,0], \"scale\": 6, \"rho\": 0.05}]}", f);
  fclose(f);
  XT_REQUIRE((f = fopen(bad, "w")));
  fputs("{\"gaussians\": [{\"center\": [0,0,0], \"scale\": -1, \"rho\": 0.05}]}", f);
  fclose(f);
  const char *const args[] = {"--model", a, "--model-root", dir, NULL}; /* POST loads only from there */
  xt_srv_proc p;
  XT_REQUIRE(xt_srv_spawn(&p, args) == 0);
  xt_resp r;
  snprintf(body, sizeof body, "{\"path\": \"%s\"}", b);
  XT_CHECK(xt_http(&p, "POST", "/v1/models", body, -1, NULL, &r) == 0);
  XT_CHECK_MSG(r.status == 200 || r.status == 201, "POST gmm: %ld %s", r.status, r.body.p ? r.body.p : "");
  xt_resp_free(&r);
  snprintf(body, sizeof body, "{\"path\": \"%s\"}", bad);
  XT_CHECK(xt_http(&p, "POST", "/v1/models", body, -1, NULL, &r) == 0);
  check_error(&r, 400, "RANGE");
  XT_CHECK(has(&r, "scale"));
  xt_resp_free(&r);
  XT_CHECK(xt_http(&p, "GET", "/v1/models", NULL, 0, NULL, &r) == 0);
  XT_CHECK_MSG(r.status == 200 && has(&r, "\"kind\": \"gmm\"") && has(&r, "\"gaussians\": 2") &&
                   has(&r, "\"gaussians\": 1") && has(&r, "pair.gmm.json") && has(&r, "one.gmm.json") &&
                   !has(&r, "bad.gmm.json"),
               "%s", r.body.p ? r.body.p : "");
  xt_resp_free(&r);
  const char *const npy[] = {"Accept: application/x-npy", NULL};
  XT_CHECK(xt_http(&p, "POST", "/v1/render", NULL, 0, npy, &r) == 0);
  XT_CHECK_MSG(r.status == 200, "render: %ld %s", r.status, r.body.p ? r.body.p : "");
  xt_resp_free(&r);
  XT_CHECK(xt_srv_stop(&p, 15) == 0);
  unlink(a);
  unlink(b);
  unlink(bad);
  rmdir(dir);
}

XT_TEST_MAIN(XT_ENTRY(test_openapi_in_step) XT_ENTRY(test_stream_doc_offsets)
                 XT_ENTRY(test_health_info) XT_ENTRY(test_pose_partial_updates) XT_ENTRY(test_acquisition)
                     XT_ENTRY(test_bad_requests_keep_serving) XT_ENTRY(test_render_png_npy) XT_ENTRY(test_metrics_text)
                         XT_ENTRY(test_token_auth) XT_ENTRY(test_tls_self_signed) XT_ENTRY(test_bad_config_fails_cleanly)
                             XT_ENTRY(test_gmm_models))
