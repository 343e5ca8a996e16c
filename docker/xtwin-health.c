/* xtwin-health: the container's health probe. GET /v1/health of the xtwin-server in the same
 * container; exit 0 when it answers 200 with "status": "ok", 1 otherwise (one line on stderr).
 *
 *   xtwin-health [--config FILE] [URL]
 *
 * It reads the server's own JSON config file (--config FILE, which must exist; else
 * $XTWIN_CONFIG or /etc/xtwin/config.json when present) for what a probe must match: "rest_port", "token" (with
 * --token every route needs it, health included) and "tls_cert" (then https). A URL argument or
 * $XTWIN_HEALTH_URL overrides the address; $XTWIN_TOKEN the token. Default
 * http://127.0.0.1:8710/v1/health.
 *
 * Why not curl: the runtime image holds only the server, the CLI and the libraries they load;
 * this probe needs nothing more (OpenSSL and jansson are already there for the server), where
 * curl would add its own libraries (~20: nghttp2, ssh2, ldap, kerberos, ...). TLS: the
 * certificate is not verified; the probe talks to its own process over loopback, and the server's
 * certificate names its public host, not 127.0.0.1. */
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#define TIMEOUT_S 5

typedef struct target {
  int tls;
  char host[300], port[16], path[512];
  char token[512];
} target;

static int fail(const char *what) {
  fprintf(stderr, "xtwin-health: %s\n", what);
  return 1;
}

/* scheme://host[:port]/path, host may be [v6]. */
static int parse_url(const char *url, target *t) {
  const char *p;
  if (!strncmp(url, "http://", 7)) t->tls = 0, p = url + 7;
  else if (!strncmp(url, "https://", 8)) t->tls = 1, p = url + 8;
  else return -1;
  const char *slash = strchr(p, '/');
  size_t hp = slash ? (size_t)(slash - p) : strlen(p);
  char hostport[300];
  if (hp == 0 || hp >= sizeof hostport) return -1;
  memcpy(hostport, p, hp);
  hostport[hp] = 0;
  snprintf(t->path, sizeof t->path, "%s", slash ? slash : "/v1/health");
  char *colon = hostport[0] == '[' ? strstr(hostport, "]:") : strrchr(hostport, ':');
  if (colon) {
    if (hostport[0] == '[') colon++;
    *colon = 0;
    snprintf(t->port, sizeof t->port, "%s", colon + 1);
  } else
    snprintf(t->port, sizeof t->port, "%s", t->tls ? "443" : "80");
  char *h = hostport;
  if (h[0] == '[') {
    h++;
    h[strcspn(h, "]")] = 0;
  }
  snprintf(t->host, sizeof t->host, "%s", h);
  return 0;
}

/* rest_port, token and tls_cert from the server's config file (absent file: defaults). */
static int read_config(const char *path, int required, target *t) {
  FILE *f = fopen(path, "rb");
  if (!f) return required ? -1 : 0;
  json_error_t err;
  json_t *j = json_loadf(f, 0, &err);
  fclose(f);
  if (!json_is_object(j)) {
    json_decref(j);
    fprintf(stderr, "xtwin-health: %s: not a JSON object (%s)\n", path, err.text);
    return -1;
  }
  json_t *port = json_object_get(j, "rest_port");
  if (json_is_integer(port)) snprintf(t->port, sizeof t->port, "%d", (int)json_integer_value(port));
  const char *tok = json_string_value(json_object_get(j, "token"));
  if (tok) snprintf(t->token, sizeof t->token, "%s", tok);
  const char *cert = json_string_value(json_object_get(j, "tls_cert"));
  t->tls = cert && *cert;
  json_decref(j);
  return 0;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char m[] = "xtwin-health: no answer within 5 s\n";
  ssize_t n = write(2, m, sizeof m - 1);
  (void)n;
  _exit(1);
}

