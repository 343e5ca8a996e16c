/* Volume loaders and HU conversion: every format written here by our own small writers (MetaImage
 * and NRRD headers as text, NIfTI-1 as a filled nifti_1_header, NIfTI-2 through libnifti2's
 * writer), loaded back and compared with geometry and values computed by hand in the test; then
 * the malformed inputs, each expecting a specific error code and a message naming the file. */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nifti2_io.h>
#include <zlib.h>

#include "xt_hu.h"
#include "xt_load.h"
#include "xt_test.h"
#include "xt_test_files.h"

/* --- scratch directory and writers -------------------------------------------------------- */

static char g_dir[64];

static void tmp_begin(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/xt_loaders_XXXXXX");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    exit(1);
  }
}

static void rm_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) rm_tree(p);
    else unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

static void tmp_end(void) { rm_tree(g_dir); }

static const char *tp(const char *name) {
  static char buf[8][256];
  static int k;
  char *b = buf[k++ & 7];
  snprintf(b, 256, "%s/%s", g_dir, name);
  return b;
}


/* The reference grid: 4 x 3 x 2, value 100 i + 10 j + k - 500 at (i,j,k). */
enum { NX = 4, NY = 3, NZ = 2, NV = NX * NY * NZ };
static double ref_value(int i, int j, int k) { return 100.0 * i + 10.0 * j + k - 500.0; }

static void le16(unsigned char *p, int v) { p[0] = (unsigned char)(v & 0xff), p[1] = (unsigned char)((v >> 8) & 0xff); }

static void ref_i16_le(unsigned char out[NV * 2]) {
  for (int k = 0, n = 0; k < NZ; k++)
    for (int j = 0; j < NY; j++)
      for (int i = 0; i < NX; i++, n++) le16(out + 2 * n, (int)ref_value(i, j, k));
}

static void ref_f64_be(unsigned char out[NV * 8]) {
  for (int k = 0, n = 0; k < NZ; k++)
    for (int j = 0; j < NY; j++)
      for (int i = 0; i < NX; i++, n++) {
        double v = ref_value(i, j, k) + 0.25;
        uint64_t b;
        memcpy(&b, &v, 8);
        for (int q = 0; q < 8; q++) out[8 * n + q] = (unsigned char)(b >> (56 - 8 * q));
      }
}

static int load(const char *path, xt_load_convert c, xt_volume **v, xt_msg *m) {
  xt_load_options o = {.convert = c};
  *v = NULL;
  m->text[0] = '\0';
  return xt_volume_load(path, &o, v, m);
}

/* Expects failure with code `want` and a message that starts with the path. */
#define EXPECT_FAIL(path, conv, want)                                                                    \
  do {                                                                                                   \
    xt_volume *v_ = NULL;                                                                                \
    xt_msg m_;                                                                                           \
    int rc_ = load((path), (conv), &v_, &m_);                                                            \
    XT_CHECK_MSG(rc_ == (want), "%s: got %d (%s) want %d: %s", (path), rc_, xt_errname(rc_), (want), m_.text); \
    XT_CHECK_MSG(strncmp(m_.text, (path), strlen(path)) == 0, "message does not start with the path: %s", m_.text); \
    XT_CHECK(v_ == NULL);                                                                                \
    XT_CHECK(strchr(m_.text, '\n') == NULL);                                                             \
    xt_volume_free(v_);                                                                                  \
  } while (0)

/* Stop the test when a load failed, printing why. */
#define XT_REQUIRE_MSG_(rc, m)                                                      \
  do {                                                                              \
    if ((rc) != 0) {                                                                \
      fprintf(stderr, "  %s:%d: load failed %d: %s\n", __FILE__, __LINE__, (rc), (m).text); \
      xt_test_failures_++;                                                          \
      return;                                                                       \
    }                                                                               \
  } while (0)

static double vox(const xt_volume *v, int i, int j, int k) { return xt_volume_mu(v, i, j, k); }

/* index_to_model applied to (i,j,k) compared with an expected LPS point, to 1e-6 mm (libnifti2
 * carries quaternion-derived matrices partly in float precision) */
static void check_point(const xt_volume *v, double i, double j, double k, double x, double y, double z) {
  xt_vec3 p = xt_aff_apply(&v->index_to_model, xt_v3(i, j, k));
  XT_CHECK_NEAR(p.x, x, 1e-6);
  XT_CHECK_NEAR(p.y, y, 1e-6);
  XT_CHECK_NEAR(p.z, z, 1e-6);
}

static void check_ref_values(const xt_volume *v, double add) {
  XT_REQUIRE(v->dim[0] == NX && v->dim[1] == NY && v->dim[2] == NZ);
  for (int k = 0; k < NZ; k++)
    for (int j = 0; j < NY; j++)
      for (int i = 0; i < NX; i++) XT_CHECK_NEAR(vox(v, i, j, k), ref_value(i, j, k) + add, 1e-4);
}

/* --- MetaImage ---------------------------------------------------------------------------- */

/* Oblique: index axes rotated 30 degrees about z. ITK writes the direction of axis i as numbers
 * 3i..3i+2 of TransformMatrix. */
XT_TEST(mha_oblique_int16) {
  tmp_begin();
  unsigned char d[NV * 2];
  ref_i16_le(d);
  const char *p = tp("head.mha");
  write_text_then(p,
                  "ObjectType = Image\nNDims = 3\nBinaryData = True\nBinaryDataByteOrderMSB = False\n"
                  "TransformMatrix = 0.8660254037844387 0.5 0 -0.5 0.8660254037844387 0 0 0 1\n"
                  "Offset = 10 -20 30\nCenterOfRotation = 0 0 0\nAnatomicalOrientation = RAI\n"
                  "ElementSpacing = 0.5 0.75 2\nDimSize = 4 3 2\nElementType = MET_SHORT\nElementDataFile = LOCAL\n",
                  d, sizeof d);
  xt_volume *v;
  xt_msg m;
  int rc = load(p, XT_LOAD_MU, &v, &m);
  XT_REQUIRE(rc == 0);
  XT_CHECK(v->type == XT_VOXEL_F32 && v->materials == NULL);
  check_ref_values(v, 0);
  XT_CHECK_NEAR(v->spacing[0], 0.5, 1e-12);
  XT_CHECK_NEAR(v->spacing[1], 0.75, 1e-12);
  XT_CHECK_NEAR(v->spacing[2], 2, 1e-12);
  const double c = cos(XT_PI / 6), s = sin(XT_PI / 6);
  check_point(v, 0, 0, 0, 10, -20, 30);
  /* (1,0,0): 0.5 along (c, s, 0); (0,1,0): 0.75 along (-s, c, 0); (0,0,1): 2 along z */
  check_point(v, 1, 0, 0, 10 + 0.5 * c, -20 + 0.5 * s, 30);
  check_point(v, 0, 1, 0, 10 - 0.75 * s, -20 + 0.75 * c, 30);
  check_point(v, 3, 2, 1, 10 + 1.5 * c - 1.5 * s, -20 + 1.5 * s + 1.5 * c, 32);
  xt_volume_free(v);
  tmp_end();
}

