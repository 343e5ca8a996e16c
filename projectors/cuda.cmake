# The CUDA projector: the frame pipeline (cuda_pipeline.cu) and each kind's kernels (proj_voxel.cu, ...) join xt_proj, which then reports the cuda backend.
# Included by projectors/CMakeLists.txt only when nvcc was found. ptxas prints each kernel's
# registers, stack and spills (-Xptxas -v); spills and local memory are warnings, and warnings
# are errors under XT_WERROR, so a kernel that spills fails CI's build.
target_sources(xt_proj PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cuda_pipeline.cu ${CMAKE_CURRENT_LIST_DIR}/proj_voxel.cu)
target_compile_definitions(xt_proj PUBLIC XT_HAVE_CUDA)
target_link_libraries(xt_proj PUBLIC CUDA::cudart_static)
option(XT_CUDA_PTXAS_VERBOSE "Print ptxas resource usage of the CUDA kernels" ON)
target_compile_options(xt_proj PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-warn-spills,-warn-lmem-usage -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${XT_CUDA_PTXAS_VERBOSE}>>:-Xptxas=-v>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${XT_WERROR}>>:-Werror=all-warnings>)
# nvcc 13's own default target is sm_75, which the top level's "52" check does not catch; Hopper
# is what this backend is written and measured for.
if(CMAKE_CUDA_ARCHITECTURES STREQUAL "75" OR CMAKE_CUDA_ARCHITECTURES STREQUAL "52")
  set_property(TARGET xt_proj PROPERTY CUDA_ARCHITECTURES 90)
endif()
