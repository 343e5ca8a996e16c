/* The server's configuration (config.c): one table of options that drives the config file, the
 * command-line flags and GET /v1/info, and the struct it fills. No other server type is needed to
 * read or check a configuration, so the parsers' tests and fuzz target use this header alone. */
#ifndef XT_SRV_CONFIG_H
#define XT_SRV_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "xt_err.h"

/* The server's fixed limits: the table bounds its options by them, the other modules size their
 * arrays by them. */
#define XT_SRV_MAX_MODELS 16
/* The built-in thorax (issue 26): its voxel size, and its guidewire's capacity in points. */
#define XT_SRV_THORAX_VOXEL_MM 1.25
#define XT_SRV_THORAX_WIRE_POINTS 4096
#define XT_SRV_MAX_WORKERS 8
#define XT_SRV_PLANES 2 /* a biplane system: plane A (frontal) and plane B (lateral) */
#define XT_SRV_MAX_HELPERS 15       /* conversion helpers of one render worker */
#define XT_SRV_MAX_CLIENT_STATS 64  /* stream clients with their own /metrics lines */
#define XT_SRV_STR 512
#define XT_SRV_MAX_LIST 16

/* Bounds of the frame rate: the config table checks --fps against them, state.c every update. */
#define XT_FPS_MIN 0.5
#define XT_FPS_MAX 60.0

typedef struct xt_srv_model_cfg {
  char path[XT_SRV_STR];
  char name[64];
  char convert[16]; /* mu | hu | hu-labels | labels */
} xt_srv_model_cfg;

typedef struct xt_srv_config {
  char bind[64];
  int rest_port, ws_port;
  char backend[16]; /* auto | cpu | cuda */
  int threads;      /* CPU projector threads, 0 = all cores */
  int devices;      /* CUDA devices to use, 0 = all */
  char tls_cert[XT_SRV_STR], tls_key[XT_SRV_STR];
  char token[256];
  char mode[32]; /* detector mode, or "auto" */
  int planes;     /* 1, or 2: biplane (plane B lateral) */
  char mode_b[32]; /* plane B's detector mode, or "auto" */
  char timing[16]; /* interleaved | simultaneous */
  double fps;
  char run_mode[16];     /* free | lockstep */
  char pixel_format[16]; /* uint16 | float32 */
  int autostart;
  int chain; /* the imaging chain on at launch */
  char phantom[16]; /* auto | head | thorax | none */
  int phantom_dim;
  double phantom_spacing;
  int max_body;       /* bytes of a REST request body */
  int max_ws_message; /* bytes of a WebSocket text message */
  int rest_threads;
  int max_clients;
  int stream_senders; /* threads writing stream frames: -1 auto (min(4, max_clients)), 0 the service thread */
  int stream_spin_us; /* the stream's service thread polls without sleeping this long from a render's start until
                       * its frame is published (0: it sleeps until woken) */
  int pacer_spin_us;  /* the pacer polls the clock instead of sleeping this long before each exposure (0: sleeps) */
  char ports_file[XT_SRV_STR];
  char scenario[XT_SRV_STR];     /* a scenario file played from the start (srv_scenario.h) */
  char clock[16];               /* real | virtual: the device's clock (srv_clock.h) */
  char session_log[XT_SRV_STR]; /* JSON lines of the session for `xtwin replay` (docs/session-log.md) */
  char study_dir[XT_SRV_STR];   /* the chain runs as DICOM (srv_study.h, docs/dicom.md) */
  char identity[XT_SRV_STR];    /* the study's patient/study identity JSON (xt_dicom_identity_load) */
  char study_store[XT_SRV_STR]; /* HOST:PORT of a PACS the study folder's objects are sent to ("": none) */
  char study_called[XT_SRV_STR]; /* its AE title */
  int study_store_timeout;       /* s: connect, association and each C-STORE's answer */
  int verbose;
  int synthetic;       /* benchmarks/tests: skip the projector, send a constant frame */
  int convert_threads; /* threads of the uint16 conversion per worker, 0 = auto */
  /* volume loading (docs/loaders.md): applied to every model the server loads */
  char hu_model[16];        /* bilinear | linear */
  double ct_energy;         /* keV, bilinear HU -> mu */
  char nifti_transform[16]; /* sform | qform */
  char nan_value[32];       /* "none" (refuse NaN voxels) or a number to fill them with */
  int nmodels;
  xt_srv_model_cfg models[XT_SRV_MAX_MODELS];
  /* Repeatable options (lists in the config file). */
  int nmodel_roots; /* folders POST /v1/models may load from; none: the route is refused */
  char model_roots[XT_SRV_MAX_LIST][XT_SRV_STR];
  int nallow_origins; /* browser origins allowed besides the server's own */
  char allow_origins[XT_SRV_MAX_LIST][256];
  int nallow_hosts; /* Host names accepted besides IP literals and localhost */
  char allow_hosts[XT_SRV_MAX_LIST][256];
  int max_per_addr;   /* REST connections from one client address */
  double head_timeout; /* seconds for a REST request head to arrive in full */
  double request_timeout; /* seconds for a REST request's head and body together */
  int min_body_rate;      /* bytes/s a REST body must average after its head (0: no minimum) */
  double peer_timeout; /* seconds a stream peer may leave sent data unacknowledged (half-open TCP) */
  /* work budgets (budget.c, docs/server.md); 0 where "auto": the backend's default, set at start */
  int gmm_tile_budget;     /* Gaussians reaching one 16x16-pixel tile */
  int gmm_pair_budget;     /* (Gaussian, tile) pairs of one frame */
  int render_pixel_budget; /* pixels of one POST /v1/render */
  int render_threads;      /* CPU threads of the REST render worker's projector, 0 = auto */
  /* contrast (issue 26, docs/contrast.md): the operator's limits on one injection */
  double contrast_max_rate;   /* mL/s */
  double contrast_max_volume; /* mL */
} xt_srv_config;

void xt_srv_config_defaults(xt_srv_config *c);
/* Applies a JSON config file (keys of the table, plus "models"). */
int xt_srv_config_file(xt_srv_config *c, const char *path, xt_msg *msg);
/* The same from a JSON text in memory; `name` stands for the file in messages. */
int xt_srv_config_parse(xt_srv_config *c, const char *text, size_t len, const char *name, xt_msg *msg);
/* Parses argv: --config FILE first, then every --flag of the table; --help/--version/--routes
 * set *action (1 help, 2 version, 3 routes). */
int xt_srv_config_args(xt_srv_config *c, int argc, char **argv, int *action, xt_msg *msg);
void xt_srv_config_usage(FILE *f);
/* The table as JSON (secrets masked), for GET /v1/info. */
json_t *xt_srv_config_json(const xt_srv_config *c);

#endif /* XT_SRV_CONFIG_H */