XT_TEST(mha_double_msb_and_orientation) {
  tmp_begin();
  unsigned char d[NV * 8];
  ref_f64_be(d);
  /* no TransformMatrix: AnatomicalOrientation LPS means axes run L->R, P->A, S->I: -x, -y, -z */
  const char *p = tp("be.mha");
  write_text_then(p,
                  "NDims = 3\nDimSize = 4 3 2\nElementType = MET_DOUBLE\nElementByteOrderMSB = True\n"
                  "AnatomicalOrientation = LPS\nElementSize = 1 2 3\nPosition = 1 2 3\nElementDataFile = LOCAL\n",
                  d, sizeof d);
  xt_volume *v;
  xt_msg m;
  XT_REQUIRE(load(p, XT_LOAD_MU, &v, &m) == 0);
  check_ref_values(v, 0.25);
  check_point(v, 1, 1, 1, 1 - 1, 2 - 2, 3 - 3);
  check_point(v, 2, 0, 0, -1, 2, 3);
  xt_volume_free(v);
  tmp_end();
}

XT_TEST(mha_compressed) {
  tmp_begin();
  unsigned char d[NV * 2];
  ref_i16_le(d);
  size_t zn;
  unsigned char *z = deflate_buf(d, sizeof d, 0, &zn);
  char hdr[512];
  snprintf(hdr, sizeof hdr,
           "NDims = 3\nDimSize = 4 3 2\nElementType = MET_SHORT\nCompressedData = True\nCompressedDataSize = %zu\n"
           "ElementSpacing = 1 1 1\nElementDataFile = LOCAL\n",
           zn);
  const char *p = tp("z.mha");
  write_text_then(p, hdr, z, zn);
  xt_volume *v;
  xt_msg m;
  XT_REQUIRE(load(p, XT_LOAD_MU, &v, &m) == 0);
  check_ref_values(v, 0);
  xt_volume_free(v);
  /* without CompressedDataSize: the rest of the file */
  const char *p2 = tp("z2.mha");
  write_text_then(p2, "NDims = 3\nDimSize = 4 3 2\nElementType = MET_SHORT\nCompressedData = True\nElementDataFile = LOCAL\n", z,
                  zn);
  XT_REQUIRE(load(p2, XT_LOAD_MU, &v, &m) == 0);
  check_ref_values(v, 0);
  xt_volume_free(v);
  /* truncated stream */
  const char *p3 = tp("z3.mha");
  write_text_then(p3, "NDims = 3\nDimSize = 4 3 2\nElementType = MET_SHORT\nCompressedData = True\nElementDataFile = LOCAL\n", z,
                  zn / 2);
  EXPECT_FAIL(p3, XT_LOAD_MU, XT_ETRUNCATED);
  /* garbage instead of zlib */
  const char *p4 = tp("z4.mha");
  write_text_then(p4, "NDims = 3\nDimSize = 4 3 2\nElementType = MET_SHORT\nCompressedData = True\nElementDataFile = LOCAL\n",
                  "this is not a zlib stream at all", 32);
  EXPECT_FAIL(p4, XT_LOAD_MU, XT_EFORMAT);
  /* a tiny stream claiming a huge volume: refused before allocating */
  const char *p5 = tp("z5.mha");
  write_text_then(p5, "NDims = 3\nDimSize = 4096 4096 200\nElementType = MET_UCHAR\nCompressedData = True\nElementDataFile = LOCAL\n",
                  z, zn);
  EXPECT_FAIL(p5, XT_LOAD_MU, XT_ETRUNCATED);
  free(z);
  tmp_end();
}

XT_TEST(mhd_detached) {
  tmp_begin();
  unsigned char d[16 + NV * 2];
  memset(d, 0xAB, 16);
  ref_i16_le(d + 16);
  write_bytes(tp("vol.raw"), "wb", d, sizeof d);
  const char *p = tp("vol.mhd");
  write_text_then(p, "NDims = 3\nDimSize = 4 3 2\nElementType = MET_SHORT\nHeaderSize = 16\nElementDataFile = vol.raw\n", NULL, 0);
  xt_volume *v;
  xt_msg m;
  XT_REQUIRE(load(p, XT_LOAD_MU, &v, &m) == 0);
  check_ref_values(v, 0);
  xt_volume_free(v);
  /* HeaderSize = -1: data at the end of the file */
  const char *p2 = tp("vol2.mhd");
  write_text_then(p2, "NDims = 3\nDimSize = 4 3 2\nElementType = MET_SHORT\nHeaderSize = -1\nElementDataFile = vol.raw\n", NULL, 0);
  XT_REQUIRE(load(p2, XT_LOAD_MU, &v, &m) == 0);
  check_ref_values(v, 0);
  xt_volume_free(v);
  /* absolute data file path */
  char hdr[512];
  snprintf(hdr, sizeof hdr, "NDims = 3\nDimSize = 4 3 2\nElementType = MET_SHORT\nHeaderSize = 16\nElementDataFile = %s\n",
           tp("vol.raw"));
  const char *p3 = tp("vol3.mhd");
  write_text_then(p3, hdr, NULL, 0);
  XT_REQUIRE(load(p3, XT_LOAD_MU, &v, &m) == 0);
  check_ref_values(v, 0);
  xt_volume_free(v);
  /* missing data file */
  const char *p4 = tp("vol4.mhd");
  write_text_then(p4, "NDims = 3\nDimSize = 4 3 2\nElementType = MET_SHORT\nElementDataFile = missing.raw\n", NULL, 0);
  EXPECT_FAIL(p4, XT_LOAD_MU, XT_ENOTFOUND);
  /* data file is a directory */
  mkdir(tp("adir.raw"), 0700);
  const char *p5 = tp("vol5.mhd");
  write_text_then(p5, "NDims = 3\nDimSize = 4 3 2\nElementType = MET_SHORT\nElementDataFile = adir.raw\n", NULL, 0);
  EXPECT_FAIL(p5, XT_LOAD_MU, XT_EINVAL);
  tmp_end();
}

