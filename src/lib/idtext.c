/* idtext.c -- ids as short strings: base 32 (Crockford), base 58 (bwmarrin/snowflake's) and
 * base 62, written and read back.
 *
 * Base 32 and base 62 are written fixed width in alphabets that are in ASCII order, so that
 * the strings sort as the ids do; base 58 is written exactly as bwmarrin/snowflake writes it,
 * so that ids move between the two unchanged (and its strings do not sort as the ids). */
#include "snowflake.h"
#include "sf_error.h"

#include <inttypes.h>
#include <string.h>

/* Each base: its alphabet (digit values in order) and the width its strings are padded to
 * (0 = no padding). */
typedef struct sf_id_alphabet {
    const char *digits;
    size_t width;
} sf_id_alphabet;

static const sf_id_alphabet sf_base32 = { "0123456789ABCDEFGHJKMNPQRSTVWXYZ", 13 };
static const sf_id_alphabet sf_base58 = {
    "123456789abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ", 0 };
static const sf_id_alphabet sf_base62 = {
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", 11 };
static const sf_id_alphabet sf_base10 = { "0123456789", 0 };

/* The alphabet of base, or NULL for a base we do not write. */
static const sf_id_alphabet *sf_id_alphabet_of(sf_id_base base)
{
    switch (base) {
    case SF_BASE10:
        return &sf_base10;
    case SF_BASE32:
        return &sf_base32;
    case SF_BASE58:
        return &sf_base58;
    case SF_BASE62:
        return &sf_base62;
    }
    return NULL;
}

static int sf_id_bad_base(sf_id_base base, sf_error *err)
{
    return sf_error_fail(err, SF_ERR_ARG, "base %d is not one of 10, 32, 58, 62", (int)base);
}

int sf_id_encode(int64_t id, sf_id_base base, char *buf, size_t len, sf_error *err)
{
    const sf_id_alphabet *a = sf_id_alphabet_of(base);
    if (a == NULL)
        return sf_id_bad_base(base, err);
    if (id < 0)
        return sf_error_fail(err, SF_ERR_ARG, "id %" PRId64 " is negative: allowed 0..%" PRId64,
                             id, INT64_MAX);
    char rev[SF_ID_TEXT_MAX];
    size_t n = 0;
    uint64_t v = (uint64_t)id;
    do {
        rev[n++] = a->digits[v % (uint64_t)base];
        v /= (uint64_t)base;
    } while (v != 0);
    while (n < a->width)
        rev[n++] = a->digits[0];
    if (len < n + 1)
        return sf_error_fail(err, SF_ERR_ARG, "a buffer of %zu bytes is too small for id %"
                             PRId64 " in base %d: it needs %zu", len, id, (int)base, n + 1);
    for (size_t i = 0; i < n; i++)
        buf[i] = rev[n - 1 - i];
    buf[n] = '\0';
    return SF_OK;
}

/* The value of c in base (Crockford's aliases for base 32), or -1 when it is no digit. */
static int sf_id_digit(const sf_id_alphabet *a, sf_id_base base, char c)
{
    if (base == SF_BASE32) {
        if (c >= 'a' && c <= 'z')
            c = (char)(c - 'a' + 'A');
        if (c == 'O')
            c = '0';
        else if (c == 'I' || c == 'L')
            c = '1';
    }
    const char *at = c != '\0' ? strchr(a->digits, c) : NULL;
    return at != NULL ? (int)(at - a->digits) : -1;
}

int sf_id_parse(const char *text, sf_id_base base, int64_t *id, sf_error *err)
{
    const sf_id_alphabet *a = sf_id_alphabet_of(base);
    if (a == NULL)
        return sf_id_bad_base(base, err);
    if (text[0] == '\0')
        return sf_error_fail(err, SF_ERR_ARG, "'' is not an id in base %d: it is empty",
                             (int)base);
    if (text[0] == '-' && text[1] != '\0')
        return sf_error_fail(err, SF_ERR_ARG, "'%s' is not an id in base %d: it is negative; "
                             "allowed 0..%" PRId64, text, (int)base, INT64_MAX);
    uint64_t v = 0;
    for (size_t i = 0; text[i] != '\0'; i++) {
        int d = sf_id_digit(a, base, text[i]);
        if (d < 0)
            return sf_error_fail(err, SF_ERR_ARG, "'%s' is not an id in base %d: '%c' at "
                                 "position %zu is not one of \"%s\"", text, (int)base,
                                 text[i], i + 1, a->digits);
        if (v > ((uint64_t)INT64_MAX - (uint64_t)d) / (uint64_t)base)
            return sf_error_fail(err, SF_ERR_ARG, "'%s' in base %d is past the largest id: "
                                 "allowed 0..%" PRId64, text, (int)base, INT64_MAX);
        v = v * (uint64_t)base + (uint64_t)d;
    }
    *id = (int64_t)v;
    return SF_OK;
}
