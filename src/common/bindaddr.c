/* bindaddr.c -- getaddrinfo for a bind address, numeric only: a listening address is
 * configured, never looked up, so a typo cannot bind somewhere unexpected. */
#define _POSIX_C_SOURCE 200809L
#include "bindaddr.h"

#include <netdb.h>
#include <stdio.h>
#include <sys/socket.h>

int sf_bindaddr_resolve(const char *address, int port, struct addrinfo **res, char *err,
                        size_t errlen)
{
    struct addrinfo hints = {0};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    *res = NULL;
    int rc = getaddrinfo(address, service, &hints, res);
    if (rc != 0)
        snprintf(err, errlen, "\"%s\" is not a numeric IPv4 or IPv6 address: %s", address,
                 gai_strerror(rc));
    return rc;
}
