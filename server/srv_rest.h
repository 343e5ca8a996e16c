/* The REST API (rest.c): the route table, declared as data (it also feeds --routes and the
 * OpenAPI check), and the libmicrohttpd daemon's start and stop. */
#ifndef XT_SRV_REST_H
#define XT_SRV_REST_H

#include "xt_err.h"

typedef struct xt_server xt_server; /* xt_server.h */

typedef struct xt_route {
  const char *method;
  const char *path;
  const char *summary;
  void *handler; /* rest.c's handler type, opaque here */
} xt_route;

int xt_rest_route_count(void);
const xt_route *xt_rest_route_at(int i);
int xt_rest_start(xt_server *s, xt_msg *msg);
void xt_rest_stop(xt_server *s);

#endif /* XT_SRV_REST_H */
