/* `xtwin refak`: the reference air kerma of protocols and detector fields in the Instructions for
 * Use's PMMA set-up (tools/xt_refak.h), per image and per minute at the patient entrance reference
 * point, as a table or JSON. The measurement itself is xt_refak_measure; this file parses and prints. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xt_cli.h"
#include "xt_exposure.h"
#include "xt_opt.h"
#include "xt_refak.h"

#define MAX_ITEMS 512

#define say(code, ...) xt_cli_say("refak", (code), __VA_ARGS__)

void xt_cmd_refak_help(FILE *out) {
  fprintf(out,
          "usage: xtwin refak [--protocol NAME[,NAME...]] [--mode MODE[,MODE...]] [--fields DETECTOR] [--json]\n"
          "                   [--scatter 0|1] [--grid N] [--backend cpu|cuda] [--threads N] [--list]\n"
          "\n"
          "Reference air kerma as the Instructions for Use measure it (IFU-p312): 200 mm PMMA, its entrance\n"
          "945 mm from the focus, beam at 90 LAO / 0 CAUD, isocentre 810 mm, SID 1195 mm, grid in. For each\n"
          "protocol and detector field the protocol's dose-rate control runs until the detector dose sits on\n"
          "its target (the protocol's detector dose x the field's dose ratio); that image's air kerma at the\n"
          "patient entrance reference point (660 mm) is the reference air kerma per image, x fps x 60 per minute.\n"
          "\n"
          "options:\n"
          "  --protocol NAME,...  protocols of imaging/protocols.tsv (repeatable; default: every one)\n"
          "  --mode MODE,...      detector modes (repeatable; default: fd20-48; see xtwin modes)\n"
          "  --fields DETECTOR    every zoom field of a detector (fd20, fd15, fd12) instead of --mode\n"
          "  --json               one JSON array instead of the table\n"
          "  --scatter 0|1        the chain's scatter model (default 0: docs/protocols.md says why)\n"
          "  --grid N             render grid columns across the field (default 48: the dose does not depend on it)\n"
          "  --backend cpu|cuda   projector backend (default cpu)\n"
          "  --threads N          CPU threads (default 0: all cores)\n"
          "  --list               list the protocols (name, kind, fps, detector dose, curve, patient) and exit\n"
          "\n"
          "examples:\n"
          "  xtwin refak --protocol cerebral_2fps_low --fields fd20\n"
          "  xtwin refak --mode fd20-48 --json\n");
}

/* Appends the comma-separated words of s to list (at most MAX_ITEMS). */
static int add_words(const char *s, char *buf, size_t cap, const char **list, int *n) {
  snprintf(buf, cap, "%s", s);
  for (char *p = buf; p && *p;) {
    char *c = strchr(p, ',');
    if (c) *c = 0;
    if (!*p || *n == MAX_ITEMS) return -1;
    list[(*n)++] = p;
    p = c ? c + 1 : NULL;
  }
  return 0;
}

static void list_protocols(void) {
  printf("%-3s %-22s %-9s %6s %12s %-9s %-8s %s\n", "id", "name", "kind", "fps", "detector nGy", "curve", "patient",
         "phases");
  for (int i = 1; i < xt_protocol_count(); i++) {
    const xt_protocol *p = xt_protocol_at(i);
    char ph[128] = "-";
    size_t u = 0;
    for (int k = 0; k < p->nphases && u < sizeof ph; k++)
      u += (size_t)snprintf(ph + u, sizeof ph - u, "%s%gx%gs", k ? "," : "", p->phase[k].fps, p->phase[k].seconds);
    printf("%-3d %-22s %-9s %6g %12g %-9s %-8s %s\n", i, p->name, p->kind_name, p->fps, p->detector_ngy, p->curve_name,
           p->patient, ph);
  }
}

static json_t *result_json(const xt_refak_result *r) {
  return json_pack("{s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:i, s:b, s:i}",
                   "protocol", r->protocol, "mode", r->mode, "field_cm", r->field_cm, "dose_ratio", r->dose_ratio,
                   "fps", r->fps, "kv", r->kv, "ma", r->ma, "pulse_ms", r->pulse_ms, "mas", r->mas, "target_ngy",
                   r->target_ngy, "detector_ngy", r->detector_ngy, "kerma_ugy_per_mas_at_1m", r->kerma_ugy_per_mas,
                   "d_irp_mm", r->d_irp_mm, "k_ref_mgy_per_image", r->k_irp_mgy, "k_ref_mgy_per_min", r->k_irp_mgy_min,
                   "frames", r->frames, "settled", r->settled, "drc_flags", (int)r->drc_flags);
}

