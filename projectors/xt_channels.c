/* Material channels: the channel set of a scene and the voxel-to-channel maps (xt_channels.h).
 * A model's kind says what its values are (xt_model_matter_of); this file maps that onto the
 * basis materials and never asks for the kind itself. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include "xt_channels.h"
#include "xt_gmm.h"
#include "xt_instr.h"
#include "xt_model_kind.h"

int xt_chanset_find(const xt_chanset *cs, int b) {
  for (int c = 0; c < cs->n; c++)
    if (cs->basis[c] == b) return c;
  return -1;
}

static int add_basis(xt_chanset *cs, int b, const char *model, xt_msg *msg) {
  if (xt_chanset_find(cs, b) >= 0) return 0;
  if (cs->n == XT_MAX_CHANNELS)
    return xt_fail(msg, XT_ETOOLARGE, "channels: model %s needs material %s, but the scene already has %d channels",
                   model, xt_basis_name(b), XT_MAX_CHANNELS);
  cs->basis[cs->n++] = b;
  return 0;
}

/* The dense classes' basis materials, in class order. */
static const int dense_class[3] = {XT_BASIS_AIR, XT_BASIS_SOFT, XT_BASIS_BONE};

/* What a voxel model's values are (dense or label volume, NanoVDB grid): its kind's answer, which
 * must be mu by HU classes or labels through a table. */
static int voxel_matter(const xt_model *m, xt_model_matter *mm, xt_msg *msg) {
  int rc = xt_model_matter_of(m, mm, msg);
  if (rc) return rc;
  if (mm->kind != XT_MATTER_MU_CLASSES && mm->kind != XT_MATTER_LABELS)
    return xt_fail(msg, XT_EUNSUPPORTED, "channels: model %s: kind %s is not a voxel model", m->name,
                   xt_model_kind_name(m->kind));
  if (mm->kind == XT_MATTER_LABELS && !mm->table)
    return xt_fail(msg, XT_EINVAL, "channels: model %s has no material table", m->name);
  return 0;
}

/* The basis parts of label l of table t, msg naming the model. */
static int label_parts(const xt_model *m, const xt_material_table *t, int l, xt_basis_part parts[2], int *np,
                       xt_msg *msg) {
  xt_msg m2;
  int rc = xt_material_basis(t, l, parts, np, &m2);
  return rc ? xt_fail(msg, rc, "channels: model %s: %s", m->name, m2.text) : 0;
}

static int label_used(const xt_model_matter *mm, int l) { return (int)(mm->used[l >> 6] >> (l & 63) & 1u); }

int xt_chanset_add_model(xt_chanset *cs, const xt_model *m, xt_msg *msg) {
  xt_chanset next = *cs; /* all or nothing */
  xt_model_matter mm;
  int rc = xt_model_matter_of(m, &mm, msg);
  if (rc) return rc;
  switch (mm.kind) {
  case XT_MATTER_SOFT: rc = add_basis(&next, XT_BASIS_SOFT, m->name, msg); break;
  case XT_MATTER_MU_CLASSES:
    for (int k = 0; k < 3 && !rc; k++) rc = add_basis(&next, dense_class[k], m->name, msg);
    break;
  case XT_MATTER_LABELS: {
    const xt_material_table *t = mm.table;
    if (!t) return xt_fail(msg, XT_EINVAL, "channels: model %s has no material table", m->name);
    for (int l = 0; l < t->count && !rc; l++) {
      xt_basis_part parts[2];
      int np = 0;
      if ((rc = label_parts(m, t, l, parts, &np, msg))) return rc;
      for (int k = 0; k < np && !rc; k++) rc = add_basis(&next, parts[k].basis, m->name, msg);
      /* a contrast region takes iodine during a run: its channel is there from the start */
      if (!rc && t->contrast[l]) rc = add_basis(&next, XT_BASIS_IODINE, m->name, msg);
    }
    break;
  }
  case XT_MATTER_USED_LABELS: { /* the default table is 11 KB: not on the stack */
    xt_material_table *t = malloc(sizeof *t);
    if (!t) return xt_fail(msg, XT_ENOMEM, "channels: out of memory");
    rc = xt_materials_default(mm.energy_kev, t, msg);
    for (int l = 0; l < 256 && !rc; l++) {
      if (!label_used(&mm, l)) continue;
      xt_basis_part parts[2];
      int np = 0;
      if ((rc = label_parts(m, t, l, parts, &np, msg))) break;
      if (np == 0) rc = xt_fail(msg, XT_EINVAL, "channels: model %s: label %d is no default material", m->name, l);
      for (int k = 0; k < np && !rc; k++) rc = add_basis(&next, parts[k].basis, m->name, msg);
      if (!rc && mm.contrast && mm.contrast[l]) rc = add_basis(&next, XT_BASIS_IODINE, m->name, msg); /* a region */
    }
    free(t);
    break;
  }
  default:
    return xt_fail(msg, XT_EUNSUPPORTED, "channels: model %s: kind %s has no material channels", m->name,
                   xt_model_kind_name(m->kind));
  }
  if (!rc) *cs = next;
  return rc;
}

