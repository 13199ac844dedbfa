/* peer.h -- asks another snowflaked over Thrift for its worker id, datacenter id and clock. */
#ifndef SF_PEER_H
#define SF_PEER_H

#include <stddef.h>
#include <stdint.h>

/* Connects to host_port ("host:port"), framed binary protocol, and calls get_worker_id,
 * get_datacenter_id and get_timestamp, each read bounded by timeout_ms. Returns 0;
 * SF_REGISTRY_PEER_REFUSED when the connection is refused (its port is closed: not serving);
 * or -1 with err naming the peer and the failure. ctx must point to an int holding timeout_ms,
 * so the function fits sf_registry_peer_fn. */
int sf_peer_query(void *ctx, const char *host_port, int64_t *worker_id, int64_t *datacenter_id,
                  int64_t *timestamp_ms, char *err, size_t errlen);

#endif /* SF_PEER_H */
