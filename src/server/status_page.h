/* status_page.h -- the admin endpoint's status page (/), a self-contained HTML file
 * (status.html) compiled into the program, so it is served with no file to install. */
#ifndef SF_STATUS_PAGE_H
#define SF_STATUS_PAGE_H

#include <glib.h>

/* The page as a string, newly allocated (free with g_free). */
char *sf_status_page(void);

/* The icon (/favicon.ico) newly allocated, *len bytes (free with g_free); NULL if missing. */
void *sf_status_icon(gsize *len);

#endif /* SF_STATUS_PAGE_H */
