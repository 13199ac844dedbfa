/* ratelog.h -- sf_ratelog: lets a repeating log line through at most once an interval and
 * counts the ones held back, so that a fault repeating thousands of times a second
 * writes a line a second, not a full disk. */
#ifndef SF_RATELOG_H
#define SF_RATELOG_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

/* One per kind of line; zero-initialised (static, or memset) is ready to use. */
typedef struct sf_ratelog {
    atomic_int_fast64_t last_ms;      /* when a line last went through; 0 = never */
    atomic_uint_fast64_t suppressed;  /* lines held back since then */
} sf_ratelog;

/* The default interval between two lines of one kind. */
#define SF_RATELOG_INTERVAL_MS 1000

/* Logs a line (g_log at level) through rl at SF_RATELOG_INTERVAL_MS: at most one line of
 * its kind a second, the next one saying how many were held back. */
void sf_ratelog_log(sf_ratelog *rl, GLogLevelFlags level, const char *fmt, ...)
    G_GNUC_PRINTF(3, 4);

/* The same for a library's log callback: prefix, then the line fmt and ap make without its
 * trailing newline; a line held back is not even formatted. */
void sf_ratelog_logv(sf_ratelog *rl, GLogLevelFlags level, const char *prefix, const char *fmt,
                     va_list ap) G_GNUC_PRINTF(4, 0);

#endif /* SF_RATELOG_H */
