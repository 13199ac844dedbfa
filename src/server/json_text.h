/* json_text.h -- a text written as a JSON string literal, for every JSON answer the daemon
 * makes over HTTP (the ids port and the admin endpoint). */
#ifndef SF_JSON_TEXT_H
#define SF_JSON_TEXT_H

#include <glib.h>

/* Appends s to out as a JSON string: bytes that are not UTF-8 become U+FFFD (so that the
 * answer stays JSON whatever a caller sent), quotes and backslashes are escaped, control
 * characters written as \uXXXX. */
void sf_json_text(GString *out, const char *s);

#endif
