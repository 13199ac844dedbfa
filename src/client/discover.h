/* discover.h -- follows the nodes registered in ZooKeeper: the children of a worker id path,
 * each holding "host:port", watched, so the list a client uses changes as nodes join, fence
 * and leave. Embedded holders (no Thrift port) are left out. While ZooKeeper cannot be
 * reached the last list stands: the nodes may well be serving. */
#ifndef SFC_DISCOVER_H
#define SFC_DISCOVER_H

#include <stddef.h>

/* Called from the watch's thread with every listed node's "host:port", sorted by worker id. */
typedef void (*sfc_discover_list_fn)(void *ctx, const char *const *servers, int n);
/* Called, before any list arrived, with why there is none yet. */
typedef void (*sfc_discover_why_fn)(void *ctx, const char *why);

typedef struct sfc_discover sfc_discover;

/* Starts the ZooKeeper client and the watch. NULL with why when the hosts are unusable. */
sfc_discover *sfc_discover_start(const char *hosts, const char *path, int session_timeout_ms,
                                 sfc_discover_list_fn on_list, sfc_discover_why_fn on_why,
                                 void *ctx, char *why, size_t whylen);

/* Stops the watch and closes the ZooKeeper session. */
void sfc_discover_stop(sfc_discover *d);

/* ZooKeeper's own log: INFO when verbose, else errors only. Process-wide. */
void sfc_discover_set_logging(int verbose);

#endif
