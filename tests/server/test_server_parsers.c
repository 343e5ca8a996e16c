/* xtwin-server's parsers of untrusted input, without a server: the fuzz seed corpus
 * (tests/fuzz/server/) through every parser (the fuzz target's own driver and checks,
 * tests/fuzz/fuzz_server.c), and the pure parse functions' contracts.
 *
 * Corpus names: "<parser>-ok-*" must parse with that parser (pose, acq, render, ws, config, head,
 * guard);
 * every other result is free as long as nothing crashes, leaks or breaks the driver's checks. */
#include <dirent.h>
#include <math.h>
#include <stdint.h>

#include "srv_config.h"
#include "srv_state.h"
#include "xt_chain.h"
#include "xt_geom.h"
#include "xt_stream.h"
#include "xt_test.h"

#ifndef XT_FUZZ_SERVER_CORPUS_DIR
#error "XT_FUZZ_SERVER_CORPUS_DIR: tests/fuzz/server"
#endif

enum { XT_FZ_POSE, XT_FZ_ACQ, XT_FZ_RENDER, XT_FZ_WS, XT_FZ_CONFIG, XT_FZ_HEAD, XT_FZ_GUARD, XT_FZ_N };
extern const char *const xt_fuzz_server_names[XT_FZ_N];
void xt_fuzz_server_run(const uint8_t *data, size_t size, int rc[XT_FZ_N]);

static unsigned char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char *b = malloc(4096 + 1);
  size_t k = b ? fread(b, 1, 4096, f) : 0;
  fclose(f);
  if (b) b[k] = 0;
  *n = k;
  return b;
}

XT_TEST(fuzz_corpus) {
  DIR *d = opendir(XT_FUZZ_SERVER_CORPUS_DIR);
  XT_REQUIRE(d != NULL);
  struct dirent *e;
  int n = 0, ok[XT_FZ_N] = {0}, valid = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", XT_FUZZ_SERVER_CORPUS_DIR, e->d_name);
    size_t len = 0;
    unsigned char *b = read_file(p, &len);
    XT_CHECK_MSG(b != NULL, "%s: cannot read", p);
    if (!b) continue;
    XT_CHECK_MSG(len < 2048, "%s: seeds stay under 2 KB", p);
    int rc[XT_FZ_N];
    xt_fuzz_server_run(b, len, rc); /* aborts on a broken invariant */
    for (int i = 0; i < XT_FZ_N; i++) {
      char want[32];
      snprintf(want, sizeof want, "%s-ok-", xt_fuzz_server_names[i]);
      if (rc[i] == 0) ok[i]++;
      if (!strncmp(e->d_name, want, strlen(want))) {
        valid++;
        XT_CHECK_MSG(rc[i] == 0, "%s: valid %s input fails with %s", e->d_name, xt_fuzz_server_names[i],
                     xt_errname(rc[i]));
      }
    }
    free(b);
    n++;
  }
  closedir(d);
  XT_CHECK(n >= 20 && n < 200);
  XT_CHECK(valid >= 10);
  for (int i = 0; i < XT_FZ_N; i++) XT_CHECK_MSG(ok[i] > 0, "no seed parses as %s", xt_fuzz_server_names[i]);
  printf("  corpus: %d files, %d valid; parsed ok: pose %d, acq %d, render %d, ws %d, config %d, head %d, guard %d\n", n,
         valid, ok[XT_FZ_POSE], ok[XT_FZ_ACQ], ok[XT_FZ_RENDER], ok[XT_FZ_WS], ok[XT_FZ_CONFIG], ok[XT_FZ_HEAD],
         ok[XT_FZ_GUARD]);
}

