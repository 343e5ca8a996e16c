/* Who may talk to the server: the Host, Origin and Authorization checks that REST (rest.c) and
 * the WebSocket upgrade (ws.c) share, so both ports answer a request the same way.
 *
 * - Host: an IP literal (a DNS-rebinding attack always uses a name, so an address cannot be
 *   rebound), "localhost", or a name given with --allow-host. Anything else is refused: a page on
 *   evil.example whose name was re-pointed at 127.0.0.1 still sends Host: evil.example.
 * - Origin (sent by browsers, absent from other clients): the server's own REST origin (the
 *   console page is served from the REST port: http[s]://<localhost, 127.0.0.1, [::1], the bind
 *   address or the request's own host>:<rest port>) or one given with --allow-origin; "null" and
 *   every other origin are refused.
 * - Authorization: "Bearer TOKEN", the scheme case-insensitive (RFC 9110 11.1), one or more
 *   spaces, the token compared in constant time. */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "srv_guard.h"
#include "xt_console.h"
#include "xt_server.h"

/* The host part of a Host or origin authority ("name", "1.2.3.4", "[::1]"), port stripped:
 * copies it into out (without brackets for IPv6) and sets *port (-1 when absent). 0 on a
 * malformed value. */
static int split_authority(const char *a, size_t n, char *out, size_t cap, int *port, int *v6) {
  *port = -1;
  *v6 = 0;
  const char *h = a, *end = a + n, *colon = NULL;
  size_t hl;
  if (n && a[0] == '[') {
    const char *rb = memchr(a, ']', n);
    if (!rb) return 0;
    h = a + 1;
    hl = (size_t)(rb - h);
    *v6 = 1;
    if (rb + 1 < end) {
      if (rb[1] != ':') return 0;
      colon = rb + 1;
    }
  } else {
    colon = memchr(a, ':', n);
    hl = colon ? (size_t)(colon - a) : n;
  }
  if (colon) {
    const char *p = colon + 1;
    if (p == end || end - p > 5) return 0;
    int v = 0;
    for (; p < end; p++) {
      if (!isdigit((unsigned char)*p)) return 0;
      v = v * 10 + (*p - '0');
    }
    if (v > 65535) return 0;
    *port = v;
  }
  if (hl == 0 || hl >= cap) return 0;
  memcpy(out, h, hl);
  out[hl] = 0;
  for (size_t i = 0; i < hl; i++)
    if ((unsigned char)out[i] <= ' ' || out[i] == '/' || out[i] == '@' || out[i] == '\\') return 0;
  return 1;
}

static int is_ip_literal(const char *h, int v6) {
  unsigned char b[16];
  return v6 ? inet_pton(AF_INET6, h, b) == 1 : inet_pton(AF_INET, h, b) == 1;
}

int xt_host_ok(const xt_server *s, const char *host) {
  if (!host) return 0;
  char h[256];
  int port, v6;
  if (!split_authority(host, strlen(host), h, sizeof h, &port, &v6)) return 0;
  if (is_ip_literal(h, v6) || !strcasecmp(h, "localhost")) return 1;
  for (int i = 0; i < s->cfg.nallow_hosts; i++)
    if (!strcasecmp(h, s->cfg.allow_hosts[i])) return 1;
  return 0;
}

/* "scheme://authority" of an --allow-origin entry or a request, compared case-insensitively and
 * with the default port made explicit. */
static int origin_norm(const char *o, char *out, size_t cap) {
  const char *sep = strstr(o, "://");
  if (!sep) return 0;
  size_t sl = (size_t)(sep - o);
  char scheme[8];
  if (sl == 0 || sl >= sizeof scheme) return 0;
  for (size_t i = 0; i < sl; i++) scheme[i] = (char)tolower((unsigned char)o[i]);
  scheme[sl] = 0;
  const char *a = sep + 3;
  size_t al = strlen(a);
  while (al && a[al - 1] == '/') al--;
  char h[256];
  int port, v6;
  if (!split_authority(a, al, h, sizeof h, &port, &v6)) return 0;
  if (port < 0) port = !strcmp(scheme, "https") ? 443 : !strcmp(scheme, "http") ? 80 : -1;
  for (char *p = h; *p; p++) *p = (char)tolower((unsigned char)*p);
  int n = snprintf(out, cap, "%s://%s%s%s:%d", scheme, v6 ? "[" : "", h, v6 ? "]" : "", port);
  return n > 0 && (size_t)n < cap;
}

