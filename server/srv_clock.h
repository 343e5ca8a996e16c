/* The server's one clock: CLOCK_MONOTONIC in nanoseconds, read by every module that stamps or
 * waits (the pacer, the stream's send times, the gate's deadlines, shutdown). Its own header so
 * that nothing has to include the state module (or anything bigger) just to read the time. */
#ifndef XT_SRV_CLOCK_H
#define XT_SRV_CLOCK_H

#include <stdint.h>

uint64_t xt_now_ns(void); /* CLOCK_MONOTONIC */

#endif /* XT_SRV_CLOCK_H */