/* A failed command keeps the parsed message, so the nack can echo its "id" and "seq". */
XT_TEST(ws_cmd_contract) {
  xt_ws_cmd k;
  xt_msg m;
  const char *bad = "{\"type\":\"pose\",\"id\":7,\"seq\":-1,\"pose\":{}}";
  XT_CHECK(xt_ws_cmd_parse(bad, strlen(bad), &k, &m) == XT_EINVAL);
  XT_CHECK(k.cmd && json_integer_value(json_object_get(k.cmd, "id")) == 7 && !k.update);
  XT_CHECK(strstr(m.text, "seq") != NULL);
  xt_ws_cmd_free(&k);
  XT_CHECK(xt_ws_cmd_parse("[1]", 3, &k, &m) == XT_EFORMAT && !k.cmd);
  xt_ws_cmd_free(&k);
  const char *unk = "{\"type\":\"dance\"}";
  XT_CHECK(xt_ws_cmd_parse(unk, strlen(unk), &k, &m) == XT_EINVAL && strstr(m.text, "unknown type 'dance'"));
  xt_ws_cmd_free(&k);
  const char *pose = "{\"type\":\"pose\",\"seq\":5,\"pose\":{\"primary_deg\":10}}";
  XT_CHECK(xt_ws_cmd_parse(pose, strlen(pose), &k, &m) == 0 && k.type == XT_CMD_POSE);
  XT_CHECK(json_integer_value(json_object_get(k.update, "seq")) == 5);
  XT_CHECK(!json_object_get(json_object_get(k.cmd, "pose"), "seq")); /* a copy, the message untouched */
  xt_ws_cmd_free(&k);
  const char *acq = "{\"type\":\"acquisition\",\"acquisition\":{\"fps\":30}}";
  XT_CHECK(xt_ws_cmd_parse(acq, strlen(acq), &k, &m) == 0 && k.type == XT_CMD_ACQ && json_is_object(k.update));
  xt_ws_cmd_free(&k);
}

XT_TEST(body_and_render_contract) {
  json_t *j = NULL;
  xt_msg m;
  XT_CHECK(xt_body_json("", 0, 0, &j, &m) == XT_EINVAL && strstr(m.text, "request body"));
  XT_CHECK(xt_body_json("", 0, 1, &j, &m) == 0 && json_is_object(j) && json_object_size(j) == 0);
  json_decref(j);
  XT_CHECK(xt_body_json("{\"a\":1,\"a\":2}", 13, 0, &j, &m) == XT_EFORMAT); /* duplicate keys */
  const xt_detector_mode *mode = xt_mode_find("fd20-256");
  xt_pose pose = xt_pose_default(mode);
  xt_acq acq = {.mode = mode, .fps = 15, .pixel_format = XT_STREAM_PIX_U16, .running = 1};
  const char *r = "{\"pose\":{\"primary_deg\":45},\"mode\":\"fd20-128\",\"pixel_format\":\"float32\"}";
  XT_REQUIRE(xt_body_json(r, strlen(r), 1, &j, &m) == 0);
  XT_CHECK(xt_render_from_json(j, &pose, &acq, &m) == 0);
  json_decref(j);
  XT_CHECK(pose.primary_deg == 45 && acq.mode == xt_mode_find("fd20-128") && acq.pixel_format == XT_STREAM_PIX_F32);
  const char *bad = "{\"fps\":30}"; /* not a render field */
  XT_REQUIRE(xt_body_json(bad, strlen(bad), 1, &j, &m) == 0);
  XT_CHECK(xt_render_from_json(j, &pose, &acq, &m) == XT_EINVAL && strstr(m.text, "render: unknown field 'fps'"));
  json_decref(j);
}

/* The chain's settings in an acquisition update: partial, by the chain table's names, checked
 * all or nothing; and the stream's "frames" command. */
