/* The device state machine (acq/xt_device.h, docs/device.md): every command in every state the
 * machine can be in, from a table (allowed: the documented next state; refused: XT_ESTATE naming
 * the command and the state, the machine byte for byte as before); latencies to the nanosecond on
 * a virtual clock; a multiphase series' boundaries; release during prepare; a fault during an
 * exposure; the radiation-disable switch. */
#include <string.h>

#include "xt_device.h"
#include "xt_test.h"

#define MS 1000000ull
#define T0 (5000 * MS) /* the virtual clock's start: any value but 0 (0 means "no deadline") */

/* Test latencies, unlike the defaults and unlike each other, so that a mix-up shows. */
static void latencies(xt_device *d) {
  d->lat[XT_DEV_SW_FLUORO] = (xt_dev_latency){50, 10, 20};
  d->lat[XT_DEV_SW_EXPOSE] = (xt_dev_latency){300, 0, 30};
}

static int cmd(xt_device *d, xt_dev_cmd c, uint64_t t, xt_dev_out *o) {
  const xt_dev_args a = {NULL, 0, c == XT_DEV_CMD_FAULT ? 900 : 0, NULL, 0};
  xt_msg m;
  return xt_dev_command(d, c, &a, t, o, &m);
}

static const xt_dev_phase SERIES[3] = {{1.0, 2.0}, {0.5, 4.0}, {2.0, 1.0}};

static int series(xt_device *d, uint64_t t, xt_dev_out *o) {
  const xt_dev_args a = {SERIES, 3, 0, NULL, 0};
  xt_msg m;
  return xt_dev_command(d, XT_DEV_CMD_EXPOSE, &a, t, o, &m);
}

/* ---- the table ------------------------------------------------------------------------------- */

/* A situation the machine can be in, made from standby at T0 by commands and time; *t gets the
 * time at which it holds (no deadline due then). */
typedef struct fixture {
  const char *name;
  void (*make)(xt_device *d, uint64_t *t);
  /* the state after each command at *t, in XT_DEV_COMMANDS order; -1: refused */
  int next[XT_DEV_NCMDS];
  int held_after_release; /* the switch held after release (when allowed) */
} fixture;

static void mk_standby(xt_device *d, uint64_t *t) { *t = T0; }
static void mk_ready(xt_device *d, uint64_t *t) {
  xt_dev_out o;
  cmd(d, XT_DEV_CMD_POWER_ON, T0, &o);
  *t = T0 + MS;
}
static void mk_ready_disabled(xt_device *d, uint64_t *t) {
  xt_dev_out o;
  mk_ready(d, t);
  cmd(d, XT_DEV_CMD_RADIATION_DISABLE, *t, &o);
}
static void mk_prepare_fluoro(xt_device *d, uint64_t *t) {
  xt_dev_out o;
  mk_ready(d, t);
  cmd(d, XT_DEV_CMD_FLUORO, *t, &o);
  *t += 10 * MS; /* prepare lasts 50 ms */
}
static void mk_prepare_series(xt_device *d, uint64_t *t) {
  xt_dev_out o;
  mk_ready(d, t);
  series(d, *t, &o);
  *t += 100 * MS; /* of 300 */
}
static void mk_exposing_fluoro(xt_device *d, uint64_t *t) {
  xt_dev_out o;
  mk_ready(d, t);
  cmd(d, XT_DEV_CMD_FLUORO, *t, &o);
  *t += 200 * MS;
  xt_dev_advance(d, *t, &o);
  xt_dev_frame(d, 7);
}
static void mk_exposing_series(xt_device *d, uint64_t *t) {
  xt_dev_out o;
  mk_ready(d, t);
  series(d, *t, &o);
  *t += 1500 * MS; /* the series' second phase (300 ms prepare, then 1 s) */
  xt_dev_advance(d, *t, &o);
  xt_dev_frame(d, 3);
}
static void mk_exposing_api(xt_device *d, uint64_t *t) {
  xt_dev_out o;
  mk_ready(d, t);
  cmd(d, XT_DEV_CMD_START, *t, &o);
  xt_dev_frame(d, 11);
  *t += 40 * MS;
}
static void mk_readout(xt_device *d, uint64_t *t) {
  xt_dev_out o;
  mk_exposing_fluoro(d, t);
  cmd(d, XT_DEV_CMD_RELEASE, *t, &o);
  *t += 5 * MS; /* of 20 */
}
static void mk_readout_held(xt_device *d, uint64_t *t) {
  xt_dev_out o;
  mk_ready(d, t);
  series(d, *t, &o);
  *t += 300 * MS + 3500 * MS + 10 * MS; /* the series is over; 10 of its 30 ms readout */
  xt_dev_advance(d, *t, &o);
}
static void mk_ready_held(xt_device *d, uint64_t *t) {
  xt_dev_out o;
  mk_readout_held(d, t);
  *t += 100 * MS;
  xt_dev_advance(d, *t, &o);
}
static void mk_fault(xt_device *d, uint64_t *t) {
  xt_dev_out o;
  mk_ready(d, t);
  cmd(d, XT_DEV_CMD_FAULT, *t, &o);
  *t += MS;
}
static void mk_fault_held(xt_device *d, uint64_t *t) {
  xt_dev_out o;
  mk_exposing_fluoro(d, t);
  cmd(d, XT_DEV_CMD_FAULT, *t, &o);
  *t += MS;
}

