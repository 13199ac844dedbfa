/* cloexec.c -- close-on-exec for a library's own descriptors, found in /proc/self/fd
 * (cloexec.h). */
#define _GNU_SOURCE
#include "cloexec.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Calls visit with each descriptor open now but the listing's own, until it returns false.
 * 0, or -1 with errno set. */
static int sf_cloexec_each(bool (*visit)(int fd, void *ctx), void *ctx)
{
    DIR *dir = opendir("/proc/self/fd");
    if (dir == NULL)
        return -1;
    int own = dirfd(dir);
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end != '\0' || end == e->d_name || fd == own)
            continue;
        if (!visit((int)fd, ctx))
            break;
    }
    closedir(dir);
    return 0;
}

/* Marks fd close-on-exec; true when it was not. */
static bool sf_cloexec_mark(int fd)
{
    int flags = fcntl(fd, F_GETFD);
    if (flags < 0 || (flags & FD_CLOEXEC))
        return false;
    return fcntl(fd, F_SETFD, flags | FD_CLOEXEC) == 0;
}

static bool sf_cloexec_add(int fd, void *ctx)
{
    sf_fdset *set = ctx;
    if ((size_t)fd >= set->size) {
        size_t size = ((size_t)fd + 1) * 2;
        unsigned char *bits = realloc(set->bits, (size + 7) / 8);
        if (bits == NULL)
            return false;
        memset(bits + (set->size + 7) / 8, 0, (size + 7) / 8 - (set->size + 7) / 8);
        set->bits = bits;
        set->size = size;
    }
    set->bits[fd / 8] |= (unsigned char)(1u << (fd % 8));
    return true;
}

int sf_cloexec_snapshot(sf_fdset *set)
{
    set->bits = NULL;
    set->size = 0;
    return sf_cloexec_each(sf_cloexec_add, set);
}

typedef struct sf_cloexec_job {
    const sf_fdset *before;
    const char *endpoint;
    int marked;
} sf_cloexec_job;

static bool sf_cloexec_pipe(int fd, void *ctx)
{
    sf_cloexec_job *job = ctx;
    const sf_fdset *b = job->before;
    if ((size_t)fd < b->size && (b->bits[fd / 8] & (1u << (fd % 8))))
        return true;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode) && sf_cloexec_mark(fd))
        job->marked++;
    return true;
}

int sf_cloexec_new_pipes(const sf_fdset *before)
{
    sf_cloexec_job job = {.before = before};
    return sf_cloexec_each(sf_cloexec_pipe, &job) == 0 ? job.marked : -1;
}

static bool sf_cloexec_socket(int fd, void *ctx)
{
    sf_cloexec_job *job = ctx;
    struct sockaddr_storage peer;
    socklen_t len = sizeof peer;
    int flags = fcntl(fd, F_GETFD);
    if (flags < 0 || (flags & FD_CLOEXEC) ||
        getpeername(fd, (struct sockaddr *)&peer, &len) != 0)
        return true;
    char addr[INET6_ADDRSTRLEN], name[INET6_ADDRSTRLEN + 16];
    if (peer.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&peer;
        inet_ntop(AF_INET, &in->sin_addr, addr, sizeof addr);
        snprintf(name, sizeof name, "%s:%d", addr, ntohs(in->sin_port));
    } else if (peer.ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&peer;
        inet_ntop(AF_INET6, &in6->sin6_addr, addr, sizeof addr);
        snprintf(name, sizeof name, "[%s]:%d", addr, ntohs(in6->sin6_port));
    } else {
        return true;
    }
    if (strcmp(name, job->endpoint) == 0 && sf_cloexec_mark(fd))
        job->marked++;
    return true;
}

int sf_cloexec_sockets_to(const char *endpoint)
{
    sf_cloexec_job job = {.endpoint = endpoint};
    return sf_cloexec_each(sf_cloexec_socket, &job) == 0 ? job.marked : -1;
}
