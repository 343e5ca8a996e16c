/* DICOM attributes and pixel decoding through GDCM (Debian's libgdcm-dev), behind the plain C
 * header xt_dicom_gdcm.h. This is the only C++ in models/: GDCM is a C++ library. Everything that
 * can be done in C (grouping series, sorting slices, spacing and tilt checks, rescale) is in
 * xt_load_dicom.c; here we only read attributes and decode pixels.
 *
 * Every entry point catches all exceptions (std::bad_alloc -> XT_ENOMEM, anything else ->
 * XT_EFORMAT) and reports one line naming the file. GDCM prints warnings to std::cerr by default;
 * its trace output is switched off so that our message is the only one. GDCM calls are serialised
 * by one mutex: loading is rare and GDCM's global dictionaries are not documented as thread-safe. */
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include <gdcmDataSet.h>
#include <gdcmFile.h>
#include <gdcmImage.h>
#include <gdcmImageReader.h>
#include <gdcmItem.h>
#include <gdcmReader.h>
#include <gdcmSequenceOfItems.h>
#include <gdcmStringFilter.h>
#include <gdcmTrace.h>
#include <gdcmTransferSyntax.h>

extern "C" {
#include "xt_err.h" /* a C header without its own extern "C" */
}
#include "xt_dicom_gdcm.h"