int main(int argc, char **argv) {
  target t;
  memset(&t, 0, sizeof t);
  snprintf(t.host, sizeof t.host, "127.0.0.1");
  snprintf(t.port, sizeof t.port, "8710");
  snprintf(t.path, sizeof t.path, "/v1/health");
  const char *config = getenv("XTWIN_CONFIG"), *url = getenv("XTWIN_HEALTH_URL");
  int config_required = 0; /* only a --config FILE must exist */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--config") && i + 1 < argc) config = argv[++i], config_required = 1;
    else if (!strcmp(argv[i], "--help")) {
      printf("usage: xtwin-health [--config FILE] [URL]  (exit 0: the server answers GET /v1/health)\n");
      return 0;
    } else if (argv[i][0] != '-') url = argv[i];
    else return fail("usage: xtwin-health [--config FILE] [URL]");
  }
  if (read_config(config ? config : "/etc/xtwin/config.json", config_required, &t)) return fail("cannot read the config");
  if (url && parse_url(url, &t)) return fail("URL must be http://host[:port]/path or https://...");
  const char *tok = getenv("XTWIN_TOKEN");
  if (tok) snprintf(t.token, sizeof t.token, "%s", tok);

  signal(SIGALRM, on_alarm);
  alarm(TIMEOUT_S);
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(t.host, t.port, &hints, &ai) || !ai) return fail("cannot resolve the host");
  int fd = -1;
  for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen)) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(ai);
  if (fd < 0) return fail("connection refused");

  SSL_CTX *ctx = NULL;
  SSL *ssl = NULL;
  if (t.tls) {
    ctx = SSL_CTX_new(TLS_client_method());
    ssl = ctx ? SSL_new(ctx) : NULL;
    int named = strspn(t.host, "0123456789.:") != strlen(t.host); /* SNI carries names, not addresses */
    if (!ssl || !SSL_set_fd(ssl, fd) || (named && !SSL_set_tlsext_host_name(ssl, t.host)) || SSL_connect(ssl) != 1)
      return fail("TLS handshake failed");
  }
  char req[2048];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s%s%s:%s\r\n%s%s%sAccept: application/json\r\n"
                   "Connection: close\r\n\r\n", t.path, strchr(t.host, ':') ? "[" : "", t.host,
                   strchr(t.host, ':') ? "]" : "", t.port, t.token[0] ? "Authorization: Bearer " : "", t.token,
                   t.token[0] ? "\r\n" : "");
  if (n <= 0 || n >= (int)sizeof req) return fail("request too long");
  if ((ssl ? SSL_write(ssl, req, n) : (int)write(fd, req, (size_t)n)) != n) return fail("cannot send the request");
  char resp[8192];
  size_t got = 0;
  for (;;) {
    int k = ssl ? SSL_read(ssl, resp + got, (int)(sizeof resp - 1 - got)) : (int)read(fd, resp + got, sizeof resp - 1 - got);
    if (k <= 0) break;
    got += (size_t)k;
    if (got == sizeof resp - 1) break;
  }
  resp[got] = 0;
  if (ssl) SSL_free(ssl);
  if (ctx) SSL_CTX_free(ctx);
  close(fd);
  int status = 0;
  if (sscanf(resp, "HTTP/1.%*d %d", &status) != 1) return fail("no HTTP answer");
  const char *body = strstr(resp, "\r\n\r\n");
  if (status != 200 || !body || !strstr(body, "\"ok\"")) {
    char line[160];
    snprintf(line, sizeof line, "HTTP %d%s%.100s", status, body ? ": " : "", body ? body + 4 : "");
    for (char *c = line, *o = line;; c++) { /* the JSON body on one line, runs of blanks as one */
      if (*c == '\r' || *c == '\n' || *c == '\t') *c = ' ';
      if (*c == ' ' && o > line && o[-1] == ' ') continue;
      if (!(*o++ = *c)) break;
    }
    return fail(line);
  }
  return 0;
}
