/* hand_frames.h -- Thrift binary-protocol frames written and read by hand, so that the
 * unit tests of the server's path do not depend on the code they check. */
#ifndef SF_HAND_FRAMES_H
#define SF_HAND_FRAMES_H

#include <glib.h>
#include <stdint.h>
#include <string.h>

/* Appends v big-endian. */
static inline void hand_put32(GByteArray *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    g_byte_array_append(b, x, 4);
}

/* The big-endian 32-bit integer at p. */
static inline uint32_t hand_get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Appends one framed strict CALL of method with seqid whose argument struct holds
 * args[0..args_len) (encoded fields; the stop byte is added). */
static inline void hand_append_call(GByteArray *b, const char *method, int32_t seqid,
                                    const uint8_t *args, size_t args_len)
{
    GByteArray *m = g_byte_array_new();
    hand_put32(m, 0x80010001u); /* version 1, T_CALL */
    hand_put32(m, (uint32_t)strlen(method));
    g_byte_array_append(m, (const guint8 *)method, (guint)strlen(method));
    hand_put32(m, (uint32_t)seqid);
    if (args_len > 0)
        g_byte_array_append(m, args, (guint)args_len);
    uint8_t stop = 0;
    g_byte_array_append(m, &stop, 1);
    hand_put32(b, m->len);
    g_byte_array_append(b, m->data, m->len);
    g_byte_array_free(m, TRUE);
}

#endif