enum { R = -1, SB = XT_DEV_STANDBY, RD = XT_DEV_READY, PR = XT_DEV_PREPARE, EX = XT_DEV_EXPOSING, RO = XT_DEV_READOUT,
       FT = XT_DEV_FAULT };

/* Columns: power_on, standby, fluoro, expose, release, start, stop, radiation_disable,
 * radiation_enable, fault, reset (docs/device.md, "Transitions"). */
static const fixture FIXTURES[] = {
    {"standby", mk_standby, {RD, R, R, R, R, R, SB, SB, SB, FT, R}, 0},
    {"ready", mk_ready, {R, SB, PR, PR, R, EX, RD, RD, RD, FT, R}, 0},
    {"ready, radiation disabled", mk_ready_disabled, {R, SB, R, R, R, R, RD, RD, RD, FT, R}, 0},
    {"ready, the exposure switch held (series over)", mk_ready_held, {R, SB, R, R, RD, R, RD, RD, RD, FT, R}, 0},
    {"prepare (fluoro)", mk_prepare_fluoro, {R, R, R, R, RD, R, RD, RD, PR, FT, R}, 0},
    {"prepare (series)", mk_prepare_series, {R, R, R, R, RD, R, RD, RD, PR, FT, R}, 0},
    {"exposing (fluoro)", mk_exposing_fluoro, {R, R, R, R, RO, R, RO, RO, EX, FT, R}, 0},
    {"exposing (series)", mk_exposing_series, {R, R, R, R, RO, R, RO, RO, EX, FT, R}, 0},
    {"exposing (the API's start)", mk_exposing_api, {R, R, R, R, RD, EX, RD, RD, EX, FT, R}, 0},
    {"readout", mk_readout, {R, R, R, R, R, R, RO, RO, RO, FT, R}, 0},
    {"readout, the exposure switch held (series over)", mk_readout_held, {R, R, R, R, RO, R, RO, RO, RO, FT, R}, 0},
    {"fault", mk_fault, {R, SB, R, R, R, R, FT, FT, FT, FT, RD}, 0},
    {"fault, the pedal still held", mk_fault_held, {R, SB, R, R, FT, R, FT, FT, FT, FT, RD}, 0},
};
#define NFIX ((int)(sizeof FIXTURES / sizeof FIXTURES[0]))

