/* snowflake.thrift -- the wire contract of snowflaked.
 *
 * The four methods, the two exceptions and AuditLogEntry keep the names and
 * field ids of Twitter's original Snowflake IDL, so a client built for a
 * legacy node works unchanged (framed transport, binary protocol, port 7609).
 * The original declared no throws clause; a client built from it sees a
 * declared exception as a failed call ("unknown result"), never as an id.
 * Additions: get_ids, and two exceptions for its count and for a node that
 * does not hold a worker id at the moment (starting up, or fenced). */
namespace c_glib SfThrift
namespace java com.twitter.service.snowflake.gen
namespace rb Snowflake
namespace py snowflake_thrift

exception InvalidSystemClock {
  1: string message,
}

exception InvalidUserAgentError {
  1: string message,
}

/* get_ids: a count outside 1..max_batch_size. */
exception InvalidRequestError {
  1: string message,
}

/* The node is not handing out ids now: it has not claimed its worker id yet,
 * or it has lost its ZooKeeper session and must assume another node holds it. */
exception ServiceUnavailable {
  1: string message,
}

struct AuditLogEntry {
  1: i64 id,
  2: string useragent,
  3: i64 tag
}

service Snowflake {
  i64 get_worker_id()
  i64 get_timestamp()
  i64 get_id(1:string useragent)
    throws (1: InvalidSystemClock clock_error,
            2: InvalidUserAgentError agent_error,
            3: ServiceUnavailable unavailable)
  i64 get_datacenter_id()

  /* count ids, strictly increasing, under the same rules as get_id. */
  list<i64> get_ids(1:string useragent, 2:i32 count)
    throws (1: InvalidSystemClock clock_error,
            2: InvalidUserAgentError agent_error,
            3: InvalidRequestError request_error,
            4: ServiceUnavailable unavailable)
}
