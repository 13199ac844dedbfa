/* notify.h -- tells a service manager (systemd's Type=notify) what the daemon is doing:
 * ready once ids are served, its status on each serving or fenced transition, stopping,
 * and watchdog keep-alives. Every call is a no-op when NOTIFY_SOCKET is not set, so the
 * daemon behaves the same with or without systemd. Safe to call from any thread. */
#ifndef SF_NOTIFY_H
#define SF_NOTIFY_H

#include <stdint.h>

/* A message that cannot be sent (a bad NOTIFY_SOCKET, a manager gone) does not stop the
 * daemon: the first such failure is reported on standard error, naming the socket and
 * the reason; the functions return -1 with errno set then, else 0 (also without
 * NOTIFY_SOCKET), and callers need not check. */

/* Sends READY=1, once per process: later calls do nothing. Call it when ids are
 * first handed out. */
int sf_notify_ready(void);

/* Sends STATUS=<formatted text> (one line; newlines are replaced by spaces), shown by
 * `systemctl status`. */
int sf_notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Sends STOPPING=1: the daemon has begun shutting down. */
int sf_notify_stopping(void);

/* Sends WATCHDOG=1, the keep-alive for WatchdogSec=. */
int sf_notify_watchdog(void);

/* The keep-alive interval the manager asked for (WATCHDOG_USEC, when WATCHDOG_PID is
 * unset or ours), in microseconds; 0 when no watchdog is wanted. Send keep-alives at
 * half this interval. */
uint64_t sf_notify_watchdog_usec(void);

#endif
