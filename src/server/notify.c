/* notify.c -- the service manager notification protocol (sd_notify(3)) in plain C: one
 * datagram of NAME=VALUE lines sent to the AF_UNIX socket named by NOTIFY_SOCKET (a path,
 * or an abstract name written with a leading '@'). No libsystemd, so the daemon builds
 * and runs the same on hosts without it. */
#define _GNU_SOURCE
#include "notify.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* The longest message we send; a longer STATUS is cut. */
#define SF_NOTIFY_MAX 1024

static atomic_bool sf_notify_ready_sent;
static atomic_bool sf_notify_failure_told;

/* Reports the first failure to send (errno set), so a broken NOTIFY_SOCKET shows once in
 * the log instead of once per transition; returns -1 with errno kept. */
static int sf_notify_failed(const char *name, const char *msg)
{
    int saved = errno;
    if (!atomic_exchange(&sf_notify_failure_told, true))
        fprintf(stderr, "snowflaked: cannot tell the service manager '%.*s' through "
                        "NOTIFY_SOCKET=%s: %s (it must be an absolute path or an @abstract "
                        "name of a listening datagram socket)\n",
                (int)strcspn(msg, "\n"), msg, name, strerror(saved));
    errno = saved;
    return -1;
}

/* Sends msg as one datagram to NOTIFY_SOCKET: 0 when sent or when there is no socket
 * to send to; -1 with errno when the name is unusable or the send failed. */
static int sf_notify_send(const char *msg)
{
    const char *name = getenv("NOTIFY_SOCKET");
    if (name == NULL || name[0] == '\0')
        return 0;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t len = strlen(name);
    if ((name[0] != '/' && name[0] != '@') || len >= sizeof addr.sun_path) {
        errno = EINVAL; /* only absolute paths and abstract names are defined */
        return sf_notify_failed(name, msg);
    }
    memcpy(addr.sun_path, name, len);
    if (name[0] == '@')
        addr.sun_path[0] = '\0';
    socklen_t addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len +
                                     (name[0] == '@' ? 0 : 1));
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return sf_notify_failed(name, msg);
    ssize_t n = sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&addr, addr_len);
    int saved = errno;
    close(fd);
    errno = saved;
    return n < 0 ? sf_notify_failed(name, msg) : 0;
}

/* READY=1 once: the manager needs it once, and the callers are every serving transition. */
int sf_notify_ready(void)
{
    if (atomic_exchange(&sf_notify_ready_sent, true))
        return 0;
    return sf_notify_send("READY=1");
}

/* STATUS= with the text on one line, as the protocol's lines are newline-separated. */
int sf_notify_status(const char *fmt, ...)
{
    char msg[SF_NOTIFY_MAX];
    int prefix = snprintf(msg, sizeof msg, "STATUS=");
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg + prefix, sizeof msg - (size_t)prefix, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    for (char *p = msg; *p != '\0'; p++)
        if (*p == '\n')
            *p = ' ';
    return sf_notify_send(msg);
}

/* STOPPING=1, so `systemctl` shows the unit deactivating while requests drain. */
int sf_notify_stopping(void)
{
    return sf_notify_send("STOPPING=1");
}

/* WATCHDOG=1: the keep-alive that WatchdogSec= waits for. */
int sf_notify_watchdog(void)
{
    return sf_notify_send("WATCHDOG=1");
}

/* WATCHDOG_USEC when it applies to this process (WATCHDOG_PID unset or ours), else 0. */
uint64_t sf_notify_watchdog_usec(void)
{
    const char *usec = getenv("WATCHDOG_USEC");
    if (usec == NULL || usec[0] == '\0')
        return 0;
    const char *pid = getenv("WATCHDOG_PID");
    if (pid != NULL && pid[0] != '\0' && strtoll(pid, NULL, 10) != (long long)getpid())
        return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(usec, &end, 10);
    if (errno != 0 || end == usec || *end != '\0')
        return 0;
    return (uint64_t)v;
}
