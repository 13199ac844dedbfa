/* status_page.c -- the status page and its icon out of the compiled-in GResource
 * (status.gresource.xml). */
#include "status_page.h"

#include <gio/gio.h>

#include "status_resource.h" /* generated into gen/ of the build tree */

char *sf_status_page(void)
{
    GBytes *page = g_resource_lookup_data(sf_status_get_resource(),
                                          "/org/snowflake/admin/status.html",
                                          G_RESOURCE_LOOKUP_FLAGS_NONE, NULL);
    if (page == NULL) /* compiled in: missing only from a broken build */
        return g_strdup("the status page is missing from this build of snowflaked\n");
    gsize n;
    const char *data = g_bytes_get_data(page, &n);
    char *copy = g_strndup(data, n);
    g_bytes_unref(page);
    return copy;
}

void *sf_status_icon(gsize *len)
{
    GBytes *icon = g_resource_lookup_data(sf_status_get_resource(),
                                          "/org/snowflake/admin/favicon.ico",
                                          G_RESOURCE_LOOKUP_FLAGS_NONE, NULL);
    if (icon == NULL) /* compiled in: missing only from a broken build */
        return NULL;
    const void *data = g_bytes_get_data(icon, len);
    void *copy = g_memdup2(data, *len);
    g_bytes_unref(icon);
    return copy;
}
