/* Stream compression benchmark: zstd (levels 1 and 3) and LZ4 on real 16-bit frames, as the stream
 * would send them (api/stream.md, "Compression"): ratio, compression and decompression speed on
 * this CPU, one thread, each round trip checked byte for byte. Frames are raw little-endian uint16
 * files (the pixels of stream messages; bench/server/codec_frames.py saves some from a server).
 *
 *   bench_codec [--seconds S] FILE.u16 ...
 *
 * Prints one line per file and codec, then the mean over the files (results: docs/BENCHMARKS.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lz4.h>
#include <zstd.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

enum { ZSTD1, ZSTD3, LZ4, NCODECS };
static const char *const names[NCODECS] = {"zstd-1", "zstd-3", "lz4"};

static size_t compress(int k, const void *src, size_t n, void *dst, size_t cap) {
  if (k == LZ4) {
    int w = LZ4_compress_default(src, dst, (int)n, (int)cap);
    return w > 0 ? (size_t)w : 0;
  }
  size_t w = ZSTD_compress(dst, cap, src, n, k == ZSTD1 ? 1 : 3);
  return ZSTD_isError(w) ? 0 : w;
}

static int decompress(int k, const void *src, size_t w, void *dst, size_t n) {
  if (k == LZ4) return LZ4_decompress_safe(src, dst, (int)w, (int)n) == (int)n ? 0 : -1;
  size_t got = ZSTD_decompress(dst, n, src, w);
  return !ZSTD_isError(got) && got == n ? 0 : -1;
}

int main(int argc, char **argv) {
  double seconds = 0.5;
  int first = 1;
  if (argc > 2 && !strcmp(argv[1], "--seconds")) {
    seconds = atof(argv[2]);
    first = 3;
  }
  if (first >= argc || seconds <= 0) {
    fprintf(stderr, "usage: bench_codec [--seconds S] FILE.u16 ...\n");
    return 2;
  }
  double sum_ratio[NCODECS] = {0}, sum_c[NCODECS] = {0}, sum_d[NCODECS] = {0};
  int files = 0;
  printf("%-36s %-7s %10s %10s %7s %9s %9s\n", "file", "codec", "bytes", "wire", "ratio", "comp MB/s", "dec MB/s");
  for (int a = first; a < argc; a++) {
    FILE *f = fopen(argv[a], "rb");
    if (!f) {
      fprintf(stderr, "bench_codec: %s: cannot open\n", argv[a]);
      return 1;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (len <= 0 || len > (1L << 30)) {
      fprintf(stderr, "bench_codec: %s: %ld bytes\n", argv[a], len);
      fclose(f);
      return 1;
    }
    const size_t n = (size_t)len, cap = ZSTD_compressBound(n) > (size_t)LZ4_compressBound((int)n)
                                             ? ZSTD_compressBound(n) : (size_t)LZ4_compressBound((int)n);
    unsigned char *src = malloc(n), *dst = malloc(cap), *back = malloc(n);
    if (!src || !dst || !back || fread(src, 1, n, f) != n) {
      fprintf(stderr, "bench_codec: %s: cannot read\n", argv[a]);
      return 1;
    }
    fclose(f);
    for (int k = 0; k < NCODECS; k++) {
      size_t w = 0;
      int reps = 0;
      double t0 = now_s(), t;
      do {
        w = compress(k, src, n, dst, cap);
        reps++;
      } while ((t = now_s()) - t0 < seconds);
      const double c_mbs = (double)n * reps / (t - t0) / 1e6;
      reps = 0;
      t0 = now_s();
      int bad = 0;
      do {
        bad |= decompress(k, dst, w, back, n);
        reps++;
      } while ((t = now_s()) - t0 < seconds);
      const double d_mbs = (double)n * reps / (t - t0) / 1e6;
      if (!w || bad || memcmp(src, back, n)) {
        fprintf(stderr, "bench_codec: %s: %s round trip failed\n", argv[a], names[k]);
        return 1;
      }
      const char *base = strrchr(argv[a], '/');
      printf("%-36s %-7s %10zu %10zu %7.2f %9.0f %9.0f\n", base ? base + 1 : argv[a], names[k], n, w, (double)n / (double)w,
             c_mbs, d_mbs);
      sum_ratio[k] += (double)n / (double)w;
      sum_c[k] += c_mbs;
      sum_d[k] += d_mbs;
    }
    files++;
    free(src);
    free(dst);
    free(back);
  }
  for (int k = 0; k < NCODECS; k++)
    printf("mean of %d files %-19s %-7s %21s %7.2f %9.0f %9.0f\n", files, "", names[k], "", sum_ratio[k] / files, sum_c[k] / files,
           sum_d[k] / files);
  return 0;
}