XT_TEST(every_command_in_every_state) {
  int allowed = 0, refused = 0;
  for (int f = 0; f < NFIX; f++) {
    for (int c = 0; c < XT_DEV_NCMDS; c++) {
      xt_device d, before;
      uint64_t t = 0;
      xt_dev_init(&d, T0);
      latencies(&d);
      FIXTURES[f].make(&d, &t);
      xt_dev_out o;
      xt_dev_advance(&d, t, &o);
      XT_REQUIRE_MSG(o.nev == 0, "%s: the fixture still had %d transitions due", FIXTURES[f].name, o.nev);
      memcpy(&before, &d, sizeof d);
      const xt_dev_args a = {NULL, 0, c == XT_DEV_CMD_FAULT ? 900 : 0, NULL, 0};
      xt_msg m = {{0}};
      const int rc = xt_dev_command(&d, (xt_dev_cmd)c, &a, t, &o, &m);
      const int want = FIXTURES[f].next[c];
      const char *cn = xt_dev_cmd_name((xt_dev_cmd)c), *sn = xt_dev_state_name(before.state);
      XT_CHECK_MSG(xt_dev_allowed(&before, (xt_dev_cmd)c) == (want != R), "%s: allowed(%s)", FIXTURES[f].name, cn);
      if (want == R) {
        refused++;
        char expect[128];
        snprintf(expect, sizeof expect, "device: '%s' not allowed in state %s", cn, sn);
        XT_CHECK_MSG(rc == XT_ESTATE, "%s: '%s' gave %d, want refused", FIXTURES[f].name, cn, rc);
        XT_CHECK_MSG(!strncmp(m.text, expect, strlen(expect)), "%s: '%s': message '%s'", FIXTURES[f].name, cn, m.text);
        XT_CHECK_MSG(!memcmp(&before, &d, sizeof d), "%s: refused '%s' changed the machine", FIXTURES[f].name, cn);
        XT_CHECK_MSG(o.nev == 0, "%s: refused '%s' reported %d events", FIXTURES[f].name, cn, o.nev);
      } else {
        allowed++;
        XT_CHECK_MSG(rc == 0, "%s: '%s' refused: %s", FIXTURES[f].name, cn, m.text);
        XT_CHECK_MSG((int)d.state == want, "%s: '%s' -> %s, want %s", FIXTURES[f].name, cn, xt_dev_state_name(d.state),
                     xt_dev_state_name((xt_dev_state)want));
        XT_CHECK(o.may_expose == (d.state == XT_DEV_EXPOSING));
        XT_CHECK(o.t_next_ns == d.t_deadline_ns);
        /* every state change is reported, stamped with the command's time */
        if (d.state != before.state) {
          XT_CHECK_MSG(o.nev >= 1 && o.ev[0].kind != 0, "%s: '%s': no event", FIXTURES[f].name, cn);
          int last = -1;
          for (int i = 0; i < o.nev; i++) {
            XT_CHECK(o.ev[i].t_ns == t);
            if (o.ev[i].kind == XT_DEV_EV_STATE) last = (int)o.ev[i].to;
          }
          XT_CHECK_MSG(last == want, "%s: '%s': the last state event is %d", FIXTURES[f].name, cn, last);
        }
        if (c == XT_DEV_CMD_RELEASE || c == XT_DEV_CMD_STOP) XT_CHECK(d.held == XT_DEV_SW_NONE);
        if (c == XT_DEV_CMD_RADIATION_DISABLE) XT_CHECK(d.rad_disabled && !o.may_expose);
        if (c == XT_DEV_CMD_RADIATION_ENABLE) XT_CHECK(!d.rad_disabled);
        if (c == XT_DEV_CMD_FAULT) XT_CHECK(d.fault_code == 900 && !strcmp(d.fault_text, "injected fault"));
        if (c == XT_DEV_CMD_RESET || c == XT_DEV_CMD_STANDBY) XT_CHECK(d.fault_code == 0);
      }
    }
  }
  printf("  %d fixtures x %d commands: %d allowed, %d refused\n", NFIX, XT_DEV_NCMDS, allowed, refused);
  XT_CHECK(allowed + refused == NFIX * XT_DEV_NCMDS);
}

/* Every state appears in the table (so no state's commands went untested). */
XT_TEST(table_covers_every_state) {
  int seen[XT_DEV_NSTATES] = {0};
  for (int f = 0; f < NFIX; f++) {
    xt_device d;
    uint64_t t = 0;
    xt_dev_init(&d, T0);
    latencies(&d);
    FIXTURES[f].make(&d, &t);
    seen[d.state]++;
  }
  for (int s = 0; s < XT_DEV_NSTATES; s++) XT_CHECK_MSG(seen[s] > 0, "state %s not in the table", xt_dev_state_name(s));
}

/* ---- latencies, to the nanosecond -------------------------------------------------------------- */

