/* server_options.h -- sf_server's settings: the struct, each integer setting's range and
 * default named once, the defaults and the check. Plain C, apart from the server itself,
 * so that the settings file's reader can hold and check them without linking a server. */
#ifndef SF_SERVER_OPTIONS_H
#define SF_SERVER_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

/* X(field, min, max, default) for every integer setting. */
#define SF_SERVER_INT_OPTIONS(X)                                                               \
    X(port, 0, 65535, 7609)                   /* 0 = any free port (see sf_server_port) */    \
    X(threads, 1, 256, 2)                     /* event-loop threads */                        \
    X(max_frame_size, 64, 16777216, 65536)    /* largest frame payload accepted, bytes */     \
    X(max_connections, 1, 1000000, 16384)     /* open at once; more are refused */            \
    X(idle_timeout_ms, 0, 86400000, 300000)   /* close a silent connection; 0 = never */      \
    X(frame_timeout_ms, 1, 3600000, 10000)    /* close one whose started frame stalls */      \
    X(write_timeout_ms, 1, 3600000, 30000)    /* close one whose replies wait unsent */       \
    X(max_output_buffer, 1048576, 1073741824, 33554432) /* unsent replies over all, bytes */

/* SF_SERVER_MIN_<field> and SF_SERVER_MAX_<field>, for the settings file's key table. */
enum {
#define SF_SERVER_RANGE(field, lo, hi, dflt) SF_SERVER_MIN_##field = (lo), SF_SERVER_MAX_##field = (hi),
    SF_SERVER_INT_OPTIONS(SF_SERVER_RANGE)
#undef SF_SERVER_RANGE
};

/* The event loop each server thread runs. auto: io_uring when the kernel and the build
 * allow it, else epoll (the start-up log says which, and why). */
typedef enum {
    SF_SERVER_LOOP_AUTO,
    SF_SERVER_LOOP_EPOLL,
    SF_SERVER_LOOP_IO_URING,
} sf_server_loop;

/* Settings; start from sf_server_options_init(). */
typedef struct sf_server_options {
    const char *bind_address;  /* numeric IPv4 or IPv6 address, e.g. "127.0.0.1" */
#define SF_SERVER_FIELD(field, lo, hi, dflt) int field;
    SF_SERVER_INT_OPTIONS(SF_SERVER_FIELD)
#undef SF_SERVER_FIELD
    sf_server_loop event_loop; /* default auto */
    bool listen_at_start;      /* listen from sf_server_start (default); false = bound only,
                                * connections refused until sf_server_set_listening */
    /* When set, asked on the serving thread after each batch of requests is answered:
     * TRUE = the replies must not be sent; the connection is closed unanswered instead
     * (a transport error, which pooled clients retry elsewhere). NULL = always send. */
    bool (*withhold_replies)(void *ctx);
    void *withhold_ctx;
} sf_server_options;

/* Fills the defaults: 0.0.0.0 and those of SF_SERVER_INT_OPTIONS, the loop auto picks,
 * listening from the start, replies always sent. */
void sf_server_options_init(sf_server_options *opts);

/* The loop named "auto", "epoll" or "io_uring"; false for any other name. */
bool sf_server_loop_from_name(const char *name, sf_server_loop *loop);

/* The name of a loop, as sf_server_loop_from_name reads it. */
const char *sf_server_loop_name(sf_server_loop loop);

/* Checks every setting against its range; false with err naming the setting, its value
 * and the range. */
bool sf_server_options_check(const sf_server_options *opts, char *err, size_t errlen);

#endif
