/* ratelog.c -- sf_ratelog: at most one line of a kind per interval, with the count of the
 * lines held back written on the next one that goes through. */
#define _POSIX_C_SOURCE 200809L
#include "ratelog.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "common/clocks.h"

/* Monotonic milliseconds: the interval must not jump with the wall clock. The +1 keeps
 * 0 free to mean "never". */
static int64_t sf_ratelog_now_ms(void)
{
    return sf_clocks_coarse_ms() + 1;
}

/* TRUE when a line may be written now (at most one per interval_ms, from any thread);
 * *suppressed then receives how many were held back since the last one. FALSE counts
 * this one as held back. */
static bool sf_ratelog_allow(sf_ratelog *rl, int64_t interval_ms, uint64_t *suppressed)
{
    int64_t now = sf_ratelog_now_ms();
    int64_t last = atomic_load_explicit(&rl->last_ms, memory_order_relaxed);
    if ((last == 0 || now - last >= interval_ms) &&
        atomic_compare_exchange_strong(&rl->last_ms, &last, now)) {
        *suppressed = atomic_exchange(&rl->suppressed, 0);
        return true;
    }
    atomic_fetch_add_explicit(&rl->suppressed, 1, memory_order_relaxed);
    return false;
}

/* Writes " (N similar lines suppressed)" into buf (or "" when n is 0), for appending to
 * the line that goes through. */
static void sf_ratelog_note(uint64_t n, char *buf, unsigned long size)
{
    if (n == 0)
        snprintf(buf, size, "%s", "");
    else
        snprintf(buf, size, " (%" PRIu64 " similar line%s suppressed)", n, n == 1 ? "" : "s");
}

void sf_ratelog_logv(sf_ratelog *rl, GLogLevelFlags level, const char *prefix, const char *fmt,
                     va_list ap)
{
    uint64_t suppressed;
    if (!sf_ratelog_allow(rl, SF_RATELOG_INTERVAL_MS, &suppressed))
        return;
    char *msg = g_strdup_vprintf(fmt, ap);
    char note[64];
    sf_ratelog_note(suppressed, note, sizeof note);
    g_log(NULL, level, "%s%s%s", prefix, g_strchomp(msg), note);
    g_free(msg);
}

void sf_ratelog_log(sf_ratelog *rl, GLogLevelFlags level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sf_ratelog_logv(rl, level, "", fmt, ap);
    va_end(ap);
}
