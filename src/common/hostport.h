/* hostport.h -- the one reading of a network address written as text ("host:port",
 * "[v6]:port", and lists of them) and of a decimal number in a range, so that nodes, peers,
 * ZooKeeper hosts and command lines accept and refuse the same things. Plain C. */
#ifndef SF_HOSTPORT_H
#define SF_HOSTPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Room for any host sf_hostport_parse gives (a DNS name is at most 253 bytes). */
#define SF_HOSTPORT_HOST_MAX 280

/* Reads text as a decimal integer in lo..hi: digits only (no blanks, no sign), at most
 * INT64_MAX. False with why saying "<what> '<text>' is not a number <lo>..<hi>" (or that it
 * is outside the range). */
bool sf_decimal_parse(const char *what, const char *text, int64_t lo, int64_t hi, int64_t *out,
                      char *why, size_t whylen);

/* Splits "host:port" or "[v6]:port" into host (without brackets, 1..hostlen-1 bytes) and
 * port 1..65535. A host with colons and no brackets splits at its last colon (snowflaked
 * registers "::1:7609" for an IPv6 bind address). False with why naming text and the
 * allowed form or range. */
bool sf_hostport_parse(const char *text, char *host, size_t hostlen, int *port, char *why,
                       size_t whylen);

/* Checks a comma-separated list of host:port entries (the ZooKeeper client's form, which
 * may end in a chroot path: "h1:2181,h2:2181/app"); name is the option, for the message.
 * False with why naming the option and the first bad entry. */
bool sf_hostport_list_check(const char *name, const char *list, char *why, size_t whylen);

#endif
