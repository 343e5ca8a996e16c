/* Material channels: the channel set of a scene and the voxel-to-channel maps (xt_channels.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "xt_channels.h"

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

int xt_chanset_add_model(xt_chanset *cs, const xt_model *m, xt_msg *msg) {
  xt_chanset next = *cs; /* all or nothing */
  int rc = 0;
  if (m->kind == XT_MODEL_DENSE) {
    for (int k = 0; k < 3 && !rc; k++) rc = add_basis(&next, dense_class[k], m->name, msg);
  } else if (m->kind == XT_MODEL_LABELS) {
    const xt_material_table *t = m->volume ? m->volume->materials : NULL;
    if (!t) return xt_fail(msg, XT_EINVAL, "channels: model %s has no material table", m->name);
    for (int l = 0; l < t->count && !rc; l++) {
      xt_basis_part parts[2];
      int np = 0;
      xt_msg m2;
      if ((rc = xt_material_basis(t, l, parts, &np, &m2))) return xt_fail(msg, rc, "channels: model %s: %s", m->name, m2.text);
      for (int k = 0; k < np && !rc; k++) rc = add_basis(&next, parts[k].basis, m->name, msg);
    }
  } else {
    return xt_fail(msg, XT_EUNSUPPORTED, "channels: model %s: kind %s has no material channels yet", m->name,
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

int xt_voxel_chan_build(const xt_chanset *cs, const xt_model *m, xt_voxel_chan *out, xt_msg *msg) {
  memset(out, 0, sizeof *out);
  const xt_volume *v = m->volume;
  if (!v) return xt_fail(msg, XT_EINVAL, "channels: model %s has no volume", m->name);
  if (m->kind == XT_MODEL_LABELS) {
    const xt_material_table *t = v->materials;
    if (!t) return xt_fail(msg, XT_EINVAL, "channels: model %s has no material table", m->name);
    out->labels = 1;
    for (int l = 0; l < t->count; l++) {
      xt_basis_part parts[2];
      int np = 0;
      xt_msg m2;
      int rc = xt_material_basis(t, l, parts, &np, &m2);
      if (rc) return xt_fail(msg, rc, "channels: model %s: %s", m->name, m2.text);
      for (int k = 0; k < np; k++) {
        const int c = xt_chanset_find(cs, parts[k].basis);
        if (c < 0)
          return xt_fail(msg, XT_EINVAL, "channels: model %s: material %s is not in the channel set", m->name,
                         xt_basis_name(parts[k].basis));
        out->w[l][c] += (float)(parts[k].density * 0.1); /* g/cm^3 x mm -> g/cm^2 */
      }
    }
    return 0;
  }
  if (m->kind != XT_MODEL_DENSE)
    return xt_fail(msg, XT_EUNSUPPORTED, "channels: model %s: kind %s is not a voxel model", m->name,
                   xt_model_kind_name(m->kind));
  const double e = v->energy_kev > 0 ? v->energy_kev : XT_DEFAULT_ENERGY_KEV;
  /* HU is defined against water; as xt_hu.h, mu_water = (mu/rho)_soft x 1 g/cm^3 */
  double mr_soft = 0;
  int rc = xt_basis_mass_atten(XT_BASIS_SOFT, e, &mr_soft, msg);
  if (rc) return rc;
  const double mu_w = mr_soft * 0.1; /* 1/mm */
  out->thr[0] = (float)(mu_w * (1.0 + XT_DENSE_AIR_BELOW_HU / 1000.0));
  out->thr[1] = (float)(mu_w * (1.0 + XT_DENSE_BONE_FROM_HU / 1000.0));
  for (int k = 0; k < 3; k++) {
    double mr = 0;
    if ((rc = xt_basis_mass_atten(dense_class[k], e, &mr, msg))) return rc;
    const int c = xt_chanset_find(cs, dense_class[k]);
    if (c < 0)
      return xt_fail(msg, XT_EINVAL, "channels: model %s: material %s is not in the channel set", m->name,
                     xt_basis_name(dense_class[k]));
    /* mu [1/mm] x len [mm] / (mu/rho) [cm^2/g] = g/cm^2 */
    out->cw[k][c] = (float)(1.0 / mr);
  }
  return 0;
}

int xt_chanset_mass_atten(const xt_chanset *cs, double e_kev, double mr[XT_MAX_CHANNELS], xt_msg *msg) {
  for (int c = 0; c < XT_MAX_CHANNELS; c++) mr[c] = 0;
  for (int c = 0; c < cs->n; c++) {
    int rc = xt_basis_mass_atten(cs->basis[c], e_kev, &mr[c], msg);
    if (rc) return rc;
  }
  return 0;
}
