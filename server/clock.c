/* The server's clock (srv_clock.h). Monotonic, never the wall clock: exposure deadlines, frame
 * latencies and request timeouts must not jump when the system time is set. */
#include <time.h>

#include "srv_clock.h"

uint64_t xt_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}
