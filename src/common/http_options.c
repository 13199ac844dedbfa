/* http_options.c -- the HTTP ids port's defaults and the check of its settings, both read off
 * SF_HTTP_INT_OPTIONS. */
#include "http_options.h"

#include <stdio.h>

#include "option_range.h"

void sf_http_options_init(sf_http_options *opts)
{
    *opts = (sf_http_options){
#define SF_HTTP_DEFAULT(field, lo, hi, dflt) .field = (dflt),
        SF_HTTP_INT_OPTIONS(SF_HTTP_DEFAULT)
#undef SF_HTTP_DEFAULT
        .bind_address = "0.0.0.0",
        .keep_alive = true,
    };
}

bool sf_http_options_check(const sf_http_options *o, char *err, size_t errlen)
{
#define SF_HTTP_CHECK(field, lo, hi, dflt) \
    if (!sf_option_in_range("[http] ", #field, o->field, (lo), (hi), err, errlen)) \
        return false;
    SF_HTTP_INT_OPTIONS(SF_HTTP_CHECK)
#undef SF_HTTP_CHECK
    if (o->bind_address == NULL) {
        snprintf(err, errlen, "[http] bind_address is not set");
        return false;
    }
    return true;
}