XT_TEST(mha_malformed) {
  tmp_begin();
  unsigned char d[NV * 8];
  memset(d, 0, sizeof d);
  struct {
    const char *name, *hdr;
    size_t ndata;
    int want;
  } cases[] = {
      {"dimx.mha", "NDims = 3\nDimSize = 12 x 4\nElementType = MET_SHORT\nElementDataFile = LOCAL\n", 48, XT_EFORMAT},
      {"dim2.mha", "NDims = 3\nDimSize = 4 3\nElementType = MET_SHORT\nElementDataFile = LOCAL\n", 48, XT_EFORMAT},
      {"dimneg.mha", "NDims = 3\nDimSize = 4 -3 2\nElementType = MET_SHORT\nElementDataFile = LOCAL\n", 48, XT_EFORMAT},
      {"huge.mha", "NDims = 3\nDimSize = 100000 100000 100000\nElementType = MET_SHORT\nElementDataFile = LOCAL\n", 48, XT_ERANGE},
      {"toomany.mha", "NDims = 3\nDimSize = 16384 16384 16384\nElementType = MET_UCHAR\nElementDataFile = LOCAL\n", 48,
       XT_ETOOLARGE},
      {"big.mha", "NDims = 3\nDimSize = 4096 4096 200\nElementType = MET_UCHAR\nElementDataFile = LOCAL\n", 48, XT_ETRUNCATED},
      {"trunc.mha", "NDims = 3\nDimSize = 4 3 2\nElementType = MET_SHORT\nElementDataFile = LOCAL\n", 47, XT_ETRUNCATED},
      {"nodata.mha", "NDims = 3\nDimSize = 4 3 2\nElementType = MET_SHORT\nElementDataFile = LOCAL", 0, XT_ETRUNCATED},
      {"ndims2.mha", "NDims = 2\nDimSize = 4 3\nElementType = MET_SHORT\nElementDataFile = LOCAL\n", 24, XT_EUNSUPPORTED},
      {"sp0.mha", "NDims = 3\nDimSize = 4 3 2\nElementSpacing = 1 0 1\nElementType = MET_SHORT\nElementDataFile = LOCAL\n", 48,
       XT_ERANGE},
      {"spneg.mha", "NDims = 3\nDimSize = 4 3 2\nElementSpacing = 1 1 -2\nElementType = MET_SHORT\nElementDataFile = LOCAL\n",
       48, XT_ERANGE},
      {"spnan.mha", "NDims = 3\nDimSize = 4 3 2\nElementSpacing = nan 1 1\nElementType = MET_SHORT\nElementDataFile = LOCAL\n",
       48, XT_ERANGE},
      {"chan.mha", "NDims = 3\nDimSize = 4 3 2\nElementNumberOfChannels = 3\nElementType = MET_SHORT\nElementDataFile = LOCAL\n",
       144, XT_EUNSUPPORTED},
      {"type.mha", "NDims = 3\nDimSize = 4 3 2\nElementType = MET_LONG_LONG\nElementDataFile = LOCAL\n", 192, XT_EUNSUPPORTED},
      {"notype.mha", "NDims = 3\nDimSize = 4 3 2\nElementDataFile = LOCAL\n", 48, XT_EFORMAT},
      {"noedf.mha", "NDims = 3\nDimSize = 4 3 2\nElementType = MET_SHORT\n", 0, XT_EFORMAT},
      {"noeq.mha", "NDims 3\nDimSize = 4 3 2\nElementType = MET_SHORT\nElementDataFile = LOCAL\n", 48, XT_EFORMAT},
      {"sing.mha", "NDims = 3\nDimSize = 4 3 2\nTransformMatrix = 1 0 0 1 0 0 0 0 1\nElementType = MET_SHORT\nElementDataFile = LOCAL\n",
       48, XT_EFORMAT},
      {"tm8.mha", "NDims = 3\nDimSize = 4 3 2\nTransformMatrix = 1 0 0 0 1 0 0 0\nElementType = MET_SHORT\nElementDataFile = LOCAL\n",
       48, XT_EFORMAT},
      {"ao.mha", "NDims = 3\nDimSize = 4 3 2\nAnatomicalOrientation = RRI\nElementType = MET_SHORT\nElementDataFile = LOCAL\n", 48,
       XT_EFORMAT},
      {"obj.mha", "ObjectType = Mesh\nNDims = 3\nDimSize = 4 3 2\nElementType = MET_SHORT\nElementDataFile = LOCAL\n", 48,
       XT_EUNSUPPORTED},
      {"list.mhd", "NDims = 3\nDimSize = 4 3 2\nElementType = MET_SHORT\nElementDataFile = LIST\n", 0, XT_EUNSUPPORTED},
      {"hs.mha", "NDims = 3\nDimSize = 4 3 2\nHeaderSize = -2\nElementType = MET_SHORT\nElementDataFile = LOCAL\n", 48, XT_EFORMAT},
      {"bin.mha", "NDims = 3\nDimSize = 4 3 2\nBinaryData = False\nElementType = MET_SHORT\nElementDataFile = LOCAL\n", 48,
       XT_EUNSUPPORTED},
      {"cds.mha", "NDims = 3\nDimSize = 4 3 2\nCompressedData = True\nCompressedDataSize = 9999\nElementType = MET_SHORT\n"
                  "ElementDataFile = LOCAL\n", 48, XT_ETRUNCATED},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const char *p = tp(cases[c].name);
    XT_REQUIRE(cases[c].ndata <= sizeof d);
    write_text_then(p, cases[c].hdr, d, cases[c].ndata);
    EXPECT_FAIL(p, XT_LOAD_MU, cases[c].want);
  }
  /* the message quotes what was wrong */
  xt_volume *v;
  xt_msg m;
  load(tp("dimx.mha"), XT_LOAD_MU, &v, &m);
  XT_CHECK_MSG(strstr(m.text, "DimSize") && strstr(m.text, "\"12 x 4\""), "%s", m.text);
  /* NaN voxel data */
  float fd[NV];
  for (int i = 0; i < NV; i++) fd[i] = (float)i;
  fd[7] = NAN;
  const char *pn = tp("nan.mha");
  write_text_then(pn, "NDims = 3\nDimSize = 4 3 2\nElementType = MET_FLOAT\nElementDataFile = LOCAL\n", fd, sizeof fd);
  EXPECT_FAIL(pn, XT_LOAD_MU, XT_ENANDATA);
  EXPECT_FAIL(pn, XT_LOAD_HU_TO_MU, XT_ENANDATA);
  EXPECT_FAIL(pn, XT_LOAD_HU_TO_LABELS, XT_ENANDATA);
  tmp_end();
}

