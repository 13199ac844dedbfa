/* audit_options.c -- the audit log's defaults and the check of its settings, the integer
 * ones read off SF_AUDIT_INT_OPTIONS. */
#include "audit_options.h"


#include <stdio.h>
#include <string.h>

#include "option_range.h"

void sf_audit_options_init(sf_audit_options *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->sink = SF_AUDIT_NONE;
    opts->scribe_host = "localhost";
    opts->category = "snowflake";
#define SF_AUDIT_DEFAULT(field, lo, hi, dflt) opts->field = (dflt);
    SF_AUDIT_INT_OPTIONS(SF_AUDIT_DEFAULT)
#undef SF_AUDIT_DEFAULT
}

bool sf_audit_sink_from_name(const char *name, sf_audit_sink *sink)
{
    static const struct {
        const char *name;
        sf_audit_sink sink;
    } sinks[] = {{"none", SF_AUDIT_NONE}, {"scribe", SF_AUDIT_SCRIBE}, {"file", SF_AUDIT_FILE}};
    for (size_t i = 0; i < sizeof sinks / sizeof sinks[0]; i++)
        if (strcmp(name, sinks[i].name) == 0) {
            *sink = sinks[i].sink;
            return true;
        }
    return false;
}

bool sf_audit_options_check(const sf_audit_options *o, char *err, size_t errlen)
{
#define SF_AUDIT_CHECK(field, lo, hi, dflt) \
    if (!sf_option_in_range("[audit] ", #field, o->field, (lo), (hi), err, errlen)) \
        return false;
    SF_AUDIT_INT_OPTIONS(SF_AUDIT_CHECK)
#undef SF_AUDIT_CHECK
    if (o->sink == SF_AUDIT_FILE && (o->file == NULL || o->file[0] == '\0')) {
        snprintf(err, errlen, "[audit] sink = file needs [audit] file: the path of the "
                 "JSON-lines file to append to");
        return false;
    }
    if (o->sink == SF_AUDIT_SCRIBE && (o->scribe_host == NULL || o->scribe_host[0] == '\0' ||
                                       o->category == NULL || o->category[0] == '\0')) {
        snprintf(err, errlen, "[audit] sink = scribe needs a scribe_host (default localhost) "
                 "and a category (default snowflake)");
        return false;
    }
    return true;
}
