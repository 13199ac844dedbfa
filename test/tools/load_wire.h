/* load_wire.h -- encodes snowflaked requests once, as a real Thrift client would, for the load tools. */
#ifndef LOAD_WIRE_H
#define LOAD_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Encodes get_id(agent), or get_ids(agent, count) when count > 0, with the
 * generated Thrift client: binary protocol, framed transport, into memory.
 * Returns a malloc'd buffer (frame length included) and its size in *len, or
 * NULL after printing why to stderr. */
uint8_t *load_wire_encode(const char *agent, int count, size_t *len);

/* Reads a big-endian 32-bit integer. */
uint32_t load_wire_be32(const uint8_t *p);

#endif /* LOAD_WIRE_H */
