# The chain's device pipeline (chain_cuda.cu) and its stage kernels (stage_*.cu), beside their CPU
# twins. Included only when nvcc was found; ptxas spills and local memory are errors under
# XT_WERROR, as for the projectors.
target_sources(xt_imaging PRIVATE ${CMAKE_CURRENT_LIST_DIR}/chain_cuda.cu ${CMAKE_CURRENT_LIST_DIR}/stage_detect.cu
  ${CMAKE_CURRENT_LIST_DIR}/stage_blur.cu ${CMAKE_CURRENT_LIST_DIR}/stage_readout.cu
  ${CMAKE_CURRENT_LIST_DIR}/stage_process.cu ${CMAKE_CURRENT_LIST_DIR}/stage_scatter.cu
  ${CMAKE_CURRENT_LIST_DIR}/stage_drc.cu)
target_compile_options(xt_imaging PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-warn-spills,-warn-lmem-usage -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${XT_CUDA_PTXAS_VERBOSE}>>:-Xptxas=-v>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${XT_WERROR}>>:-Werror=all-warnings>)
if(CMAKE_CUDA_ARCHITECTURES STREQUAL "75" OR CMAKE_CUDA_ARCHITECTURES STREQUAL "52")
  set_property(TARGET xt_imaging PROPERTY CUDA_ARCHITECTURES 90)
endif()
