/* thrift_fix.h -- mends Thrift 0.17's c_glib code at run time: struct finalize not
 * chaining up, method names lost on malformed requests, and a framed transport's flush
 * that hides a failed write. */
#ifndef SF_THRIFT_FIX_H
#define SF_THRIFT_FIX_H

/* Patches every generated SfThrift* and SfScribe* struct class, and the library's
 * ThriftApplicationException, ThriftSocket, ThriftFramedTransport, ThriftBinaryProtocol
 * and ThriftMemoryBuffer, so that finalizing an instance also runs its parent's finalize;
 * a class without a finalize of its own (it inherits one that chains) is left alone.
 * Without it each instance leaks the GObject data GLib attaches during g_object_unref
 * (about 32 bytes per request and reply, 96 per client connection). Idempotent and
 * thread-safe; servers call it from main and libsnowflake-client from sfc_open, before
 * any Thrift object of theirs exists. Verified on Thrift 0.17 only, whose finalizers do
 * not chain up (configure refuses other versions: on one whose finalizers chain, this
 * would run the parent's finalize twice). */
void sf_thrift_fix_finalize(void);

/* Replaces two steps of the library's request processing with ones that
 * answer the same but free the method name on every path: reading the
 * message header (the library leaks the name when the message is not a call
 * or ends before its sequence id) and answering an unknown method (leaked
 * when its arguments cannot be skipped). Without this every such malformed
 * frame leaks a few bytes, so a hostile client could grow the server without
 * bound. Idempotent; servers call it before serving. */
void sf_thrift_fix_processor(void);

/* Makes ThriftFramedTransport's flush return FALSE, with the write's error, when its
 * write to the underlying transport failed. The library's flush ignores that failure and
 * returns TRUE with the error set, so a client whose peer reset the connection goes on
 * to read and sets a second error over the first (GLib warns on standard error, and the
 * error reported is the read's). Idempotent and thread-safe; every program that calls
 * over a framed transport calls it from main, before any transport exists. */
void sf_thrift_fix_transport(void);

#endif /* SF_THRIFT_FIX_H */