int xt_origin_ok(const xt_server *s, const char *origin, const char *host, int *listed) {
  if (listed) *listed = 0;
  if (!origin) return 1; /* not a browser */
  char o[320], e[320];
  if (!origin_norm(origin, o, sizeof o)) return 0; /* "null", garbage */
  for (int i = 0; i < s->cfg.nallow_origins; i++)
    if (origin_norm(s->cfg.allow_origins[i], e, sizeof e) && !strcmp(o, e)) {
      if (listed) *listed = 1;
      return 1;
    }
  /* The server's own REST origin, under any of the names it answers to. */
  const char *scheme = s->tls ? "https" : "http";
  char hh[256] = "";
  int port, v6 = 0;
  if (host) split_authority(host, strlen(host), hh, sizeof hh, &port, &v6);
  const char *names[] = {"localhost", "127.0.0.1", "[::1]", s->cfg.bind, hh};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (!names[i][0]) continue;
    int lit6 = i == 4 ? v6 : (i == 3 && strchr(names[i], ':') != NULL);
    char want[320];
    snprintf(want, sizeof want, "%s://%s%s%s", scheme, lit6 ? "[" : "", names[i], lit6 ? "]" : "");
    char wn[320];
    size_t k = strlen(want);
    snprintf(want + k, sizeof want - k, ":%d", s->rest_port);
    if (origin_norm(want, wn, sizeof wn) && !strcmp(o, wn)) return 1;
  }
  return 0;
}

int xt_token_eq(const xt_server *s, const char *t, size_t m) {
  size_t n = strlen(s->cfg.token);
  unsigned diff = (unsigned)(n ^ m);
  for (size_t i = 0; i < n; i++) diff |= (unsigned)(s->cfg.token[i] ^ (i < m ? t[i] : 0));
  return diff == 0;
}

int xt_bearer_ok(const xt_server *s, const char *authorization) {
  if (!s->cfg.token[0]) return 1;
  if (!authorization || strncasecmp(authorization, "bearer", 6) != 0 || authorization[6] != ' ') return 0;
  const char *t = authorization + 6;
  while (*t == ' ') t++;
  return xt_token_eq(s, t, strlen(t));
}

int xt_media_is_json(const char *ctype) {
  if (!ctype) return 0;
  while (*ctype == ' ') ctype++;
  size_t n = strcspn(ctype, "; \t");
  return n == 16 && !strncasecmp(ctype, "application/json", 16);
}

int xt_guard_request(const xt_server *s, const xt_head *h, int *err, char *t, size_t cap) {
  if (!h->host) {
    if (!h->http10) {
      snprintf(t, cap, "HTTP/1.1 request without a Host header");
      return *err = XT_EFORMAT, 400;
    }
  } else if (!xt_host_ok(s, h->host)) {
    snprintf(t, cap, "Host '%.200s' is not one this server answers to (an IP address, localhost or --allow-host)",
             h->host);
    return *err = XT_EPERM, 403;
  }
  if (!xt_origin_ok(s, h->origin, h->host, NULL)) {
    snprintf(t, cap, "Origin '%.200s' is not allowed (start the server with --allow-origin to allow it)", h->origin);
    return *err = XT_EPERM, 403;
  }
  if (!strcmp(h->method, "OPTIONS")) return 0; /* a CORS preflight carries no credentials */
  /* The console's files are public like any static page: the page asks for the token itself. */
  const int console_get = xt_console_find(h->path) && (!strcmp(h->method, "GET") || !strcmp(h->method, "HEAD"));
  if (!console_get && !xt_bearer_ok(s, h->authorization)) {
    snprintf(t, cap, "missing or wrong bearer token");
    return *err = XT_EAUTH, 401;
  }
  if (h->content_length > (long long)s->cfg.max_body) {
    snprintf(t, cap, "request body over %d bytes", s->cfg.max_body);
    return *err = XT_ETOOLARGE, 413;
  }
  int has_body = h->content_length > 0 || h->transfer_encoding;
  if ((has_body || h->content_type) && !xt_media_is_json(h->content_type)) {
    snprintf(t, cap, "request bodies must be Content-Type: application/json (got %.100s)",
             h->content_type ? h->content_type : "none");
    return *err = XT_EUNSUPPORTED, 415;
  }
  return 0;
}
