/* fdlimit.h -- the open-file limit the daemon's listeners share: raised toward the hard
 * limit as far as their connections want, and, when even that is short, divided among them
 * so that together they leave SF_FDLIMIT_RESERVE free (the admin endpoint, ZooKeeper's
 * session, the log). Past that, accept() would fail with EMFILE and the rest with it. */
#ifndef SF_FDLIMIT_H
#define SF_FDLIMIT_H

#include <stddef.h>

/* Descriptors no listener's connections may take. */
#define SF_FDLIMIT_RESERVE 96
/* The fewest connections a listener is cut to. */
#define SF_FDLIMIT_MIN_CONNECTIONS 16

/* One listener: its setting's name in the log, its max_connections (lowered in place when
 * it must be), and the descriptors its threads hold beside the connections. */
typedef struct sf_fdlimit_port {
    const char *name;
    int *max_connections;
    int thread_fds;
} sf_fdlimit_port;

/* Fits every port's max_connections at once: raises the soft limit toward what all want
 * (never past the hard one), then lowers each in proportion to its wish, logging a warning
 * for each one lowered. The daemon calls it once, before it starts the ports: a port takes
 * the max_connections it is given (sf_server_new, sf_http_ids_start). */
void sf_fdlimit_fit(sf_fdlimit_port *ports, size_t n);

#endif