XT_TEST(latencies_exact) {
  xt_device d;
  xt_dev_out o;
  xt_dev_init(&d, T0);
  latencies(&d);
  const uint64_t tp = T0 + 123456789ull; /* a press at an odd instant */
  XT_REQUIRE(cmd(&d, XT_DEV_CMD_POWER_ON, T0, &o) == 0);
  XT_REQUIRE(cmd(&d, XT_DEV_CMD_FLUORO, tp, &o) == 0);
  XT_CHECK(d.state == XT_DEV_PREPARE && o.nev == 1 && o.ev[0].to == XT_DEV_PREPARE && o.ev[0].t_ns == tp);
  XT_CHECK(o.t_next_ns == tp + 50 * MS && !o.may_expose);
  xt_dev_advance(&d, tp + 50 * MS - 1, &o);
  XT_CHECK(d.state == XT_DEV_PREPARE && o.nev == 0 && !o.may_expose);
  xt_dev_advance(&d, tp + 50 * MS, &o);
  XT_CHECK(d.state == XT_DEV_EXPOSING && o.may_expose && o.nev == 1);
  XT_CHECK(o.ev[0].from == XT_DEV_PREPARE && o.ev[0].to == XT_DEV_EXPOSING && o.ev[0].t_ns == tp + 50 * MS);
  XT_CHECK(o.ev[0].cause == -1 && o.ev[0].sw == XT_DEV_SW_FLUORO);
  xt_dev_pace p;
  xt_dev_pacing(&d, &p);
  XT_CHECK(p.expose && p.sw == XT_DEV_SW_FLUORO && p.fps == 0 && p.until_ns == 0);
  XT_CHECK(p.t0_ns == tp + 60 * MS); /* prepare 50 + first frame 10 */
  xt_dev_frame(&d, 41);
  xt_dev_frame(&d, 42);
  const uint64_t tr = tp + 777 * MS + 3;
  XT_REQUIRE(cmd(&d, XT_DEV_CMD_RELEASE, tr, &o) == 0);
  XT_CHECK(d.state == XT_DEV_READOUT && o.nev == 1 && o.ev[0].t_ns == tr && o.t_next_ns == tr + 20 * MS);
  XT_CHECK(!d.lih);
  xt_dev_advance(&d, tr + 20 * MS - 1, &o);
  XT_CHECK(d.state == XT_DEV_READOUT && o.nev == 0);
  xt_dev_advance(&d, tr + 20 * MS, &o);
  XT_CHECK(d.state == XT_DEV_READY && o.nev == 2 && o.t_next_ns == 0);
  XT_CHECK(o.ev[0].to == XT_DEV_READY && o.ev[0].t_ns == tr + 20 * MS);
  XT_CHECK(o.ev[1].kind == XT_DEV_EV_LIH && o.ev[1].frame == 42 && o.ev[1].t_ns == tr + 20 * MS);
  XT_CHECK(d.lih && d.lih_frame == 42);
  /* the next exposure replaces the held image */
  XT_REQUIRE(cmd(&d, XT_DEV_CMD_FLUORO, tr + 1000 * MS, &o) == 0);
  xt_dev_advance(&d, tr + 2000 * MS, &o);
  XT_CHECK(d.state == XT_DEV_EXPOSING && !d.lih && d.frames == 0);
}

/* A late caller sees the same transitions, at the same instants, as a punctual one. */
XT_TEST(late_advance_same_events) {
  xt_device a, b;
  xt_dev_out o, all;
  memset(&all, 0, sizeof all);
  for (int k = 0; k < 2; k++) {
    xt_device *d = k ? &b : &a;
    xt_dev_init(d, T0);
    latencies(d);
    cmd(d, XT_DEV_CMD_POWER_ON, T0, &o);
    XT_REQUIRE(series(d, T0 + MS, &o) == 0);
  }
  /* a: one advance a millisecond through the whole series and its readout; b: one jump */
  int n = 0;
  uint64_t times[16];
  for (uint64_t t = T0 + MS; t <= T0 + 5000 * MS; t += MS) {
    xt_dev_advance(&a, t, &o);
    for (int i = 0; i < o.nev && n < 16; i++) times[n++] = o.ev[i].t_ns;
  }
  xt_dev_advance(&b, T0 + 5000 * MS, &all);
  XT_CHECK(n == all.nev);
  for (int i = 0; i < n && i < all.nev; i++) XT_CHECK(times[i] == all.ev[i].t_ns);
  XT_CHECK(!memcmp(&a, &b, sizeof a));
}

/* ---- the series ---------------------------------------------------------------------------------- */