int xt_cmd_refak(int argc, char **argv) {
  const char *protos[MAX_ITEMS], *modes[MAX_ITEMS];
  static char pbuf[16][1024], mbuf[16][1024];
  int np = 0, nm = 0, npb = 0, nmb = 0, json = 0, list = 0;
  const char *fields = NULL;
  xt_refak_options o = {XT_BACKEND_CPU, 0, 0, 0, 0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const int has = i + 1 < argc;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      xt_cmd_refak_help(stdout);
      return XT_EXIT_OK;
    } else if (!strcmp(a, "--json")) {
      json = 1;
    } else if (!strcmp(a, "--list")) {
      list = 1;
    } else if ((!strcmp(a, "--protocol") || !strcmp(a, "--mode")) && has) {
      const int p = a[2] == 'p';
      if ((p ? npb : nmb) == 16 ||
          add_words(argv[++i], p ? pbuf[npb++] : mbuf[nmb++], 1024, p ? protos : modes, p ? &np : &nm))
        return say(XT_EXIT_USAGE, "%s: expected NAME[,NAME...]", a);
    } else if (!strcmp(a, "--fields") && has) {
      fields = argv[++i];
    } else if ((!strcmp(a, "--scatter") || !strcmp(a, "--grid") || !strcmp(a, "--threads")) && has) {
      char *end;
      const long v = strtol(argv[++i], &end, 10);
      const long hi = a[2] == 's' ? 1 : a[2] == 'g' ? 1024 : 1024, lo = a[2] == 'g' ? 4 : 0;
      if (*end || end == argv[i] || v < lo || v > hi) return say(XT_EXIT_USAGE, "%s: expected a whole number in [%ld, %ld]", a, lo, hi);
      if (a[2] == 's') o.scatter = (int)v;
      else if (a[2] == 'g') o.grid_cols = (int)v;
      else o.threads = (int)v;
    } else if (!strcmp(a, "--backend") && has) {
      const char *b = argv[++i];
      if (!strcmp(b, "cpu")) o.backend = XT_BACKEND_CPU;
      else if (!strcmp(b, "cuda")) o.backend = XT_BACKEND_CUDA;
      else return say(XT_EXIT_USAGE, "--backend: expected cpu or cuda, not \"%s\"", b);
    } else {
      return say(XT_EXIT_USAGE, "%s \"%s\" (see xtwin refak --help)", has || a[0] != '-' ? "unexpected argument" : "missing value after", a);
    }
  }
  if (list) {
    list_protocols();
    return XT_EXIT_OK;
  }
  if (fields && nm) return say(XT_EXIT_USAGE, "--fields and --mode exclude each other");
  /* what to measure: protocol ids and modes, checked before any work */
  int ids[MAX_ITEMS], nids = 0;
  if (!np)
    for (int i = 1; i < xt_protocol_count() && nids < MAX_ITEMS; i++) ids[nids++] = i;
  for (int i = 0; i < np; i++) {
    const int id = xt_protocol_find(protos[i]);
    if (id <= 0) return say(XT_EXIT_USAGE, "--protocol: unknown protocol \"%s\" (see xtwin refak --list)", protos[i]);
    ids[nids++] = id;
  }
  const xt_detector_mode *ms[MAX_ITEMS];
  int nms = 0;
  if (fields) {
    for (int i = 0; i < xt_mode_count() && nms < MAX_ITEMS; i++) {
      const xt_detector_mode *m = xt_mode_at(i);
      if (m->detector && !strcmp(m->detector, fields) && m->field_cm > 0) ms[nms++] = m;
    }
    if (!nms) return say(XT_EXIT_USAGE, "--fields: no zoom fields of detector \"%s\" (see xtwin modes)", fields);
  } else if (!nm) {
    if (!(ms[nms++] = xt_mode_find("fd20-48"))) return say(XT_EXIT_RUNTIME, "no mode fd20-48");
  }
  for (int i = 0; i < nm; i++)
    if (!(ms[nms++] = xt_mode_find(modes[i]))) return say(XT_EXIT_USAGE, "--mode: unknown mode \"%s\" (see xtwin modes)", modes[i]);

  xt_msg msg;
  xt_refak *r = NULL;
  if (xt_refak_open(&o, &r, &msg)) return say(XT_EXIT_RUNTIME, "%s", msg.text);
  json_t *arr = json ? json_array() : NULL;
  int code = XT_EXIT_OK;
  if (!json)
    printf("%-22s %-9s %5s %5s %5s %5s %6s %6s %7s %9s %9s %11s %10s %s\n", "protocol", "mode", "field", "ratio", "fps",
           "kV", "mA", "ms", "mAs", "det nGy", "target", "mGy/img", "mGy/min", "");
  for (int i = 0; i < nids && !code; i++)
    for (int j = 0; j < nms && !code; j++) {
      xt_refak_result res;
      if (xt_refak_measure(r, ids[i], ms[j], &res, &msg)) {
        code = say(XT_EXIT_RUNTIME, "%s in %s: %s", xt_protocol_name(ids[i]), ms[j]->name, msg.text);
        break;
      }
      if (json) {
        json_array_append_new(arr, result_json(&res));
        continue;
      }
      printf("%-22s %-9s %5g %5.2f %5g %5.0f %6.1f %6.2f %7.4f %9.2f %9.2f %11.5f %10.3f %s\n", res.protocol, res.mode,
             res.field_cm, res.dose_ratio, res.fps, res.kv, res.ma, res.pulse_ms, res.mas, res.detector_ngy,
             res.target_ngy, res.k_irp_mgy, res.k_irp_mgy_min,
             res.settled ? "" : (res.drc_flags & XT_DRC_CLAMP_HIGH) ? "(curve's top: target out of reach)"
                                : (res.drc_flags & XT_DRC_CLAMP_LOW) ? "(curve's start: target out of reach)"
                                                                    : "(not settled)");
      fflush(stdout);
    }
  if (json && !code) {
    char *s = json_dumps(arr, JSON_INDENT(1) | JSON_REAL_PRECISION(10));
    if (s) printf("%s\n", s);
    free(s);
  }
  json_decref(arr);
  xt_refak_close(r);
  return code;
}
