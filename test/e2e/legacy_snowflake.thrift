# legacy_snowflake.thrift -- the service as the original Snowflake declared it: the
# four methods, no throws clauses, no get_ids. Clients generated from it are what a
# legacy fleet runs; the drop-in tests talk through one.
namespace py legacy_snowflake

service Snowflake {
  i64 get_worker_id()
  i64 get_timestamp()
  i64 get_id(1:string useragent)
  i64 get_datacenter_id()
}
