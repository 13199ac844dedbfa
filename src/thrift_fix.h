/* thrift_fix.h -- mends leaks of Thrift 0.17's c_glib code at run time: struct
 * finalize not chaining up, and method names lost on malformed requests. */
#ifndef SF_THRIFT_FIX_H
#define SF_THRIFT_FIX_H

/* Patches every generated SfThrift* and SfScribe* struct class, and the library's
 * ThriftApplicationException, ThriftFramedTransport, ThriftBinaryProtocol and
 * ThriftMemoryBuffer, so that finalizing an instance also runs its parent's finalize;
 * a class without a finalize of its own (it inherits one that chains) is left alone.
 * Without it each instance leaks the GObject data GLib attaches during g_object_unref
 * (about 32 bytes per request and reply, 96 per client connection). Idempotent and
 * thread-safe; servers and long-running clients call it from main, before any
 * Thrift object exists. Verified on Thrift 0.17 only, whose finalizers do not chain
 * up (configure refuses other versions: on one whose finalizers chain, this would
 * run the parent's finalize twice). */
void sf_thrift_fix_finalize(void);

/* Replaces two steps of the library's request processing with ones that
 * answer the same but free the method name on every path: reading the
 * message header (the library leaks the name when the message is not a call
 * or ends before its sequence id) and answering an unknown method (leaked
 * when its arguments cannot be skipped). Without this every such malformed
 * frame leaks a few bytes, so a hostile client could grow the server without
 * bound. Idempotent; servers call it before serving. */
void sf_thrift_fix_processor(void);

#endif /* SF_THRIFT_FIX_H */