void xt_chanset_names(const xt_chanset *cs, char *buf, size_t len) {
  size_t used = 0;
  if (len) buf[0] = 0;
  for (int c = 0; c < cs->n && used < len; c++) {
    int w = snprintf(buf + used, len - used, "%s%s", c ? "," : "", xt_basis_name(cs->basis[c]));
    if (w < 0) break;
    used += (size_t)w;
  }
}

static int chan_of(const xt_chanset *cs, const xt_model *m, int basis, int *c, xt_msg *msg) {
  *c = xt_chanset_find(cs, basis);
  if (*c < 0)
    return xt_fail(msg, XT_EINVAL, "channels: model %s: material %s is not in the channel set", m->name,
                   xt_basis_name(basis));
  return 0;
}

int xt_voxel_chan_build(const xt_chanset *cs, const xt_model *m, xt_voxel_chan *out, xt_msg *msg) {
  memset(out, 0, sizeof *out);
  xt_model_matter mm;
  int rc;
  if ((rc = voxel_matter(m, &mm, msg))) return rc;
  const xt_material_table *t = mm.table;
  const double e = mm.energy_kev;
  if (mm.kind == XT_MATTER_LABELS) {
    out->labels = 1;
    for (int l = 0; l < t->count; l++) {
      xt_basis_part parts[2];
      int np = 0, c;
      if ((rc = label_parts(m, t, l, parts, &np, msg))) return rc;
      for (int k = 0; k < np; k++) {
        if ((rc = chan_of(cs, m, parts[k].basis, &c, msg))) return rc;
        out->w[l][c] += (float)(parts[k].density * 0.1); /* g/cm^3 x mm -> g/cm^2 */
      }
    }
    return 0;
  }
  /* HU is defined against water; as xt_hu.h, mu_water = (mu/rho)_soft x 1 g/cm^3 */
  double mr_soft = 0;
  if ((rc = xt_basis_mass_atten(XT_BASIS_SOFT, e, &mr_soft, msg))) return rc;
  const double mu_w = mr_soft * 0.1; /* 1/mm */
  out->thr[0] = (float)(mu_w * (1.0 + XT_DENSE_AIR_BELOW_HU / 1000.0));
  out->thr[1] = (float)(mu_w * (1.0 + XT_DENSE_BONE_FROM_HU / 1000.0));
  for (int k = 0; k < 3; k++) {
    double mr = 0;
    int c;
    if ((rc = xt_basis_mass_atten(dense_class[k], e, &mr, msg)) || (rc = chan_of(cs, m, dense_class[k], &c, msg)))
      return rc;
    /* mu [1/mm] x len [mm] / (mu/rho) [cm^2/g] = g/cm^2 */
    out->cw[k][c] = (float)(1.0 / mr);
  }
  return 0;
}

