/* The server's clocks. xt_now_ns is CLOCK_MONOTONIC in nanoseconds: request timeouts, shutdown,
 * real durations. xt_dev_now_ns is the device's clock (issue 24, point 8), what pose commands,
 * exposures and the stream's times are stamped with: the same CLOCK_MONOTONIC, or with --clock
 * virtual a simulated clock that stands still while the device works and jumps from one exposure
 * deadline to the next once everything before it is rendered and sent (xt_dev_clock_advance, by
 * the pacer), so a long procedure runs as fast as the backend allows with the same deadlines,
 * exposures and frames as in real time. Its own header so that nothing has to include the state
 * module (or anything bigger) just to read the time. */
#ifndef XT_SRV_CLOCK_H
#define XT_SRV_CLOCK_H

#include <stdint.h>

uint64_t xt_now_ns(void); /* CLOCK_MONOTONIC */

/* A polling loop's pause: lets the core's other thread run and saves power while it polls. */
static inline void xt_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

uint64_t xt_dev_now_ns(void);
/* From now on the device's clock is virtual, starting at start_ns (before any thread starts). */
void xt_dev_clock_virtual(uint64_t start_ns);
int xt_dev_clock_is_virtual(void);
/* The virtual clock to t_ns; never backwards. */
void xt_dev_clock_advance(uint64_t t_ns);

#endif /* XT_SRV_CLOCK_H */
