/* zkpath.h -- the one rule for the ZooKeeper paths snowflaked registers under, shared by
 * the settings check (which refuses a bad path before anything starts) and the registry
 * (which must never build a node name from one), and the one rule for a worker node's name.
 * Plain C: no GLib, no ZooKeeper. */
#ifndef SF_ZKPATH_H
#define SF_ZKPATH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The longest path accepted: room left under it for "-locks", "-state" and a node name. */
#define SF_ZKPATH_MAX 500

/* True when path is an absolute ZooKeeper path of at most SF_ZKPATH_MAX bytes, other
 * than "/", with no empty, "." or ".." component and no trailing slash. Otherwise false,
 * with *why (if why is not NULL) saying which rule it breaks. */
bool sf_zkpath_valid(const char *path, const char **why);

/* Parses a worker node's name as a worker id: canonical decimal 0..31 only ("5", not "05",
 * "+5" or " 5"), so that every id has exactly one node name. */
bool sf_zkpath_parse_worker_id(const char *name, int64_t *id);

/* An embedded holder (a process using libsnowflake-zk, which serves no Thrift) describes
 * itself in its worker node as "embedded pid=<pid> host=<host> datacenter=<id>", so that
 * peers and tools know not to query it and can still check its datacenter. */
#define SF_ZKPATH_EMBEDDED_PREFIX "embedded "

/* True when data is an embedded holder's description; *datacenter_id is its datacenter id,
 * or -1 when the description names none. */
bool sf_zkpath_parse_embedded(const char *data, int64_t *datacenter_id);

/* Writes this process's description as an embedded holder of datacenter_id into out. */
void sf_zkpath_format_embedded(char *out, size_t outlen, int64_t datacenter_id);

#endif