XT_TEST(chain_settings_contract) {
  const xt_detector_mode *mode = xt_mode_find("fd20-256");
  xt_acq acq = {.mode = mode, .fps = 15, .pixel_format = XT_STREAM_PIX_U16, .running = 1};
  acq.chain_prm = xt_chain_params_default();
  xt_msg m;
  json_t *j = json_loads("{\"chain\":{\"enabled\":true,\"kv\":70,\"binning\":2}}", 0, NULL);
  XT_REQUIRE(j);
  XT_CHECK(xt_acq_from_json(j, &acq, &m) == 0 && acq.chain == 1 && acq.chain_prm.kv == 70 && acq.chain_prm.binning == 2);
  json_decref(j);
  static const struct {
    const char *body, *needle;
    int rc;
  } bad[] = {
      {"{\"chain\":{\"kv\":300}}", "chain.kv: 300 outside", XT_ERANGE},
      {"{\"chain\":{\"binning\":1.5}}", "chain.binning", XT_ERANGE},
      {"{\"chain\":{\"kvp\":80}}", "chain: unknown field 'kvp'", XT_EINVAL},
      {"{\"chain\":{\"kv\":\"80\"}}", "chain.kv: expected a number", XT_EINVAL},
      {"{\"chain\":{\"enabled\":1}}", "chain.enabled", XT_EINVAL},
      {"{\"chain\":[]}", "chain: expected a JSON object", XT_EINVAL},
      {"{\"chain\":{\"lag_frac_1\":0.5,\"lag_frac_2\":0.5}}", "lag", XT_ERANGE},
      /* issue 11: presets by name or number, the tube current */
      {"{\"chain\":{\"protocol\":\"turbo\"}}", "chain.protocol: expected one of custom, fluoro_low", XT_EINVAL},
      {"{\"chain\":{\"protocol\":999}}", "chain.protocol", XT_EINVAL},
      {"{\"chain\":{\"protocol\":2.5}}", "chain.protocol", XT_EINVAL},
      {"{\"chain\":{\"ma\":0}}", "chain.ma: 0 outside", XT_ERANGE},
      {"{\"chain\":{\"protocol\":\"dsa\",\"kv\":20}}", "chain.kv", XT_ERANGE},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    xt_acq before = acq;
    j = json_loads(bad[i].body, 0, NULL);
    XT_REQUIRE(j);
    const int rc = xt_acq_from_json(j, &acq, &m);
    XT_CHECK_MSG(rc == bad[i].rc && strstr(m.text, bad[i].needle), "%s: %d %s", bad[i].body, rc, m.text);
    XT_CHECK(memcmp(&before, &acq, sizeof acq) == 0); /* nothing applied */
    json_decref(j);
  }
  json_t *out = xt_acq_to_json(&acq);
  json_t *ch = json_object_get(out, "chain");
  XT_CHECK(json_is_true(json_object_get(ch, "enabled")) && json_real_value(json_object_get(ch, "kv")) == 70);
  XT_CHECK(json_object_size(ch) == (size_t)xt_chain_param_count() + 3); /* enabled, derived ma, protocol_name */
  json_decref(out);
  /* a preset by name, adjusted by the same update's other fields (applied after it), and its fps */
  j = json_loads("{\"chain\":{\"kv\":90,\"protocol\":\"cine_30\",\"ma\":200}}", 0, NULL);
  XT_REQUIRE(j);
  XT_CHECK(xt_acq_from_json(j, &acq, &m) == 0);
  XT_CHECK(acq.chain_prm.protocol == 5 && acq.chain_prm.kv == 90 && acq.fps == 30 && acq.chain_prm.grid == 1);
  XT_CHECK(fabs(acq.chain_prm.mas - 200 * acq.chain_prm.pulse_ms / 1000) < 1e-12);
  json_decref(j);
  out = xt_acq_to_json(&acq);
  ch = json_object_get(out, "chain");
  XT_CHECK(!strcmp(json_string_value(json_object_get(ch, "protocol_name")), "cine_30"));
  XT_CHECK(fabs(json_real_value(json_object_get(ch, "ma")) - 200) < 1e-9);
  json_decref(out);
  xt_ws_cmd k;
  const char *f = "{\"type\":\"frames\",\"frames\":\"processed\"}";
  XT_CHECK(xt_ws_cmd_parse(f, strlen(f), &k, &m) == 0 && k.type == XT_CMD_FRAMES && k.processed == 1);
  xt_ws_cmd_free(&k);
  const char *g = "{\"type\":\"frames\",\"frames\":\"cooked\"}";
  XT_CHECK(xt_ws_cmd_parse(g, strlen(g), &k, &m) == XT_EINVAL && strstr(m.text, "raw"));
  xt_ws_cmd_free(&k);
}

