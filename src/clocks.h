/* clocks.h -- the clocks snowflaked times things by, read in one place so that every module
 * agrees on which clock a deadline or a lease is on. Plain C. (The ids themselves are on the
 * wall clock, which the generator reads through its own clock hook.) */
#ifndef SF_CLOCKS_H
#define SF_CLOCKS_H

#include <stdint.h>

/* Milliseconds on CLOCK_MONOTONIC: deadlines that must not jump with the wall clock. */
int64_t sf_clocks_mono_ms(void);

/* Milliseconds on CLOCK_MONOTONIC_COARSE: as above, cheap enough for every event of a loop,
 * a tick (a few ms) coarse. */
int64_t sf_clocks_coarse_ms(void);

/* Nanoseconds on CLOCK_MONOTONIC: timing calls. */
uint64_t sf_clocks_mono_ns(void);

/* Milliseconds on CLOCK_BOOTTIME: the clock of every lease. Unlike CLOCK_MONOTONIC it runs on
 * while the machine is suspended, and ZooKeeper's session clock runs on meanwhile too. */
int64_t sf_clocks_boot_ms(void);

#endif