XT_TEST(generic_file_errors) {
  tmp_begin();
  const char *p = tp("empty.mha");
  write_bytes(p, "wb", "", 0);
  EXPECT_FAIL(p, XT_LOAD_MU, XT_ETRUNCATED);
  EXPECT_FAIL(tp("missing.nii"), XT_LOAD_MU, XT_ENOTFOUND);
  EXPECT_FAIL(tp("missing.nrrd"), XT_LOAD_MU, XT_ENOTFOUND);
  mkdir(tp("dir.nii.gz"), 0700);
  EXPECT_FAIL(tp("dir.nii.gz"), XT_LOAD_MU, XT_EINVAL);
  mkdir(tp("dir.nrrd"), 0700);
  EXPECT_FAIL(tp("dir.nrrd"), XT_LOAD_MU, XT_EINVAL);
  /* .dcm is DICOM now (issue 14): a one-byte file is malformed DICOM; an unknown suffix stays
   * unsupported */
  write_bytes(tp("vol.dcm"), "wb", "x", 1);
  EXPECT_FAIL(tp("vol.dcm"), XT_LOAD_MU, XT_EFORMAT);
  write_bytes(tp("vol.raw"), "wb", "x", 1);
  EXPECT_FAIL(tp("vol.raw"), XT_LOAD_MU, XT_EUNSUPPORTED);
  write_bytes(tp("e.nii"), "wb", "", 0);
  EXPECT_FAIL(tp("e.nii"), XT_LOAD_MU, XT_ETRUNCATED);
  write_bytes(tp("e.nrrd"), "wb", "", 0);
  EXPECT_FAIL(tp("e.nrrd"), XT_LOAD_MU, XT_ETRUNCATED);
  xt_volume *v = (xt_volume *)1;
  xt_msg m;
  XT_CHECK(xt_volume_load(NULL, NULL, &v, &m) == XT_EINVAL);
  xt_load_options bad = {.convert = (xt_load_convert)42};
  XT_CHECK(xt_volume_load(p, &bad, &v, &m) == XT_EINVAL);
  xt_load_options badE = {.convert = XT_LOAD_HU_TO_MU, .energy_kev = 5.0};
  unsigned char d[NV * 2];
  ref_i16_le(d);
  const char *ok = tp("ok.mha");
  write_text_then(ok, "NDims = 3\nDimSize = 4 3 2\nElementType = MET_SHORT\nElementDataFile = LOCAL\n", d, sizeof d);
  XT_CHECK(xt_volume_load(ok, &badE, &v, &m) == XT_ERANGE);
  XT_CHECK_MSG(strncmp(m.text, ok, strlen(ok)) == 0, "%s", m.text);
  tmp_end();
}

/* --- NRRD --------------------------------------------------------------------------------- */

XT_TEST(nrrd_ras_oblique) {
  tmp_begin();
  unsigned char d[NV * 2];
  ref_i16_le(d);
  const char *p = tp("ras.nrrd");
  /* RAS directions: axis 0 (0.6, 0.8, 0) * 2 mm, axis 1 (-0.8, 0.6, 0) * 1 mm, axis 2 (0, 0, 3) */
  write_text_then(p,
                  "NRRD0004\n# a comment\ntype: short\ndimension: 3\nspace: right-anterior-superior\nsizes: 4 3 2\n"
                  "space directions: (1.2,1.6,0) (-0.8,0.6,0) (0,0,3)\nspace origin: (5,6,7)\nendian: little\n"
                  "encoding: raw\n\n",
                  d, sizeof d);
  xt_volume *v;
  xt_msg m;
  XT_REQUIRE(load(p, XT_LOAD_MU, &v, &m) == 0);
  check_ref_values(v, 0);
  XT_CHECK_NEAR(v->spacing[0], 2, 1e-12);
  XT_CHECK_NEAR(v->spacing[1], 1, 1e-12);
  XT_CHECK_NEAR(v->spacing[2], 3, 1e-12);
  /* LPS = (-x, -y, z) of RAS */
  check_point(v, 0, 0, 0, -5, -6, 7);
  check_point(v, 1, 0, 0, -5 - 1.2, -6 - 1.6, 7);
  check_point(v, 2, 1, 1, -5 - 2.4 + 0.8, -6 - 3.2 - 0.6, 10);
  xt_volume_free(v);
  tmp_end();
}

XT_TEST(nrrd_gzip_and_detached) {
  tmp_begin();
  unsigned char d[NV * 2];
  ref_i16_le(d);
  size_t zn;
  unsigned char *z = deflate_buf(d, sizeof d, 1, &zn);
  const char *p = tp("gz.nrrd");
  write_text_then(p,
                  "NRRD0004\ntype: int16\ndimension: 3\nspace: left-posterior-superior\nsizes: 4 3 2\n"
                  "space directions: (2,0,0) (0,2,0) (0,0,2)\nspace origin: (-1,-2,-3)\nendian: little\nencoding: gzip\n\n",
                  z, zn);
  xt_volume *v;
  xt_msg m;
  XT_REQUIRE(load(p, XT_LOAD_MU, &v, &m) == 0);
  check_ref_values(v, 0);
  check_point(v, 1, 1, 1, 1, 0, -1);
  xt_volume_free(v);
  /* detached gzip data, LAS space */
  write_bytes(tp("d.raw.gz"), "wb", z, zn);
  const char *p2 = tp("d.nhdr");
  write_text_then(p2,
                  "NRRD0004\ntype: short\ndimension: 3\nspace: left-anterior-superior\nsizes: 4 3 2\n"
                  "space directions: (1,0,0) (0,1,0) (0,0,1)\nspace origin: (1,2,3)\nendian: little\nencoding: gzip\n"
                  "data file: d.raw.gz\n",
                  NULL, 0);
  XT_REQUIRE(load(p2, XT_LOAD_MU, &v, &m) == 0);
  check_ref_values(v, 0);
  check_point(v, 1, 1, 1, 2, -3, 4); /* LAS -> LPS negates y only */
  xt_volume_free(v);
  /* detached raw big-endian doubles with spacings only */
  unsigned char be[NV * 8];
  ref_f64_be(be);
  write_bytes(tp("b.raw"), "wb", be, sizeof be);
  const char *p3 = tp("b.nhdr");
  write_text_then(p3,
                  "NRRD0004\ntype: double\ndimension: 3\nsizes: 4 3 2\nspacings: 0.5 1.5 2.5\nendian: big\nencoding: raw\n"
                  "data file: b.raw\n",
                  NULL, 0);
  XT_REQUIRE(load(p3, XT_LOAD_MU, &v, &m) == 0);
  check_ref_values(v, 0.25);
  check_point(v, 2, 2, 2, 1, 3, 5);
  xt_volume_free(v);
  free(z);
  tmp_end();
}

