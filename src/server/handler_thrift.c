/* handler_thrift.c -- the Snowflake service's methods as the generated Thrift processor
 * calls them: each forwards to the handler's plain call (handler.c) and turns a refusal
 * into the exception the method declares. Knows the generated types, nothing of workers. */
#include "handler_internal.h"

/* Turns a refusal into the declared exception the generated processor writes, taking
 * message; request is NULL for a method that does not declare InvalidRequestError. */
static void sf_handler_thrift_raise(sf_handler_outcome o, char *message,
                                    SfThriftInvalidSystemClock **clock_error,
                                    SfThriftInvalidUserAgentError **agent_error,
                                    SfThriftInvalidRequestError **request_error,
                                    SfThriftServiceUnavailable **unavailable)
{
    switch (o) {
    case SF_HANDLER_INVALID_SYSTEM_CLOCK:
        *clock_error = g_object_new(SF_THRIFT_TYPE_INVALID_SYSTEM_CLOCK, "message", message, NULL);
        break;
    case SF_HANDLER_INVALID_USER_AGENT:
        *agent_error =
            g_object_new(SF_THRIFT_TYPE_INVALID_USER_AGENT_ERROR, "message", message, NULL);
        break;
    case SF_HANDLER_INVALID_REQUEST:
        *request_error =
            g_object_new(SF_THRIFT_TYPE_INVALID_REQUEST_ERROR, "message", message, NULL);
        break;
    case SF_HANDLER_SERVICE_UNAVAILABLE:
        *unavailable = g_object_new(SF_THRIFT_TYPE_SERVICE_UNAVAILABLE, "message", message, NULL);
        break;
    case SF_HANDLER_OK:
        break;
    }
    g_free(message);
}

/* The service's methods as the generated processor calls them, through the vtable. */
static gboolean sf_handler_thrift_get_worker_id(SfThriftSnowflakeIf *iface, gint64 *_return,
                                                GError **error)
{
    (void)error;
    *_return = sf_handler_call_get_worker_id(SF_HANDLER(iface));
    return TRUE;
}

static gboolean sf_handler_thrift_get_datacenter_id(SfThriftSnowflakeIf *iface, gint64 *_return,
                                                    GError **error)
{
    (void)error;
    *_return = sf_handler_call_get_datacenter_id(SF_HANDLER(iface));
    return TRUE;
}

static gboolean sf_handler_thrift_get_timestamp(SfThriftSnowflakeIf *iface, gint64 *_return,
                                                GError **error)
{
    (void)error;
    *_return = sf_handler_call_get_timestamp(SF_HANDLER(iface));
    return TRUE;
}

static gboolean sf_handler_thrift_get_id(SfThriftSnowflakeIf *iface, gint64 *_return,
                                         const gchar *useragent,
                                         SfThriftInvalidSystemClock **clock_error,
                                         SfThriftInvalidUserAgentError **agent_error,
                                         SfThriftServiceUnavailable **unavailable, GError **error)
{
    (void)error;
    char *message = NULL;
    int64_t id;
    sf_handler_outcome o = sf_handler_call_get_id(SF_HANDLER(iface), useragent, &id, &message);
    if (o == SF_HANDLER_OK) {
        *_return = id;
        return TRUE;
    }
    sf_handler_thrift_raise(o, message, clock_error, agent_error, NULL, unavailable);
    return FALSE;
}

static gboolean sf_handler_thrift_get_ids(SfThriftSnowflakeIf *iface, GArray **_return,
                                          const gchar *useragent, const gint32 count,
                                          SfThriftInvalidSystemClock **clock_error,
                                          SfThriftInvalidUserAgentError **agent_error,
                                          SfThriftInvalidRequestError **request_error,
                                          SfThriftServiceUnavailable **unavailable, GError **error)
{
    (void)error;
    SfHandler *h = SF_HANDLER(iface);
    GArray *ids = *_return;
    gboolean fits = count >= 1 && count <= sf_handler_max_batch_size(h);
    if (fits)
        g_array_set_size(ids, (guint)count);
    char *message = NULL;
    sf_handler_outcome o = sf_handler_call_get_ids(
        h, useragent, count, fits ? (int64_t *)(void *)ids->data : NULL, &message);
    if (o == SF_HANDLER_OK)
        return TRUE;
    g_array_set_size(ids, 0);
    sf_handler_thrift_raise(o, message, clock_error, agent_error, request_error, unavailable);
    return FALSE;
}

void sf_handler_thrift_install(SfThriftSnowflakeHandlerClass *base)
{
    base->get_worker_id = sf_handler_thrift_get_worker_id;
    base->get_timestamp = sf_handler_thrift_get_timestamp;
    base->get_id = sf_handler_thrift_get_id;
    base->get_datacenter_id = sf_handler_thrift_get_datacenter_id;
    base->get_ids = sf_handler_thrift_get_ids;
}
