/* json_text.c -- a text as a JSON string literal (json_text.h). */
#include "json_text.h"

/* Runs of bytes that need no escape go in whole. */
void sf_json_text(GString *out, const char *s)
{
    char *valid = g_utf8_make_valid(s, -1);
    const char *run = valid;
    g_string_append_c(out, '"');
    for (const char *p = valid;; p++) {
        unsigned char c = (unsigned char)*p;
        if (c != '\0' && c != '"' && c != '\\' && c >= 0x20 && c != 0x7f)
            continue;
        g_string_append_len(out, run, p - run);
        if (c == '\0')
            break;
        if (c == '"' || c == '\\')
            g_string_append_printf(out, "\\%c", c);
        else
            g_string_append_printf(out, "\\u%04x", c);
        run = p + 1;
    }
    g_string_append_c(out, '"');
    g_free(valid);
}
