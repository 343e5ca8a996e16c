/* Look-up of the browser console's compiled-in files (xt_console.h; the table itself is generated
 * by server/console/embed.cmake). */
#include <string.h>

#include "xt_console.h"

const xt_console_asset *xt_console_find(const char *url) {
  if (!url) return NULL;
  for (const xt_console_asset *a = xt_console_assets; a->path; a++)
    if (!strcmp(a->path, url)) return a;
  return NULL;
}
