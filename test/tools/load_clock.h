/* load_clock.h -- what the load tools share besides the wire: a monotonic
 * clock and a stop flag raised by SIGINT or SIGTERM. */
#ifndef LOAD_CLOCK_H
#define LOAD_CLOCK_H

#include <signal.h>
#include <stdint.h>

/* Set by SIGINT or SIGTERM once load_catch_signals() has run; loops check it. */
extern volatile sig_atomic_t load_stop_requested;

/* Makes SIGINT and SIGTERM raise load_stop_requested, and ignores SIGPIPE so
 * a server closing a connection shows as a write error, not a death. */
void load_catch_signals(void);

/* Monotonic time in nanoseconds, the clock of every latency sample. */
int64_t load_now_ns(void);

#endif /* LOAD_CLOCK_H */