int xt_gmm_chan_build(const xt_chanset *cs, const xt_model *m, xt_gmm_chan *out, xt_msg *msg) {
  memset(out, 0, sizeof *out);
  xt_model_matter mm;
  xt_msg mmsg;
  if (xt_model_matter_of(m, &mm, &mmsg) || (mm.kind != XT_MATTER_SOFT && mm.kind != XT_MATTER_USED_LABELS))
    return xt_fail(msg, XT_EINVAL, "channels: model %s has no mixture", m->name);
  const double e = mm.energy_kev;
  int rc, c;
  if (mm.kind == XT_MATTER_SOFT) {
    double mr = 0;
    if ((rc = xt_basis_mass_atten(XT_BASIS_SOFT, e, &mr, msg)) || (rc = chan_of(cs, m, XT_BASIS_SOFT, &c, msg))) return rc;
    out->w[0][c] = (float)(1.0 / mr); /* optical depth / (mu/rho) = g/cm^2 */
    return 0;
  }
  out->labels = 1;
  xt_material_table *t = malloc(sizeof *t);
  if (!t) return xt_fail(msg, XT_ENOMEM, "channels: out of memory");
  rc = xt_materials_default(e, t, msg);
  for (int l = 0; l < 256 && !rc; l++) {
    if (!label_used(&mm, l)) continue;
    xt_basis_part parts[2];
    int np = 0;
    double mr[2] = {0, 0}, mu = 0; /* mu_l in 1/mm, from the parts, in double */
    if ((rc = label_parts(m, t, l, parts, &np, msg))) break;
    for (int k = 0; k < np && !rc; k++) {
      rc = xt_basis_mass_atten(parts[k].basis, e, &mr[k], msg);
      mu += mr[k] * parts[k].density * 0.1;
    }
    if (!rc && !(mu > 0)) rc = xt_fail(msg, XT_EINVAL, "channels: model %s: label %d is no default material", m->name, l);
    for (int k = 0; k < np && !rc; k++) {
      if (!(rc = chan_of(cs, m, parts[k].basis, &c, msg)))
        out->w[l][c] += (float)(parts[k].density * 0.1 / mu); /* (tau / mu_l) mm x density -> g/cm^2 */
    }
  }
  free(t);
  return rc;
}

int xt_chanset_mass_atten(const xt_chanset *cs, double e_kev, double mr[XT_MAX_CHANNELS], xt_msg *msg) {
  for (int c = 0; c < XT_MAX_CHANNELS; c++) mr[c] = 0;
  for (int c = 0; c < cs->n; c++) {
    int rc = xt_basis_mass_atten(cs->basis[c], e_kev, &mr[c], msg);
    if (rc) return rc;
  }
  return 0;
}

/* A labelled mixture's regions: each label's optical-depth scale and iodine weight (the channels'
 * rows of xt_gmm_chan_build, with iodine). */
static int gmm_iodine_tab(const xt_chanset *cs, const xt_model *m, const xt_model_matter *mm, const double *rho,
                          xt_iodine_tab *out, xt_msg *msg) {
  out->ci = cs ? xt_chanset_find(cs, XT_BASIS_IODINE) : -1;
  double mr_i = 0;
  int rc = xt_basis_mass_atten(XT_BASIS_IODINE, mm->energy_kev, &mr_i, msg);
  xt_material_table *t = rc ? NULL : malloc(sizeof *t); /* the default table is 11 KB: not on the stack */
  if (!rc && !t) rc = xt_fail(msg, XT_ENOMEM, "contrast: out of memory");
  if (!rc) rc = xt_materials_default(mm->energy_kev, t, msg);
  for (int l = 0; l < 256 && !rc; l++) {
    const double r = rho ? rho[l] : 0.0;
    out->scale[l] = 1.0;
    out->wio[l] = 0.f;
    out->mu[l] = 0.f;
    out->col[l] = 0.f;
    if (!(r >= 0.0 && r < 1e3)) {
      rc = xt_fail(msg, XT_EINVAL, "contrast: model %s label %d: iodine %g g/cm^3 is not a density", m->name, l, r);
      break;
    }
    if (r > 0.0 && !(mm->contrast && mm->contrast[l])) {
      rc = xt_fail(msg, XT_EINVAL, "contrast: model %s label %d is no contrast region", m->name, l);
      break;
    }
    if (!label_used(mm, l)) continue;
    xt_basis_part parts[2];
    int np = 0;
    double mu = 0, own = 0; /* mu_l in 1/mm from the parts, in double (as xt_gmm_chan_build) */
    if ((rc = label_parts(m, t, l, parts, &np, msg))) break;
    for (int k = 0; k < np && !rc; k++) {
      double mr = 0;
      rc = xt_basis_mass_atten(parts[k].basis, mm->energy_kev, &mr, msg);
      mu += mr * parts[k].density * 0.1;
      if (parts[k].basis == XT_BASIS_IODINE) own += parts[k].density;
    }
    if (rc || !(mu > 0)) continue;
    const double mu_i = mu + mr_i * r * 0.1;
    out->scale[l] = r > 0.0 ? mu_i / mu : 1.0; /* 1 exactly without iodine: the optical depth bit for bit */
    out->mu[l] = (float)mu_i;
    out->col[l] = (float)((own + r) * 0.1);
    out->wio[l] = (float)((own + r) * 0.1 / mu_i); /* g/cm^2 per unit of the scaled optical depth */
  }
  free(t);
  return rc;
}

