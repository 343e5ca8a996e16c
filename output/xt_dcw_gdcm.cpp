/* The DICOM writer through GDCM, behind xt_dcw.h (the one C++ file of output/: GDCM is a
 * C++ library). A builder is a stack: the root data set at the bottom, then an open sequence, an
 * open item in it, and so on; closing an item adds it to its sequence, closing a sequence adds it
 * to the data set below. Every entry point catches every exception; the first failure is kept and
 * returned by xt_dcw_encode. GDCM calls that touch its global dictionaries are serialised by one
 * mutex, as models/xt_dicom_gdcm.cpp's are. */
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include <gdcmDataElement.h>
#include <gdcmDataSet.h>
#include <gdcmFile.h>
#include <gdcmFileMetaInformation.h>
#include <gdcmItem.h>
#include <gdcmSequenceOfItems.h>
#include <gdcmTrace.h>
#include <gdcmTransferSyntax.h>
#include <gdcmUIDGenerator.h>
#include <gdcmVR.h>
#include <gdcmWriter.h>

extern "C" {
#include "xt_err.h"
}
#include "xt_dcw.h"

namespace {

std::mutex gdcm_mu;

void quiet() {
  gdcm::Trace::SetDebug(false);
  gdcm::Trace::SetWarning(false);
  gdcm::Trace::SetError(false);
}

struct Node {
  bool is_seq;
  gdcm::Tag tag;                                 /* a sequence's tag */
  gdcm::SmartPointer<gdcm::SequenceOfItems> sq;  /* a sequence's items */
  gdcm::DataSet ds;                              /* an item's (or the root's) elements */
};

/* Longest value of one string VR (PS3.5 6.2); 0: no limit we check. */
size_t max_len(const std::string &vr) {
  static const struct {
    const char *vr;
    size_t n;
  } t[] = {{"AE", 16}, {"AS", 4}, {"CS", 16}, {"DA", 8}, {"DS", 16}, {"DT", 26}, {"IS", 12}, {"LO", 64},
           {"PN", 64}, {"SH", 16}, {"TM", 14}, {"UI", 64}, {"LT", 10240}, {"ST", 1024}};
  for (const auto &e : t)
    if (vr == e.vr) return e.n;
  return 0;
}

/* A number as DS: the most significant digits that fit 16 characters. */
std::string ds_text(double v) {
  char b[64];
  for (int prec = 15; prec > 0; prec--) {
    snprintf(b, sizeof b, "%.*g", prec, v);
    if (strlen(b) <= 16) return b;
  }
  return "0";
}

}  // namespace

struct xt_dcw {
  std::vector<Node> st;
  std::string err; /* the first error */
  int code = 0;
  xt_dcw() {
    st.push_back(Node());
    st.back().is_seq = false;
  }
  void fail(int c, const std::string &why) {
    if (!code) code = c, err = why;
  }
  gdcm::DataSet *top_ds() {
    if (st.back().is_seq) {
      fail(XT_EINTERNAL, "an element inside a sequence but outside an item");
      return nullptr;
    }
    return &st.back().ds;
  }
  void put(uint32_t tag, const char *vr, const char *bytes, size_t n) {
    gdcm::DataSet *ds = top_ds();
    if (!ds) return;
    gdcm::VR::VRType t = gdcm::VR::GetVRType(vr);
    if (t == gdcm::VR::INVALID || t == gdcm::VR::VR_END) return fail(XT_EINTERNAL, std::string("unknown VR ") + vr);
    gdcm::DataElement de(gdcm::Tag((uint16_t)(tag >> 16), (uint16_t)(tag & 0xffff)));
    de.SetVR(t);
    de.SetByteValue(bytes, (uint32_t)n);
    ds->Replace(de);
  }
};

static std::string tag_name(uint32_t tag) {
  char b[16];
  snprintf(b, sizeof b, "(%04X,%04X)", (unsigned)(tag >> 16), (unsigned)(tag & 0xffff));
  return b;
}

