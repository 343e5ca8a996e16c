# Table files (detectors, protocols) are data, kept as text beside the code that reads them and
# compiled into the library, so that a binary never depends on finding its data at run time.
#
#   xt_embed_text(<target> <symbol> <file>)   adds a generated C file to <target> defining
#                                             `const char <symbol>[]` with the file's bytes + NUL
#
# The same file runs in script mode (cmake -DIN= -DOUT= -DSYM= -P xt_embed.cmake) to write it.
if(CMAKE_SCRIPT_MODE_FILE)
  file(READ "${IN}" hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)"
         "\\1\n" bytes "${bytes}")
  get_filename_component(name "${IN}" NAME)
  file(WRITE "${OUT}.tmp" "/* Generated from ${name} by cmake/xt_embed.cmake: edit the table, not this. */\n"
       "const char ${SYM}[] = {\n${bytes}0x00};\n")
  file(RENAME "${OUT}.tmp" "${OUT}")
  return()
endif()

function(xt_embed_text target symbol file)
  get_filename_component(abs "${file}" ABSOLUTE)
  set(out "${CMAKE_CURRENT_BINARY_DIR}/${symbol}.c")
  add_custom_command(OUTPUT "${out}"
    COMMAND ${CMAKE_COMMAND} -DIN=${abs} -DOUT=${out} -DSYM=${symbol} -P ${PROJECT_SOURCE_DIR}/cmake/xt_embed.cmake
    DEPENDS "${abs}" ${PROJECT_SOURCE_DIR}/cmake/xt_embed.cmake
    COMMENT "Embedding ${file}" VERBATIM)
  target_sources(${target} PRIVATE "${out}")
endfunction()