XT_TEST(nrrd_malformed) {
  tmp_begin();
  unsigned char d[NV * 8];
  memset(d, 0, sizeof d);
  struct {
    const char *name, *hdr;
    size_t ndata;
    int want;
  } cases[] = {
      {"trunc.nrrd", "NRRD0004\ntype: short\ndimension: 3\nsizes: 4 3 2\nspacings: 1 1 1\nencoding: raw\nendian: little\n\n", 40,
       XT_ETRUNCATED},
      {"huge.nrrd", "NRRD0004\ntype: short\ndimension: 3\nsizes: 100000 100000 100000\nspacings: 1 1 1\nencoding: raw\nendian: little\n\n",
       48, XT_ERANGE},
      {"big.nrrd", "NRRD0004\ntype: uchar\ndimension: 3\nsizes: 4096 4096 200\nspacings: 1 1 1\nencoding: gzip\n\n", 48,
       XT_ETRUNCATED},
      {"dim2.nrrd", "NRRD0004\ntype: short\ndimension: 2\nsizes: 4 6\nspacings: 1 1\nencoding: raw\nendian: little\n\n", 48,
       XT_EUNSUPPORTED},
      {"ll.nrrd", "NRRD0004\ntype: long long\ndimension: 3\nsizes: 4 3 2\nspacings: 1 1 1\nencoding: raw\nendian: little\n\n", 192,
       XT_EUNSUPPORTED},
      {"nosp.nrrd", "NRRD0004\ntype: short\ndimension: 3\nsizes: 4 3 2\nencoding: raw\nendian: little\n\n", 48, XT_ERANGE},
      {"spneg.nrrd", "NRRD0004\ntype: short\ndimension: 3\nsizes: 4 3 2\nspacings: 1 -1 1\nencoding: raw\nendian: little\n\n", 48,
       XT_ERANGE},
      {"magic.nrrd", "P5\n4 6\n255\n", 24, XT_EFORMAT},
      {"bad.nrrd", "NRRD0004\ntype: short\ndimension: 3\nsizes: 4 x 2\nencoding: raw\n\n", 48, XT_EFORMAT},
      {"miss.nhdr", "NRRD0004\ntype: short\ndimension: 3\nsizes: 4 3 2\nspacings: 1 1 1\nencoding: raw\nendian: little\n"
                    "data file: nothere.raw\n", 0, XT_ENOTFOUND},
      {"sing.nrrd", "NRRD0004\ntype: short\ndimension: 3\nspace: LPS\nsizes: 4 3 2\nspace directions: (1,0,0) (2,0,0) (0,0,1)\n"
                    "encoding: raw\nendian: little\n\n", 48, XT_EFORMAT},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const char *p = tp(cases[c].name);
    XT_REQUIRE(cases[c].ndata <= sizeof d);
    write_text_then(p, cases[c].hdr, d, cases[c].ndata);
    EXPECT_FAIL(p, XT_LOAD_MU, cases[c].want);
  }
  tmp_end();
}

/* Teem quotes a bad line into a fixed 1,025-byte buffer (a stack overflow found by long-fuzz):
 * long field and key/value lines are refused before Teem reads them; long comments, which Teem
 * skips, still load. */
XT_TEST(nrrd_long_lines) {
  tmp_begin();
  unsigned char d[NV * 2];
  ref_i16_le(d);
  static char hdr[8192], pad[3001];
  memset(pad, 'x', sizeof pad - 1);
  const char *p = tp("longfield.nrrd");
  snprintf(hdr, sizeof hdr, "NRRD0004\ntype: int16\ndimension: 3\nsizes: 4 3 2\nspacings: 1 1 1\nno such field: %s\n"
           "endian: little\nencoding: raw\n\n", pad);
  write_text_then(p, hdr, d, sizeof d);
  EXPECT_FAIL(p, XT_LOAD_MU, XT_EFORMAT);
  p = tp("longkv.nrrd");
  snprintf(hdr, sizeof hdr, "NRRD0004\ntype: int16\ndimension: 3\nsizes: 4 3 2\nspacings: 1 1 1\nnote:=%s\n"
           "endian: little\nencoding: raw\n\n", pad);
  write_text_then(p, hdr, d, sizeof d);
  EXPECT_FAIL(p, XT_LOAD_MU, XT_EFORMAT);
  p = tp("longcomment.nrrd");
  snprintf(hdr, sizeof hdr, "NRRD0004\n# %s\ntype: int16\ndimension: 3\nsizes: 4 3 2\nspacings: 1 1 1\nnote:=short\n"
           "endian: little\nencoding: raw\n\n", pad);
  write_text_then(p, hdr, d, sizeof d);
  xt_volume *v = NULL;
  xt_msg m;
  XT_CHECK_MSG(load(p, XT_LOAD_MU, &v, &m) == 0, "%s", m.text);
  if (v) check_ref_values(v, 0);
  xt_volume_free(v);
  tmp_end();
}

/* --- NIfTI -------------------------------------------------------------------------------- */

/* A NIfTI-1 file written from a filled header struct (not through the library's writer). */
static void write_nifti1(const char *path, const nifti_1_header *h, const void *data, size_t n) {
  unsigned char ext[4] = {0, 0, 0, 0};
  FILE *f = fopen(path, "wb");
  if (!f) exit(1);
  fwrite(h, sizeof *h, 1, f);
  fwrite(ext, 4, 1, f);
  if (n) fwrite(data, 1, n, f);
  fclose(f);
}

static nifti_1_header n1_header(int dt, int bitpix) {
  nifti_1_header h;
  memset(&h, 0, sizeof h);
  h.sizeof_hdr = 348;
  h.dim[0] = 3;
  h.dim[1] = NX, h.dim[2] = NY, h.dim[3] = NZ;
  for (int i = 4; i < 8; i++) h.dim[i] = 1;
  h.datatype = (short)dt;
  h.bitpix = (short)bitpix;
  h.pixdim[0] = 1;
  h.pixdim[1] = 1, h.pixdim[2] = 1, h.pixdim[3] = 1;
  h.vox_offset = 352;
  memcpy(h.magic, "n+1", 4);
  return h;
}

