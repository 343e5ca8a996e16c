/* The chain's spectral tables (spectrum x CsI absorption x the channels' mass attenuation per
 * energy bin) and their cache (issue 11).
 *
 * Building a table set costs 0.2-2 ms on the host (TASMIP, rebinning, xraylib per bin and channel)
 * and, on a GPU, an upload: far too much to do per frame, yet the dose-rate loop moves kV every
 * frame. So table sets are kept in a least-recently-used cache of XT_TAB_SLOTS, keyed by everything
 * that shapes them (kV, anode angle, filtration, CsI thickness and fill, energy bins; the channel
 * set is the chain's own), allocated with the chain, host and device copies side by side (the
 * device's in chain_cuda.cu, uploaded when a slot is built). With dose-rate control on, every whole
 * kV of the loop's curve is built at set-up (xt_chain_set_params), so the loop never builds one.
 * mAs, mA and pulse width shape no table: the detect stage scales by the frame's mAs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "xt_chain_internal.h"

/* Spectrum, CsI absorption and the channels' mass attenuation, per energy bin. */
static int build_tables(const xt_chain_params *p, const xt_chanset *cs, xt_chain_tables *t, xt_chain_info *info,
                        xt_msg *msg) {
  xt_tube tube = {p->kv, p->anode_deg, p->inherent_al_mm, p->filter_al_mm, p->filter_cu_mm};
  xt_spectrum full, s;
  int rc;
  if ((rc = xt_spectrum_tube(&tube, &full, msg))) return rc;
  if ((rc = xt_spectrum_rebin(&full, p->energy_bins > 0 ? p->energy_bins : full.n, &s, msg))) return rc;
  memset(t, 0, sizeof *t);
  memset(info, 0, sizeof *info);
  t->nbins = s.n;
  t->nch = cs->n;
  const double rho_csi = xt_basis_density(XT_BASIS_CSI) * p->csi_fill;
  double n_in = 0, n_abs = 0;
  for (int b = 0; b < s.n; b++) {
    const double e = s.e_kev[b];
    double mr_csi = 0, mr[XT_MAX_CHANNELS];
    if ((rc = xt_basis_mass_atten(XT_BASIS_CSI, e, &mr_csi, msg)) || (rc = xt_chanset_mass_atten(cs, e, mr, msg)))
      return rc;
    /* absorption efficiency of the CsI layer: the fraction of quanta that interact in it; an
     * interacting quantum is taken to deposit all its energy (K-fluorescence escape neglected) */
    const double eta = 1.0 - exp(-mr_csi * rho_csi * p->csi_mm * 0.1);
    for (int c = 0; c < XT_MAX_CHANNELS; c++) t->mr[b][c] = (float)(mr[c] * 1.4426950408889634); /* log2(e) */
    t->k1[b] = (float)(s.fluence[b] * eta * e);
    t->k2[b] = (float)(s.fluence[b] * eta * e * e);
    t->flat1 += t->k1[b];
    t->flat2 += t->k2[b];
    n_in += s.fluence[b];
    n_abs += s.fluence[b] * eta;
  }
  info->mean_energy_kev = xt_spectrum_mean_energy(&full);
  if ((rc = xt_spectrum_hvl(&full, XT_BASIS_ALUMINIUM, &info->hvl_mm_al, msg)) ||
      (rc = xt_spectrum_air_kerma(&full, 1000.0, &info->kerma_ugy_per_mas, msg)))
    return rc;
  info->absorbed_fraction = n_in > 0 ? n_abs / n_in : 0;
  info->flat_kev_per_mm2_ugy = info->kerma_ugy_per_mas > 0 ? t->flat1 / info->kerma_ugy_per_mas : 0;
  if ((rc = xt_scatter_water_fit(t, &info->water_fit_a, &info->water_fit_b, msg))) return rc;
  t->wa = (float)info->water_fit_a;
  t->wb = (float)info->water_fit_b;
  info->nbins = s.n;
  info->nch = cs->n;
  xt_chanset_names(cs, info->channels, sizeof info->channels);
  return 0;
}

