/* admin_value.h -- how the admin endpoint writes one figure: as it is, or, for a figure whose
 * name ends in "_seconds" (a gauge, a histogram's bounds and sum), from the milliseconds it
 * is kept in to seconds, exact to the millisecond: Prometheus's base unit. */
#ifndef SF_ADMIN_VALUE_H
#define SF_ADMIN_VALUE_H

#include <glib.h>
#include <stdint.h>

#define SF_ADMIN_VALUE_MAX 32

/* Writes v as the figure name shows it into out; returns out. */
static inline const char *sf_admin_value(const char *name, int64_t v, char out[SF_ADMIN_VALUE_MAX])
{
    if (g_str_has_suffix(name, "_seconds"))
        g_snprintf(out, SF_ADMIN_VALUE_MAX, "%.3f", (double)v / 1000);
    else
        g_snprintf(out, SF_ADMIN_VALUE_MAX, "%" G_GINT64_FORMAT, v);
    return out;
}

#endif /* SF_ADMIN_VALUE_H */
