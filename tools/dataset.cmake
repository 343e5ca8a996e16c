# dataset.cmake: `xtwin dataset` (tools/xt_dataset_*.c, docs/dataset.md) as a static library that
# xtwin and the tests link; the imaging chain (imaging/) for raw and processed frames. SHA-256 of
# shards through OpenSSL's libcrypto; threads for the render/encode/write pipeline.
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
add_library(xt_dataset STATIC xt_dataset_spec.c xt_dataset_sample.c xt_dataset_scene.c xt_dataset_shard.c
  xt_dataset_run.c xt_dataset_cmd.c)
target_include_directories(xt_dataset PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(xt_dataset PUBLIC xt_cli xt_imaging xt_proj xt_models xt_scene OpenSSL::Crypto Threads::Threads
  PkgConfig::JANSSON ${M_LIB} PRIVATE xt_warnings)
target_compile_definitions(xt_dataset PRIVATE XT_VERSION="${PROJECT_VERSION}")
if(TARGET xt_loaders AND XT_CLI_LOADERS)
  target_link_libraries(xt_dataset PUBLIC xt_loaders)
  target_compile_definitions(xt_dataset PUBLIC XT_HAVE_LOADERS)
endif()
target_link_libraries(xtwin PRIVATE xt_dataset)
