/* useragent.c -- the original's user-agent grammar, [a-zA-Z][a-zA-Z\-0-9]*.
 *
 * The original server matched the whole string with that regex before
 * generating; a character-class check is the same test without a regex engine. */
#include "snowflake.h"

static bool sf_is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

bool sf_useragent_valid(const char *agent)
{
    if (agent == NULL || !sf_is_alpha(agent[0]))
        return false;
    for (const char *p = agent + 1; *p != '\0'; p++)
        if (!sf_is_alpha(*p) && !(*p >= '0' && *p <= '9') && *p != '-')
            return false;
    return true;
}