XT_TEST(nifti1_sform_scaled) {
  tmp_begin();
  unsigned char d[NV * 2];
  ref_i16_le(d);
  nifti_1_header h = n1_header(DT_INT16, 16);
  h.scl_slope = 2.0f;
  h.scl_inter = 24.0f;
  h.sform_code = 1;
  h.qform_code = 0;
  /* RAS sform rows */
  const float sx[4] = {0, 0, 2.5f, -10}, sy[4] = {1.5f, 0, 0, 20}, sz[4] = {0, -0.5f, 0, 30};
  memcpy(h.srow_x, sx, sizeof sx);
  memcpy(h.srow_y, sy, sizeof sy);
  memcpy(h.srow_z, sz, sizeof sz);
  const char *p = tp("s.nii");
  write_nifti1(p, &h, d, sizeof d);
  xt_volume *v;
  xt_msg m;
  int rc = load(p, XT_LOAD_MU, &v, &m);
  XT_REQUIRE_MSG_(rc, m);
  XT_REQUIRE(v->dim[0] == NX && v->dim[1] == NY && v->dim[2] == NZ);
  for (int k = 0; k < NZ; k++)
    for (int j = 0; j < NY; j++)
      for (int i = 0; i < NX; i++) XT_CHECK_NEAR(vox(v, i, j, k), 2 * ref_value(i, j, k) + 24, 1e-3);
  /* RAS(i,j,k) = (2.5k - 10, 1.5i + 20, -0.5j + 30); LPS negates the first two */
  check_point(v, 0, 0, 0, 10, -20, 30);
  check_point(v, 1, 2, 1, -(2.5 - 10), -(1.5 + 20), -1 + 30);
  XT_CHECK_NEAR(v->spacing[0], 1.5, 1e-9);
  XT_CHECK_NEAR(v->spacing[1], 0.5, 1e-9);
  XT_CHECK_NEAR(v->spacing[2], 2.5, 1e-9);
  xt_volume_free(v);
  tmp_end();
}

/* NIfTI-2, gzipped, written by libnifti2's writer, qform only: 90 degrees about z. */
XT_TEST(nifti2_gz_qform) {
  tmp_begin();
  int64_t dims[8] = {3, NX, NY, NZ, 1, 1, 1, 1};
  nifti_image *nim = nifti_make_new_nim(dims, DT_FLOAT32, 1);
  XT_REQUIRE(nim != NULL);
  float *f = nim->data;
  for (int k = 0, n = 0; k < NZ; k++)
    for (int j = 0; j < NY; j++)
      for (int i = 0; i < NX; i++, n++) f[n] = (float)ref_value(i, j, k);
  nim->nifti_type = NIFTI_FTYPE_NIFTI2_1;
  nim->qform_code = 1;
  nim->sform_code = 0;
  nim->quatern_b = 0, nim->quatern_c = 0, nim->quatern_d = sqrt(0.5);
  nim->qfac = 1;
  nim->qoffset_x = 10, nim->qoffset_y = 20, nim->qoffset_z = 30;
  nim->dx = nim->pixdim[1] = 2, nim->dy = nim->pixdim[2] = 3, nim->dz = nim->pixdim[3] = 4;
  const char *p = tp("q.nii.gz");
  XT_REQUIRE(nifti_set_filenames(nim, p, 0, 1) == 0);
  nifti_image_write(nim);
  nifti_image_free(nim);
  /* make sure it really is gzip and NIfTI-2 */
  FILE *fp = fopen(p, "rb");
  XT_REQUIRE(fp);
  unsigned char mg[2] = {0, 0};
  XT_CHECK(fread(mg, 1, 2, fp) == 2 && mg[0] == 0x1f && mg[1] == 0x8b);
  fclose(fp);
  xt_volume *v;
  xt_msg m;
  int rc = load(p, XT_LOAD_MU, &v, &m);
  XT_REQUIRE_MSG_(rc, m);
  check_ref_values(v, 0);
  /* R = rot_z(90): i -> RAS (0, 2, 0), j -> (-3, 0, 0), k -> (0, 0, 4); origin (10, 20, 30).
   * LPS: i -> (0, -2, 0), j -> (3, 0, 0), origin (-10, -20, 30) */
  check_point(v, 0, 0, 0, -10, -20, 30);
  check_point(v, 1, 0, 0, -10, -22, 30);
  check_point(v, 0, 1, 0, -7, -20, 30);
  check_point(v, 2, 2, 1, -10 + 6, -20 - 4, 34);
  xt_volume_free(v);
  tmp_end();
}

XT_TEST(nifti_pixdim_only_and_4d) {
  tmp_begin();
  unsigned char d[NV * 2];
  ref_i16_le(d);
  nifti_1_header h = n1_header(DT_INT16, 16);
  h.pixdim[1] = 0.5f, h.pixdim[2] = 0.25f, h.pixdim[3] = 3;
  const char *p = tp("pd.nii");
  write_nifti1(p, &h, d, sizeof d);
  xt_volume *v;
  xt_msg m;
  int rc = load(p, XT_LOAD_MU, &v, &m);
  XT_REQUIRE_MSG_(rc, m);
  check_ref_values(v, 0);
  /* method 1 is x = pixdim * index in RAS; in LPS: (-0.5 i, -0.25 j, 3 k) */
  check_point(v, 2, 4, 1, -1, -1, 3);
  xt_volume_free(v);
  /* 4D with one volume is fine */
  h.dim[0] = 4;
  h.dim[4] = 1;
  const char *p2 = tp("4d1.nii");
  write_nifti1(p2, &h, d, sizeof d);
  XT_REQUIRE(load(p2, XT_LOAD_MU, &v, &m) == 0);
  xt_volume_free(v);
  h.dim[4] = 2;
  const char *p3 = tp("4d2.nii");
  unsigned char d2[NV * 4];
  memset(d2, 0, sizeof d2);
  write_nifti1(p3, &h, d2, sizeof d2);
  EXPECT_FAIL(p3, XT_LOAD_MU, XT_EUNSUPPORTED);
  tmp_end();
}

