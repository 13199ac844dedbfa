/* handler_internal.h -- what the handler's two files share and nothing else sees: the
 * hook by which handler.c's class init plugs handler_thrift.c's methods into the generated
 * Snowflake service's vtable. The public interface is handler.h. */
#ifndef SF_HANDLER_INTERNAL_H
#define SF_HANDLER_INTERNAL_H

#include "handler.h"

void sf_handler_thrift_install(SfThriftSnowflakeHandlerClass *base);

#endif /* SF_HANDLER_INTERNAL_H */