XT_TEST(multiphase_boundaries) {
  xt_device d;
  xt_dev_out o;
  xt_dev_pace p;
  xt_dev_init(&d, T0);
  latencies(&d);
  cmd(&d, XT_DEV_CMD_POWER_ON, T0, &o);
  const uint64_t tp = T0 + 10 * MS, on = tp + 300 * MS; /* X-ray on after the series' prepare */
  XT_REQUIRE(series(&d, tp, &o) == 0);
  XT_CHECK(d.state == XT_DEV_PREPARE && o.t_next_ns == on);
  xt_dev_advance(&d, on, &o);
  XT_CHECK(d.state == XT_DEV_EXPOSING && o.nev == 1 && o.t_next_ns == on + 1000 * MS);
  xt_dev_pacing(&d, &p);
  XT_CHECK(p.t0_ns == on && p.fps == 2.0 && p.until_ns == on + 1000 * MS);
  xt_dev_frame(&d, 0);
  xt_dev_frame(&d, 1);
  /* phase 1 begins exactly at the end of phase 0 */
  xt_dev_advance(&d, on + 1000 * MS - 1, &o);
  XT_CHECK(o.nev == 0 && d.phase == 0);
  xt_dev_advance(&d, on + 1000 * MS, &o);
  XT_CHECK(o.nev == 1 && o.ev[0].kind == XT_DEV_EV_PHASE && o.ev[0].phase == 1 && o.ev[0].t_ns == on + 1000 * MS);
  xt_dev_pacing(&d, &p);
  XT_CHECK(p.t0_ns == on + 1000 * MS && p.fps == 4.0 && p.until_ns == on + 1500 * MS);
  xt_dev_frame(&d, 2);
  /* phase 2, then the series ends on its own: readout, ready, the last frame held */
  xt_dev_advance(&d, on + 1500 * MS, &o);
  XT_CHECK(o.nev == 1 && o.ev[0].phase == 2 && d.state == XT_DEV_EXPOSING);
  xt_dev_pacing(&d, &p);
  XT_CHECK(p.fps == 1.0 && p.until_ns == on + 3500 * MS);
  xt_dev_frame(&d, 5);
  xt_dev_advance(&d, on + 3500 * MS, &o);
  XT_CHECK(d.state == XT_DEV_READOUT && o.nev == 1 && o.ev[0].cause == -1 && o.t_next_ns == on + 3530 * MS);
  XT_CHECK(d.held == XT_DEV_SW_EXPOSE); /* the hand switch is still held */
  xt_dev_advance(&d, on + 3530 * MS, &o);
  XT_CHECK(d.state == XT_DEV_READY && o.nev == 2 && o.ev[1].kind == XT_DEV_EV_LIH && o.ev[1].frame == 5);
  /* held still: no new series until the switch is let go */
  xt_msg m;
  XT_CHECK(xt_dev_command(&d, XT_DEV_CMD_EXPOSE, NULL, on + 4000 * MS, &o, &m) == XT_ESTATE);
  XT_CHECK(strstr(m.text, "still held") != NULL);
  XT_CHECK(cmd(&d, XT_DEV_CMD_RELEASE, on + 4001 * MS, &o) == 0 && o.nev == 0 && d.state == XT_DEV_READY);
  XT_CHECK(series(&d, on + 4002 * MS, &o) == 0 && d.state == XT_DEV_PREPARE);
}

XT_TEST(release_ends_series_early) {
  xt_device d;
  xt_dev_out o;
  xt_dev_init(&d, T0);
  latencies(&d);
  cmd(&d, XT_DEV_CMD_POWER_ON, T0, &o);
  XT_REQUIRE(series(&d, T0, &o) == 0);
  xt_dev_advance(&d, T0 + 1400 * MS, &o); /* in phase 1 */
  XT_CHECK(d.phase == 1);
  xt_dev_frame(&d, 9);
  XT_CHECK(cmd(&d, XT_DEV_CMD_RELEASE, T0 + 1400 * MS, &o) == 0 && d.state == XT_DEV_READOUT);
  xt_dev_advance(&d, T0 + 9000 * MS, &o);
  XT_CHECK(d.state == XT_DEV_READY && o.nev == 2 && o.ev[0].t_ns == T0 + 1430 * MS && o.ev[1].frame == 9);
}

XT_TEST(series_arguments_checked) {
  xt_device d, before;
  xt_dev_out o;
  xt_msg m;
  uint64_t t;
  xt_dev_init(&d, T0);
  latencies(&d);
  mk_ready(&d, &t);
  memcpy(&before, &d, sizeof d);
  xt_dev_phase many[XT_DEV_MAX_PHASES + 1];
  for (int i = 0; i <= XT_DEV_MAX_PHASES; i++) many[i] = (xt_dev_phase){1, 1};
  const xt_dev_phase zero_fps = {1, 0}, too_fast = {1, 121}, too_short = {0.0005, 2}, nan_s = {NAN, 2};
  const xt_dev_args bad[] = {{many, XT_DEV_MAX_PHASES + 1, 0, NULL, 0}, {&zero_fps, 1, 0, NULL, 0}, {&too_fast, 1, 0, NULL, 0},
                             {&too_short, 1, 0, NULL, 0}, {&nan_s, 1, 0, NULL, 0}};
  for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
    XT_CHECK_MSG(xt_dev_command(&d, XT_DEV_CMD_EXPOSE, &bad[i], t, &o, &m) == XT_ERANGE, "case %d", i);
    XT_CHECK(!memcmp(&before, &d, sizeof d));
  }
  const xt_dev_args on_fluoro = {SERIES, 3, 0, NULL, 0}, no_code = {NULL, 0, 0, NULL, 0};
  XT_CHECK(xt_dev_command(&d, XT_DEV_CMD_FLUORO, &on_fluoro, t, &o, &m) == XT_EINVAL);
  XT_CHECK(xt_dev_command(&d, XT_DEV_CMD_FAULT, &no_code, t, &o, &m) == XT_EINVAL);
  XT_CHECK(!memcmp(&before, &d, sizeof d));
  XT_CHECK(xt_dev_command(&d, XT_DEV_CMD_EXPOSE, &(xt_dev_args){many, XT_DEV_MAX_PHASES, 0, NULL, 0}, t, &o, &m) == 0);
}

