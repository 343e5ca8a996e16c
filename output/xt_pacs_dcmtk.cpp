/* C-STORE through DCMTK's DcmSCU, behind xt_pacs.h (the one C++ file of the network side). One
 * association per call: the presentation contexts are the files' SOP classes, each offered in the
 * file's own transfer syntax (xtwin writes Explicit VR Little Endian) and Implicit VR Little Endian,
 * plus Verification for the C-ECHO. DCMTK's own log is set to fatal-only, so the caller's one line
 * is the only output; calls are serialised (DCMTK's network initialisation is process-wide). */
#include <cstdio>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include <dcmtk/config/osconfig.h>
#include <dcmtk/dcmdata/dcfilefo.h>
#include <dcmtk/dcmdata/dcdeftag.h>
#include <dcmtk/dcmdata/dcuid.h>
#include <dcmtk/dcmnet/scu.h>
#include <dcmtk/oflog/oflog.h>

extern "C" {
#include "xt_err.h"
}
#include "xt_pacs.h"

namespace {

std::mutex pacs_mu;

struct FileInfo {
  std::string path, sop_class, ts;
};

int read_info(const char *path, FileInfo &fi, xt_msg *msg) {
  DcmFileFormat ff;
  OFCondition c = ff.loadFile(OFFilename(path), EXS_Unknown, EGL_noChange, 4096 /* skip long values */);
  if (c.bad()) return xt_fail(msg, XT_EFORMAT, "\"%s\": not a DICOM file DCMTK can read (%s)", path, c.text());
  OFString cls, ts;
  if (ff.getMetaInfo()->findAndGetOFString(DCM_MediaStorageSOPClassUID, cls).bad() || cls.empty())
    return xt_fail(msg, XT_EFORMAT, "\"%s\": no Media Storage SOP Class UID", path);
  if (ff.getMetaInfo()->findAndGetOFString(DCM_TransferSyntaxUID, ts).bad() || ts.empty())
    ts = UID_LittleEndianExplicitTransferSyntax;
  fi.path = path;
  fi.sop_class = cls.c_str();
  fi.ts = ts.c_str();
  return 0;
}

}  // namespace

extern "C" int xt_pacs_store(const xt_pacs_peer *peer, const char *const *files, int n, xt_msg *msg) {
  if (!peer || !peer->host || !*peer->host || peer->port < 1 || peer->port > 65535)
    return xt_fail(msg, XT_EINVAL, "C-STORE: bad peer address");
  const char *called = peer->called ? peer->called : "ANY-SCP";
  const char *calling = peer->calling ? peer->calling : "XTWIN";
  const int timeout = peer->timeout_s > 0 ? peer->timeout_s : 30;
  std::lock_guard<std::mutex> lock(pacs_mu);
  try {
    OFLog::configure(OFLogger::FATAL_LOG_LEVEL);
    std::vector<FileInfo> info((size_t)n);
    for (int i = 0; i < n; i++)
      if (int rc = read_info(files[i], info[(size_t)i], msg)) return rc;
    DcmSCU scu;
    scu.setAETitle(calling);
    scu.setPeerAETitle(called);
    scu.setPeerHostName(peer->host);
    scu.setPeerPort((Uint16)peer->port);
    scu.setConnectionTimeout(timeout);
    scu.setACSETimeout((Uint32)timeout);
    scu.setDIMSETimeout((Uint32)timeout);
    scu.setDIMSEBlockingMode(DIMSE_NONBLOCKING);
    OFList<OFString> verification;
    verification.push_back(UID_LittleEndianImplicitTransferSyntax);
    scu.addPresentationContext(UID_VerificationSOPClass, verification);
    std::vector<std::string> offered;
    for (const FileInfo &fi : info) {
      bool seen = false;
      for (const std::string &o : offered) seen = seen || o == fi.sop_class + "|" + fi.ts;
      if (seen) continue;
      offered.push_back(fi.sop_class + "|" + fi.ts);
      OFList<OFString> ts;
      ts.push_back(fi.ts.c_str());
      if (fi.ts != UID_LittleEndianImplicitTransferSyntax) ts.push_back(UID_LittleEndianImplicitTransferSyntax);
      scu.addPresentationContext(fi.sop_class.c_str(), ts);
    }
    OFCondition c = scu.initNetwork();
    if (c.bad()) return xt_fail(msg, XT_EIO, "C-STORE: network: %s", c.text());
    c = scu.negotiateAssociation();
    if (c.bad())
      return xt_fail(msg, XT_EIO, "C-STORE to %s@%s:%d: no association (%s): no DICOM SCP there, or it refused AE title %s",
                     called, peer->host, peer->port, c.text(), calling);
    int rc = 0;
    T_ASC_PresentationContextID echo = scu.findPresentationContextID(UID_VerificationSOPClass, "");
    if (echo == 0 || (c = scu.sendECHORequest(echo)).bad())
      rc = xt_fail(msg, XT_EIO, "C-ECHO to %s@%s:%d failed: %s", called, peer->host, peer->port,
                   echo ? c.text() : "Verification not accepted");
    for (size_t i = 0; !rc && i < info.size(); i++) {
      const FileInfo &fi = info[i];
      T_ASC_PresentationContextID pc = scu.findPresentationContextID(fi.sop_class.c_str(), fi.ts.c_str());
      if (pc == 0) pc = scu.findPresentationContextID(fi.sop_class.c_str(), UID_LittleEndianImplicitTransferSyntax);
      if (pc == 0) {
        rc = xt_fail(msg, XT_EUNSUPPORTED, "C-STORE to %s@%s:%d: \"%s\": the SCP accepts no presentation context for SOP class %s",
                     called, peer->host, peer->port, fi.path.c_str(), fi.sop_class.c_str());
        break;
      }
      Uint16 status = 0;
      c = scu.sendSTORERequest(pc, OFFilename(fi.path.c_str()), nullptr, status);
      if (c.bad())
        rc = xt_fail(msg, XT_EIO, "C-STORE to %s@%s:%d: \"%s\": %s", called, peer->host, peer->port, fi.path.c_str(), c.text());
      else if (status != STATUS_Success && (status & 0xf000) != 0xb000) /* Bxxx: warnings, stored */
        rc = xt_fail(msg, XT_EIO, "C-STORE to %s@%s:%d: \"%s\": the SCP answered status 0x%04x", called, peer->host,
                     peer->port, fi.path.c_str(), (unsigned)status);
    }
    if (rc) scu.abortAssociation();
    else scu.releaseAssociation();
    return rc;
  } catch (const std::bad_alloc &) {
    return xt_fail(msg, XT_ENOMEM, "out of memory in C-STORE");
  } catch (...) {
    return xt_fail(msg, XT_EINTERNAL, "C-STORE to %s:%d: DCMTK failed", peer->host, peer->port);
  }
}