namespace {

std::mutex gdcm_mu;

void quiet() {
  gdcm::Trace::SetDebug(false);
  gdcm::Trace::SetWarning(false);
  gdcm::Trace::SetError(false);
}

/* The value of a string-VR element (DS, IS, UI, CS, LO...) without padding. Strings are stored
 * as bytes in every transfer syntax, so no byte swapping applies. */
std::string str_of(const gdcm::DataElement &de) {
  const gdcm::ByteValue *bv = de.GetByteValue();
  if (!bv || !bv->GetPointer()) return std::string();
  std::string s(bv->GetPointer(), bv->GetLength());
  size_t e = s.find_last_not_of(std::string(" \0", 2));
  if (e == std::string::npos) return std::string();
  size_t b = s.find_first_not_of(' ');
  return s.substr(b, e + 1 - b);
}

std::string str_at(const gdcm::DataSet &ds, uint16_t g, uint16_t e) {
  gdcm::Tag t(g, e);
  if (!ds.FindDataElement(t)) return std::string();
  return str_of(ds.GetDataElement(t));
}

/* Parses up to n backslash-separated decimal numbers; returns how many were read, or -1 when a
 * value is not a finite number. */
int numbers(const std::string &s, double *out, int n) {
  if (s.empty()) return 0;
  int k = 0;
  const char *p = s.c_str();
  while (k < n) {
    char *end = nullptr;
    errno = 0;
    double v = strtod(p, &end);
    if (end == p || errno || !std::isfinite(v)) return -1;
    while (*end == ' ') end++;
    out[k++] = v;
    if (*end == '\\') {
      p = end + 1;
      continue;
    }
    if (*end) return -1;
    break;
  }
  return k;
}

void copy_text(char *dst, size_t cap, const std::string &s) { snprintf(dst, cap, "%s", s.c_str()); }

/* An item's nested data set for a sequence tag in ds, or nullptr: the first item, which is all
 * the functional-group macros we read have. */
const gdcm::DataSet *first_item(const gdcm::DataSet &ds, uint16_t g, uint16_t e, gdcm::SmartPointer<gdcm::SequenceOfItems> &keep) {
  gdcm::Tag t(g, e);
  if (!ds.FindDataElement(t)) return nullptr;
  keep = ds.GetDataElement(t).GetValueAsSQ();
  if (!keep || keep->GetNumberOfItems() < 1) return nullptr;
  return &keep->GetItem(1).GetNestedDataSet();
}

/* Reads the functional-group macros of one item of the shared or per-frame sequence into f
 * (fields present there overwrite f's). Returns 0 or a message id < 0 on a malformed value. */
int read_groups(const gdcm::DataSet &fg, xt_dcm_frame *f, std::string &bad) {
  gdcm::SmartPointer<gdcm::SequenceOfItems> k1, k2, k3, k4;
  double v[6];
  if (const gdcm::DataSet *pp = first_item(fg, 0x0020, 0x9113, k1)) { /* Plane Position Sequence */
    std::string s = str_at(*pp, 0x0020, 0x0032);
    if (!s.empty()) {
      if (numbers(s, v, 3) != 3) return bad = "Image Position (Patient) \"" + s + "\"", -1;
      memcpy(f->ipp, v, sizeof f->ipp), f->has_ipp = 1;
    }
  }
  if (const gdcm::DataSet *po = first_item(fg, 0x0020, 0x9116, k2)) { /* Plane Orientation Sequence */
    std::string s = str_at(*po, 0x0020, 0x0037);
    if (!s.empty()) {
      if (numbers(s, v, 6) != 6) return bad = "Image Orientation (Patient) \"" + s + "\"", -1;
      memcpy(f->iop, v, sizeof f->iop), f->has_iop = 1;
    }
  }
  if (const gdcm::DataSet *pm = first_item(fg, 0x0028, 0x9110, k3)) { /* Pixel Measures Sequence */
    std::string s = str_at(*pm, 0x0028, 0x0030);
    if (!s.empty()) {
      if (numbers(s, v, 2) != 2) return bad = "Pixel Spacing \"" + s + "\"", -1;
      f->spacing[0] = v[0], f->spacing[1] = v[1], f->has_spacing = 1;
    }
    s = str_at(*pm, 0x0018, 0x0050);
    if (!s.empty() && numbers(s, v, 1) == 1) f->thickness = v[0];
  }
  if (const gdcm::DataSet *pv = first_item(fg, 0x0028, 0x9145, k4)) { /* Pixel Value Transformation */
    std::string s = str_at(*pv, 0x0028, 0x1052);
    if (!s.empty()) {
      if (numbers(s, v, 1) != 1) return bad = "Rescale Intercept \"" + s + "\"", -1;
      f->inter = v[0];
    }
    s = str_at(*pv, 0x0028, 0x1053);
    if (!s.empty()) {
      if (numbers(s, v, 1) != 1) return bad = "Rescale Slope \"" + s + "\"", -1;
      f->slope = v[0];
    }
  }
  return 0;
}

int to_int(const std::string &s, int *out) {
  if (s.empty()) return 0;
  char *end = nullptr;
  errno = 0;
  long v = strtol(s.c_str(), &end, 10);
  while (end && *end == ' ') end++;
  if (end == s.c_str() || errno || (end && *end) || v < -2147483647L || v > 2147483647L) return -1;
  *out = (int)v;
  return 1;
}

int header_impl(const char *path, xt_dcm_header *h, xt_msg *msg) {
  gdcm::Reader r;
  r.SetFileName(path);
  /* Stop before the pixel data: a header is all we need to group and sort a series. */
  if (!r.ReadUpToTag(gdcm::Tag(0x7fe0, 0x0010)))
    return xt_fail(msg, XT_EFORMAT, "%s: not a DICOM file GDCM can parse", path);
  const gdcm::File &file = r.GetFile();
  const gdcm::DataSet &ds = file.GetDataSet();
  gdcm::StringFilter sf;
  sf.SetFile(file);
  /* Binary-VR values (US) through StringFilter, which knows the file's byte order. */
  auto us = [&](uint16_t g, uint16_t e, int *out, const char *name) -> int {
    gdcm::Tag t(g, e);
    if (!ds.FindDataElement(t) || ds.GetDataElement(t).IsEmpty()) return 0;
    int rc = to_int(sf.ToString(t), out);
    if (rc < 0) return xt_fail(msg, XT_EFORMAT, "%s: %s is not an integer", path, name);
    return rc;
  };
  copy_text(h->transfer_syntax, sizeof h->transfer_syntax, str_at(file.GetHeader(), 0x0002, 0x0010));
  copy_text(h->series_uid, sizeof h->series_uid, str_at(ds, 0x0020, 0x000e));
  copy_text(h->sop_class, sizeof h->sop_class, str_at(ds, 0x0008, 0x0016));
  copy_text(h->modality, sizeof h->modality, str_at(ds, 0x0008, 0x0060));
  copy_text(h->series_desc, sizeof h->series_desc, str_at(ds, 0x0008, 0x103e));
  copy_text(h->photometric, sizeof h->photometric, str_at(ds, 0x0028, 0x0004));
  int rc;
  if ((rc = to_int(str_at(ds, 0x0020, 0x0011), &h->series_number)) < 0) h->series_number = 0;
  h->has_series_number = rc > 0;
  h->frames = 1;
  if (to_int(str_at(ds, 0x0028, 0x0008), &h->frames) < 0 || h->frames < 1)
    return xt_fail(msg, XT_EFORMAT, "%s: Number of Frames \"%s\" is not a positive integer", path,
                   str_at(ds, 0x0028, 0x0008).c_str());
  int got_r = 0, got_c = 0, got_b = 0;
  if ((got_r = us(0x0028, 0x0010, &h->rows, "Rows")) < 0 || (got_c = us(0x0028, 0x0011, &h->cols, "Columns")) < 0)
    return XT_EFORMAT;
  h->has_rows = got_r > 0 && got_c > 0;
  h->samples = 1;
  if (us(0x0028, 0x0002, &h->samples, "Samples per Pixel") < 0 || (got_b = us(0x0028, 0x0100, &h->bits_allocated, "Bits Allocated")) < 0 ||
      us(0x0028, 0x0101, &h->bits_stored, "Bits Stored") < 0 || us(0x0028, 0x0102, &h->high_bit, "High Bit") < 0 ||
      us(0x0028, 0x0103, &h->pixel_rep, "Pixel Representation") < 0)
    return XT_EFORMAT;
  h->has_pixel_format = got_b > 0;
  if (h->bits_stored == 0) h->bits_stored = h->bits_allocated;
  if (h->high_bit == 0 && h->bits_stored > 0) h->high_bit = h->bits_stored - 1;
  h->float_pixels = ds.FindDataElement(gdcm::Tag(0x7fe0, 0x0008)) || ds.FindDataElement(gdcm::Tag(0x7fe0, 0x0009));
  double v[6];
  std::string s = str_at(ds, 0x0018, 0x0088);
  if (!s.empty() && numbers(s, v, 1) == 1) h->spacing_between = v[0];
  s = str_at(ds, 0x0018, 0x1120);
  if (!s.empty() && numbers(s, v, 1) == 1) h->tilt_deg = v[0], h->has_tilt = 1;

  /* The frame defaults from the top level (classic images), then the functional groups. */
  xt_dcm_frame top;
  memset(&top, 0, sizeof top);
  top.slope = 1.0;
  std::string bad;
  if (!(s = str_at(ds, 0x0020, 0x0032)).empty()) {
    if (numbers(s, v, 3) != 3) return xt_fail(msg, XT_EFORMAT, "%s: Image Position (Patient) \"%s\" is not 3 numbers", path, s.c_str());
    memcpy(top.ipp, v, sizeof top.ipp), top.has_ipp = 1;
  }
  if (!(s = str_at(ds, 0x0020, 0x0037)).empty()) {
    if (numbers(s, v, 6) != 6)
      return xt_fail(msg, XT_EFORMAT, "%s: Image Orientation (Patient) \"%s\" is not 6 numbers", path, s.c_str());
    memcpy(top.iop, v, sizeof top.iop), top.has_iop = 1;
  }
  if (!(s = str_at(ds, 0x0028, 0x0030)).empty()) {
    if (numbers(s, v, 2) != 2) return xt_fail(msg, XT_EFORMAT, "%s: Pixel Spacing \"%s\" is not 2 numbers", path, s.c_str());
    top.spacing[0] = v[0], top.spacing[1] = v[1], top.has_spacing = 1;
  }
  if (!(s = str_at(ds, 0x0018, 0x0050)).empty() && numbers(s, v, 1) == 1) top.thickness = v[0];
  if (!(s = str_at(ds, 0x0028, 0x1052)).empty()) {
    if (numbers(s, v, 1) != 1) return xt_fail(msg, XT_EFORMAT, "%s: Rescale Intercept \"%s\" is not a number", path, s.c_str());
    top.inter = v[0];
  }
  if (!(s = str_at(ds, 0x0028, 0x1053)).empty()) {
    if (numbers(s, v, 1) != 1) return xt_fail(msg, XT_EFORMAT, "%s: Rescale Slope \"%s\" is not a number", path, s.c_str());
    top.slope = v[0];
  }

  gdcm::SmartPointer<gdcm::SequenceOfItems> shared_keep;
  const gdcm::DataSet *shared = first_item(ds, 0x5200, 0x9229, shared_keep);
  gdcm::Tag perframe_tag(0x5200, 0x9230);
  gdcm::SmartPointer<gdcm::SequenceOfItems> per;
  if (ds.FindDataElement(perframe_tag)) per = ds.GetDataElement(perframe_tag).GetValueAsSQ();
  h->enhanced = shared || (per && per->GetNumberOfItems() > 0);
  if (shared && read_groups(*shared, &top, bad) < 0)
    return xt_fail(msg, XT_EFORMAT, "%s: shared functional groups: malformed %s", path, bad.c_str());

  int n = h->frames;
  h->nframe_info = n;
  h->frame = static_cast<xt_dcm_frame *>(calloc((size_t)n, sizeof *h->frame));
  if (!h->frame) return xt_fail(msg, XT_ENOMEM, "%s: out of memory for %d frames", path, n);
  for (int i = 0; i < n; i++) h->frame[i] = top;
  if (per && per->GetNumberOfItems() > 0) {
    if ((int)per->GetNumberOfItems() != n)
      return xt_fail(msg, XT_EFORMAT, "%s: %d per-frame functional group items for %d frames", path,
                     (int)per->GetNumberOfItems(), n);
    for (int i = 0; i < n; i++)
      if (read_groups(per->GetItem((gdcm::SequenceOfItems::SizeType)i + 1).GetNestedDataSet(), &h->frame[i], bad) < 0)
        return xt_fail(msg, XT_EFORMAT, "%s: frame %d: malformed %s", path, i + 1, bad.c_str());
  } else if (n > 1) {
    /* Classic multi-frame (e.g. RT Dose): Grid Frame Offset Vector gives each frame's offset
     * along the normal from the first frame's position. Without it the frames have no positions;
     * the caller refuses that. */
    std::string g = str_at(ds, 0x3004, 0x000c);
    if (!g.empty() && top.has_ipp && top.has_iop) {
      double *off = static_cast<double *>(calloc((size_t)n, sizeof *off));
      if (!off) return xt_fail(msg, XT_ENOMEM, "%s: out of memory", path);
      int k = numbers(g, off, n);
      if (k != n) {
        free(off);
        return xt_fail(msg, XT_EFORMAT, "%s: Grid Frame Offset Vector has %d usable values for %d frames", path, k < 0 ? 0 : k, n);
      }
      const double *o = top.iop;
      double nrm[3] = {o[1] * o[5] - o[2] * o[4], o[2] * o[3] - o[0] * o[5], o[0] * o[4] - o[1] * o[3]};
      for (int i = 0; i < n; i++)
        for (int a = 0; a < 3; a++) h->frame[i].ipp[a] = top.ipp[a] + off[i] * nrm[a];
      free(off);
    } else {
      for (int i = 0; i < n; i++) h->frame[i].has_ipp = 0;
    }
  }
  return 0;
}

int pixels_impl(const char *path, void *buf, size_t bytes, xt_dcm_pixfmt *fmt, xt_msg *msg) {
  gdcm::ImageReader r;
  r.SetFileName(path);
  if (!r.Read()) return xt_fail(msg, XT_EFORMAT, "%s: GDCM cannot read the image (not an image, or malformed)", path);
  const gdcm::Image &img = r.GetImage();
  const gdcm::PixelFormat &pf = img.GetPixelFormat();
  fmt->bits_allocated = pf.GetBitsAllocated();
  fmt->bits_stored = pf.GetBitsStored();
  fmt->high_bit = pf.GetHighBit();
  fmt->pixel_rep = pf.GetPixelRepresentation();
  fmt->samples = pf.GetSamplesPerPixel();
  unsigned long len = img.GetBufferLength();
  if (len != bytes)
    return xt_fail(msg, XT_EFORMAT, "%s: decoded pixel data is %lu bytes, the header's size is %zu", path, len, bytes);
  if (!img.GetBuffer(static_cast<char *>(buf))) {
    const gdcm::TransferSyntax &ts = img.GetTransferSyntax();
    return xt_fail(msg, XT_EUNSUPPORTED, "%s: GDCM cannot decode the pixel data (transfer syntax %s)", path,
                   ts.GetString() ? ts.GetString() : "?");
  }
  return 0;
}

} // namespace