XT_TEST(nifti_malformed) {
  tmp_begin();
  unsigned char d[NV * 8];
  memset(d, 0, sizeof d);
  /* complex type, named in the message */
  nifti_1_header h = n1_header(DT_COMPLEX64, 64);
  const char *p = tp("cx.nii");
  write_nifti1(p, &h, d, NV * 8);
  EXPECT_FAIL(p, XT_LOAD_MU, XT_EUNSUPPORTED);
  xt_volume *v;
  xt_msg m;
  load(p, XT_LOAD_MU, &v, &m);
  XT_CHECK_MSG(strstr(m.text, "COMPLEX") != NULL, "%s", m.text);
  h = n1_header(DT_RGB24, 24);
  p = tp("rgb.nii");
  write_nifti1(p, &h, d, NV * 3);
  EXPECT_FAIL(p, XT_LOAD_MU, XT_EUNSUPPORTED);
  /* truncated data */
  h = n1_header(DT_INT16, 16);
  p = tp("trunc.nii");
  write_nifti1(p, &h, d, NV * 2 - 1);
  EXPECT_FAIL(p, XT_LOAD_MU, XT_ETRUNCATED);
  /* truncated header */
  p = tp("hdr.nii");
  write_bytes(p, "wb", &h, 100);
  EXPECT_FAIL(p, XT_LOAD_MU, XT_ETRUNCATED);
  /* garbage */
  p = tp("junk.nii");
  write_bytes(p, "wb", "hello, this is not a nifti file at all, just text padding padding padding", 70);
  EXPECT_FAIL(p, XT_LOAD_MU, XT_EFORMAT);
  /* absurd dims, refused before any allocation */
  h = n1_header(DT_UINT8, 8);
  h.dim[1] = 4096, h.dim[2] = 4096, h.dim[3] = 200;
  p = tp("big.nii");
  write_nifti1(p, &h, d, 16);
  EXPECT_FAIL(p, XT_LOAD_MU, XT_ETRUNCATED);
  h.dim[1] = 30000;
  p = tp("dim.nii");
  write_nifti1(p, &h, d, 16);
  EXPECT_FAIL(p, XT_LOAD_MU, XT_ERANGE);
  /* zero pixdim without q/sform */
  h = n1_header(DT_INT16, 16);
  h.pixdim[2] = 0;
  p = tp("pd0.nii");
  write_nifti1(p, &h, d, NV * 2);
  EXPECT_FAIL(p, XT_LOAD_MU, XT_ERANGE);
  /* gzip of a truncated file */
  h = n1_header(DT_INT16, 16);
  unsigned char buf[352 + NV * 2];
  memset(buf, 0, sizeof buf);
  memcpy(buf, &h, sizeof h);
  size_t zn;
  unsigned char *z = deflate_buf(buf, sizeof buf - 10, 1, &zn);
  p = tp("trunc.nii.gz");
  write_bytes(p, "wb", z, zn);
  EXPECT_FAIL(p, XT_LOAD_MU, XT_ETRUNCATED);
  free(z);
  /* vox_offset far beyond the end */
  h.vox_offset = 1e9f;
  p = tp("off.nii");
  write_nifti1(p, &h, d, NV * 2);
  EXPECT_FAIL(p, XT_LOAD_MU, XT_ETRUNCATED);
  /* NaN data */
  h = n1_header(DT_FLOAT32, 32);
  float fd[NV] = {0};
  fd[NV - 1] = INFINITY;
  p = tp("inf.nii");
  write_nifti1(p, &h, fd, sizeof fd);
  EXPECT_FAIL(p, XT_LOAD_MU, XT_ENANDATA);
  tmp_end();
}

/* --- HU conversion ------------------------------------------------------------------------ */

XT_TEST(hu_formulas) {
  XT_CHECK_NEAR(xt_hu_to_mu(0, 0.02), 0.02, 1e-15);
  XT_CHECK_NEAR(xt_hu_to_mu(1000, 0.02), 0.04, 1e-15);
  XT_CHECK_NEAR(xt_hu_to_mu(-1000, 0.02), 0.0, 1e-15);
  XT_CHECK_NEAR(xt_hu_to_mu(-1024, 0.02), 0.0, 1e-15); /* clamped */
  XT_CHECK_NEAR(xt_hu_to_mu(-500, 0.02), 0.01, 1e-15);
  /* NIST XCOM: water at 60 keV, mu/rho (with coherent) = 0.2059 cm^2/g -> 0.02059 / mm */
  double mw = 0;
  xt_msg m;
  XT_REQUIRE(xt_hu_mu_water(60, &mw, &m) == 0);
  XT_CHECK_NEAR(mw, 0.02059, 0.02059 * 0.02);
  /* 100 keV: 0.1707 cm^2/g */
  XT_REQUIRE(xt_hu_mu_water(100, &mw, &m) == 0);
  XT_CHECK_NEAR(mw, 0.01707, 0.01707 * 0.02);
  XT_CHECK(xt_hu_mu_water(10, &mw, &m) == XT_ERANGE);
  const struct {
    double hu;
    int label;
  } l[] = {{-3000, XT_MAT_AIR}, {-1000, XT_MAT_AIR}, {-800, XT_MAT_AIR},    {-500.5, XT_MAT_AIR}, {-500, XT_MAT_FAT},
           {-100, XT_MAT_FAT},  {-30.5, XT_MAT_FAT}, {-30, XT_MAT_SOFT},    {40, XT_MAT_SOFT},    {299, XT_MAT_SOFT},
           {300, XT_MAT_BONE},  {1500, XT_MAT_BONE}, {2499, XT_MAT_BONE},   {2500, XT_MAT_METAL}, {3071, XT_MAT_METAL}};
  for (size_t i = 0; i < sizeof l / sizeof l[0]; i++)
    XT_CHECK_MSG(xt_hu_to_label(l[i].hu) == l[i].label, "HU %g -> %d, want %d", l[i].hu, xt_hu_to_label(l[i].hu), l[i].label);
  int nb = 0;
  const xt_hu_band *b = xt_hu_bands(&nb);
  XT_REQUIRE(nb >= 2);
  XT_CHECK(isinf(b[0].lo) && b[0].lo < 0 && isinf(b[nb - 1].hi));
  for (int i = 0; i < nb; i++) {
    if (i > 0) XT_CHECK(b[i].lo == b[i - 1].hi);
    if (isfinite(b[i].lo)) XT_CHECK(xt_hu_to_label(b[i].lo) == b[i].label);
  }
}

static void write_hu_mha(const char *p, const short hu[NV]) {
  unsigned char d[NV * 2];
  for (int i = 0; i < NV; i++) le16(d + 2 * i, hu[i]);
  write_text_then(p, "NDims = 3\nDimSize = 4 3 2\nElementType = MET_SHORT\nElementDataFile = LOCAL\n", d, sizeof d);
}

