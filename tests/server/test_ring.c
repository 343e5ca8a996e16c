/* The frame ring's choice of a stream client's next frame (server/ring.c), per plane it subscribed
 * to: latest wins within a plane, lockstep frames in order, of two planes pending the older frame
 * first (so that plane B, pushed after A in every cycle, never starves A), per-plane publication
 * numbers that count a client's misses; and the stream's plane and codec names and codecs
 * (server/wire.c). No server, no sockets. */
#include <stdint.h>
#include <string.h>

#include "srv_ring.h"
#include "srv_wire.h"
#include "xt_test.h"

/* Pushes a frame of plane p (lockstep or not); returns its pub. */
static uint64_t push(xt_ring *r, int p, int lockstep) {
  xt_frame *f = xt_frame_get(r, 64);
  if (!f) return 0;
  f->plane = p;
  f->lockstep = lockstep;
  xt_ring_push(r, f);
  return f->pub;
}

/* The next frame's pub for a client at last[] with the planes of mask, which then "sends" it
 * (0: none). */
static uint64_t next(xt_ring *r, uint64_t last[XT_RING_PLANES], unsigned mask, uint64_t *upto) {
  xt_frame *f = xt_ring_next_planes(r, last, mask, upto);
  if (!f) return 0;
  const uint64_t pub = f->pub;
  last[f->plane == 1 ? 1 : 0] = pub;
  xt_frame_unref(r, f);
  return pub;
}

XT_TEST(single_plane_latest_wins) {
  xt_ring r;
  xt_ring_init(&r);
  uint64_t last[2] = {0, 0}, upto = 0;
  XT_CHECK(next(&r, last, 1, &upto) == 0 && upto == 0);
  push(&r, 0, 0);
  push(&r, 0, 0);
  const uint64_t p3 = push(&r, 0, 0);
  XT_CHECK(next(&r, last, 1, &upto) == p3 && upto == p3 - 1); /* the newest; the two before are missed */
  XT_CHECK(next(&r, last, 1, &upto) == 0 && upto == p3);
  /* the old single-plane call agrees */
  xt_frame *f = xt_ring_next(&r, 1);
  XT_CHECK(f && f->pub == p3);
  xt_frame_unref(&r, f);
  xt_ring_destroy(&r);
}

XT_TEST(plane_b_only_gets_nothing_from_plane_a) {
  xt_ring r;
  xt_ring_init(&r);
  uint64_t last[2] = {0, 0}, upto = 0;
  for (int i = 0; i < 20; i++) push(&r, 0, 0);
  XT_CHECK(next(&r, last, 2, &upto) == 0);
  XT_CHECK(upto == 20); /* nothing pending: caught up with the whole ring (the virtual clock moves on) */
  XT_CHECK(xt_ring_plane_pubs(&r, 0) == 20 && xt_ring_plane_pubs(&r, 1) == 0);
  xt_ring_destroy(&r);
}

XT_TEST(both_planes_older_first_no_starvation) {
  xt_ring r;
  xt_ring_init(&r);
  uint64_t last[2] = {0, 0}, upto = 0;
  /* cycles of A then B: a client that is always a little late must still get both planes, the
   * older (A) first each time, though B's frame is always the newest of the ring */
  int got_a = 0, got_b = 0;
  for (int cyc = 0; cyc < 50; cyc++) {
    const uint64_t a = push(&r, 0, 0), b = push(&r, 1, 0);
    const uint64_t n1 = next(&r, last, 3, &upto), n2 = next(&r, last, 3, &upto);
    XT_CHECK_MSG(n1 == a && n2 == b, "cycle %d: sent %llu then %llu, pushed A %llu B %llu", cyc, (unsigned long long)n1,
                 (unsigned long long)n2, (unsigned long long)a, (unsigned long long)b);
    got_a += n1 == a;
    got_b += n2 == b;
  }
  XT_CHECK(got_a == 50 && got_b == 50);
  /* a slow client (three cycles behind): each plane's newest, A's first */
  uint64_t a = 0, b = 0;
  for (int cyc = 0; cyc < 3; cyc++) {
    a = push(&r, 0, 0);
    b = push(&r, 1, 0);
  }
  XT_CHECK(next(&r, last, 3, &upto) == a && upto == a - 1);
  XT_CHECK(next(&r, last, 3, &upto) == b);
  XT_CHECK(next(&r, last, 3, &upto) == 0 && upto == b);
  XT_CHECK(xt_ring_plane_pubs(&r, 0) == 53 && xt_ring_plane_pubs(&r, 1) == 53);
  xt_ring_destroy(&r);
}

