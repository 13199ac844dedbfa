/* http_options.h -- the HTTP ids port's settings: the struct, each integer setting's range
 * and default named once (the limits with the Thrift port's defaults), the defaults and the
 * check. Plain C, so that the settings file's reader can hold and check them without
 * starting a listener. */
#ifndef SF_HTTP_OPTIONS_H
#define SF_HTTP_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

/* X(field, min, max, default) for every integer setting. */
#define SF_HTTP_INT_OPTIONS(X)                                                                 \
    X(port, 0, 65535, 0)                      /* 0 = off: no listener at all */               \
    X(threads, 1, 256, 2)                     /* threads answering requests */                \
    X(max_connections, 1, 1000000, 16384)     /* open at once; more are refused */            \
    X(idle_timeout_ms, 0, 86400000, 300000)   /* close a silent connection; 0 = never */      \
    X(request_timeout_ms, 1, 3600000, 10000)  /* a started request head must be in by then */ \
    X(max_request_size, 4096, 1048576, 8192)  /* request line and headers, bytes */          \
    X(max_output_buffer, 1048576, 1073741824, 33554432) /* unsent reply bodies, bytes */

/* SF_HTTP_MIN_<field> and SF_HTTP_MAX_<field>, for the settings file's key table. */
enum {
#define SF_HTTP_RANGE(field, lo, hi, dflt) SF_HTTP_MIN_##field = (lo), SF_HTTP_MAX_##field = (hi),
    SF_HTTP_INT_OPTIONS(SF_HTTP_RANGE)
#undef SF_HTTP_RANGE
};

/* Settings; start from sf_http_options_init(). */
typedef struct sf_http_options {
    const char *bind_address; /* numeric IPv4 or IPv6 address, default "0.0.0.0" */
#define SF_HTTP_FIELD(field, lo, hi, dflt) int field;
    SF_HTTP_INT_OPTIONS(SF_HTTP_FIELD)
#undef SF_HTTP_FIELD
    bool keep_alive; /* default true: a connection serves request after request */
} sf_http_options;

/* Fills the defaults: off, 0.0.0.0, those of SF_HTTP_INT_OPTIONS, keep-alive on. */
void sf_http_options_init(sf_http_options *opts);

/* Checks every setting against its range; false with err naming the setting as the settings
 * file does ([http] key), its value and the range. */
bool sf_http_options_check(const sf_http_options *opts, char *err, size_t errlen);

#endif
