/* status_page.h -- the admin endpoint's status page (/), a self-contained HTML file
 * (status.html) compiled into the program, so it is served with no file to install. */
#ifndef SF_STATUS_PAGE_H
#define SF_STATUS_PAGE_H

/* The page as a string, newly allocated (free with g_free). */
char *sf_status_page(void);

#endif /* SF_STATUS_PAGE_H */