/* ---- release, faults, radiation disable ------------------------------------------------------ */

XT_TEST(release_during_prepare) {
  xt_device d;
  xt_dev_out o;
  xt_dev_init(&d, T0);
  latencies(&d);
  cmd(&d, XT_DEV_CMD_POWER_ON, T0, &o);
  XT_REQUIRE(cmd(&d, XT_DEV_CMD_EXPOSE, T0 + MS, &o) == 0);
  XT_CHECK(cmd(&d, XT_DEV_CMD_RELEASE, T0 + 299 * MS, &o) == 0);
  XT_CHECK(d.state == XT_DEV_READY && o.nev == 1 && o.ev[0].from == XT_DEV_PREPARE && o.t_next_ns == 0);
  xt_dev_advance(&d, T0 + 10000 * MS, &o); /* the prepare deadline is gone: no X-ray, nothing held */
  XT_CHECK(d.state == XT_DEV_READY && o.nev == 0 && !o.may_expose && !d.lih);
}

XT_TEST(fault_during_exposing_aborts) {
  xt_device d;
  xt_dev_out o;
  xt_msg m;
  uint64_t t;
  xt_dev_init(&d, T0);
  latencies(&d);
  mk_exposing_fluoro(&d, &t);
  const xt_dev_args f = {NULL, 0, 200, NULL, 0};
  XT_REQUIRE(xt_dev_command(&d, XT_DEV_CMD_FAULT, &f, t, &o, &m) == 0);
  XT_CHECK(d.state == XT_DEV_FAULT && !o.may_expose && o.t_next_ns == 0 && o.nev == 1);
  XT_CHECK(o.ev[0].from == XT_DEV_EXPOSING && o.ev[0].cause == XT_DEV_CMD_FAULT);
  XT_CHECK(d.fault_code == 200 && !strcmp(d.fault_text, "generator: high voltage fault"));
  xt_dev_advance(&d, t + 10000 * MS, &o); /* no readout, no image held */
  XT_CHECK(d.state == XT_DEV_FAULT && o.nev == 0 && !d.lih);
  /* a fault's own text, and a second fault replacing the first */
  const xt_dev_args g = {NULL, 0, 4242, "anode stuck", 0};
  XT_CHECK(xt_dev_command(&d, XT_DEV_CMD_FAULT, &g, t + MS, &o, &m) == 0 && d.fault_code == 4242);
  XT_CHECK(!strcmp(d.fault_text, "anode stuck") && o.nev == 1 && o.ev[0].from == XT_DEV_FAULT);
  XT_CHECK(cmd(&d, XT_DEV_CMD_RESET, t + 2 * MS, &o) == 0 && d.state == XT_DEV_READY && d.fault_code == 0);
  /* the pedal is still held: X-ray does not resume; release and press again (IFU-p23) */
  XT_CHECK(xt_dev_command(&d, XT_DEV_CMD_FLUORO, NULL, t + 3 * MS, &o, &m) == XT_ESTATE);
  XT_CHECK(cmd(&d, XT_DEV_CMD_RELEASE, t + 4 * MS, &o) == 0 && o.nev == 0);
  XT_CHECK(cmd(&d, XT_DEV_CMD_FLUORO, t + 5 * MS, &o) == 0 && d.state == XT_DEV_PREPARE);
}

/* A timed fault (the server's injected over-temperature): presses refused while it lasts, then ready
 * by time at exactly fault + recover_s, with no reset; a reset or a new fault before then cancels the
 * timer; recover_s is a fault's only and bounded. */
