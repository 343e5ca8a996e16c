# `cmake --install BUILD [--prefix DIR]` (default prefix /usr/local): the programs on the PATH, the
# Python client where Debian's /usr/bin/python3 finds it, the console's files and the examples
# beside the documentation. docs/install.md (and the README) say how; tests/install.cmake checks it.
include(GNUInstallDirs)
if(NOT DEFINED Python3_VERSION_MINOR)
  find_package(Python3 COMPONENTS Interpreter QUIET)
endif()
set(XT_PY_INSTALL_DIR lib/python3.${Python3_VERSION_MINOR}/dist-packages CACHE STRING
  "where `cmake --install` puts the xtwin package (relative to the prefix; Debian's python3 reads /usr/local/lib/python3.X/dist-packages)")
set(_xt_progs xtwin xtwin-server xtwin-health)
foreach(t IN LISTS _xt_progs)
  if(TARGET ${t})
    install(TARGETS ${t} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/api/python/xtwin DESTINATION ${XT_PY_INSTALL_DIR}
  PATTERN "__pycache__" EXCLUDE PATTERN "*.pyc" EXCLUDE)
install(FILES ${PROJECT_SOURCE_DIR}/api/python/xtwin_dataset.py DESTINATION ${XT_PY_INSTALL_DIR})
# The server serves the console from its own binary; these copies are for a reverse proxy or a
# kiosk that serves them itself (docs/console.md "Other addresses").
install(DIRECTORY ${PROJECT_SOURCE_DIR}/server/console/ DESTINATION ${CMAKE_INSTALL_DATADIR}/xtwin/console
  FILES_MATCHING PATTERN "*.html" PATTERN "*.js" PATTERN "*.css")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/api/python/examples/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples/python
  PATTERN "__pycache__" EXCLUDE)
install(FILES ${PROJECT_SOURCE_DIR}/api/openapi.yaml ${PROJECT_SOURCE_DIR}/api/stream.md
  ${PROJECT_SOURCE_DIR}/api/xt_stream.h DESTINATION ${CMAKE_INSTALL_DOCDIR}/api)
install(FILES ${PROJECT_SOURCE_DIR}/api/examples/stream_client.py DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