static void key_of(const xt_chain_params *p, double kv, xt_tab_key *k) {
  memset(k, 0, sizeof *k);
  k->v[0] = kv;
  k->v[1] = p->anode_deg;
  k->v[2] = p->inherent_al_mm;
  k->v[3] = p->filter_al_mm;
  k->v[4] = p->filter_cu_mm;
  k->v[5] = p->csi_mm;
  k->v[6] = p->csi_fill;
  k->v[7] = p->energy_bins;
}

static int key_eq(const xt_tab_key *a, const xt_tab_key *b) {
  for (int i = 0; i < XT_TAB_KEY_N; i++)
    if (a->v[i] != b->v[i]) return 0;
  return 1;
}

int xt__tab_cache_init(xt_tab_cache **out, xt_msg *msg) {
  xt_tab_cache *tc = calloc(1, sizeof *tc);
  if (!tc) return xt_fail(msg, XT_ENOMEM, "chain: out of memory for the table cache");
  tc->enabled = 1;
  *out = tc;
  return 0;
}

int xt__tab_cache_get(xt_chain *c, const xt_chain_params *p, double kv, int *slot, xt_msg *msg) {
  xt_tab_cache *tc = c->tc;
  xt_tab_key k;
  key_of(p, kv, &k);
  int lru = 0;
  for (int i = 0; i < XT_TAB_SLOTS; i++) {
    if (tc->enabled && tc->used[i] && key_eq(&tc->key[i], &k)) {
      tc->stamp[i] = ++tc->clock;
      tc->hits++;
      *slot = i;
      return 0;
    }
    if (!tc->used[i] ? tc->used[lru] : (tc->used[lru] && tc->stamp[i] < tc->stamp[lru])) lru = i;
  }
  /* a miss: build into the least recently used slot (a free one first); with the cache off
   * (tests: the uncached reference) always into slot 0 */
  if (!tc->enabled) lru = 0;
  xt_chain_params q = *p;
  q.kv = kv;
  xt_chain_tables t;
  xt_chain_info info;
  int rc = build_tables(&q, &c->cs, &t, &info, msg);
  if (rc) return rc;
  tc->tab[lru] = t;
  tc->info[lru] = info;
  tc->key[lru] = k;
  tc->used[lru] = 1;
  tc->stamp[lru] = ++tc->clock;
  tc->builds++;
#ifdef XT_HAVE_CUDA
  if (c->dev && (rc = xt_chain_cuda_upload_slot(c, lru, msg))) {
    tc->used[lru] = 0;
    return rc;
  }
#endif
  *slot = lru;
  return 0;
}

int xt__tab_cache_bank(xt_chain *c, const xt_chain_params *p, xt_msg *msg) {
  xt_drc_bank *b = &c->tc->bank;
  memset(b, 0, sizeof *b);
  const int kv0 = XT_DRC_BANK_KV0, kv1 = (int)floor(p->drc_kv_max);
  for (int kv = kv0; kv <= kv1 && kv - kv0 < XT_DRC_BANK_N; kv++) {
    int rc, slot;
    if ((rc = xt__tab_cache_get(c, p, kv, &slot, msg))) return rc;
    b->slot[kv - kv0] = slot;
    b->flat_per_ugy[kv - kv0] = c->tc->info[slot].flat_kev_per_mm2_ugy;
    b->n = kv - kv0 + 1;
  }
  /* a later build may have evicted an early kV (only with more kVs than slots: never, 66 < 96) */
  for (int i = 0; i < b->n; i++) {
    const int s = b->slot[i];
    if (!c->tc->used[s] || c->tc->key[s].v[0] != kv0 + i)
      return xt_fail(msg, XT_EINVAL, "chain: the table cache cannot hold the loop's %d kV steps", b->n);
  }
  return 0;
}