extern "C" int xt_dcm_sniff(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  unsigned char b[132];
  size_t n = fread(b, 1, sizeof b, f);
  fclose(f);
  return n == sizeof b && memcmp(b + 128, "DICM", 4) == 0;
}

extern "C" int xt_dcm_read_header(const char *path, xt_dcm_header *h, xt_msg *msg) {
  memset(h, 0, sizeof *h);
  try {
    std::lock_guard<std::mutex> lock(gdcm_mu);
    quiet();
    int rc = header_impl(path, h, msg);
    if (rc) xt_dcm_header_free(h);
    return rc;
  } catch (const std::bad_alloc &) {
    xt_dcm_header_free(h);
    return xt_fail(msg, XT_ENOMEM, "%s: out of memory reading the DICOM header", path);
  } catch (const std::exception &e) {
    xt_dcm_header_free(h);
    return xt_fail(msg, XT_EFORMAT, "%s: malformed DICOM (%s)", path, e.what());
  } catch (...) {
    xt_dcm_header_free(h);
    return xt_fail(msg, XT_EFORMAT, "%s: malformed DICOM", path);
  }
}

extern "C" void xt_dcm_header_free(xt_dcm_header *h) {
  if (!h) return;
  free(h->frame);
  h->frame = nullptr;
  h->nframe_info = 0;
}

extern "C" int xt_dcm_read_pixels(const char *path, void *buf, size_t bytes, xt_dcm_pixfmt *fmt, xt_msg *msg) {
  try {
    std::lock_guard<std::mutex> lock(gdcm_mu);
    quiet();
    return pixels_impl(path, buf, bytes, fmt, msg);
  } catch (const std::bad_alloc &) {
    return xt_fail(msg, XT_ENOMEM, "%s: out of memory decoding the pixel data", path);
  } catch (const std::exception &e) {
    return xt_fail(msg, XT_EFORMAT, "%s: malformed pixel data (%s)", path, e.what());
  } catch (...) {
    return xt_fail(msg, XT_EFORMAT, "%s: malformed pixel data", path);
  }
}
