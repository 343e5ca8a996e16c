/* Building the content hull of xt_hull.h on the host, once per model (at add_model): the
 * extremes of n.p over the cubes of the cells added, then the margin. */
#include "xt_hull.h"

#include <math.h>
#include <stdlib.h>

static const int hull_dirs[XT_HULL_DIRS][3] = XT_HULL_DIR_LIST;

void xt_hull_begin(xt_hull_acc *h) {
  for (int j = 0; j < XT_HULL_DIRS; j++) {
    h->lo[j] = INFINITY;
    h->hi[j] = -INFINITY;
  }
  h->any = 0;
}

/* n.p over a box of cells is extreme at its corners: per axis, the smaller and the larger of
 * n_a x (first cell) and n_a x (last cell + 1). */
void xt_hull_add_cells(xt_hull_acc *h, int x0, int x1, int y0, int y1, int z0, int z1) {
  const int l[3] = {x0, y0, z0}, u[3] = {x1 + 1, y1 + 1, z1 + 1};
  h->any = 1;
  for (int j = 0; j < XT_HULL_DIRS; j++) {
    double mn = 0, mx = 0;
    for (int a = 0; a < 3; a++) {
      const double p = (double)hull_dirs[j][a] * l[a], r = (double)hull_dirs[j][a] * u[a];
      mn += fmin(p, r);
      mx += fmax(p, r);
    }
    h->lo[j] = fmin(h->lo[j], mn);
    h->hi[j] = fmax(h->hi[j], mx);
  }
}

int xt_hull_end(const xt_hull_acc *h, float lo[XT_HULL_DIRS], float hi[XT_HULL_DIRS]) {
  if (!h->any) return 0;
  for (int j = 0; j < XT_HULL_DIRS; j++) {
    /* widened by the margin here, once, rather than per ray */
    const double margin = (double)XT_HULL_MARGIN * (abs(hull_dirs[j][0]) + abs(hull_dirs[j][1]) + abs(hull_dirs[j][2]));
    lo[j] = (float)(h->lo[j] - margin);
    hi[j] = (float)(h->hi[j] + margin);
  }
  return 1;
}
