/* The browser console's static files (server/console/), compiled into xtwin-server by
 * server/console/embed.cmake so that the binary alone serves it at "/": no files to install, no
 * CDN. rest.c serves them on GET without the bearer token (they hold no data: the page asks for
 * the token and sends it with every API request and on the stream upgrade). */
#ifndef XT_CONSOLE_H
#define XT_CONSOLE_H

#include <stddef.h>

typedef struct xt_console_asset {
  const char *path;  /* URL path: "/" for index.html, else "/<file name>" */
  const char *ctype; /* Content-Type */
  const unsigned char *data;
  size_t len;
} xt_console_asset;

/* Terminated by an entry whose path is NULL (generated: console_assets.c in the build tree). */
extern const xt_console_asset xt_console_assets[];

/* The asset served at url (the path without query), or NULL. */
const xt_console_asset *xt_console_find(const char *url);

#endif /* XT_CONSOLE_H */
