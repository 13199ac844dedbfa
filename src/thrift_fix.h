/* thrift_fix.h -- makes the generated Thrift structs' finalize chain up to GObject, which Thrift 0.17's c_glib generator omits. */
#ifndef SF_THRIFT_FIX_H
#define SF_THRIFT_FIX_H

/* Patches every generated SfThrift* struct class so that finalizing an
 * instance also runs GObject's finalize. Without it each struct leaks the
 * GObject data GLib attaches during g_object_unref (about 32 bytes per
 * request and reply). Idempotent and thread-safe; call before the first
 * Thrift call in any program that uses the generated code. */
void sf_thrift_fix_struct_finalize(void);

#endif /* SF_THRIFT_FIX_H */
