/* load_clock.c -- a monotonic clock and a signal-raised stop flag for the load tools. */
#define _POSIX_C_SOURCE 200809L
#include "load_clock.h"

#include <time.h>

volatile sig_atomic_t load_stop_requested;

/* Signal handler: only sets the flag that the loops check. */
static void load_on_stop_signal(int sig)
{
    (void)sig;
    load_stop_requested = 1;
}

void load_catch_signals(void)
{
    struct sigaction sa = {.sa_handler = load_on_stop_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int64_t load_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