XT_TEST(lockstep_in_order_per_plane) {
  xt_ring r;
  xt_ring_init(&r);
  uint64_t last[2] = {0, 0}, upto = 0;
  const uint64_t a1 = push(&r, 0, 1), b1 = push(&r, 1, 1), a2 = push(&r, 0, 1), b2 = push(&r, 1, 1);
  XT_CHECK(next(&r, last, 3, &upto) == a1);
  XT_CHECK(next(&r, last, 3, &upto) == b1);
  XT_CHECK(next(&r, last, 3, &upto) == a2);
  XT_CHECK(next(&r, last, 3, &upto) == b2);
  XT_CHECK(next(&r, last, 3, &upto) == 0);
  /* plane A alone: its lockstep frames in order, B's not sent */
  uint64_t la[2] = {0, 0};
  XT_CHECK(next(&r, la, 1, &upto) == a1 && next(&r, la, 1, &upto) == a2 && next(&r, la, 1, &upto) == 0);
  xt_ring_destroy(&r);
}

XT_TEST(ppub_counts_each_plane) {
  xt_ring r;
  xt_ring_init(&r);
  uint64_t latest, pp[2];
  for (int i = 0; i < 5; i++) push(&r, i % 2, 0);
  push(&r, 7, 0); /* a plane outside A and B counts as A, and never indexes out */
  xt_ring_mark(&r, &latest, pp);
  XT_CHECK(latest == 6 && pp[0] == 4 && pp[1] == 2);
  xt_frame *f = xt_ring_next(&r, 5);
  XT_CHECK(f && f->ppub == 4);
  xt_frame_unref(&r, f);
  xt_ring_destroy(&r);
}

XT_TEST(frame_reuse_forgets_encodings) {
  xt_ring r;
  xt_ring_init(&r);
  xt_frame *f = xt_frame_get(&r, 1000);
  XT_REQUIRE(f);
  f->wire[0][1].state = 1;
  f->wire[0][1].len = 10;
  f->plane = 1;
  xt_frame_unref(&r, f); /* into the pool */
  xt_frame *g = xt_frame_get(&r, 500);
  XT_REQUIRE(g);
  XT_CHECK(g == f && g->wire[0][1].state == 0 && g->wire[0][1].len == 0 && g->plane == 0);
  xt_frame_unref(&r, g);
  xt_ring_destroy(&r);
}

/* What the stream's polling service thread (--stream-spin-us) reads: a render's start stamps
 * t_expect_ns and wakes the reader; the frame's push stamps t_push_ns after it, under the ring's lock,
 * so a reader that sees the new stamp finds the frame. */
static int woken;
static void count_wake(void *ctx) { (void)ctx, woken++; }

XT_TEST(expect_and_push_stamps) {
  xt_ring r;
  xt_ring_init(&r);
  xt_ring_set_notify(&r, count_wake, NULL);
  woken = 0;
  XT_CHECK(atomic_load(&r.t_expect_ns) == 0 && atomic_load(&r.t_push_ns) == 0);
  xt_ring_expect(&r);
  const uint64_t te = atomic_load(&r.t_expect_ns);
  XT_CHECK(te > 0 && woken == 1 && atomic_load(&r.t_push_ns) == 0);
  const uint64_t pub = push(&r, 0, 0);
  const uint64_t tp = atomic_load(&r.t_push_ns);
  XT_CHECK(tp >= te && atomic_load(&r.t_expect_ns) == te);
  uint64_t last[2] = {0, 0};
  XT_CHECK(next(&r, last, 1, NULL) == pub);
  xt_ring_set_notify(&r, NULL, NULL);
  xt_ring_expect(&r); /* no reader: only the stamp */
  XT_CHECK(woken == 1 && atomic_load(&r.t_expect_ns) >= tp);
  xt_ring_destroy(&r);
}