XT_TEST(fault_recovers_by_itself) {
  xt_device d;
  xt_dev_out o;
  xt_msg m;
  uint64_t t;
  xt_dev_init(&d, T0);
  latencies(&d);
  mk_exposing_fluoro(&d, &t);
  const xt_dev_args hot = {NULL, 0, 310, NULL, 2.5};
  XT_REQUIRE(xt_dev_command(&d, XT_DEV_CMD_FAULT, &hot, t, &o, &m) == 0);
  XT_CHECK(d.state == XT_DEV_FAULT && d.fault_code == 310 && o.t_next_ns == t + 2500 * MS && !o.may_expose);
  XT_CHECK(!strcmp(d.fault_text, "detector: over temperature, not ready"));
  XT_CHECK(cmd(&d, XT_DEV_CMD_RELEASE, t + MS, &o) == 0); /* the pedal let go during the fault */
  XT_CHECK(cmd(&d, XT_DEV_CMD_FLUORO, t + 2 * MS, &o) == XT_ESTATE && d.state == XT_DEV_FAULT);
  xt_dev_advance(&d, t + 2500 * MS - 1, &o);
  XT_CHECK(d.state == XT_DEV_FAULT && o.nev == 0);
  xt_dev_advance(&d, t + 9000 * MS, &o); /* woken late: the event is still at its own deadline */
  XT_REQUIRE(o.nev == 1);
  XT_CHECK(d.state == XT_DEV_READY && o.ev[0].from == XT_DEV_FAULT && o.ev[0].cause == -1);
  XT_CHECK(o.ev[0].t_ns == t + 2500 * MS && d.fault_code == 0 && !d.lih && o.t_next_ns == 0);
  XT_CHECK(cmd(&d, XT_DEV_CMD_FLUORO, t + 9001 * MS, &o) == 0 && d.state == XT_DEV_PREPARE);
  /* a reset first, or a later untimed fault, ends the timer */
  xt_dev_init(&d, T0);
  mk_ready(&d, &t);
  XT_CHECK(xt_dev_command(&d, XT_DEV_CMD_FAULT, &hot, t, &o, &m) == 0 && cmd(&d, XT_DEV_CMD_RESET, t + MS, &o) == 0);
  XT_CHECK(d.state == XT_DEV_READY && d.t_deadline_ns == 0);
  XT_CHECK(xt_dev_command(&d, XT_DEV_CMD_FAULT, &hot, t + 2 * MS, &o, &m) == 0 && cmd(&d, XT_DEV_CMD_FAULT, t + 3 * MS, &o) == 0);
  xt_dev_advance(&d, t + 10000 * MS, &o);
  XT_CHECK(d.state == XT_DEV_FAULT && d.fault_code == 900);
  const xt_dev_args bad[] = {{NULL, 0, 310, NULL, -1}, {NULL, 0, 310, NULL, XT_DEV_MAX_RECOVER_S + 1},
                             {NULL, 0, 310, NULL, NAN}, {NULL, 0, 0, NULL, 1}};
  for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++)
    XT_CHECK_MSG(xt_dev_command(&d, XT_DEV_CMD_FAULT, &bad[i], t + 4 * MS, &o, &m) == XT_EINVAL, "case %d", i);
  XT_CHECK(xt_dev_command(&d, XT_DEV_CMD_RESET, &bad[0], t + 4 * MS, &o, &m) == XT_EINVAL && d.state == XT_DEV_FAULT);
}

XT_TEST(fault_during_api_run_ends_it) {
  xt_device d;
  xt_dev_out o;
  uint64_t t;
  xt_dev_init(&d, T0);
  latencies(&d);
  mk_exposing_api(&d, &t);
  XT_CHECK(cmd(&d, XT_DEV_CMD_FAULT, t, &o) == 0 && d.held == XT_DEV_SW_NONE);
  XT_CHECK(cmd(&d, XT_DEV_CMD_RESET, t, &o) == 0 && cmd(&d, XT_DEV_CMD_START, t, &o) == 0 && d.state == XT_DEV_EXPOSING);
}

XT_TEST(radiation_disable) {
  xt_device d;
  xt_dev_out o;
  xt_msg m;
  uint64_t t;
  xt_dev_init(&d, T0);
  latencies(&d);
  mk_exposing_fluoro(&d, &t);
  XT_REQUIRE(cmd(&d, XT_DEV_CMD_RADIATION_DISABLE, t, &o) == 0);
  /* X-ray stops at once: the radiation event, then the readout */
  XT_CHECK(o.nev == 2 && o.ev[0].kind == XT_DEV_EV_RADIATION && o.ev[0].disabled == 1);
  XT_CHECK(o.ev[1].to == XT_DEV_READOUT && !o.may_expose && d.held == XT_DEV_SW_FLUORO);
  xt_dev_advance(&d, t + 20 * MS, &o);
  XT_CHECK(d.state == XT_DEV_READY && o.nev == 2 && o.ev[1].frame == 7);
  XT_CHECK(cmd(&d, XT_DEV_CMD_RELEASE, t + 21 * MS, &o) == 0);
  /* exposures refused, naming the state and why */
  for (int c = XT_DEV_CMD_FLUORO; c <= XT_DEV_CMD_START; c++) {
    if (c == XT_DEV_CMD_RELEASE) continue;
    XT_CHECK(xt_dev_command(&d, (xt_dev_cmd)c, NULL, t + 22 * MS, &o, &m) == XT_ESTATE);
    XT_CHECK_MSG(strstr(m.text, "in state ready (radiation disabled)") != NULL, "%s", m.text);
  }
  /* moving to ready is allowed: standby, power on, fault and reset */
  XT_CHECK(cmd(&d, XT_DEV_CMD_STANDBY, t + 23 * MS, &o) == 0 && d.state == XT_DEV_STANDBY);
  XT_CHECK(cmd(&d, XT_DEV_CMD_POWER_ON, t + 24 * MS, &o) == 0 && d.state == XT_DEV_READY);
  XT_CHECK(cmd(&d, XT_DEV_CMD_FAULT, t + 25 * MS, &o) == 0 && cmd(&d, XT_DEV_CMD_RESET, t + 26 * MS, &o) == 0);
  XT_CHECK(d.state == XT_DEV_READY && d.rad_disabled);
  /* twice is harmless and silent */
  XT_CHECK(cmd(&d, XT_DEV_CMD_RADIATION_DISABLE, t + 27 * MS, &o) == 0 && o.nev == 0);
  XT_CHECK(cmd(&d, XT_DEV_CMD_RADIATION_ENABLE, t + 28 * MS, &o) == 0 && o.nev == 1 && o.ev[0].disabled == 0);
  XT_CHECK(cmd(&d, XT_DEV_CMD_FLUORO, t + 29 * MS, &o) == 0 && d.state == XT_DEV_PREPARE);
  /* during prepare: back to ready, nothing exposed; the image held before stays */
  XT_CHECK(cmd(&d, XT_DEV_CMD_RADIATION_DISABLE, t + 30 * MS, &o) == 0 && d.state == XT_DEV_READY);
  XT_CHECK(o.nev == 2 && d.lih && d.lih_frame == 7);
}

