/* cloexec.h -- close-on-exec for descriptors a library opened without it (the ZooKeeper C
 * client's wake-up pipe and its connection's socket), found by what they are, so that a
 * program's exec'd children (posix_spawn, fork and exec) never inherit them: a child holding
 * a copy of a session's socket keeps its connection open after the session moved on, and
 * ZooKeeper counts it against the host's connections. Linux: reads /proc/self/fd. Plain C.
 *
 * Convention: each returns how many descriptors it marked, or -1 with errno set when
 * /proc/self/fd cannot be read. */
#ifndef SF_CLOEXEC_H
#define SF_CLOEXEC_H

#include <stddef.h>

/* The descriptors open now, for sf_cloexec_new_pipes: a bitmap the caller frees (free). */
typedef struct sf_fdset {
    unsigned char *bits;
    size_t size; /* descriptors covered: 0..size-1 */
} sf_fdset;

int sf_cloexec_snapshot(sf_fdset *set);

/* Marks close-on-exec the pipes open now that were not in before (and are not yet). */
int sf_cloexec_new_pipes(const sf_fdset *before);

/* Marks close-on-exec the sockets whose peer is endpoint, written "a.b.c.d:port" or
 * "[v6]:port" (as the ZooKeeper client names its server). */
int sf_cloexec_sockets_to(const char *endpoint);

#endif /* SF_CLOEXEC_H */
