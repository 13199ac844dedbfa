/* handler_options.c -- the handler's defaults and the check of its limits, both read off
 * SF_HANDLER_INT_OPTIONS. */
#include "handler_options.h"



#include "option_range.h"

void sf_handler_options_init(sf_handler_options *o)
{
#define SF_HANDLER_DEFAULT(field, lo, hi, dflt) o->field = (dflt);
    SF_HANDLER_INT_OPTIONS(SF_HANDLER_DEFAULT)
#undef SF_HANDLER_DEFAULT
}

bool sf_handler_options_check(const sf_handler_options *o, char *err, size_t errlen)
{
#define SF_HANDLER_CHECK(field, lo, hi, dflt) \
    if (!sf_option_in_range("", #field, o->field, (lo), (hi), err, errlen)) \
        return false;
    SF_HANDLER_INT_OPTIONS(SF_HANDLER_CHECK)
#undef SF_HANDLER_CHECK
    return true;
}