XT_TEST(wire_names) {
  xt_msg m;
  unsigned mask = 0;
  XT_CHECK(xt_wire_planes_parse("a", "planes", &mask, &m) == 0 && mask == 1);
  XT_CHECK(xt_wire_planes_parse("B", "planes", &mask, &m) == 0 && mask == 2);
  XT_CHECK(xt_wire_planes_parse("a,B", "planes", &mask, &m) == 0 && mask == 3);
  XT_CHECK(xt_wire_planes_parse("b,a", "planes", &mask, &m) == 0 && mask == 3);
  const char *bad[] = {"", "c", "a,", ",a", "a,a", "ab", "a;b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    XT_CHECK_MSG(xt_wire_planes_parse(bad[i], "planes", &mask, &m) == XT_EINVAL, "'%s' accepted", bad[i]);
    XT_CHECK_MSG(!strncmp(m.text, "planes: ", 8), "'%s': %s", bad[i], m.text);
  }
  XT_CHECK(xt_wire_planes_parse(NULL, "planes", &mask, &m) == XT_EINVAL);
  XT_CHECK(xt_wire_codec_parse("ZSTD") == XT_STREAM_CODEC_ZSTD && xt_wire_codec_parse("lz4") == XT_STREAM_CODEC_LZ4);
  XT_CHECK(xt_wire_codec_parse("none") == 0 && xt_wire_codec_parse("gzip") < 0 && xt_wire_codec_parse(NULL) < 0);
}

XT_TEST(codecs_round_trip) {
  enum { N = 1 << 16 };
  static uint16_t px[N], back[N];
  static unsigned char buf[N * 3];
  for (int i = 0; i < N; i++) px[i] = (uint16_t)(30000 + 3000 * ((i / 256) % 7) + (i * 2654435761u >> 28));
  for (int c = 1; c < XT_FRAME_CODECS; c++) {
    if (!xt_wire_codec_available(c)) {
      fprintf(stderr, "  codec %s not built: skipped\n", xt_wire_codec_name(c));
      continue;
    }
    const size_t bound = xt_wire_bound(c, sizeof px);
    XT_REQUIRE(bound && bound <= sizeof buf);
    const size_t w = xt_wire_compress(c, px, sizeof px, buf, bound);
    XT_CHECK_MSG(w > 0 && w < sizeof px, "%s: %zu bytes", xt_wire_codec_name(c), w);
    memset(back, 0, sizeof back);
    XT_CHECK(xt_wire_decompress(c, buf, w, back, sizeof back) == 0 && !memcmp(px, back, sizeof px));
    /* damaged or short data is an error, never a crash */
    XT_CHECK(xt_wire_decompress(c, buf, w / 2, back, sizeof back) == XT_EFORMAT);
    XT_CHECK(xt_wire_decompress(c, buf, w, back, sizeof back - 2) == XT_EFORMAT);
    XT_CHECK(xt_wire_compress(c, px, sizeof px, buf, 16) == 0); /* no room: 0, not an overrun */
  }
  XT_CHECK(xt_wire_bound(XT_STREAM_CODEC_NONE, 100) == 0 && xt_wire_compress(0, px, 8, buf, 64) == 0);
}

XT_TEST_MAIN(XT_ENTRY(single_plane_latest_wins) XT_ENTRY(plane_b_only_gets_nothing_from_plane_a)
             XT_ENTRY(both_planes_older_first_no_starvation) XT_ENTRY(lockstep_in_order_per_plane)
             XT_ENTRY(ppub_counts_each_plane) XT_ENTRY(frame_reuse_forgets_encodings) XT_ENTRY(wire_names)
             XT_ENTRY(codecs_round_trip) XT_ENTRY(expect_and_push_stamps))
