/* Who may talk to the server: the Host, Origin and token checks REST and the stream upgrade share
 * (guard.c), and the REST port's accept gate in front of libmicrohttpd (gate.c). */
#ifndef XT_SRV_GUARD_H
#define XT_SRV_GUARD_H

#include <stddef.h>

#include "xt_err.h"

typedef struct xt_server xt_server; /* xt_server.h */

/* ---- checks on a request (guard.c) ---------------------------------------------------------- */

/* A Host header value the server answers to: an IP literal, localhost or an --allow-host name. */
int xt_host_ok(const xt_server *s, const char *host);
/* An Origin header (NULL: not a browser, allowed): the server's own REST origin or an
 * --allow-origin entry (*listed set then). host: the request's Host, for same-origin requests. */
int xt_origin_ok(const xt_server *s, const char *origin, const char *host, int *listed);
/* "Bearer TOKEN" (scheme case-insensitive) against --token; 1 when no token is configured. */
int xt_bearer_ok(const xt_server *s, const char *authorization);
int xt_token_eq(const xt_server *s, const char *t, size_t n);
/* A Content-Type of application/json (parameters such as charset allowed). */
int xt_media_is_json(const char *ctype);
/* What the checks on a REST request head look at, filled by the gate from the raw head (before
 * any body byte is read) and by rest.c from libmicrohttpd's parse (TLS, where the gate sees no
 * head). Absent headers are NULL. */
typedef struct xt_head {
  const char *method, *path; /* path without the query */
  int http10;
  const char *host, *origin, *authorization, *content_type, *transfer_encoding;
  long long content_length; /* -1: none */
} xt_head;
/* Host, Origin, the token, the body's announced size and its content type, in that order: 0 when
 * the request may go on (OPTIONS stops after Origin: rest.c answers it), else the HTTP status,
 * with *err and the message set (401 wants a WWW-Authenticate header). */
int xt_guard_request(const xt_server *s, const xt_head *h, int *err, char *message, size_t cap);

/* ---- the REST port's accept gate (gate.c) --------------------------------------------------- */

struct sockaddr;
/* Listens (sets s->rest_port); xt_gate_run starts accepting once s->mhd exists. */
int xt_gate_start(xt_server *s, const struct sockaddr *sa, unsigned salen, xt_msg *msg);
int xt_gate_run(xt_server *s, xt_msg *msg);
void xt_gate_stop_accepting(xt_server *s);
void xt_gate_free(xt_server *s);
/* Checks a complete request head (len bytes up to and including the blank line): 0 when it is a
 * well-formed HTTP/1.0 or 1.1 head, else the status to answer (400, 414) with *why set. */
int xt_gate_check_head(const char *h, size_t len, const char **why);
/* A connection libmicrohttpd had from this address is closed (its per-address count). */
void xt_gate_release(xt_server *s, const struct sockaddr *sa);
/* Bytes of head + body the gate can hold in a socket's receive buffer (what the kernel granted):
 * a request body is only handed to libmicrohttpd once it has arrived in full. */
size_t xt_gate_capacity(const xt_server *s);

#endif /* XT_SRV_GUARD_H */
