/* The catheter of the lumen tests (test_contrast.c, test_contrast_cuda.c): a 5 F catheter with its
 * lumen region, and two shapes of 40 points, tip first: straight along x, and an arc of 60 mm
 * radius. 0, or -1 with msg. */
#ifndef XT_TEST_INSTR_H
#define XT_TEST_INSTR_H

#include <math.h>

#include "xt_instr.h"

static int lumen_catheter(xt_instr_device *dev, int *lum, double pts[3 * 40], double bent[3 * 40], xt_msg *msg) {
  if (xt_instr_catheter(dev, "blood", 64, msg) || xt_instr_lumen_region(dev, lum, msg)) return -1;
  for (int i = 0; i < 40; i++) {
    pts[3 * i] = -60.0 + 3.0 * i, pts[3 * i + 1] = 5.0, pts[3 * i + 2] = -2.0;
    const double t = 0.4 + 1.6 * i / 39.0;
    bent[3 * i] = 60.0 * cos(t) - 20, bent[3 * i + 1] = 0.2 * 60.0 * sin(t), bent[3 * i + 2] = 60.0 * sin(t) - 50;
  }
  return 0;
}

#endif
