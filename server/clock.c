/* The server's clocks (srv_clock.h). Monotonic, never the wall clock: exposure deadlines, frame
 * latencies and request timeouts must not jump when the system time is set. */
#include <stdatomic.h>
#include <time.h>

#include "srv_clock.h"

static atomic_int dev_virtual;
static atomic_ullong dev_now; /* the virtual clock's time */

uint64_t xt_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

uint64_t xt_dev_now_ns(void) { return atomic_load(&dev_virtual) ? (uint64_t)atomic_load(&dev_now) : xt_now_ns(); }

void xt_dev_clock_virtual(uint64_t start_ns) {
  atomic_store(&dev_now, start_ns);
  atomic_store(&dev_virtual, 1);
}

int xt_dev_clock_is_virtual(void) { return atomic_load(&dev_virtual); }

void xt_dev_clock_advance(uint64_t t_ns) {
  unsigned long long cur = atomic_load(&dev_now);
  while (cur < t_ns && !atomic_compare_exchange_weak(&dev_now, &cur, t_ns)) {
  }
}
