/* Exposure settings of the imaging chain (issue 11): tube current and pulse width beside the frame's
 * mAs, focal spot, anti-scatter grid, collimation (four shutters, two wedge filters), the protocol
 * presets (low/normal/high-dose fluoroscopy, cine 15/30 fps, DSA), and the per-pixel transmission of
 * the collimator and the grid that the detect stage applies (XT_HOSTDEV, one formula for the CPU
 * and the GPU). The protocols and their dose control curves are data: imaging/protocols.tsv and
 * imaging/dose_curves.tsv (issue 24), compiled in.
 *
 * The settings are rows of the chain's parameter table (xt_chain_params.c), so the CLI, the server's
 * REST and WebSocket `chain` object, the sidecar and docs/imaging.md carry them like any other
 * parameter. mAs stays the quantity the physics uses; the tube current is the derived mA = mAs /
 * pulse width, kept coherent by xt_exposure_set. docs/imaging.md "Exposure" gives the sources. */
#ifndef XT_EXPOSURE_H
#define XT_EXPOSURE_H

#include "xt_vec.h"

/* The collimator and grid on the render grid of one frame: shutters in render-pixel units (a pixel
 * is in the field when its centre is), wedges likewise, and the grid's primary transmission. */
typedef struct xt_collim {
  float u0, u1, v0, v1;   /* open field: u0 <= col + 0.5 < u1, v0 <= row + 0.5 < v1 */
  float wl, wr;           /* wedges cover col + 0.5 < wl (left) and col + 0.5 >= wr (right) */
  float wedge_t;          /* a wedge's transmission */
  float grid_tp;          /* the grid's primary transmission (1 with the grid out) */
} xt_collim;

/* Fraction of the primary beam reaching pixel (col, row): 0 behind a shutter (lead: its
 * transmission at these energies, < 1e-6 for 1 mm, is taken as 0), the wedge's transmission under
 * a wedge (energy-independent: the wedge's hardening is not modelled), times the grid's. The
 * absorbed energy's mean and second moment both scale by it (binomial thinning of the quanta). */
static XT_INLINE XT_HOSTDEV float xt_collim_t(const xt_collim *k, int col, int row) {
  const float x = (float)col + 0.5f, y = (float)row + 0.5f;
  if (x < k->u0 || x >= k->u1 || y < k->v0 || y >= k->v1) return 0.f;
  float t = k->grid_tp;
  if (x < k->wl || x >= k->wr) t *= k->wedge_t;
  return t;
}

#ifndef __CUDACC__
#include "xt_chain.h"
#include "xt_drc_math.h"

/* The protocols: the rows of imaging/protocols.tsv (compiled in, read once on first use); the
 * `protocol` parameter is a row's index, 0 = custom settings. The first seven rows are issue 11's
 * presets, whose ids the enum names; docs/protocols.md describes the table. */
enum {
  XT_PROTOCOL_CUSTOM = 0,
  XT_PROTOCOL_FLUORO_LOW = 1,
  XT_PROTOCOL_FLUORO_NORMAL = 2,
  XT_PROTOCOL_FLUORO_HIGH = 3,
  XT_PROTOCOL_CINE_15 = 4,
  XT_PROTOCOL_CINE_30 = 5,
  XT_PROTOCOL_DSA = 6,
  XT_PROTOCOL_MAX = 255 /* the most rows the `protocol` parameter's range admits */
};
/* The number of protocols (rows of the table), custom included. */
int xt_protocol_count(void);
#define XT_PROTOCOL_COUNT (xt_protocol_count())

enum { XT_PROTOCOL_KIND_CUSTOM = 0, XT_PROTOCOL_KIND_FLUORO, XT_PROTOCOL_KIND_EXPOSURE, XT_PROTOCOL_KIND_DSA };

#define XT_PROTOCOL_MAX_PHASES 8

/* One phase of a multiphase run: this many frames per second for this long. */
typedef struct xt_protocol_phase {
  double fps, seconds;
} xt_protocol_phase;

