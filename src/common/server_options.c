/* server_options.c -- the server's defaults and the check of its settings, both read off
 * SF_SERVER_INT_OPTIONS. */
#include "server_options.h"


#include <stdio.h>
#include <string.h>

#include "option_range.h"

void sf_server_options_init(sf_server_options *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->bind_address = "0.0.0.0";
#define SF_SERVER_DEFAULT(field, lo, hi, dflt) opts->field = (dflt);
    SF_SERVER_INT_OPTIONS(SF_SERVER_DEFAULT)
#undef SF_SERVER_DEFAULT
    opts->event_loop = SF_SERVER_LOOP_AUTO;
    opts->listen_at_start = true;
}

static const char *const sf_server_loop_names[] = {
    [SF_SERVER_LOOP_AUTO] = "auto",
    [SF_SERVER_LOOP_EPOLL] = "epoll",
    [SF_SERVER_LOOP_IO_URING] = "io_uring",
};

bool sf_server_loop_from_name(const char *name, sf_server_loop *loop)
{
    for (size_t i = 0; i < sizeof sf_server_loop_names / sizeof sf_server_loop_names[0]; i++)
        if (strcmp(name, sf_server_loop_names[i]) == 0) {
            *loop = (sf_server_loop)i;
            return true;
        }
    return false;
}

const char *sf_server_loop_name(sf_server_loop loop)
{
    return (unsigned)loop < sizeof sf_server_loop_names / sizeof sf_server_loop_names[0]
               ? sf_server_loop_names[loop]
               : "?";
}

bool sf_server_options_check(const sf_server_options *o, char *err, size_t errlen)
{
#define SF_SERVER_CHECK(field, lo, hi, dflt) \
    if (!sf_option_in_range("", #field, o->field, (lo), (hi), err, errlen)) \
        return false;
    SF_SERVER_INT_OPTIONS(SF_SERVER_CHECK)
#undef SF_SERVER_CHECK
    if ((unsigned)o->event_loop > SF_SERVER_LOOP_IO_URING) {
        snprintf(err, errlen, "event_loop = %d is not valid: allowed auto, epoll or io_uring",
                 (int)o->event_loop);
        return false;
    }
    if (o->bind_address == NULL) {
        snprintf(err, errlen, "bind_address is not set");
        return false;
    }
    return true;
}
