/* scribe.thrift -- the part of Facebook's scribe log collector that snowflaked
 * speaks: Log(list<LogEntry>), framed transport, binary protocol. Legacy scribe
 * servers extend fb303's FacebookService too; calls to Log are the same on the
 * wire, so nothing else is declared here (nor is the service name: it is
 * Scribe here because the C generator mishandles a lower-case one). The audit
 * log sends through it. */
namespace c_glib SfScribe
namespace py scribe_thrift

enum ResultCode {
  OK = 0,
  TRY_LATER = 1
}

struct LogEntry {
  1: string category,
  2: string message
}

service Scribe {
  ResultCode Log(1: list<LogEntry> messages);
}