XT_TEST(hu_through_loader) {
  tmp_begin();
  short hu[NV];
  const short pattern[8] = {-1024, -1000, -700, -100, 0, 40, 1000, 3071};
  const int labels[8] = {XT_MAT_AIR, XT_MAT_AIR, XT_MAT_AIR, XT_MAT_FAT, XT_MAT_SOFT, XT_MAT_SOFT, XT_MAT_BONE, XT_MAT_METAL};
  for (int i = 0; i < NV; i++) hu[i] = pattern[i % 8];
  const char *p = tp("hu.mha");
  write_hu_mha(p, hu);
  /* the linear map with NIST's water at 80 keV (0.1837 cm^2/g); xt_hu_mu_water is checked
   * against NIST in hu_formulas, so the formula is what is tested here */
  xt_msg m;
  double mw = 0;
  XT_REQUIRE(xt_hu_mu_water(80.0, &mw, &m) == 0);
  XT_CHECK_NEAR(mw, 0.01837, 0.01837 * 0.005);
  xt_load_options o = {.convert = XT_LOAD_HU_TO_MU, .energy_kev = 80.0, .hu_model = XT_HU_LINEAR};
  xt_volume *v = NULL;
  XT_REQUIRE(xt_volume_load(p, &o, &v, &m) == 0);
  XT_CHECK(v->type == XT_VOXEL_F32);
  const float *f = v->data;
  for (int i = 0; i < NV; i++) {
    double want = hu[i] <= -1000 ? 0.0 : mw * (1.0 + hu[i] / 1000.0);
    XT_CHECK_NEAR(f[i], want, 1e-6 * mw + 1e-9);
  }
  xt_volume_free(v);
  XT_REQUIRE(load(p, XT_LOAD_HU_TO_LABELS, &v, &m) == 0);
  XT_CHECK(v->type == XT_VOXEL_U8);
  XT_REQUIRE(v->materials != NULL);
  XT_CHECK(v->materials->count == XT_MAT_DEFAULT_COUNT);
  XT_CHECK_NEAR(v->materials->energy_kev, XT_DEFAULT_ENERGY_KEV, 1e-12);
  const uint8_t *u = v->data;
  for (int i = 0; i < NV; i++) XT_CHECK_MSG(u[i] == labels[i % 8], "voxel %d HU %d -> %d", i, hu[i], u[i]);
  xt_volume_free(v);
  tmp_end();
}

XT_TEST(labels_mode) {
  tmp_begin();
  unsigned char lab[NV];
  for (int i = 0; i < NV; i++) lab[i] = (unsigned char)(i % XT_MAT_DEFAULT_COUNT);
  const char *p = tp("lab.mha");
  write_text_then(p, "NDims = 3\nDimSize = 4 3 2\nElementType = MET_UCHAR\nElementDataFile = LOCAL\n", lab, sizeof lab);
  xt_volume *v;
  xt_msg m;
  XT_REQUIRE(load(p, XT_LOAD_LABELS, &v, &m) == 0);
  XT_CHECK(v->type == XT_VOXEL_U8 && v->materials && v->materials->count == XT_MAT_DEFAULT_COUNT);
  XT_CHECK(memcmp(v->data, lab, NV) == 0);
  xt_volume_free(v);
  /* label 8 at voxel 13 = (1,0,1): out of range, named */
  lab[13] = 8;
  const char *p2 = tp("lab8.mha");
  write_text_then(p2, "NDims = 3\nDimSize = 4 3 2\nElementType = MET_UCHAR\nElementDataFile = LOCAL\n", lab, sizeof lab);
  EXPECT_FAIL(p2, XT_LOAD_LABELS, XT_ERANGE);
  load(p2, XT_LOAD_LABELS, &v, &m);
  XT_CHECK_MSG(strstr(m.text, "(1,0,1)") && strstr(m.text, "label 8"), "%s", m.text);
  /* negative and fractional labels in float data */
  float fl[NV] = {0};
  fl[2] = -1;
  const char *p3 = tp("labneg.mha");
  write_text_then(p3, "NDims = 3\nDimSize = 4 3 2\nElementType = MET_FLOAT\nElementDataFile = LOCAL\n", fl, sizeof fl);
  EXPECT_FAIL(p3, XT_LOAD_LABELS, XT_ERANGE);
  fl[2] = 1.5f;
  write_text_then(p3, "NDims = 3\nDimSize = 4 3 2\nElementType = MET_FLOAT\nElementDataFile = LOCAL\n", fl, sizeof fl);
  EXPECT_FAIL(p3, XT_LOAD_LABELS, XT_ERANGE);
  tmp_end();
}

/* --- seed corpus: each file once per conversion, any outcome but a crash ------------------ */

XT_TEST(fuzz_corpus) {
  DIR *d = opendir(XT_FUZZ_CORPUS_DIR);
  XT_REQUIRE(d != NULL);
  struct dirent *e;
  int n = 0, ok = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", XT_FUZZ_CORPUS_DIR, e->d_name);
    for (int c = XT_LOAD_MU; c <= XT_LOAD_LABELS; c++) {
      xt_volume *v = NULL;
      xt_msg m;
      m.text[0] = '\0';
      int rc = load(p, (xt_load_convert)c, &v, &m);
      if (rc == 0) {
        XT_CHECK(v != NULL);
        ok++;
      } else {
        XT_CHECK(v == NULL);
        XT_CHECK_MSG(m.text[0] != '\0', "%s: error %d without a message", p, rc);
      }
      xt_volume_free(v);
    }
    n++;
  }
  closedir(d);
  XT_CHECK(n >= 10);
  XT_CHECK(ok > 0);
  printf("  corpus: %d files, %d successful loads\n", n, ok);
}

XT_TEST_MAIN(XT_ENTRY(mha_oblique_int16) XT_ENTRY(mha_double_msb_and_orientation) XT_ENTRY(mha_compressed)
                 XT_ENTRY(mhd_detached) XT_ENTRY(mha_malformed) XT_ENTRY(generic_file_errors)
                     XT_ENTRY(nrrd_ras_oblique) XT_ENTRY(nrrd_gzip_and_detached) XT_ENTRY(nrrd_malformed) XT_ENTRY(nrrd_long_lines)
                         XT_ENTRY(nifti1_sform_scaled) XT_ENTRY(nifti2_gz_qform) XT_ENTRY(nifti_pixdim_only_and_4d)
                             XT_ENTRY(nifti_malformed) XT_ENTRY(hu_formulas) XT_ENTRY(hu_through_loader)
                                 XT_ENTRY(labels_mode) XT_ENTRY(fuzz_corpus))