/* A row of the table (strings point into the parsed table and live as long as it). */
typedef struct xt_protocol {
  const char *name, *kind_name, *curve_name, *patient, *source;
  int kind;                  /* XT_PROTOCOL_KIND_* */
  double fps, kv, ma, pulse_ms, filter_al_mm, filter_cu_mm;
  double detector_ngy;       /* requested detector dose per frame at the largest field */
  double temporal_alpha;
  double prepare_ms, first_frame_ms; /* the device's latencies when its switch starts this protocol */
  int curve;                 /* index into the table's dose control curves */
  int nphases;               /* 0: one phase at fps */
  xt_protocol_phase phase[XT_PROTOCOL_MAX_PHASES];
} xt_protocol;

/* "custom", "fluoro_low", ...: NULL past the end. */
const char *xt_protocol_name(int id);
int xt_protocol_find(const char *name); /* -1 when unknown */
/* The row, or NULL past the end. */
const xt_protocol *xt_protocol_at(int id);
/* Frames per second the protocol runs at (the server's acquisition fps follows it); 0 for custom. */
double xt_protocol_fps(int id);
/* A multiphase protocol's phases (at most cap into out); returns their count, 0 for one phase. */
int xt_protocol_phases(int id, xt_protocol_phase *out, int cap);
/* The frame speed t seconds into a run of the protocol: the phase t falls in (the last phase goes on
 * after the table's durations); the protocol's fps when it has one phase. */
double xt_protocol_fps_at(int id, double t_s);
/* Writes the protocol's exposure settings into p (kV, mA, pulse width, filter, grid, dose-rate
 * control and its target, processing); other parameters are kept. */
int xt_protocol_apply(xt_chain_params *p, int id, xt_msg *msg);
/* The dose control curve the protocol's loop moves along (the default one for custom and unknown
 * ids); the curves by index and name. */
const xt_drc_nodes *xt_protocol_curve(int id);
int xt_dose_curve_count(void);
const char *xt_dose_curve_name(int i);
const xt_drc_nodes *xt_dose_curve_at(int i);

/* A protocol table and its curves parsed from text (the built-in ones are parsed by the functions
 * above; tests and tools parse their own). Every error names the table, the line and the column. */
typedef struct xt_protocol_set xt_protocol_set;
int xt_protocol_set_parse(const char *protocols_tsv, const char *protocols_source, const char *curves_tsv,
                          const char *curves_source, xt_protocol_set **out, xt_msg *msg);
void xt_protocol_set_free(xt_protocol_set *s);
int xt_protocol_set_count(const xt_protocol_set *s);
const xt_protocol *xt_protocol_set_at(const xt_protocol_set *s, int id);
int xt_protocol_set_curve_count(const xt_protocol_set *s);
const char *xt_protocol_set_curve_name(const xt_protocol_set *s, int i);
const xt_drc_nodes *xt_protocol_set_curve(const xt_protocol_set *s, int i);

/* Sets one parameter by name like xt_chain_param_set, keeping mAs = mA x pulse width coherent:
 * "ma" sets the tube current (mAs follows), "pulse_ms" keeps the tube current (mAs follows), "mas"
 * keeps the pulse width (the current follows); "protocol" applies a preset by its number. */
int xt_exposure_set(xt_chain_params *p, const char *name, double value, xt_msg *msg);
/* The tube current, mA, of the parameters: mas / pulse width. */
double xt_exposure_ma(const xt_chain_params *p);

/* The frame's collimator and grid on a render grid of cols x rows. */
void xt_collim_make(const xt_chain_params *p, int cols, int rows, xt_collim *k);
/* The open field's area at the detector as a fraction of the detector's, wedges counted at their
 * transmission (for the kerma-area product). */
double xt_collim_open_fraction(const xt_chain_params *p);
#endif

#endif /* XT_EXPOSURE_H */
