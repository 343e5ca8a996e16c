# dicom_out.cmake: DICOM out (issue 28). Label cpu.
#   test_dicom_out  `xtwin render --dicom` and `xtwin store` end to end (tests/test_dicom_out.py): every
#                   object through dicom3tools' dciodvfy, pydicom and GDCM, its geometry against the
#                   sidecar's P, the dose SR against the sidecars, and a real PACS (Debian's Orthanc on
#                   loopback, its own configuration in a temporary folder) read back over REST.
#                   Skipped (exit 77, naming the package) only when a tool scripts/install-deps
#                   installs is missing.
#                   Then xtwin-server --study-dir (the writer thread's folder; single plane, and biplane with
#                   --identity and --study-store to Orthanc; a silent PACS holds up neither stream nor folder),
#                   when the server is built; last, xtwin dataset's
#                   "dicom" output (dciodvfy, pydicom, both planes' P, a 2-task split).
if(TARGET xtwin AND EXISTS /usr/bin/python3)
  if(TARGET xtwin-server)
    set(XT_DICOM_OUT_SERVER $<TARGET_FILE:xtwin-server>)
  else()
    set(XT_DICOM_OUT_SERVER -)
  endif()
  add_test(NAME test_dicom_out
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_dicom_out.py $<TARGET_FILE:xtwin> ${XT_DICOM_OUT_SERVER}
            ${CMAKE_CURRENT_BINARY_DIR}/dicom_out_scratch)
  set_tests_properties(test_dicom_out PROPERTIES TIMEOUT 300 LABELS cpu SKIP_RETURN_CODE 77)
endif()