int xt_iodine_tab_build(const xt_chanset *cs, const xt_model *m, const double *rho, xt_iodine_tab *out, xt_msg *msg) {
  /* a label volume's table, or an instrument's (its lumen: xt_instr_lumen_region), or a labelled
   * mixture's regions (xt_gmm_contrast_label) */
  xt_model_matter mm;
  const xt_material_table *t = NULL;
  if (xt_model_matter_of(m, &mm, NULL) == 0 && mm.kind == XT_MATTER_LABELS) t = mm.table;
  if (m->kind == XT_MODEL_GMM && mm.kind == XT_MATTER_USED_LABELS) return gmm_iodine_tab(cs, m, &mm, rho, out, msg);
  for (int l = 0; l < 256; l++) out->scale[l] = 1.0, out->wio[l] = 0.f;
  if ((m->kind != XT_MODEL_LABELS && m->kind != XT_MODEL_INSTR) || !t)
    return xt_fail(msg, XT_EUNSUPPORTED,
                   "contrast: model %s is no label volume, instrument or labelled mixture: it has no regions to fill",
                   m->name);
  out->ci = cs ? xt_chanset_find(cs, XT_BASIS_IODINE) : -1;
  double mr = 0;
  int rc = xt_basis_mass_atten(XT_BASIS_IODINE, t->energy_kev > 0 ? t->energy_kev : XT_DEFAULT_ENERGY_KEV, &mr, msg);
  if (rc) return rc;
  for (int l = 0; l < 256; l++) {
    const double r = rho ? rho[l] : 0.0;
    if (!(r >= 0.0 && r < 1e3))
      return xt_fail(msg, XT_EINVAL, "contrast: model %s label %d: iodine %g g/cm^3 is not a density", m->name, l, r);
    if (r > 0.0 && (l >= t->count || !t->contrast[l]))
      return xt_fail(msg, XT_EINVAL, "contrast: model %s label %d is no contrast region", m->name, l);
    out->mu[l] = r > 0.0 ? (float)((double)t->mu[l] + mr * r * 0.1) : t->mu[l];
    double own = 0.0;
    xt_basis_part parts[2];
    int np = 0;
    if (l < t->count && xt_material_basis(t, l, parts, &np, NULL) == 0)
      for (int k = 0; k < np; k++)
        if (parts[k].basis == XT_BASIS_IODINE) own += parts[k].density;
    out->col[l] = (float)((own + r) * 0.1);
  }
  return 0;
}

int xt_iodine_instr_lumen(const xt_instr_device *dev, const xt_iodine_tab *io, int *id, double *mu, xt_msg *msg) {
  const int l = xt_instr_lumen_id(dev);
  for (int k = 0; k < dev->mt.count; k++) /* bitwise: the float a segment's mu was formed from */
    if (k != l && memcmp(&io->mu[k], &dev->mt.mu[k], sizeof(float)) != 0)
      return xt_fail(msg, XT_EINVAL, "contrast: instrument table entry %d: iodine outside the lumen region", k);
  *id = l;
  *mu = l < 0 ? 0.0 : (double)io->mu[l] - (double)dev->mt.mu[dev->medium];
  return 0;
}
