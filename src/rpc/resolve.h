/* resolve.h -- host names to addresses within a deadline: the lookup runs on a thread of its
 * own, so a resolver that does not answer costs a caller only the time it was willing to
 * wait, and holds no caller that needs another name. Lookups are the system's (getaddrinfo:
 * /etc/hosts, nsswitch, resolv.conf); their answers are cached for a bounded time. */
#ifndef SF_RESOLVE_H
#define SF_RESOLVE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Addresses are used for at most SF_RESOLVE_MAX_AGE_MS after their lookup; a name in use is
 * looked up again in the background once its answer is SF_RESOLVE_REFRESH_MS old, so callers
 * wait on a lookup only for a name new to the process or one whose lookups failed for
 * longer than the age bound. A failed lookup is the answer for SF_RESOLVE_FAILED_MS. */
#define SF_RESOLVE_MAX_AGE_MS 10000
#define SF_RESOLVE_REFRESH_MS 5000
#define SF_RESOLVE_FAILED_MS 1000
#define SF_RESOLVE_MAX_ADDRS 8 /* addresses kept per name, in the resolver's order */

typedef struct sf_addrs {
    int n;
    struct sockaddr_storage addr[SF_RESOLVE_MAX_ADDRS];
    socklen_t len[SF_RESOLVE_MAX_ADDRS];
} sf_addrs;

/* The TCP addresses of host (a name, or a numeric IPv4 or IPv6 address, which needs no
 * lookup) with port set, by deadline (CLOCK_MONOTONIC ms). 0; or -1 with err naming host and
 * why, and errno ETIMEDOUT when the deadline came first (the lookup goes on, for the next
 * caller) or EHOSTUNREACH when the name has no address. */
int sf_resolve(const char *host, int port, int64_t deadline, sf_addrs *out, char *err,
               size_t errlen);

#endif
