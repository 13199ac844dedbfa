/* hostport.c -- see hostport.h. Digits are read by the id parser of libsnowflake, the
 * only decimal reader in the tree. */
#include "hostport.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "lib/snowflake.h"

bool sf_decimal_parse(const char *what, const char *text, int64_t lo, int64_t hi, int64_t *out,
                      char *why, size_t whylen)
{
    int64_t v;
    if (sf_id_parse(text, SF_BASE10, &v, NULL) != SF_OK) {
        snprintf(why, whylen, "%s '%s' is not a number %" PRId64 "..%" PRId64 " (digits only)",
                 what, text, lo, hi);
        return false;
    }
    if (v < lo || v > hi) {
        snprintf(why, whylen, "%s %" PRId64 " is outside %" PRId64 "..%" PRId64, what, v, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool sf_hostport_parse(const char *text, char *host, size_t hostlen, int *port, char *why,
                       size_t whylen)
{
    const char *h = text, *colon = strrchr(text, ':');
    size_t hl = colon != NULL ? (size_t)(colon - text) : 0;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (close == NULL || close[1] != ':') {
            snprintf(why, whylen, "'%s' is not [address]:port", text);
            return false;
        }
        h = text + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    }
    if (colon == NULL) {
        snprintf(why, whylen, "'%s' has no port: write host:port, port 1..65535", text);
        return false;
    }
    if (hl == 0 || hl >= hostlen) {
        snprintf(why, whylen, "'%s' is not host:port with a host of 1..%zu characters", text,
                 hostlen - 1);
        return false;
    }
    int64_t p;
    char pwhy[160];
    if (!sf_decimal_parse("the port", colon + 1, 1, 65535, &p, pwhy, sizeof pwhy)) {
        snprintf(why, whylen, "'%s': %s", text, pwhy);
        return false;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (int)p;
    return true;
}

bool sf_hostport_list_check(const char *name, const char *list, char *why, size_t whylen)
{
    if (list == NULL || list[0] == '\0') {
        snprintf(why, whylen, "%s is empty: name at least one host:port", name);
        return false;
    }
    const char *p = list;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (comma == NULL) { /* the last entry may carry the chroot: "host:port/path" */
            const char *slash = memchr(p, '/', n);
            n = slash != NULL ? (size_t)(slash - p) : n;
        }
        char entry[300], host[280], ewhy[400];
        int port;
        if (n >= sizeof entry) {
            snprintf(why, whylen, "%s entry '%.40s...' is longer than %zu characters", name, p,
                     sizeof entry - 1);
            return false;
        }
        memcpy(entry, p, n);
        entry[n] = '\0';
        if (!sf_hostport_parse(entry, host, sizeof host, &port, ewhy, sizeof ewhy)) {
            snprintf(why, whylen, "%s entry %s", name, ewhy);
            return false;
        }
        if (comma == NULL)
            return true;
        p = comma + 1;
    }
}
