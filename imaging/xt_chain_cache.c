/* The chain's spectral tables (spectrum x CsI absorption x the channels' mass attenuation per
 * energy bin) and their cache (issue 11).
 *
 * Building a table set costs 0.2-2 ms on the host (TASMIP, rebinning, xraylib per bin and channel)
 * and, on a GPU, an upload: far too much to do per frame, yet the dose-rate loop moves kV every
 * frame. So table sets are kept in a least-recently-used cache of XT_TAB_SLOTS, keyed by everything
 * that shapes them (kV, anode angle, filtration, CsI thickness and fill, energy bins; the channel
 * set is the chain's own), allocated with the chain, host and device copies side by side (the
 * device's in chain_cuda.cu, uploaded when a slot is built). With dose-rate control on, every whole
 * kV of the loop's curve is built at set-up (xt_chain_set_params), so the loop never builds one;
 * those builds (66 at the default kV limit) run side by side on the chain's threads, since switching
 * the loop on happens between exposures (the server's render thread) and one after the other they
 * took longer than a frame period.
 * mAs, mA and pulse width shape no table: the detect stage scales by the frame's mAs. */
#include <math.h>
#include <pthread.h>
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

/* The slot holding key k, or -1 (always -1 with the cache off). */
static int find(const xt_tab_cache *tc, const xt_tab_key *k) {
  for (int i = 0; i < XT_TAB_SLOTS; i++)
    if (tc->enabled && tc->used[i] && key_eq(&tc->key[i], k)) return i;
  return -1;
}

/* Tables just built for key k into the least recently used slot (a free one first; with the cache
 * off, tests' uncached reference, always slot 0), uploaded to the device. */
static int place(xt_chain *c, const xt_tab_key *k, const xt_chain_tables *t, const xt_chain_info *info, int *slot,
                 xt_msg *msg) {
  xt_tab_cache *tc = c->tc;
  int lru = 0;
  for (int i = 0; i < XT_TAB_SLOTS && tc->enabled; i++)
    if (!tc->used[i] ? tc->used[lru] : (tc->used[lru] && tc->stamp[i] < tc->stamp[lru])) lru = i;
  tc->tab[lru] = *t;
  tc->info[lru] = *info;
  tc->key[lru] = *k;
  tc->used[lru] = 1;
  tc->stamp[lru] = ++tc->clock;
  tc->builds++;
#ifdef XT_HAVE_CUDA
  int rc;
  if (c->dev && (rc = xt_chain_cuda_upload_slot(c, lru, msg))) {
    tc->used[lru] = 0;
    return rc;
  }
#else
  (void)msg;
#endif
  *slot = lru;
  return 0;
}

int xt__tab_cache_get(xt_chain *c, const xt_chain_params *p, double kv, int *slot, xt_msg *msg) {
  xt_tab_cache *tc = c->tc;
  xt_tab_key k;
  key_of(p, kv, &k);
  const int hit = find(tc, &k);
  if (hit >= 0) {
    tc->stamp[hit] = ++tc->clock;
    tc->hits++;
    *slot = hit;
    return 0;
  }
  xt_chain_params q = *p;
  q.kv = kv;
  xt_chain_tables t;
  xt_chain_info info;
  int rc = build_tables(&q, &c->cs, &t, &info, msg);
  return rc ? rc : place(c, &k, &t, &info, slot, msg);
}

/* One kV of the bank that the cache lacks, built by a worker: build_tables is pure (the spectrum
 * model, xraylib's static tables, the scatter fit), so the builds can run side by side; they are
 * cached afterwards in kV order, as one after the other would have. */
typedef struct bank_job {
  xt_tab_key k;
  xt_chain_params p;
  const xt_chanset *cs;
  xt_chain_tables t;
  xt_chain_info info;
  int need, rc;
  xt_msg msg;
} bank_job;

typedef struct bank_worker_arg {
  bank_job *jobs;
  int n, first, stride;
} bank_worker_arg;

static void *bank_worker(void *arg) {
  const bank_worker_arg *a = arg;
  for (int i = a->first; i < a->n; i += a->stride) {
    bank_job *j = &a->jobs[i];
    if (j->need) j->rc = build_tables(&j->p, j->cs, &j->t, &j->info, &j->msg);
  }
  return NULL;
}

/* Builds the jobs that need it on up to `threads` threads (this one included). */
static void build_jobs(bank_job *jobs, int n, int threads) {
  int need = 0;
  for (int i = 0; i < n; i++) need += jobs[i].need;
  int nt = threads < need ? threads : need;
  if (nt > 64) nt = 64;
  if (nt < 1) nt = 1;
  pthread_t tid[64];
  int started[64] = {0};
  bank_worker_arg args[64];
  for (int k = 0; k < nt; k++) args[k] = (bank_worker_arg){jobs, n, k, nt};
  for (int k = 1; k < nt; k++) started[k] = pthread_create(&tid[k], NULL, bank_worker, &args[k]) == 0;
  bank_worker(&args[0]);
  for (int k = 1; k < nt; k++) {
    if (started[k]) {
      pthread_join(tid[k], NULL);
    } else { /* no thread: this one makes its share */
      bank_worker(&args[k]);
    }
  }
}

int xt__tab_cache_bank(xt_chain *c, const xt_chain_params *p, xt_msg *msg) {
  xt_drc_bank *b = &c->tc->bank;
  memset(b, 0, sizeof *b);
  const int kv0 = XT_DRC_BANK_KV0, kv1 = (int)floor(p->drc_kv_max);
  const int n = kv1 - kv0 + 1 < XT_DRC_BANK_N ? kv1 - kv0 + 1 : XT_DRC_BANK_N;
  if (n <= 0) return 0;
  bank_job *jobs = calloc((size_t)n, sizeof *jobs);
  if (!jobs) return xt_fail(msg, XT_ENOMEM, "chain: out of memory for the loop's tables");
  for (int i = 0; i < n; i++) {
    key_of(p, kv0 + i, &jobs[i].k);
    jobs[i].p = *p;
    jobs[i].p.kv = kv0 + i;
    jobs[i].cs = &c->cs;
    jobs[i].need = find(c->tc, &jobs[i].k) < 0;
  }
  build_jobs(jobs, n, c->threads);
  int rc = 0;
  for (int i = 0; i < n && !rc; i++) {
    int slot = -1;
    if (jobs[i].need && jobs[i].rc) {
      rc = xt_fail(msg, jobs[i].rc, "%s", jobs[i].msg.text);
    } else if (jobs[i].need) {
      rc = place(c, &jobs[i].k, &jobs[i].t, &jobs[i].info, &slot, msg);
    } else { /* cached when looked at (or evicted since by a placement: then built here) */
      rc = xt__tab_cache_get(c, p, kv0 + i, &slot, msg);
    }
    if (rc) break;
    b->slot[i] = slot;
    b->flat_per_ugy[i] = c->tc->info[slot].flat_kev_per_mm2_ugy;
    b->n = i + 1;
  }
  free(jobs);
  if (rc) return rc;
  /* a later build may have evicted an early kV (only with more kVs than slots: never, 66 < 96) */
  for (int i = 0; i < b->n; i++) {
    const int s = b->slot[i];
    if (!c->tc->used[s] || c->tc->key[s].v[0] != kv0 + i)
      return xt_fail(msg, XT_EINVAL, "chain: the table cache cannot hold the loop's %d kV steps", b->n);
  }
  return 0;
}
