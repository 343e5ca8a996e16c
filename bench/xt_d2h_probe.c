/* xtwin-d2h-probe: how fast the host takes frames from its GPUs, with no rendering at all.
 *
 * The dataset's render-only rate on one GPU is bound by the device-to-host copies (2 MiB of floats
 * per 512^2 frame with one channel), so whether two GPUs double it is a question about the host's
 * PCIe and memory first. This probe copies CHUNK-sized blocks from device memory into page-locked
 * host memory, back to back on two streams per GPU (as the dataset's two workers per GPU do),
 * from each listed GPU alone and then from all of them at once, and prints GB/s and the frames/s
 * that bandwidth would carry.
 *
 *   xtwin-d2h-probe [--devices 0,1] [--chunk-mib 64] [--seconds 3] [--frame-bytes 2097152]
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_DEV 16
#define STREAMS 2

typedef struct {
  int device;
  size_t chunk;
  double seconds;
  double bytes, wall; /* out */
  int err;
} job;

static pthread_barrier_t g_start;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int ok(cudaError_t e, int dev, const char *what) {
  if (e == cudaSuccess) return 1;
  fprintf(stderr, "xtwin-d2h-probe: device %d: %s: %s\n", dev, what, cudaGetErrorString(e));
  return 0;
}

static void *copy_main(void *arg) {
  job *j = arg;
  void *d = NULL, *h[STREAMS] = {0};
  cudaStream_t st[STREAMS] = {0};
  j->err = 1;
  int ready = ok(cudaSetDevice(j->device), j->device, "cudaSetDevice") &&
              ok(cudaMalloc(&d, j->chunk), j->device, "cudaMalloc") &&
              ok(cudaMemset(d, 1, j->chunk), j->device, "cudaMemset");
  for (int s = 0; ready && s < STREAMS; s++)
    ready = ok(cudaHostAlloc(&h[s], j->chunk, cudaHostAllocDefault), j->device, "cudaHostAlloc") &&
            ok(cudaStreamCreateWithFlags(&st[s], cudaStreamNonBlocking), j->device, "cudaStreamCreate");
  /* One untimed round: first touches of the pinned pages and the copy engines' start. */
  for (int s = 0; ready && s < STREAMS; s++)
    ready = ok(cudaMemcpyAsync(h[s], d, j->chunk, cudaMemcpyDeviceToHost, st[s]), j->device, "warm-up copy");
  ready = ready && ok(cudaDeviceSynchronize(), j->device, "warm-up");
  pthread_barrier_wait(&g_start); /* every thread waits here, ready or not, so none hangs */
  if (!ready) goto out;
  double t0 = now_s(), t = t0;
  long long n = 0;
  while (t - t0 < j->seconds) {
    for (int s = 0; s < STREAMS; s++)
      if (!ok(cudaMemcpyAsync(h[s], d, j->chunk, cudaMemcpyDeviceToHost, st[s]), j->device, "copy")) goto out;
    for (int s = 0; s < STREAMS; s++)
      if (!ok(cudaStreamSynchronize(st[s]), j->device, "sync")) goto out;
    n += STREAMS;
    t = now_s();
  }
  j->bytes = (double)n * (double)j->chunk;
  j->wall = t - t0;
  j->err = 0;
out:
  for (int s = 0; s < STREAMS; s++) {
    if (st[s]) cudaStreamDestroy(st[s]);
    if (h[s]) cudaFreeHost(h[s]);
  }
  if (d) cudaFree(d);
  return NULL;
}

/* Copies from devs[0..n) at once; returns the summed GB/s, or -1 on an error. */
static double run(const int *devs, int n, size_t chunk, double seconds, double *per) {
  job jobs[MAX_DEV];
  pthread_t tid[MAX_DEV];
  pthread_barrier_init(&g_start, NULL, (unsigned)n);
  for (int i = 0; i < n; i++) {
    jobs[i] = (job){devs[i], chunk, seconds, 0, 0, 1};
    if (pthread_create(&tid[i], NULL, copy_main, &jobs[i])) {
      fprintf(stderr, "xtwin-d2h-probe: pthread_create failed\n");
      exit(1);
    }
  }
  double sum = 0;
  int bad = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(tid[i], NULL);
    bad |= jobs[i].err;
    per[i] = jobs[i].err ? 0 : jobs[i].bytes / jobs[i].wall / 1e9;
    sum += per[i];
  }
  pthread_barrier_destroy(&g_start);
  return bad ? -1 : sum;
}

int main(int argc, char **argv) {
  int devs[MAX_DEV] = {0}, ndev = 1;
  double chunk_mib = 64, seconds = 3, frame_bytes = 2097152;
  for (int a = 1; a < argc; a++) {
    const char *v = a + 1 < argc ? argv[a + 1] : NULL;
    if (!strcmp(argv[a], "--devices") && v) {
      ndev = 0;
      for (const char *p = v; *p && ndev < MAX_DEV;) {
        char *e;
        long x = strtol(p, &e, 10);
        if (e == p || x < 0) {
          fprintf(stderr, "xtwin-d2h-probe: --devices: not a list of device numbers: %s\n", v);
          return 2;
        }
        devs[ndev++] = (int)x;
        p = *e == ',' ? e + 1 : e;
      }
    } else if (!strcmp(argv[a], "--chunk-mib") && v) chunk_mib = atof(v);
    else if (!strcmp(argv[a], "--seconds") && v) seconds = atof(v);
    else if (!strcmp(argv[a], "--frame-bytes") && v) frame_bytes = atof(v);
    else {
      fprintf(stderr, "usage: xtwin-d2h-probe [--devices 0,1] [--chunk-mib 64] [--seconds 3] [--frame-bytes N]\n");
      return 2;
    }
    a++;
  }
  if (!(chunk_mib >= 1 && chunk_mib <= 4096) || !(seconds > 0 && seconds <= 600) || !(frame_bytes >= 1)) {
    fprintf(stderr, "xtwin-d2h-probe: --chunk-mib 1..4096, --seconds (0, 600], --frame-bytes >= 1\n");
    return 2;
  }
  const size_t chunk = (size_t)(chunk_mib * 1048576.0);
  double per[MAX_DEV], alone[MAX_DEV], sum_alone = 0;
  for (int i = 0; i < ndev; i++) {
    if ((alone[i] = run(&devs[i], 1, chunk, seconds, per)) < 0) return 1;
    sum_alone += alone[i];
    printf("device %d alone:   %6.2f GB/s = %7.0f frames/s of %.0f bytes\n", devs[i], alone[i],
           alone[i] * 1e9 / frame_bytes, frame_bytes);
  }
  if (ndev > 1) {
    double all = run(devs, ndev, chunk, seconds, per);
    if (all < 0) return 1;
    for (int i = 0; i < ndev; i++) printf("device %d together: %6.2f GB/s\n", devs[i], per[i]);
    printf("all %d together:   %6.2f GB/s = %7.0f frames/s; %.2fx one device alone (%.0f%% of the sum alone)\n",
           ndev, all, all * 1e9 / frame_bytes, all / alone[0], 100 * all / sum_alone);
  }
  return 0;
}
