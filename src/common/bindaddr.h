/* bindaddr.h -- resolves the numeric address and port a listening socket binds to, for the
 * Thrift server and the admin endpoint alike. Plain C. */
#ifndef SF_BINDADDR_H
#define SF_BINDADDR_H

#include <stddef.h>

struct addrinfo;

/* Resolves address (a numeric IPv4 or IPv6 address: no name lookup) and port for a
 * passive TCP socket. 0 with *res set (free it with freeaddrinfo); otherwise the
 * getaddrinfo error, with err saying "\"ADDRESS\" is not a numeric IPv4 or IPv6
 * address: WHY". */
int sf_bindaddr_resolve(const char *address, int port, struct addrinfo **res, char *err,
                        size_t errlen);

#endif