/* ---- the API's run: no latencies ------------------------------------------------------------ */

XT_TEST(api_start_stop_immediate) {
  xt_device d;
  xt_dev_out o;
  xt_dev_init(&d, T0);
  latencies(&d);
  cmd(&d, XT_DEV_CMD_POWER_ON, T0, &o);
  XT_REQUIRE(cmd(&d, XT_DEV_CMD_START, T0 + MS, &o) == 0);
  XT_CHECK(d.state == XT_DEV_EXPOSING && o.may_expose && o.nev == 2 && o.ev[1].t_ns == T0 + MS);
  xt_dev_pace p;
  xt_dev_pacing(&d, &p);
  XT_CHECK(p.sw == XT_DEV_SW_API && p.t0_ns == T0 + MS && p.fps == 0 && p.until_ns == 0);
  XT_CHECK(cmd(&d, XT_DEV_CMD_START, T0 + 2 * MS, &o) == 0 && o.nev == 0); /* a second start: as before, ok */
  xt_dev_frame(&d, 3);
  XT_CHECK(cmd(&d, XT_DEV_CMD_STOP, T0 + 3 * MS, &o) == 0 && d.state == XT_DEV_READY && o.nev == 3);
  XT_CHECK(o.ev[2].kind == XT_DEV_EV_LIH && o.ev[2].frame == 3 && o.ev[2].t_ns == T0 + 3 * MS);
  XT_CHECK(cmd(&d, XT_DEV_CMD_STOP, T0 + 4 * MS, &o) == 0 && o.nev == 0); /* a second stop: ok */
}

XT_TEST(names) {
  for (int c = 0; c < XT_DEV_NCMDS; c++) XT_CHECK(xt_dev_cmd_parse(xt_dev_cmd_name((xt_dev_cmd)c)) == c);
  XT_CHECK(xt_dev_cmd_parse("launch") == -1 && xt_dev_cmd_parse(NULL) == -1);
  XT_CHECK(!strcmp(xt_dev_state_name(XT_DEV_EXPOSING), "exposing"));
  XT_CHECK(xt_dev_fault_name(100) != NULL && xt_dev_fault_name(1) == NULL);
  XT_CHECK(xt_dev_ms_ns(16.7) == 16700000ull && xt_dev_ms_ns(-1) == 0);
  XT_CHECK(!strcmp(xt_errname(XT_ESTATE), "STATE") && xt_errhttp(XT_ESTATE) == 409);
}

XT_TEST_MAIN(XT_ENTRY(every_command_in_every_state) XT_ENTRY(table_covers_every_state) XT_ENTRY(latencies_exact)
                 XT_ENTRY(late_advance_same_events) XT_ENTRY(multiphase_boundaries) XT_ENTRY(release_ends_series_early)
                     XT_ENTRY(series_arguments_checked) XT_ENTRY(release_during_prepare)
                         XT_ENTRY(fault_during_exposing_aborts) XT_ENTRY(fault_recovers_by_itself) XT_ENTRY(fault_during_api_run_ends_it)
                             XT_ENTRY(radiation_disable) XT_ENTRY(api_start_stop_immediate) XT_ENTRY(names))