extern "C" {

xt_dcw *xt_dcw_new(void) {
  try {
    return new xt_dcw();
  } catch (...) {
    return nullptr;
  }
}

void xt_dcw_free(xt_dcw *d) { delete d; }

void xt_dcw_str(xt_dcw *d, uint32_t tag, const char *vr, const char *value) {
  if (!d || d->code) return;
  try {
    std::string v = value ? value : "";
    const std::string svr = vr;
    const size_t lim = max_len(svr);
    if (lim) { /* each value of a multi-valued element */
      size_t b = 0;
      for (;;) {
        size_t e = v.find('\\', b);
        size_t n = (e == std::string::npos ? v.size() : e) - b;
        if (n > lim) return d->fail(XT_ERANGE, tag_name(tag) + " " + svr + ": \"" + v + "\" longer than " + std::to_string(lim));
        if (e == std::string::npos) break;
        b = e + 1;
      }
    }
    if (v.size() % 2) v.push_back(svr == "UI" ? '\0' : ' ');
    d->put(tag, vr, v.data(), v.size());
  } catch (const std::bad_alloc &) {
    d->fail(XT_ENOMEM, "out of memory");
  } catch (...) {
    d->fail(XT_EINTERNAL, tag_name(tag) + ": GDCM failed");
  }
}

void xt_dcw_num(xt_dcw *d, uint32_t tag, const char *vr, const double *v, int n) {
  if (!d || d->code) return;
  try {
    const std::string s = vr;
    for (int i = 0; i < n; i++)
      if (!std::isfinite(v[i])) return d->fail(XT_ENANDATA, tag_name(tag) + ": a value is not finite");
    if (s == "DS" || s == "IS") {
      std::string t;
      for (int i = 0; i < n; i++) {
        if (i) t += '\\';
        t += s == "DS" ? ds_text(v[i]) : std::to_string((long long)std::llround(v[i]));
      }
      xt_dcw_str(d, tag, vr, t.c_str());
      return;
    }
    std::string b;
    for (int i = 0; i < n; i++) {
      union {
        uint16_t us;
        int16_t ss;
        uint32_t ul;
        int32_t sl;
        float fl;
        double fd;
      } u;
      size_t k;
      if (s == "US") u.us = (uint16_t)std::llround(v[i]), k = 2;
      else if (s == "SS") u.ss = (int16_t)std::llround(v[i]), k = 2;
      else if (s == "UL") u.ul = (uint32_t)std::llround(v[i]), k = 4;
      else if (s == "SL") u.sl = (int32_t)std::llround(v[i]), k = 4;
      else if (s == "FL") u.fl = (float)v[i], k = 4;
      else if (s == "FD") u.fd = v[i], k = 8;
      else if (s == "AT") { /* a tag, 0xGGGGEEEE: group then element */
        const uint32_t t = (uint32_t)std::llround(v[i]);
        const uint16_t ge[2] = {(uint16_t)(t >> 16), (uint16_t)(t & 0xffff)};
        b.append(reinterpret_cast<const char *>(ge), 4);
        continue;
      }
      else return d->fail(XT_EINTERNAL, tag_name(tag) + ": no numbers for VR " + s);
      b.append(reinterpret_cast<const char *>(&u), k);
    }
    d->put(tag, vr, b.data(), b.size());
  } catch (const std::bad_alloc &) {
    d->fail(XT_ENOMEM, "out of memory");
  } catch (...) {
    d->fail(XT_EINTERNAL, tag_name(tag) + ": GDCM failed");
  }
}

void xt_dcw_num1(xt_dcw *d, uint32_t tag, const char *vr, double v) { xt_dcw_num(d, tag, vr, &v, 1); }

void xt_dcw_seq(xt_dcw *d, uint32_t tag) {
  if (!d || d->code) return;
  try {
    if (!d->top_ds()) return;
    Node n;
    n.is_seq = true;
    n.tag = gdcm::Tag((uint16_t)(tag >> 16), (uint16_t)(tag & 0xffff));
    n.sq = new gdcm::SequenceOfItems();
    n.sq->SetLengthToUndefined();
    d->st.push_back(n);
  } catch (...) {
    d->fail(XT_ENOMEM, "out of memory");
  }
}

void xt_dcw_item(xt_dcw *d) {
  if (!d || d->code) return;
  if (!d->st.back().is_seq) return d->fail(XT_EINTERNAL, "an item outside a sequence");
  try {
    Node n;
    n.is_seq = false;
    d->st.push_back(n);
  } catch (...) {
    d->fail(XT_ENOMEM, "out of memory");
  }
}

void xt_dcw_end_item(xt_dcw *d) {
  if (!d || d->code) return;
  if (d->st.size() < 3 || d->st.back().is_seq) return d->fail(XT_EINTERNAL, "an item closed that is not open");
  try {
    gdcm::Item it;
    it.SetVLToUndefined();
    it.SetNestedDataSet(d->st.back().ds);
    d->st.pop_back();
    d->st.back().sq->AddItem(it);
  } catch (...) {
    d->fail(XT_ENOMEM, "out of memory");
  }
}

void xt_dcw_end_seq(xt_dcw *d) {
  if (!d || d->code) return;
  if (d->st.size() < 2 || !d->st.back().is_seq) return d->fail(XT_EINTERNAL, "a sequence closed that is not open");
  try {
    gdcm::DataElement de(d->st.back().tag);
    de.SetVR(gdcm::VR::SQ);
    de.SetValue(*d->st.back().sq);
    de.SetVLToUndefined();
    d->st.pop_back();
    d->st.back().ds.Replace(de);
  } catch (...) {
    d->fail(XT_ENOMEM, "out of memory");
  }
}

void xt_dcw_fail(xt_dcw *d, int code, const char *why) {
  if (!d) return;
  try {
    d->fail(code, why ? why : "failed");
  } catch (...) {
    d->code = code;
  }
}

void xt_dcw_pixels16(xt_dcw *d, const uint16_t *px, size_t n) {
  if (!d || d->code) return;
  if (n > 0x7ffffffeu / 2) return d->fail(XT_ETOOLARGE, "pixel data over 2 GiB");
  try {
    d->put(XT_TAG(0x7fe0, 0x0010), "OW", reinterpret_cast<const char *>(px), n * 2);
  } catch (...) {
    d->fail(XT_ENOMEM, "out of memory for the pixel data");
  }
}

int xt_dcw_encode(xt_dcw *d, unsigned char **out, size_t *len, xt_msg *msg) {
  *out = nullptr;
  *len = 0;
  if (!d) return xt_fail(msg, XT_ENOMEM, "out of memory");
  if (d->code) return xt_fail(msg, d->code, "DICOM: %s", d->err.c_str());
  if (d->st.size() != 1) return xt_fail(msg, XT_EINTERNAL, "DICOM: a sequence or item left open");
  std::lock_guard<std::mutex> lock(gdcm_mu);
  try {
    quiet();
    gdcm::Writer w;
    gdcm::File &f = w.GetFile();
    f.SetDataSet(d->st.back().ds);
    gdcm::FileMetaInformation &fmi = f.GetHeader();
    fmi.SetDataSetTransferSyntax(gdcm::TransferSyntax::ExplicitVRLittleEndian);
    fmi.SetSourceApplicationEntityTitle("XTWIN");
    std::ostringstream os;
    w.SetStream(os);
    if (!w.Write()) return xt_fail(msg, XT_EFORMAT, "DICOM: GDCM could not encode the data set");
    const std::string s = os.str();
    unsigned char *b = static_cast<unsigned char *>(malloc(s.size()));
    if (!b) return xt_fail(msg, XT_ENOMEM, "out of memory for a %zu-byte DICOM file", s.size());
    memcpy(b, s.data(), s.size());
    *out = b;
    *len = s.size();
    return 0;
  } catch (const std::bad_alloc &) {
    return xt_fail(msg, XT_ENOMEM, "out of memory encoding a DICOM file");
  } catch (...) {
    return xt_fail(msg, XT_EFORMAT, "DICOM: GDCM could not encode the data set");
  }
}

void xt_dcw_uid(char out[XT_DCW_UID]) {
  std::lock_guard<std::mutex> lock(gdcm_mu);
  out[0] = 0;
  try {
    gdcm::UIDGenerator g;
    const char *u = g.Generate();
    if (u) snprintf(out, XT_DCW_UID, "%s", u);
  } catch (...) {
  }
}

}  // extern "C"