XT_TEST(config_parse_contract) {
  xt_srv_config c;
  xt_srv_config_defaults(&c);
  xt_msg m;
  const char *ok = "{\"fps\": 30, \"run_mode\": \"lockstep\", \"models\": [\"a.nii\", {\"path\": \"b.mha\", \"name\": \"b\"}]}";
  XT_CHECK(xt_srv_config_parse(&c, ok, strlen(ok), "cfg.json", &m) == 0);
  XT_CHECK(c.fps == 30 && !strcmp(c.run_mode, "lockstep") && c.nmodels == 2 && !strcmp(c.models[1].name, "b"));
  const char *bad = "{\"fps\": 300}";
  XT_CHECK(xt_srv_config_parse(&c, bad, strlen(bad), "cfg.json", &m) == XT_ERANGE && !strncmp(m.text, "cfg.json: fps", 13));
  XT_CHECK(xt_srv_config_parse(&c, "{", 1, "cfg.json", &m) == XT_EFORMAT && !strncmp(m.text, "cfg.json:1:", 11));
}

/* Messages quote client strings cut at a byte count ("%.64s", the 512-byte xt_msg); a cut inside
 * a UTF-8 character once made xt_error_json return NULL (no error body in the REST reply, no
 * "error" in the WebSocket nack). Found by fuzz_server; seed regress-ws-type-utf8-cut.json. */
XT_TEST(error_json_cut_utf8) {
  xt_ws_cmd k;
  xt_msg m;
  char t[256];
  int n = snprintf(t, sizeof t, "{\"type\": \"x");
  for (int i = 0; i < 40; i++) n += snprintf(t + n, sizeof t - (size_t)n, "\xc3\xbc"); /* u-umlaut: 80 bytes */
  snprintf(t + n, sizeof t - (size_t)n, "\"}");
  XT_CHECK(xt_ws_cmd_parse(t, strlen(t), &k, &m) == XT_EINVAL);
  xt_ws_cmd_free(&k);
  json_t *e = xt_error_json(XT_EINVAL, 400, m.text);
  XT_REQUIRE(e != NULL);
  const char *msg = json_string_value(json_object_get(json_object_get(e, "error"), "message"));
  XT_CHECK(msg && !strncmp(msg, "unknown type '", 14) && strlen(msg) == 14 + 64 + 1 &&
           !strcmp(msg + 14 + 63, "?'")); /* "x", 31 whole characters, the cut one as '?' */
  json_decref(e);
  /* invalid sequences become '?', valid ones are kept */
  e = xt_error_json(XT_EINVAL, 400, "a\xff b\xe2\x82\xac c\xed\xa0\x80 d\xc0\xaf");
  XT_REQUIRE(e != NULL);
  msg = json_string_value(json_object_get(json_object_get(e, "error"), "message"));
  XT_CHECK_MSG(msg && !strcmp(msg, "a? b\xe2\x82\xac c??? d??"), "%s", msg ? msg : "(null)");
  json_decref(e);
}

XT_TEST_MAIN(XT_ENTRY(fuzz_corpus) XT_ENTRY(ws_cmd_contract) XT_ENTRY(body_and_render_contract) XT_ENTRY(chain_settings_contract)
                 XT_ENTRY(config_parse_contract) XT_ENTRY(error_json_cut_utf8))
